"""Replies arrive in order (BEHAVIOUR §6) without a FIFO queue: a turn's deliveries are invoked and
waited for (adapters.aws.WaitingDeliveries, `{"deliveries": [...]}`), so the next turn's reply
cannot overtake one being retried; a platform down past the wait hands the job to the asynchronous
path, whose retries end in the dead letters with the job as it was sent. Pushes and command answers
are asynchronous invokes, each on its own: they keep no order between them (docs/architecture.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway import wiring
from hermes_gateway.adapters.aws import WaitingDeliveries
from hermes_gateway.resources import function
from hermes_gateway.services.dead_letters import classify
from hermes_local.aws import AsyncInvokes, install_lambda_dispatch
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.integration

SERVER_ERROR = {"ok": False, "error_code": 502, "description": "Bad Gateway"}


def _context(name: str) -> LambdaContext:
    return LambdaContext(name, 256, f"arn:aws:lambda:us-east-1:123456789012:function:{name}", time.time() + 30)


@pytest.fixture
def asynchronous(aws: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> Iterator[AsyncInvokes]:
    """Given the delivery function behind moto's Lambda invokes, its asynchronous invokes run with
    Lambda's two retries (at once here) and then its dead-letter queue."""
    from moto.awslambda_simple.models import LambdaSimpleBackend

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    monkeypatch.setattr(LambdaSimpleBackend, "invoke", LambdaSimpleBackend.invoke)  # restored afterwards
    wiring.reset()
    delivery = load_handler_module(function("delivery")).lambda_handler
    name = aws.bindings.function("delivery").rsplit(":", 1)[-1]
    runner = AsyncInvokes({name: aws.bindings.queue("dead-letters")}, retry_delays=(0.0, 0.0))

    def on_its_thread(event: dict[str, Any], context: Any) -> Any:
        RAN_ON.append(threading.current_thread().name)
        return delivery(event, context)

    RAN_ON.clear()
    install_lambda_dispatch(lambda called: on_its_thread if called == name else None, _context, runner)
    yield runner
    runner.close()


RAN_ON: list[str] = []  # the thread each run of the delivery function ran on


def job(delivery_id: str, text: str) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "turn_id": delivery_id, "target": {"platform": "telegram", "chat_id": "99"},
            "text": text}  # fmt: skip


def test_a_turn_reply_retried_after_a_failure_is_not_overtaken_by_the_next(
    aws: Any, asynchronous: AsyncInvokes, fake_telegram: FakeTelegram
) -> None:
    # Given the platform fails the first reply twice
    fake_telegram.answer_next(502, SERVER_ERROR, times=2)
    slept: list[float] = []
    deliveries = WaitingDeliveries(aws.bindings.function("delivery"), sleep=slept.append)
    # When two turns of one session deliver, one after the other (as a session runs its turns)
    deliveries.send(job("turn-1", "one"))
    deliveries.send(job("turn-2", "two"))
    # Then the first was tried again (backing off) until it was sent, before the second went out
    assert [m["text"] for m in fake_telegram.sent] == ["one", "two"]
    assert slept == [0.5, 1.0]
    assert asynchronous.pending == 0  # nothing was handed to the asynchronous path


def test_a_platform_down_past_the_wait_hands_the_reply_to_the_retries_and_then_the_dead_letters(
    aws: Any, asynchronous: AsyncInvokes, fake_telegram: FakeTelegram
) -> None:
    # Given a platform that keeps failing (the turn's five tries, then Lambda's first run and its two retries)
    fake_telegram.answer_next(502, SERVER_ERROR, times=8)
    deliveries = WaitingDeliveries(aws.bindings.function("delivery"), sleep=lambda seconds: None)
    deliveries.send(job("turn-1", "one"))  # returns: the turn goes on
    assert asynchronous.wait_idle(30)
    # Then the job is on the dead letters exactly as it was sent, with Lambda's error attributes
    dead = wiring.dead_letters()
    (message,) = dead.receive(visibility_seconds=0)
    letter = classify(message)
    assert letter.kind == "delivery-async" and letter.jobs == [job("turn-1", "one")]
    assert {"RequestID", "ErrorCode", "ErrorMessage"} <= set(message["MessageAttributes"])
    assert "TransientError" in letter.reason
    assert fake_telegram.sent == [] and len(fake_telegram.calls("sendMessage")) == 5 + 3


def test_an_asynchronous_invoke_runs_on_a_worker_not_in_the_callers_thread(
    aws: Any, asynchronous: AsyncInvokes, fake_telegram: FakeTelegram
) -> None:
    from hermes_gateway.adapters.aws import LambdaDeliveries

    LambdaDeliveries(aws.bindings.function("delivery")).send(job("push-1", "hi"))
    assert asynchronous.wait_idle(30)
    (row,) = wiring.outbox().recent()
    assert (row.delivery_id, row.status) == ("push-1#1", "sent")
    assert len(RAN_ON) == 1 and RAN_ON[0].startswith("lambda-async") and RAN_ON[0] != threading.current_thread().name
