"""Delivery under platform faults, on moto with a fake Telegram on loopback (issue #6's done list), as
the delivery function runs an asynchronous invoke: a short 429 is waited out and sends once; a long
one is raised for Lambda's retry and then sends once; three 500s then success send once; a permanent
failure lands in the dead-letter queue (whose depth the alarm watches) with its reason, a repeat
of the job leaves it there, and a redrive sends it once; two concurrent deliveries of the same
chunk send once; a blocked chat is gone."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from hermes_gateway import wiring
from hermes_gateway.errors import RateLimited, TransientError
from hermes_gateway.resources import function
from hermes_gateway.services.dead_letters import redrive
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.telegram_server import FakeTelegram, too_many_requests

pytestmark = pytest.mark.integration


@pytest.fixture
def env(aws: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    return aws


def job(delivery_id: str, text: str = "hello") -> dict[str, Any]:
    return {"delivery_id": delivery_id, "target": {"platform": "telegram", "chat_id": "99"}, "text": text}


def invoke(event: dict[str, Any]) -> str:
    """One run of the delivery function on an asynchronous invoke; the job's outcome, or the error
    Lambda would retry it after."""
    context = LambdaContext(
        "delivery", 256, "arn:aws:lambda:us-east-1:123456789012:function:delivery", deadline=time.time() + 30
    )
    try:
        return str(load_handler_module(function("delivery")).lambda_handler(event, context)["status"])
    except TransientError as exc:
        return type(exc).__name__


class Redelivered:
    """The delivery function's asynchronous invokes as a redrive makes them: each job run once."""

    def __init__(self) -> None:
        self.outcomes: list[str] = []

    def send(self, body: dict[str, Any]) -> str:
        self.outcomes.append(invoke(body))
        return "request"


def test_a_short_429_is_waited_out_and_sends_once(env: Any, fake_telegram: FakeTelegram) -> None:
    fake_telegram.answer_next(429, too_many_requests(1))
    assert invoke(job("j-429")) == "sent"
    assert invoke(job("j-429")) == "sent"  # a duplicate invoke
    assert [m["text"] for m in fake_telegram.sent] == ["hello"]
    assert len(fake_telegram.calls("sendMessage")) == 2


def test_a_long_429_is_retried_by_lambda_and_sends_once(env: Any, fake_telegram: FakeTelegram) -> None:
    fake_telegram.answer_next(429, too_many_requests(40))
    assert invoke(job("j-long")) == RateLimited.__name__
    assert invoke(job("j-long")) == "sent"
    assert [m["text"] for m in fake_telegram.sent] == ["hello"]


def test_three_500s_then_success_sends_once(env: Any, fake_telegram: FakeTelegram) -> None:
    fake_telegram.answer_next(500, {"ok": False, "error_code": 500, "description": "Internal Server Error"}, times=3)
    assert [invoke(job("j-500")) for _ in range(4)] == ["TransientError"] * 3 + ["sent"]
    assert len(fake_telegram.sent) == 1
    (row,) = wiring.outbox().recent()
    assert (row.status, row.attempts, row.platform_message_id) == ("sent", 4, "1")


def test_a_permanent_failure_is_dead_lettered_and_a_redrive_sends_it_once(
    env: Any, fake_telegram: FakeTelegram
) -> None:
    dead_letters = wiring.dead_letters()
    fake_telegram.answer_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: something"})
    # The job is not retried: it goes to the dead letters, with the reason, where the alarm counts it
    assert invoke(job("j-400")) == "dead_lettered"
    assert dead_letters.depth() == 1
    (letter,) = dead_letters.receive(visibility_seconds=0)
    body = json.loads(letter["Body"])
    assert body["kind"] == "delivery" and body["job"] == job("j-400") and "Bad Request" in body["reason"]
    assert wiring.outbox().recent()[0].status == "dead_lettered"
    # A repeat of the job (a duplicate invoke, a turn's Fail state handing it on) leaves it for the
    # redrive, though the platform would take it now: it would arrive after the chat's later replies
    assert invoke(job("j-400")) == "dead_lettered"
    assert len(fake_telegram.sent) == 0 and dead_letters.depth() == 1
    # After the cause is fixed, a redrive sends it once; a second redrive finds nothing
    deliveries = Redelivered()
    assert redrive(dead_letters, deliveries, wiring.inbox(), limit=10).deliveries == 1
    assert redrive(dead_letters, deliveries, wiring.inbox(), limit=10).moved == 0
    assert deliveries.outcomes == ["sent"]
    assert invoke(job("j-400")) == "sent"  # the job again (a duplicate): nothing more is sent
    assert len(fake_telegram.sent) == 1 and dead_letters.depth() == 0


def test_a_redriven_job_refused_again_is_dead_lettered_again(env: Any, fake_telegram: FakeTelegram) -> None:
    dead_letters = wiring.dead_letters()
    fake_telegram.answer_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: refused"}, times=2)
    assert invoke(job("r1", "refused")) == "dead_lettered"
    deliveries = Redelivered()
    assert redrive(dead_letters, deliveries, wiring.inbox(), limit=10).deliveries == 1
    assert deliveries.outcomes == ["dead_lettered"] and dead_letters.depth() == 1
    assert len(fake_telegram.sent) == 0 and len(fake_telegram.calls("sendMessage")) == 2


def test_two_concurrent_deliveries_of_one_chunk_send_it_once(env: Any, fake_telegram: FakeTelegram) -> None:
    # The first send is slow, so the second delivery (Lambda ran the event twice) arrives while it is in flight
    fake_telegram.answer_next(200, {"ok": True, "result": {"message_id": 501}}, delay=0.6)
    module = load_handler_module(function("delivery"))
    outcomes: list[str] = []

    def instance() -> None:
        try:
            outcomes.append(module.run_job(job("j-race"), 0.0))
        except TransientError:
            outcomes.append("retry")

    threads = [threading.Thread(target=instance) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.15)
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["retry", "sent"]  # the loser is retried by Lambda
    assert invoke(job("j-race")) == "sent"  # and then finds the chunk sent
    assert len(fake_telegram.calls("sendMessage")) == 1
    (row,) = wiring.outbox().recent()
    assert (row.status, row.platform_message_id) == ("sent", "501")


def test_a_blocked_chat_is_marked_gone_without_retries_or_dead_letters(env: Any, fake_telegram: FakeTelegram) -> None:
    fake_telegram.answer_next(
        403, {"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}
    )
    assert invoke(job("j-gone")) == "gone"
    assert wiring.dead_letters().depth() == 0
    assert wiring.directory().gone_reason("telegram", "99", None, time.time()) is not None
    assert wiring.outbox().recent()[0].status == "gone"
