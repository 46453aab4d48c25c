"""Delivery under platform faults, on moto with a fake Telegram on loopback (issue #6's done list):
a 429 then success sends once; three 500s then success sends once; a permanent failure lands in the
dead-letter queue (whose depth the alarm watches); a redrive sends it once; two concurrent
deliveries of the same chunk send once."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from hermes_gateway import wiring
from hermes_gateway.adapters.aws import SqsQueue
from hermes_gateway.cli.outbox import redrive
from hermes_gateway.errors import TransientError
from hermes_gateway.resources import function
from hermes_local import pollers
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.telegram_server import FakeTelegram, too_many_requests

pytestmark = pytest.mark.integration


@pytest.fixture
def env(aws: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    return aws


def deliver_once(records: list[dict[str, Any]]) -> dict[str, Any]:
    context = LambdaContext(
        "delivery", 256, "arn:aws:lambda:us-east-1:123456789012:function:delivery", deadline=time.time() + 30
    )
    event = pollers.sqs_event(records, "arn:aws:sqs:us-east-1:123456789012:delivery", "us-east-1")
    result: dict[str, Any] = load_handler_module(function("delivery")).lambda_handler(event, context)
    return result


def enqueue(env: Any, delivery_id: str, text: str = "hello") -> list[dict[str, Any]]:
    url = env.bindings.queue("delivery")
    job = {"delivery_id": delivery_id, "target": {"platform": "telegram", "chat_id": "99"}, "text": text}
    SqsQueue(url).send(job)  # FIFO: grouped by the target chat
    messages = boto3.client("sqs").receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    return list(messages)


def failed(result: dict[str, Any]) -> int:
    return len(result["batchItemFailures"])


def test_a_429_then_success_sends_once(env: Any, fake_telegram: FakeTelegram) -> None:
    records = enqueue(env, "j-429")
    fake_telegram.answer_next(429, too_many_requests(1))
    assert failed(deliver_once(records)) == 1
    assert failed(deliver_once(records)) == 0
    assert failed(deliver_once(records)) == 0  # a duplicate hand-over
    assert [m["text"] for m in fake_telegram.sent] == ["hello"]


def test_three_500s_then_success_sends_once(env: Any, fake_telegram: FakeTelegram) -> None:
    records = enqueue(env, "j-500")
    fake_telegram.answer_next(500, {"ok": False, "error_code": 500, "description": "Internal Server Error"}, times=3)
    assert [failed(deliver_once(records)) for _ in range(4)] == [1, 1, 1, 0]
    assert len(fake_telegram.sent) == 1
    (row,) = wiring.outbox().recent()
    assert (row.status, row.attempts, row.platform_message_id) == ("sent", 4, "1")


def test_a_permanent_failure_is_dead_lettered_and_a_redrive_sends_it_once(
    env: Any, fake_telegram: FakeTelegram
) -> None:
    records = enqueue(env, "j-400")
    dead_letters = SqsQueue(env.bindings.queue("delivery-dlq"))
    live = SqsQueue(env.bindings.queue("delivery"))
    fake_telegram.answer_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: something"})
    # The job is not retried: it leaves the queue for the dead letters, where the alarm counts it
    assert failed(deliver_once(records)) == 0
    live.delete(records[0]["ReceiptHandle"])  # as the event source mapping does with what succeeded
    assert dead_letters.depth() == 1
    assert wiring.outbox().recent()[0].status == "failed"
    # After the cause is fixed, a redrive sends it once; a second redrive finds nothing
    assert redrive(live, dead_letters, limit=10) == 1
    assert redrive(live, dead_letters, limit=10) == 0
    (again,) = boto3.client("sqs").receive_message(QueueUrl=live.url, AttributeNames=["All"])["Messages"]
    assert failed(deliver_once([again])) == 0
    assert failed(deliver_once([again])) == 0
    assert len(fake_telegram.sent) == 1 and dead_letters.depth() == 0


def test_two_concurrent_deliveries_of_one_chunk_send_it_once(env: Any, fake_telegram: FakeTelegram) -> None:
    records = enqueue(env, "j-race")
    # The first send is slow, so the second delivery arrives while it is in flight
    fake_telegram.answer_next(200, {"ok": True, "result": {"message_id": 501}}, delay=0.6)
    # Two Lambda instances: each runs the record handler in its own process; threads stand in here
    module = load_handler_module(function("delivery"))
    record = SQSRecord(pollers.sqs_event(records, "arn:aws:sqs:us-east-1:1:delivery", "us-east-1")["Records"][0])
    outcomes: list[str] = []

    def instance() -> None:
        try:
            module.record_handler(record)
            outcomes.append("done")
        except TransientError:
            outcomes.append("retry")

    threads = [threading.Thread(target=instance) for _ in range(2)]
    for thread in threads:
        thread.start()
        time.sleep(0.15)
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["done", "retry"]  # the loser retries later
    assert failed(deliver_once(records)) == 0  # and then finds the chunk sent
    assert len(fake_telegram.calls("sendMessage")) == 1
    (row,) = wiring.outbox().recent()
    assert (row.status, row.platform_message_id) == ("sent", "501")


def test_a_blocked_chat_is_marked_gone_without_retries_or_dead_letters(env: Any, fake_telegram: FakeTelegram) -> None:
    records = enqueue(env, "j-gone")
    fake_telegram.answer_next(
        403, {"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}
    )
    assert failed(deliver_once(records)) == 0
    assert SqsQueue(env.bindings.queue("delivery-dlq")).depth() == 0
    assert wiring.directory().gone_reason("telegram", "99", None, time.time()) is not None
    assert wiring.outbox().recent()[0].status == "gone"
