"""The handlers on moto, invoked with the events AWS would give them."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
from hermes_gateway.errors import RateLimited, TransientError
from hermes_gateway.platforms.whatsapp import SIGNATURE_HEADER, meta_signature
from hermes_gateway.resources import EVENT_BUS, function
from hermes_gateway.services.ingress import dedup_window_seconds
from hermes_local.http_front import api_gateway_v2_event
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.telegram_server import FakeTelegram, too_many_requests
from tests.fakes.whatsapp_server import FakeWhatsApp

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
    return sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
    ).get("Messages", [])


def inbox_items(env: Any) -> list[dict[str, Any]]:
    return list(boto3.client("dynamodb").scan(TableName=env.bindings.table("inbox"))["Items"])


@pytest.fixture
def env(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("TELEGRAM_ALLOW_ALL_USERS", "true")
    return aws


def test_ingress_writes_the_inbox_once_and_acknowledges_duplicates(env: Any) -> None:
    # Given a valid update
    event = webhook_event(json.dumps(update(1001)).encode())
    # When it arrives twice
    first = handler("ingress")(event, context("ingress"))
    second = handler("ingress")(event, context("ingress"))
    # Then both are acknowledged and exactly one message is in the inbox, in the session's partition
    assert first["statusCode"] == 200 and json.loads(first["body"]) == {"ok": True}
    assert second["statusCode"] == 200 and json.loads(second["body"])["duplicate"] is True
    (item,) = inbox_items(env)
    body = json.loads(item["envelope"]["S"])
    assert body["event_id"] == item["event_id"]["S"] == "telegram:default:1001"
    assert body["session_key"] == "agent:main:telegram:dm:99"
    assert "99" not in item["group"]["S"]  # hashed, not the raw chat id
    # And it ages out after the platform's retry window (Telegram's 24 h; never under 48 h)
    window = dedup_window_seconds("telegram")
    assert window == 48 * 3600
    assert window - 60 < int(item["expires_at"]["N"]) - time.time() <= window
    # And the stream hands it to the router
    assert [r["dynamodb"]["Keys"]["event_id"]["S"] for r in env.inbox_records()] == ["telegram:default:1001"]


def test_ingress_accepts_a_base64_body(env: Any) -> None:
    event = webhook_event(b"")
    event["body"] = base64.b64encode(json.dumps(update(7)).encode()).decode()
    event["isBase64Encoded"] = True
    assert handler("ingress")(event, context("ingress"))["statusCode"] == 200
    assert len(inbox_items(env)) == 1


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
    assert inbox_items(env) == []


def function_url_event(method: str, path: str, body: bytes, secret: str | None = SECRET) -> dict[str, Any]:
    """The event a Lambda function URL sends (`ingress.endpoint: function_url`): payload 2.0's shape
    with no route, so no path parameters (PLATFORMS §14)."""
    event = webhook_event(body, secret)
    event.pop("pathParameters", None)
    event["routeKey"] = "$default"
    event["rawPath"] = path
    event["requestContext"] = {
        **event["requestContext"],
        "routeKey": "$default",
        "domainName": "abcdefghij.lambda-url.us-east-1.on.aws",
        "http": {**event["requestContext"]["http"], "method": method, "path": path},
    }
    return event


def test_ingress_behind_a_function_url_reads_the_platform_from_the_path(env: Any) -> None:
    """Every path reaches the function: it answers what API Gateway's routes answered before it."""
    body = json.dumps(update(1101)).encode()
    ok = handler("ingress")(function_url_event("POST", "/webhooks/telegram", body), context("ingress"))
    assert ok["statusCode"] == 200
    assert [json.loads(i["envelope"]["S"])["event_id"] for i in inbox_items(env)] == ["telegram:default:1101"]
    for method, path, status in (
        ("POST", "/webhooks/nowhere", 404),  # no such platform
        ("POST", "/webhooks/slack", 404),  # not enabled here
        ("POST", "/", 404),
        ("GET", "/webhooks/telegram", 405),  # Telegram only posts
    ):
        answer = handler("ingress")(function_url_event(method, path, body), context("ingress"))
        assert answer["statusCode"] == status, (method, path)
    forged = handler("ingress")(function_url_event("POST", "/webhooks/telegram", body, "forged"), context("ingress"))
    assert forged["statusCode"] == 401
    assert len(inbox_items(env)) == 1


def test_webchat_is_not_served_outside_local_mode(env: Any) -> None:
    response = handler("ingress")(webhook_event(b"{}", platform="webchat"), context("ingress"))
    assert response["statusCode"] == 404


def test_router_starts_one_turn_per_message_even_when_redelivered(env: Any) -> None:
    handler("ingress")(webhook_event(json.dumps(update(5)).encode()), context("ingress"))
    records = env.inbox_records()
    # When the router gets the same record twice (a stream batch retried)
    assert handler("router")({"Records": records}, context("router")) == {"batchItemFailures": []}
    assert handler("router")({"Records": records}, context("router")) == {"batchItemFailures": []}
    # Then one execution exists, named after the turn
    sfn = boto3.client("stepfunctions")
    executions = sfn.list_executions(stateMachineArn=env.bindings.state_machine("turn"))["executions"]
    assert len(executions) == 1 and executions[0]["name"].startswith("turn-")


def test_router_queues_a_message_for_a_busy_session_behind_its_turn(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given two messages of one session, with no workflow running to release the first lease
    monkeypatch.setattr("hermes_gateway.adapters.aws.StepFunctionsStarter.start", lambda self, name, turn: True)
    for update_id in (1, 2):
        handler("ingress")(webhook_event(json.dumps(update(update_id)).encode()), context("ingress"))
    batch = env.inbox_records()
    assert [r["dynamodb"]["Keys"]["event_id"]["S"] for r in batch] == ["telegram:default:1", "telegram:default:2"]
    # When both arrive in one batch (the stream hands a session's messages over in order)
    result = handler("router")({"Records": batch}, context("router"))
    # Then the first starts a turn and the second waits on the session's queue (no retry needed)
    from hermes_gateway import wiring

    assert result == {"batchItemFailures": []}
    waiting = wiring.session_stores().control.state("agent:main:telegram:dm:99").queue
    assert [q.event_id for q in waiting] == ["telegram:default:2"]


def test_router_drops_an_unauthorized_sender_silently(env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_ALLOW_ALL_USERS", "false")
    monkeypatch.setenv("TELEGRAM_ALLOWED_USERS", "7")
    handler("ingress")(webhook_event(json.dumps(update(9, user_id=42)).encode()), context("ingress"))
    from hermes_gateway import wiring

    wiring.reset()
    assert handler("router")({"Records": env.inbox_records()}, context("router")) == {"batchItemFailures": []}
    assert boto3.client("dynamodb").scan(TableName=env.bindings.table("sessions"))["Count"] == 0


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
    # Given Telegram answers the first request with flood control longer than the function waits
    fake_telegram.answer_next(429, too_many_requests(30))
    with pytest.raises(RateLimited):  # Lambda tries the asynchronous invoke again later
        handler("delivery")(job, context("delivery"))
    # When the job comes back, and then once more (a duplicate delivery)
    assert handler("delivery")(job, context("delivery")) == {"delivery_id": "turn-1", "status": "sent"}
    assert handler("delivery")(job, context("delivery")) == {"delivery_id": "turn-1", "status": "sent"}
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
    result = handler("delivery")(job, context("delivery"))
    assert result == {"delivery_id": "turn-2", "status": "dead_lettered"}  # not retried: it cannot succeed
    (dead,) = queued(env.bindings.queue("dead-letters"))
    body = json.loads(dead["Body"])
    assert (body["kind"], body["job"]) == ("delivery", job)
    assert "credentials are not configured" in body["reason"]


def test_delivery_sends_a_list_of_jobs_in_order_and_returns_each_outcome(
    env: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_gateway import wiring

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    target = {"platform": "telegram", "chat_id": "99"}
    jobs = [{"delivery_id": f"t-{n}", "turn_id": "t", "target": target, "text": f"part {n}"} for n in (1, 2, 3)]
    # Given the platform refuses the second for good
    fake_telegram.answer_next(200, {"ok": True, "result": {"message_id": 11}})
    fake_telegram.answer_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: no"})
    result = handler("delivery")({"deliveries": jobs}, context("delivery"))
    # Then the others are sent, in order, and the refused one is dead-lettered with its reason
    assert result == {
        "deliveries": [
            {"delivery_id": "t-1", "status": "sent"},
            {"delivery_id": "t-2", "status": "dead_lettered"},
            {"delivery_id": "t-3", "status": "sent"},
        ]
    }
    assert [c["text"] for c in fake_telegram.calls("sendMessage")] == ["part 1", "part 2", "part 3"]
    (dead,) = queued(env.bindings.queue("dead-letters"))
    assert json.loads(dead["Body"])["job"] == jobs[1]


def test_a_failure_in_a_list_stops_its_later_jobs_until_the_retry(
    env: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hermes_gateway import wiring

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    target = {"platform": "telegram", "chat_id": "99"}
    jobs = [{"delivery_id": f"t-{n}", "turn_id": "t", "target": target, "text": f"part {n}"} for n in (1, 2)]
    fake_telegram.answer_next(502, {"ok": False, "error_code": 502, "description": "Bad Gateway"})
    with pytest.raises(TransientError):  # the turn retries the list
        handler("delivery")({"deliveries": jobs}, context("delivery"))
    assert fake_telegram.sent == []  # the second was not sent ahead of the first
    assert handler("delivery")({"deliveries": jobs}, context("delivery"))["deliveries"][1]["status"] == "sent"
    assert [m["text"] for m in fake_telegram.sent] == ["part 1", "part 2"]


def test_expiry_releases_expired_leases_with_something_waiting(env: Any) -> None:
    from hermes_gateway import wiring
    from hermes_gateway.domain.source import SessionSource
    from hermes_gateway.domain.targets import ReplyTarget
    from hermes_gateway.domain.turns import QueuedInput

    stores = wiring.session_stores()
    source = SessionSource("telegram", chat_id="1", user_id="1")
    entry = stores.routes.open(source, "k", time.time() - 1000)
    assert stores.leases.begin(entry, "turn", "tok", "e1", time.time() - 1000) is not None
    held = stores.routes.get("k")
    assert held is not None
    item = QueuedInput("e2", "waiting", time.time() - 999, source, ReplyTarget("telegram", "1"))
    assert stores.leases.enqueue(held, item, max_items=5, now=time.time() - 999).status == "queued"
    assert handler("expiry")({"source": "aws.scheduler"}, context("expiry"))["leases_released"] == 1
    route = stores.routes.get("k")
    assert route is not None and route.resume_pending and route.queued == 0  # handed to the queued message
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


# --- a reply the platform accepted and later reported failed (WhatsApp) --------------------------

APP_SECRET = "whatsapp-app-secret-for-tests"


@pytest.fixture
def fake_whatsapp() -> Iterator[FakeWhatsApp]:
    with FakeWhatsApp() as fake:
        yield fake


@pytest.fixture
def whatsapp_env(aws: Any, fake_whatsapp: FakeWhatsApp, monkeypatch: pytest.MonkeyPatch) -> Any:
    from hermes_gateway import wiring

    for name, value in {
        "WHATSAPP_ENABLED": "true",
        "WHATSAPP_PHONE_NUMBER_ID": "123456123",
        "WHATSAPP_APP_SECRET": APP_SECRET,
        "WHATSAPP_ACCESS_TOKEN": fake_whatsapp.token,
        "WHATSAPP_API_BASE_URL": fake_whatsapp.base_url,
        "GATEWAY_BUS_EVENTS": "delivery:*",  # the test reads delivery:failed off the bus
    }.items():
        monkeypatch.setenv(name, value)
    wiring.reset()
    return aws


def captured_events(bus: str) -> str:
    """A queue that receives every event the gateway puts on its bus."""
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName="captured-events")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events = boto3.client("events")
    events.put_rule(Name="all", EventBusName=bus, EventPattern=json.dumps({"source": [EVENT_BUS.source]}))
    events.put_targets(Rule="all", EventBusName=bus, Targets=[{"Id": "q", "Arn": arn}])
    return url


def test_a_whatsapp_failed_status_marks_the_sent_reply_failed_and_publishes_it(
    whatsapp_env: Any, fake_whatsapp: FakeWhatsApp
) -> None:
    env = whatsapp_env
    events_queue = captured_events(env.bindings.event_bus)
    # Given the delivery function sent a reply to a WhatsApp user
    job = {"delivery_id": "reply-1", "turn_id": "t1", "target": {"platform": "whatsapp", "chat_id": "16315551181"}}
    sqs = boto3.client("sqs")
    assert handler("delivery")({**job, "text": "the answer"}, context("delivery"))["status"] == "sent"
    (sent,) = fake_whatsapp.sent
    assert sent["biz_opaque_callback_data"] == "reply-1#1"
    # When Meta reports, later, that the message failed
    status = {
        "id": sent["id"],
        "status": "failed",
        "timestamp": "1750857384",
        "recipient_id": "16315551181",
        "biz_opaque_callback_data": sent["biz_opaque_callback_data"],
        "errors": [{"code": 131026, "title": "Message undeliverable", "message": "Message undeliverable"}],
    }
    value = {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "123456123"}, "statuses": [status]}
    body = json.dumps(
        {
            "object": "whatsapp_business_account",
            "entry": [{"id": "W", "changes": [{"value": value, "field": "messages"}]}],
        }
    ).encode()
    headers = [("Content-Type", "application/json"), (SIGNATURE_HEADER, meta_signature(APP_SECRET, body))]
    webhook = api_gateway_v2_event("POST", "/webhooks/whatsapp", headers, body, "203.0.113.9")
    answer = handler("ingress")(webhook, context("ingress"))
    # Then it is acknowledged, the outbox row is failed with Meta's error, and the bus has the event
    assert answer["statusCode"] == 200
    row = DynamoOutbox(env.bindings).get("reply-1#1")
    assert row is not None
    assert (row.status, row.error) == ("failed", "failed later: whatsapp 131026 Message undeliverable")
    published = [
        json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=events_queue, MaxNumberOfMessages=10)["Messages"]
    ]
    failed = [e["detail"] for e in published if e["detail-type"] == "delivery:failed"]
    assert failed == [
        {
            "platform": "whatsapp",
            "delivery_id": "reply-1#1",
            "reason": "failed_later",
            "error": "whatsapp 131026 Message undeliverable",
        }
    ]
