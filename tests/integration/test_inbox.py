"""The inbox on moto: the ingress's one AWS call before the 200, the router's ordered consumer with
its attempts counted on the item and its dead letters, and the dead-letter queue's shapes redriven
(an inbound message back through the stream, a stream batch read back, a delivery job)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from hermes_gateway import wiring
from hermes_gateway.resources import INBOX_SOURCE, function
from hermes_gateway.services.dead_letters import classify, redrive
from hermes_local.http_front import api_gateway_v2_event
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.aws_calls import aws_calls

pytestmark = pytest.mark.integration

SECRET = "inbox-test-" + "secret"


@pytest.fixture
def env(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("TELEGRAM_ALLOW_ALL_USERS", "true")
    wiring.reset()
    return aws


def handler(name: str) -> Any:
    return load_handler_module(function(name)).lambda_handler


def context(name: str, seconds: float = 30) -> LambdaContext:
    arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
    return LambdaContext(name, 512, arn, deadline=time.time() + seconds)


def webhook(update_id: int, chat_id: int = 99, text: str = "hello") -> dict[str, Any]:
    update = {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1,
            "chat": {"id": chat_id, "type": "private", "first_name": "Al"},
            "from": {"id": chat_id, "is_bot": False, "first_name": "Al"},
            "text": text,
        },
    }
    headers = [("Content-Type", "application/json"), ("X-Telegram-Bot-Api-Secret-Token", SECRET)]
    return api_gateway_v2_event("POST", "/webhooks/telegram", headers, json.dumps(update).encode(), "203.0.113.9")


def inbox_items(env: Any) -> list[dict[str, Any]]:
    return list(boto3.client("dynamodb").scan(TableName=env.bindings.table("inbox"))["Items"])


def dead_letters(env: Any) -> list[dict[str, Any]]:
    return wiring.dead_letters().receive(visibility_seconds=0)


# --- the ingress ----------------------------------------------------------------------------------


def test_the_webhook_is_answered_after_exactly_one_aws_call_new_or_duplicate(env: Any) -> None:
    ingress = handler("ingress")
    ingress(webhook(1), context("ingress"))  # a cold start's clients and imports
    with aws_calls() as new:
        assert ingress(webhook(2), context("ingress"))["statusCode"] == 200
    with aws_calls() as duplicate:
        response = ingress(webhook(2), context("ingress"))
    assert new == [("dynamodb", "PutItem")]
    assert duplicate == [("dynamodb", "PutItem")] and json.loads(response["body"])["duplicate"] is True
    assert len(inbox_items(env)) == 2


def test_a_throttled_inbox_write_asks_the_platform_to_retry_and_the_retry_is_written_once(env: Any) -> None:
    throttled = ClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "PutItem"
    )
    ingress = handler("ingress")
    with aws_calls(fail=lambda service, operation: throttled if operation == "PutItem" else None):
        response = ingress(webhook(3), context("ingress"))
    assert response["statusCode"] == 503 and response["headers"]["retry-after"] == "5"
    assert inbox_items(env) == []
    assert ingress(webhook(3), context("ingress"))["statusCode"] == 200  # the platform's retry
    assert ingress(webhook(3), context("ingress"))["statusCode"] == 200  # and one more: a duplicate
    assert len(inbox_items(env)) == 1


# --- the router's consumer ------------------------------------------------------------------------


@pytest.fixture
def poison(env: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A router that cannot route the messages whose text is `poison` (a bug it meets every time)."""
    module = load_handler_module(function("router"))
    routed: list[str] = []
    real = module.route_message

    def route_message(message: Any, **kwargs: Any) -> Any:
        if message.text == "poison":
            raise KeyError("a field the router cannot do without")
        routed.append(message.event_id)
        return real(message, **kwargs)

    monkeypatch.setattr(module, "route_message", route_message)
    monkeypatch.setattr(module.time, "sleep", lambda seconds: None)  # the pause before Lambda's retry
    return routed


def test_a_failed_message_holds_back_its_session_and_is_dead_lettered_after_its_attempts(
    env: Any, poison: list[str]
) -> None:
    ingress, router = handler("ingress"), handler("router")
    # Given a poison message, then another message of its session, then a message of another session
    for event in (webhook(10, text="poison"), webhook(11, text="after"), webhook(12, chat_id=77, text="other")):
        assert ingress(event, context("ingress"))["statusCode"] == 200
    records = env.inbox_records()
    sequence = [r["dynamodb"]["SequenceNumber"] for r in records]
    # When the router gets the batch: the poison fails, its session's next message is held back
    result = router({"Records": records}, context("router"))
    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == sequence[:2]
    assert poison == ["telegram:default:12"]
    # And each retry (Lambda retries from the failed record) counts one more attempt on its item
    for attempt in range(2, INBOX_SOURCE.max_attempts):
        assert len(router({"Records": records[:2]}, context("router"))["batchItemFailures"]) == 2
        item = next(i for i in inbox_items(env) if i["event_id"]["S"] == "telegram:default:10")
        assert item["attempts"] == {"N": str(attempt)} and item["error"]["S"].startswith("KeyError")
    assert dead_letters(env) == []
    # Then the last attempt dead-letters it with the reason and the whole message, and its session goes on
    assert router({"Records": records[:2]}, context("router")) == {"batchItemFailures": []}
    assert poison == ["telegram:default:12", "telegram:default:11"]
    (letter,) = dead_letters(env)
    body = json.loads(letter["Body"])
    assert (body["kind"], body["attempts"]) == ("inbound", INBOX_SOURCE.max_attempts)
    assert body["reason"].startswith("KeyError") and body["message"]["text"] == "poison"
    assert body["key"] == [records[0]["dynamodb"]["Keys"]["group"]["S"], "telegram:default:10"]


def test_a_busy_or_throttled_message_is_retried_without_counting_an_attempt(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_gateway.errors import SessionBusy, TransientError

    module = load_handler_module(function("router"))
    failures = [SessionBusy("the lease changed hands repeatedly", 1), TransientError("DynamoDB is throttling")]
    paused: list[float] = []
    real_sleep, this_thread = time.sleep, threading.get_ident()

    def sleep(seconds: float) -> None:  # the router's pauses; another thread's sleep is its own
        if threading.get_ident() == this_thread:
            paused.append(seconds)
        else:
            real_sleep(seconds)

    monkeypatch.setattr(module, "route_message", lambda message, **kw: (_ for _ in ()).throw(failures.pop()))
    monkeypatch.setattr(module.time, "sleep", sleep)
    handler("ingress")(webhook(20), context("ingress"))
    records = env.inbox_records()
    for _ in range(2):
        assert len(module.lambda_handler({"Records": records}, context("router"))["batchItemFailures"]) == 1
    (item,) = inbox_items(env)
    assert "attempts" not in item and dead_letters(env) == []
    assert len(paused) == 2 and all(1 <= p <= INBOX_SOURCE.retry_pause_cap_seconds for p in paused)


# --- the dead letters, redriven -------------------------------------------------------------------


class Invoked:
    """The delivery function's asynchronous invokes, as a redrive makes them."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def send(self, body: dict[str, Any]) -> str:
        self.jobs.append(body)
        return "request"


def test_an_inbound_dead_letter_is_routed_again_through_the_stream(env: Any, poison: list[str]) -> None:
    ingress, router = handler("ingress"), handler("router")
    ingress(webhook(30, text="poison"), context("ingress"))
    records = env.inbox_records()
    for _ in range(INBOX_SOURCE.max_attempts):
        router({"Records": records}, context("router"))
    assert classify(dead_letters(env)[0]).kind == "inbound"
    # When the bug is fixed and the dead letter redriven
    report = redrive(wiring.dead_letters(), Invoked(), wiring.inbox(), limit=10)
    # Then the message is a new item: the stream hands it to the router again, with no attempts
    assert (report.inbound, report.deliveries, dict(report.left)) == (1, 0, {})
    again = env.inbox_records(after=records[-1]["dynamodb"]["SequenceNumber"])
    assert [r["dynamodb"]["NewImage"]["event_id"]["S"] for r in again] == ["telegram:default:30"]
    (item,) = inbox_items(env)
    assert "attempts" not in item
    assert dead_letters(env) == []


def test_a_stream_batch_the_mapping_gave_up_on_is_read_back_and_routed_again(env: Any) -> None:
    ingress = handler("ingress")
    for update_id in (40, 41):
        ingress(webhook(update_id), context("ingress"))
    records = env.inbox_records()
    # Given the metadata Lambda sends to the on-failure destination (the messages stay in the inbox)
    info = {
        "shardId": boto3.client("dynamodbstreams").describe_stream(StreamArn=records[0]["eventSourceARN"])[
            "StreamDescription"
        ]["Shards"][0]["ShardId"],
        "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
        "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
        "approximateArrivalOfFirstRecord": "2026-01-01T00:00:00Z",
        "approximateArrivalOfLastRecord": "2026-01-01T00:00:01Z",
        "batchSize": 2,
        "streamArn": records[0]["eventSourceARN"],
    }
    body = {"requestContext": {"condition": "RetryAttemptsExhausted"}, "version": "1.0", "DDBStreamBatchInfo": info}
    boto3.client("sqs").send_message(QueueUrl=env.bindings.queue("dead-letters"), MessageBody=json.dumps(body))
    assert classify(dead_letters(env)[0]).kind == "inbound-batch"
    # When it is redriven, both messages are put back (read through the stream), in order
    report = redrive(wiring.dead_letters(), Invoked(), wiring.inbox(), limit=10)
    assert report.inbound == 2
    again = env.inbox_records(after=records[-1]["dynamodb"]["SequenceNumber"])
    assert [r["dynamodb"]["Keys"]["event_id"]["S"] for r in again] == ["telegram:default:40", "telegram:default:41"]


def test_a_batch_the_stream_no_longer_holds_is_found_by_its_arrival_time(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = wiring.inbox()
    handler("ingress")(webhook(50), context("ingress"))
    monkeypatch.setattr(type(inbox), "batch_keys", lambda self, *args: None)  # past the stream's 24 hours
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    info = {"approximateArrivalOfFirstRecord": now, "approximateArrivalOfLastRecord": now, "batchSize": 1}
    boto3.client("sqs").send_message(
        QueueUrl=env.bindings.queue("dead-letters"), MessageBody=json.dumps({"DDBStreamBatchInfo": info})
    )
    assert redrive(wiring.dead_letters(), Invoked(), inbox, limit=10).inbound == 1


def test_delivery_dead_letters_of_both_kinds_go_back_to_the_delivery_function(env: Any) -> None:
    job = {"delivery_id": "d-1", "target": {"platform": "telegram", "chat_id": "99"}, "text": "hi"}
    queue = env.bindings.queue("dead-letters")
    sqs = boto3.client("sqs")
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps({"kind": "delivery", "reason": "refused", "job": job}))
    attributes = {"ErrorMessage": {"DataType": "String", "StringValue": "TransientError: 502"}}
    sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(job), MessageAttributes=attributes)  # Lambda's DLQ
    sqs.send_message(QueueUrl=queue, MessageBody="not a dead letter of ours")
    kinds = sorted(classify(m).kind for m in dead_letters(env))
    assert kinds == ["delivery", "delivery-async", "unknown"]
    invoked = Invoked()
    report = redrive(wiring.dead_letters(), invoked, wiring.inbox(), limit=10)
    assert invoked.jobs == [{**job, "redriven": True}] * 2 and report.deliveries == 2
    assert sum(report.left.values()) == 1  # the unknown one stays for a look
