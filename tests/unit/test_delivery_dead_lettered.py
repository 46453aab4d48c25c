"""A chunk the platform refused for good waits for a redrive (services/delivery.py): once its job is
on the dead letters it is `dead_lettered`, a repeat of the job (a task's retry, the turn's Fail
state handing its answer on again) sends neither it nor what follows it, and only a redriven job
sends them, in order and once."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.services.dead_letters import redrive
from hermes_gateway.services.delivery import MARK_ATTEMPTS, DeliveryDeps, DeliveryJob, run_job
from tests.fakes.services import FakeEvents, FakeOutbox, FakeSender

NOW = 1_764_400_000.0
SUFFIX = re.compile(r" \((\d+)/(\d+)\)$")


def long_text() -> str:
    paragraph = " ".join(f"word{i}" for i in range(60))
    return "\n\n".join(f"{n}. {paragraph}" for n in range(25))  # three Telegram messages


JOB = {"delivery_id": "turn-r", "turn_id": "turn-r", "target": {"platform": "telegram", "chat_id": "99"}}


class Letters:
    """The dead-letter queue: keeps each body, and the outbox's status of `chunk` when it came."""

    def __init__(self, outbox: FakeOutbox, chunk: str) -> None:
        self.outbox, self.chunk = outbox, chunk
        self.bodies: list[dict[str, Any]] = []
        self.chunk_status_when_sent: list[str] = []

    def send(self, body: dict[str, Any]) -> str:
        self.bodies.append(body)
        self.chunk_status_when_sent.append(self.outbox.entries[self.chunk].status)
        return "m"


class Queue:
    """The dead-letter queue as the redrive reads it."""

    def __init__(self, letters: Letters) -> None:
        self.letters = letters

    def receive(self, max_messages: int = 10, wait_seconds: int = 0, visibility_seconds: int = 60) -> list[Any]:
        found = [
            {"MessageId": str(n), "ReceiptHandle": str(n), "Body": json.dumps(b)}
            for n, b in enumerate(self.letters.bodies)
        ]
        self.letters.bodies = []
        return found[:max_messages]

    def delete(self, receipt_handle: str) -> None:
        pass

    def release(self, receipt_handle: str) -> None:
        pass


class Handed:
    """The delivery function, as the redrive hands it the jobs."""

    def __init__(self, run: Any) -> None:
        self.run, self.outcomes = run, list[str]()

    def send(self, job: dict[str, Any]) -> str:
        self.outcomes.append(self.run(job))
        return "r"


class World:
    def __init__(self, sender: FakeSender, outbox: FakeOutbox | None = None, refused: str = "turn-r#1") -> None:
        self.sender, self.outbox, self.events = sender, outbox or FakeOutbox(), FakeEvents()
        self.letters = Letters(self.outbox, refused)

    def deps(self, profile: str | None) -> DeliveryDeps:
        return DeliveryDeps(
            outbox=self.outbox,
            sender_for=lambda p, v: self.sender,
            now=lambda: NOW,
            events=self.events,
            sleep=lambda s: None,
        )

    def run(self, job: dict[str, Any]) -> str:
        return run_job(job, self.deps, self.letters, self.events, 0.0)

    def chunks_sent(self) -> list[str]:
        return [SUFFIX.search(text).group(1) for _, text, _ in self.sender.sent]  # type: ignore[union-attr]


def refused_second_chunk() -> World:
    world = World(FakeSender(fail_on={2}, error=PermanentError("Bad Request: message is too long")), refused="turn-r#2")
    assert world.run({**JOB, "text": long_text()}) == "dead_lettered"
    return world


def test_the_refused_chunk_is_dead_lettered_after_its_job_is_on_the_dead_letters() -> None:
    world = refused_second_chunk()
    assert world.chunks_sent() == ["1"]
    # The letter was written while the chunk was still `failed`: a crash in between leaves it for a retry
    assert world.letters.chunk_status_when_sent == ["failed"]
    assert world.outbox.entries["turn-r#2"].status == "dead_lettered"
    assert world.outbox.entries["turn-r#2"].error == "PermanentError: Bad Request: message is too long"
    assert "turn-r#3" not in world.outbox.entries


def test_a_repeat_of_the_job_sends_nothing_and_writes_no_second_dead_letter(caplog: pytest.LogCaptureFixture) -> None:
    world = refused_second_chunk()
    emitted = len(world.events.emitted)
    # The platform would now take it (a one-off refusal), and the turn's Fail state hands the answer on again
    caplog.set_level(logging.INFO, logger="hermes-gateway")
    assert world.run({**JOB, "text": long_text()}) == "dead_lettered"
    assert world.chunks_sent() == ["1"] and "turn-r#3" not in world.outbox.entries
    assert len(world.letters.bodies) == 1 and len(world.events.emitted) == emitted
    assert "it waits for a redrive" in caplog.text


def test_a_redrive_sends_the_refused_chunk_and_the_rest_in_order_once() -> None:
    world = refused_second_chunk()
    handed = Handed(world.run)
    assert redrive(Queue(world.letters), handed, inbox=None, limit=10, now=NOW).deliveries == 1  # type: ignore[arg-type]
    assert handed.outcomes == ["sent"] and world.chunks_sent() == ["1", "2", "3"]
    assert {world.outbox.entries[f"turn-r#{n}"].status for n in (1, 2, 3)} == {"sent"}
    # A repeat of the redriven job, and of the original one, finds every chunk sent
    assert world.run({**JOB, "text": long_text(), "redriven": True}) == "sent"
    assert world.run({**JOB, "text": long_text()}) == "sent"
    assert world.chunks_sent() == ["1", "2", "3"]


def test_a_redriven_job_refused_again_is_dead_lettered_again() -> None:
    world = World(FakeSender(fail_on={1, 2}, error=PermanentError("Bad Request: nope")))
    assert world.run({**JOB, "text": "hi"}) == "dead_lettered"
    assert world.run({**JOB, "text": "hi", "redriven": True}) == "dead_lettered"
    assert world.sender.attempts == 2 and len(world.letters.bodies) == 2
    assert world.letters.chunk_status_when_sent == ["failed", "failed"]
    assert world.outbox.entries["turn-r#1"].status == "dead_lettered"
    assert world.run({**JOB, "text": "hi"}) == "dead_lettered" and world.sender.attempts == 2


class Unmarkable(FakeOutbox):
    """An outbox whose dead-lettered mark is throttled `times` times."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.times = times

    def mark_dead_lettered(self, delivery_id: str, now: float) -> bool:
        if self.times:
            self.times -= 1
            raise TransientError("DynamoDB is throttling")
        return super().mark_dead_lettered(delivery_id, now)


def test_a_throttled_mark_is_tried_again() -> None:
    world = World(FakeSender(fail_on={1}, error=PermanentError("Bad Request: nope")), Unmarkable(MARK_ATTEMPTS - 1))
    assert world.run({**JOB, "text": "hi"}) == "dead_lettered"
    assert world.outbox.entries["turn-r#1"].status == "dead_lettered"


def test_a_mark_that_fails_leaves_the_chunk_failed_for_a_repeat(caplog: pytest.LogCaptureFixture) -> None:
    world = World(FakeSender(fail_on={1}, error=PermanentError("Bad Request: nope")), Unmarkable(MARK_ATTEMPTS))
    assert world.run({**JOB, "text": "hi"}) == "dead_lettered"  # the job is on the dead letters all the same
    assert world.outbox.entries["turn-r#1"].status == "failed"
    assert "the refused chunk stays failed" in caplog.text
    assert world.run({**JOB, "text": "hi"}) == "sent"  # as before the mark existed: a repeat tries it


@pytest.mark.parametrize(("value", "redriven"), [(True, True), ("true", False), (1, False), (None, False)])
def test_only_a_true_redriven_flag_reopens(value: Any, redriven: bool) -> None:
    assert DeliveryJob.from_dict({**JOB, "text": "hi", "redriven": value}).redriven is redriven
