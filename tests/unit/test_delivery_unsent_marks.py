"""A send the platform refused for certain is never lost to a throttled outbox write, and a chunk
the platform may have is never sent again (services/delivery.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.errors import RateLimited, TransientError
from hermes_gateway.platforms.base import Sender
from hermes_gateway.services.delivery import MARK_ATTEMPTS, DeliveryDeps, DeliveryJob, Undeliverable, deliver
from tests.fakes.services import FakeOutbox, FakeSender

NOW = 1_764_400_000.0
CHUNK = "turn-u#1"


class ThrottledOutbox(FakeOutbox):
    """Marks with a chosen status raise DynamoDB's throttling (as a TransientError) `times` times."""

    def __init__(self, status: str, times: int) -> None:
        super().__init__()
        self.status, self.times = status, times

    def mark(self, delivery_id: str, status: str, now: float, **kw: Any) -> None:
        if status == self.status and self.times:
            self.times -= 1
            raise TransientError("DynamoDB is throttling")
        super().mark(delivery_id, status, now, **kw)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def job() -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": "turn-u",
            "turn_id": "turn-u",
            "target": {"platform": "telegram", "chat_id": "99"},
            "text": "hi",
        }
    )


def deps(outbox: FakeOutbox, sender: Sender, clock: Clock, unsent: dict[str, float]) -> DeliveryDeps:
    return DeliveryDeps(
        outbox=outbox, sender_for=lambda p, v: sender, now=clock, sleep=lambda s: None, unsent_claims=unsent
    )


def test_a_throttled_failed_mark_is_retried_and_the_chunk_sent_later() -> None:
    # Given Telegram times out once and the first write of 'failed' is throttled
    outbox, sender, clock = ThrottledOutbox("failed", times=1), FakeSender(fail_on={1}), Clock()
    with pytest.raises(TransientError):
        deliver(job(), deps(outbox, sender, clock, {}))
    assert outbox.entries[CHUNK].status == "failed"  # the retried write landed
    # When the job comes back (on any instance)
    clock.now += 5
    deliver(job(), deps(outbox, sender, clock, {}))
    # Then the reply went out once
    assert [text for _, text, _ in sender.sent] == ["hi"] and outbox.entries[CHUNK].status == "sent"


@pytest.mark.parametrize("refusal", [TransientError("telegram 502"), RateLimited(3, "telegram 429")])
def test_a_failed_mark_that_never_lands_leaves_the_job_retried_and_this_instance_resends(refusal: Exception) -> None:
    # Given every in-process try of the 'failed' mark is throttled
    outbox, sender, clock = ThrottledOutbox("failed", times=MARK_ATTEMPTS), FakeSender({1}, refusal), Clock()
    unsent: dict[str, float] = {}
    with pytest.raises(TransientError):
        deliver(job(), deps(outbox, sender, clock, unsent))
    assert outbox.entries[CHUNK].status == "sending" and CHUNK in unsent
    # When the job comes back to this instance, before and after the claim would have gone stale
    clock.now += 600
    result = deliver(job(), deps(outbox, sender, clock, unsent))
    # Then the chunk the platform refused is sent, once, and not settled 'unknown'
    assert result.status == "sent" and [text for _, text, _ in sender.sent] == ["hi"]
    assert outbox.entries[CHUNK].status == "sent" and unsent == {}


def test_another_instance_never_resends_an_unrecorded_claim() -> None:
    # Given this instance could not record its failed send; another instance gets the job
    outbox, sender, clock = ThrottledOutbox("failed", times=MARK_ATTEMPTS), FakeSender(fail_on={1}), Clock()
    with pytest.raises(TransientError):
        deliver(job(), deps(outbox, sender, clock, {}))
    with pytest.raises(TransientError, match="another worker"):
        deliver(job(), deps(outbox, sender, clock, {}))  # the claim is fresh: it waits
    clock.now += 600
    # Then, not knowing what became of the send, it records a gap, not a possible duplicate
    assert deliver(job(), deps(outbox, sender, clock, {})).status == "unknown"
    assert sender.sent == []


def test_a_sent_chunk_whose_mark_never_lands_is_never_resent_even_by_its_instance() -> None:
    # The invariant: the platform may have it (here it does), so nobody sends it again
    outbox, sender, clock = ThrottledOutbox("sent", times=MARK_ATTEMPTS), FakeSender(), Clock()
    unsent: dict[str, float] = {}
    with pytest.raises(TransientError):
        deliver(job(), deps(outbox, sender, clock, unsent))
    assert unsent == {}
    clock.now += 600
    assert deliver(job(), deps(outbox, sender, clock, unsent)).status == "unknown"
    assert len(sender.sent) == 1


def test_a_claim_taken_over_since_is_not_taken_back() -> None:
    # Given the failed send's claim went stale and was settled by another worker meanwhile
    outbox, sender, clock = ThrottledOutbox("failed", times=MARK_ATTEMPTS), FakeSender(fail_on={1}), Clock()
    unsent: dict[str, float] = {}
    with pytest.raises(TransientError):
        deliver(job(), deps(outbox, sender, clock, unsent))
    clock.now += 600
    assert outbox.settle_stale(CHUNK, clock.now)
    # Then this instance's memory does not override what is recorded
    assert deliver(job(), deps(outbox, sender, clock, unsent)).status == "unknown"
    assert sender.sent == []


def test_a_refusal_whose_mark_never_lands_is_dead_lettered_on_the_retry() -> None:
    refused = Exception("Bad Request: chat not found")
    outbox, sender, clock = ThrottledOutbox("failed", times=MARK_ATTEMPTS), FakeSender({1, 2}, refused), Clock()
    unsent: dict[str, float] = {}
    with pytest.raises(TransientError):
        deliver(job(), deps(outbox, sender, clock, unsent))
    with pytest.raises(Undeliverable):
        deliver(job(), deps(outbox, sender, clock, unsent))
    assert outbox.entries[CHUNK].status == "failed" and sender.attempts == 2
