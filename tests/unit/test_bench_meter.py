"""bench/meter.py's pure parts: the trigger read from an event, logical resource names, the 64 KB
chunks SQS and EventBridge bill, the key form boto3's resource layer hands to botocore."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from bench.meter import billed_chunks, dynamo_json, event_source, filler, index_writes, resource_name, trigger_of
from hermes_gateway.resources import SESSIONS


@pytest.mark.parametrize(
    ("event", "trigger"),
    [
        ({"requestContext": {"http": {"method": "POST"}}, "body": "{}"}, "api"),
        ({"Records": [{"eventSource": "aws:sqs", "body": "{}"}]}, "sqs"),
        ({"Records": [{"eventSource": "aws:dynamodb", "dynamodb": {}}]}, "stream"),
        ({"step": "prepare", "turn": {}}, "stepfunctions"),
        ({"source": "aws.scheduler", "detail-type": "Scheduled Event"}, "schedule"),
        ({"job": {"delivery_id": "d"}}, "invoke"),
    ],
)
def test_the_trigger_is_read_from_the_event_shape(event: dict[str, object], trigger: str) -> None:
    assert trigger_of(event) == trigger


def test_resources_are_named_by_their_logical_names_whatever_the_arn_or_url() -> None:
    assert resource_name("sqs", {"QueueUrl": "http://127.0.0.1:5000/123456789012/hermes-local-dead-letters"}) == (
        "dead-letters"
    )
    arn = "arn:aws:dynamodb:us-east-1:123456789012:table/hermes-local-inbox/stream/2026-01-01T00:00:00.000"
    assert resource_name("dynamodbstreams", {"StreamArn": arn}) == "inbox"
    assert resource_name("lambda", {"FunctionName": "arn:aws:lambda:us-east-1:1:function:hermes-local-delivery"}) == (
        "delivery"
    )
    assert event_source({"Records": [{"eventSourceARN": arn}]}) == ("inbox", False)


def test_sqs_and_eventbridge_bill_each_64_kb_of_a_payload() -> None:
    assert billed_chunks("sqs", "SendMessage", {"MessageBody": "x" * 10}) == 1
    assert billed_chunks("sqs", "SendMessage", {"MessageBody": "x" * (64 * 1024 + 1)}) == 2
    assert billed_chunks("sqs", "DeleteMessage", {}) == 1
    assert billed_chunks("events", "PutEvents", {"Entries": [{"Detail": "{}"}, {"Detail": "y" * 70_000}]}) == 3
    assert billed_chunks("dynamodb", "GetItem", {}) == 0


def test_a_resource_layer_key_is_turned_into_dynamodb_json_and_a_client_key_is_left_alone() -> None:
    assert dynamo_json("telegram:dm:1") == {"S": "telegram:dm:1"}
    assert dynamo_json(Decimal(7)) == {"N": "7"}
    assert dynamo_json({"S": "already"}) == {"S": "already"}


def test_the_fake_reply_has_the_asked_size_and_is_the_same_for_the_same_message() -> None:
    assert len(filler("hello", 1500).encode()) == 1500
    assert filler("hello", 300) == filler("hello", 300)
    assert filler("hello", 300) != filler("other", 300)


def test_a_request_through_the_pooled_http_client_is_an_external_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    # The platforms send through hermes_gateway.http_pool (urllib3), which urllib's opener never sees
    from bench.meter import Meter
    from hermes_gateway import http_pool

    answered = http_pool.Reply(200, b"{}", {})
    monkeypatch.setattr(http_pool, "send", lambda method, url, **kw: answered)
    monkeypatch.setattr(http_pool, "download", lambda url, **kw: answered)
    meter = Meter(units=False).install()
    try:
        with meter.within("delivery", {"step": "deliver"}):
            http_pool.send("POST", "https://api.telegram.example/bot/sendMessage", timeout=1)
            http_pool.download("https://files.example/cat.png", timeout=1, limit=10)
        http_pool.send("POST", "https://outside.example/", timeout=1)  # no function: the harness's own
    finally:
        meter.uninstall()
    (invocation,) = meter.invocations
    assert invocation.round_trips == [("external", "api.telegram.example"), ("external", "files.example")]
    assert dict(meter.external) == {("delivery", "api.telegram.example"): 1, ("delivery", "files.example"): 1}
    assert http_pool.send("GET", "https://x.example/", timeout=1) is answered  # uninstalled: the patch is gone


def test_a_keys_only_index_is_written_only_when_its_key_is() -> None:
    # The sessions table: by_key and by_profile project every attribute, by_reach its keys only
    key = ({"session_id": "s1"},)
    created = (key, {"session_id": "s1", "session_key": "k", "profile": "p", "reach": "r", "started_at": 1})
    assert index_writes(SESSIONS, None, created) == 3  # a new record enters all three
    ended = (key, {**created[1], "ended_at": 2})
    assert index_writes(SESSIONS, created, ended) == 2  # the ALL indexes copy the change; by_reach not
    assert index_writes(SESSIONS, created, created) == 0
    unreached = (key, {k: v for k, v in created[1].items() if k != "reach"})
    assert index_writes(SESSIONS, None, unreached) == 2


def test_a_model_request_is_timed_and_what_it_asks_meanwhile_is_no_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    # A streamed answer's post and edits happen while the model writes: they overlap its wait
    from bench.meter import Meter
    from hermes_gateway import http_pool

    answered = http_pool.Reply(200, b"{}", {})
    monkeypatch.setattr(http_pool, "send", lambda method, url, **kw: answered)
    meter = Meter(units=False).install()
    try:
        with meter.within("agent", {"step": "respond"}):
            http_pool.send("POST", "https://api.telegram.example/bot/sendChatAction", timeout=1)
            with meter.model_request():
                time.sleep(0.05)
                http_pool.send("POST", "https://api.telegram.example/bot/editMessageText", timeout=1)
            http_pool.send("POST", "https://api.telegram.example/bot/sendMessage", timeout=1)
    finally:
        meter.uninstall()
    (invocation,) = meter.invocations
    assert invocation.round_trips == [("external", "api.telegram.example")] * 2  # before and after it
    assert invocation.overlapped == 1
    assert invocation.trips_to_model == (("external", "api.telegram.example"),)
    assert 0.05 <= invocation.model_seconds < 0.5 and meter.model_seconds == [invocation.model_seconds]


def test_counted_sleeps_go_to_the_invocation_whose_thread_slept() -> None:
    from bench import meter as metering

    meter = metering.Meter(units=False)
    metering._sleep_meter[:] = [meter]
    try:
        with meter.within("agent", {"step": "respond"}):
            metering._metered_sleep(0.02)
        metering._metered_sleep(0.01)  # outside any invocation: nobody's
    finally:
        metering._sleep_meter.clear()
    (invocation,) = meter.invocations
    assert 0.02 <= invocation.slept < 0.2
    assert metering.sleeps_counted(metering._metered_sleep) and not metering.sleeps_counted(time.sleep)
