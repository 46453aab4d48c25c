"""Replies arrive in order (BEHAVIOUR §6): the delivery queue is FIFO with one group per target chat,
the consumer stops a chat's batch at its first failure and brings the held-back jobs back with it,
and local mode receives FIFO queues by SQS's rule."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest
from moto import mock_aws

from hermes_gateway import wiring
from hermes_gateway.adapters import aws as aws_adapters
from hermes_gateway.adapters.aws import SqsQueue, delivery_group_id
from hermes_gateway.resources import function
from hermes_local import pollers
from hermes_local.aws import configure_moto
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.telegram_server import FakeTelegram, too_many_requests

pytestmark = pytest.mark.integration


@pytest.fixture
def env(aws: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    return aws


def job(delivery_id: str, chat: str, text: str, thread: str | None = None) -> dict[str, Any]:
    target = {"platform": "telegram", "chat_id": chat, "thread_id": thread}
    return {"delivery_id": delivery_id, "target": target, "text": text}


def receive_all(url: str) -> list[dict[str, Any]]:
    response = boto3.client("sqs").receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
    return list(response.get("Messages", []))


def deliver(records: list[dict[str, Any]]) -> dict[str, Any]:
    context = LambdaContext(
        "delivery", 256, "arn:aws:lambda:us-east-1:123456789012:function:delivery", deadline=time.time() + 30
    )
    event = pollers.sqs_event(records, "arn:aws:sqs:us-east-1:123456789012:delivery.fifo", "us-east-1")
    result: dict[str, Any] = load_handler_module(function("delivery")).lambda_handler(event, context)
    return result


def test_every_producer_s_job_is_grouped_by_its_target_chat_and_de_duplicated(env: Any) -> None:
    queue = SqsQueue(env.bindings.queue("delivery"))
    assert queue.fifo
    # Given the same job queued twice (a turn task that ran twice) and jobs for other chats and threads
    queue.send(job("turn-1", "99", "one"))
    queue.send(job("turn-1", "99", "one"))
    queue.send(job("turn-2", "99", "two", thread="7"))
    queue.send(job("turn-3", "77", "three"))
    messages = receive_all(queue.url)
    # Then the duplicate is dropped, and each chat (and thread) is its own group, named without raw ids
    groups = [m["Attributes"]["MessageGroupId"] for m in messages]
    assert len(messages) == 3 and len(set(groups)) == 3
    assert groups[0] == delivery_group_id(job("x", "99", "")) and not any("99" in g for g in groups)
    with pytest.raises(ValueError, match="group id"):
        queue.send({"text": "no target, no delivery id"})


def test_a_rate_limited_reply_holds_back_its_chat_but_not_the_others(
    env: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = SqsQueue(env.bindings.queue("delivery"))
    for delivery_id, chat, text in (("a1", "99", "one"), ("a2", "99", "two"), ("b1", "77", "other")):
        queue.send(job(delivery_id, chat, text))
    delays: list[tuple[str, int]] = []
    monkeypatch.setattr(aws_adapters.SqsQueue, "delay_retry", lambda _, handle, s: delays.append((handle, s)))
    batch = receive_all(queue.url)
    by_text = {m["Body"].split('"text":"')[1].split('"')[0]: m for m in batch}
    fake_telegram.answer_next(429, too_many_requests(3))  # the first send: chat 99's "one"

    result = deliver(batch)

    # Then chat 99's second reply is not sent ahead of the first; chat 77's goes out
    assert [m["text"] for m in fake_telegram.sent] == ["other"]
    assert {f["itemIdentifier"] for f in result["batchItemFailures"]} == {
        by_text["one"]["MessageId"],
        by_text["two"]["MessageId"],
    }
    # Both come back together when Telegram says they may; the failed one turns visible last
    assert delays == [(by_text["two"]["ReceiptHandle"], 4), (by_text["one"]["ReceiptHandle"], 4)]
    # And when they come back, in order
    sqs = boto3.client("sqs")
    for message in (by_text["two"], by_text["one"]):
        sqs.change_message_visibility(QueueUrl=queue.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0)
    again = receive_all(queue.url)
    assert [m["MessageId"] for m in again] == [by_text["one"]["MessageId"], by_text["two"]["MessageId"]]
    assert deliver(again)["batchItemFailures"] == []
    assert [m["text"] for m in fake_telegram.sent] == ["other", "one", "two"]


def test_a_dead_lettered_job_lets_its_chat_go_on(env: Any, fake_telegram: FakeTelegram) -> None:
    queue = SqsQueue(env.bindings.queue("delivery"))
    queue.send(job("c1", "99", "refused"))
    queue.send(job("c2", "99", "next"))
    fake_telegram.answer_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: refused"})
    assert deliver(receive_all(queue.url))["batchItemFailures"] == []
    assert [m["text"] for m in fake_telegram.sent] == ["next"]
    assert SqsQueue(env.bindings.queue("delivery-dlq")).depth() == 1


def test_local_mode_keeps_a_fifo_group_in_order_during_a_long_poll() -> None:
    # moto alone hands out m2 first (it decides which groups are in flight when the poll starts);
    # configure_moto installs the shim that receives by SQS's rule
    configure_moto()
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="order.fifo", Attributes={"FifoQueue": "true", "VisibilityTimeout": "30"})[
            "QueueUrl"
        ]
        for n in (1, 2, 3):
            sqs.send_message(QueueUrl=url, MessageBody=f"m{n}", MessageGroupId="g", MessageDeduplicationId=str(n))
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="h", MessageDeduplicationId="x")
        handles = {
            m["Body"]: m["ReceiptHandle"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
        }
        assert set(handles) == {"m1", "m2"}
        # The consumer fails both: m1 comes back at once, m2 after a second (the group is in flight until then)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles["m1"], VisibilityTimeout=0)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles["m2"], VisibilityTimeout=1)
        # Another group is not held back
        assert [m["Body"] for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]] == ["x"]
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=3)["Messages"]
    assert [m["Body"] for m in again] == ["m1", "m2", "m3"]


def test_a_redriven_job_refused_again_is_dead_lettered_again(env: Any, fake_telegram: FakeTelegram) -> None:
    # Within SQS's 5-minute de-duplication window, neither the redrive nor the second dead letter
    # may be dropped as a duplicate of the first
    from hermes_gateway.cli.outbox import redrive

    queue, dead = SqsQueue(env.bindings.queue("delivery")), SqsQueue(env.bindings.queue("delivery-dlq"))
    queue.send(job("r1", "99", "refused"))
    fake_telegram.answer_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: refused"}, times=2)
    for attempt in range(2):
        batch = receive_all(queue.url)
        assert len(batch) == 1, f"attempt {attempt}: the job is not on the queue"
        assert deliver(batch)["batchItemFailures"] == []
        queue.delete(batch[0]["ReceiptHandle"])  # as the event source mapping does with what succeeded
        assert dead.depth() == 1
        if attempt == 0:
            assert redrive(queue, dead, limit=10) == 1
    assert len(fake_telegram.sent) == 0 and len(fake_telegram.calls("sendMessage")) == 2
