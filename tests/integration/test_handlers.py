"""The five handlers on moto, invoked with the events AWS would give them."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import boto3
import pytest

from hermes_gateway.adapters.aws import SqsQueue
from hermes_gateway.resources import function
from hermes_local import pollers
from hermes_local.http_front import api_gateway_v2_event
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.telegram_server import FakeTelegram, too_many_requests

pytestmark = pytest.mark.integration

SECRET = "s3cret-token_value"


def handler(name: str) -> Any:
    return load_handler_module(function(name)).lambda_handler


def context(name: str) -> LambdaContext:
    return LambdaContext(name, 256, f"arn:aws:lambda:us-east-1:123456789012:function:{name}", deadline=time.time() + 30)


def update(update_id: int, text: str = "hello", chat_id: int = 99, user_id: int = 42) -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1,
            "chat": {"id": chat_id, "type": "private", "first_name": "Al"},
            "from": {"id": user_id, "is_bot": False, "first_name": "Al"},
            "text": text,
        },
    }


def webhook_event(body: bytes, secret: str | None = SECRET, platform: str = "telegram") -> dict[str, Any]:
    headers = [("Content-Type", "application/json")]
    if secret is not None:
        headers.append(("X-Telegram-Bot-Api-Secret-Token", secret))
    return api_gateway_v2_event("POST", f"/webhooks/{platform}", headers, body, "203.0.113.9")


def queued(queue_url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs")
    return sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])


def sqs_event(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return pollers.sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1")


@pytest.fixture
def env(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("TELEGRAM_ALLOW_ALL_USERS", "true")
    return aws


def test_ingress_enqueues_once_and_acknowledges_duplicates(env: Any) -> None:
    # Given a valid update
    event = webhook_event(json.dumps(update(1001)).encode())
    # When it arrives twice
    first = handler("ingress")(event, context("ingress"))
    second = handler("ingress")(event, context("ingress"))
    # Then both are acknowledged and exactly one message is queued, in the session's FIFO group
    assert first["statusCode"] == 200 and json.loads(first["body"]) == {"ok": True}
    assert second["statusCode"] == 200 and json.loads(second["body"])["duplicate"] is True
    messages = queued(env.bindings.queue("inbound"))
    assert len(messages) == 1
    body = json.loads(messages[0]["Body"])
    assert body["event_id"] == "telegram:default:1001"
    assert body["session_key"] == "agent:main:telegram:dm:99"
    assert "99" not in messages[0]["Attributes"]["MessageGroupId"]  # hashed, not the raw chat id


def test_ingress_accepts_a_base64_body(env: Any) -> None:
    event = webhook_event(b"")
    event["body"] = base64.b64encode(json.dumps(update(7)).encode()).decode()
    event["isBase64Encoded"] = True
    assert handler("ingress")(event, context("ingress"))["statusCode"] == 200
    assert len(queued(env.bindings.queue("inbound"))) == 1


@pytest.mark.parametrize(
    ("secret", "body", "status"),
    [
        ("wrong-secret", json.dumps(update(1)).encode(), 401),
        (None, json.dumps(update(1)).encode(), 401),
        (SECRET, b"{not json", 400),
        (SECRET, json.dumps({"update_id": "x"}).encode(), 400),
        (SECRET, b"{" + b" " * 70000 + b"}", 413),
    ],
)
def test_ingress_rejects_bad_input_and_enqueues_nothing(env: Any, secret: str | None, body: bytes, status: int) -> None:
    response = handler("ingress")(webhook_event(body, secret), context("ingress"))
    assert response["statusCode"] == status
    assert json.loads(response["body"])["ok"] is False
    assert queued(env.bindings.queue("inbound")) == []


def test_webchat_is_not_served_outside_local_mode(env: Any) -> None:
    response = handler("ingress")(webhook_event(b"{}", platform="webchat"), context("ingress"))
    assert response["statusCode"] == 404


def test_router_starts_one_turn_per_message_even_when_redelivered(env: Any) -> None:
    handler("ingress")(webhook_event(json.dumps(update(5)).encode()), context("ingress"))
    messages = queued(env.bindings.queue("inbound"))
    # When the router gets the same record twice (an SQS redelivery)
    assert handler("router")(sqs_event(messages), context("router")) == {"batchItemFailures": []}
    assert handler("router")(sqs_event(messages), context("router")) == {"batchItemFailures": []}
    # Then one execution exists, named after the turn
    sfn = boto3.client("stepfunctions")
    executions = sfn.list_executions(stateMachineArn=env.bindings.state_machine("turn"))["executions"]
    assert len(executions) == 1 and executions[0]["name"].startswith("turn-")


def test_router_queues_a_message_for_a_busy_session_behind_its_turn(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two messages of one session, with no workflow running to release the first lease
    monkeypatch.setattr("hermes_gateway.adapters.aws.StepFunctionsStarter.start", lambda self, name, turn: True)
    for update_id in (1, 2):
        handler("ingress")(webhook_event(json.dumps(update(update_id)).encode()), context("ingress"))
    batch = queued(env.bindings.queue("inbound"))
    assert [json.loads(m["Body"])["event_id"] for m in batch] == ["telegram:default:1", "telegram:default:2"]
    # When both arrive in one batch (FIFO hands a group's messages over in order)
    result = handler("router")(sqs_event(batch), context("router"))
    # Then the first starts a turn and the second waits on the session's queue (no retry needed)
    from hermes_gateway import wiring

    assert result == {"batchItemFailures": []}
    waiting = wiring.turn_control().state("agent:main:telegram:dm:99").queue
    assert [q.event_id for q in waiting] == ["telegram:default:2"]


def test_router_drops_an_unauthorized_sender_silently(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_ALLOW_ALL_USERS", "false")
    monkeypatch.setenv("TELEGRAM_ALLOWED_USERS", "7")
    handler("ingress")(webhook_event(json.dumps(update(9, user_id=42)).encode()), context("ingress"))
    from hermes_gateway import wiring

    wiring.reset()
    assert handler("router")(sqs_event(queued(env.bindings.queue("inbound"))), context("router")) == {
        "batchItemFailures": []
    }
    assert boto3.client("dynamodb").scan(TableName=env.bindings.table("sessions"))["Count"] == 0


def send_delivery(env: Any, job: dict[str, Any]) -> list[dict[str, Any]]:
    SqsQueue(env.bindings.queue("delivery")).send(job)  # FIFO: grouped by the target chat
    return queued(env.bindings.queue("delivery"))


def test_delivery_sends_to_telegram_once_and_honours_429(
    env: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_gateway import wiring

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    job = {
        "delivery_id": "turn-1",
        "turn_id": "turn-1",
        "target": {"platform": "telegram", "chat_id": "99"},
        "text": "x" * 5000,
    }
    messages = send_delivery(env, job)
    # Given Telegram answers the first request with flood control
    fake_telegram.answer_next(429, too_many_requests(3))
    first = handler("delivery")(sqs_event(messages), context("delivery"))
    assert first == {"batchItemFailures": [{"itemIdentifier": messages[0]["MessageId"]}]}
    # When the job comes back, and then once more (a duplicate delivery)
    assert handler("delivery")(sqs_event(messages), context("delivery")) == {"batchItemFailures": []}
    assert handler("delivery")(sqs_event(messages), context("delivery")) == {"batchItemFailures": []}
    # Then two chunks were sent, each once, in order, and the outbox holds Telegram's message ids
    sent = fake_telegram.calls("sendMessage")
    assert [len(s["text"]) <= 4096 for s in sent] == [True, True, True]  # the 429'd attempt, then 2 chunks
    accepted = fake_telegram.sent
    assert len(accepted) == 2 and accepted[0]["text"].endswith("(1/2)") and accepted[1]["text"].endswith("(2/2)")
    rows = wiring.outbox().recent()
    assert [(r.status, r.platform_message_id) for r in rows] == [("sent", "1"), ("sent", "2")]
    assert all(fake_telegram.token not in (r.error or "") for r in rows)


def test_delivery_without_a_bot_token_is_dead_lettered_outside_local_mode(
    env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    job = {
        "delivery_id": "turn-2",
        "turn_id": "turn-2",
        "target": {"platform": "telegram", "chat_id": "99"},
        "text": "hi",
    }
    messages = send_delivery(env, job)
    result = handler("delivery")(sqs_event(messages), context("delivery"))
    assert result == {"batchItemFailures": []}  # not retried: it cannot succeed
    (dead,) = queued(env.bindings.queue("delivery-dlq"))
    assert json.loads(dead["Body"]) == job


def test_expiry_releases_expired_leases(env: Any) -> None:
    from hermes_gateway import wiring
    from hermes_gateway.domain.source import SessionSource

    store = wiring.session_store()
    store.get_or_create(SessionSource("telegram", chat_id="1", user_id="1"), "k", time.time())
    assert store.acquire("k", "turn", "tok", time.time() - 1000, 60)
    assert handler("expiry")({"source": "aws.scheduler"}, context("expiry"))["leases_released"] == 1
    route = store.get_route("k")
    assert route is not None and route.resume_pending and route.lease_token is None
    assert handler("expiry")({"source": "aws.scheduler"}, context("expiry"))["leases_released"] == 0


def test_expiry_needs_only_the_routes_table_it_is_granted(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_gateway import wiring
    from hermes_gateway.resources import TABLES, function

    # Given the expiry function's environment in AWS: only the tables it is granted
    granted = set(function("expiry").grants)
    for table in TABLES:
        if table.name not in granted:
            monkeypatch.delenv(table.env_var, raising=False)
    wiring.reset()
    assert handler("expiry")({"source": "aws.scheduler"}, context("expiry"))["leases_released"] == 0
