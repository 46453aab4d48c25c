"""Standard Webhooks: the published vector, verification, the generic webhook platform and its
signed callback sender against a loopback receiver that verifies what it gets."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import (
    BadRequest,
    ConfigError,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.standard_webhook import (
    CallbackSender,
    secret_key,
    sign,
    verify,
)
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, Ignored, handle_webhook
from hermes_gateway.settings import Settings
from tests.fakes import platforms
from tests.fakes.callback_server import FakeCallback
from tests.fakes.services import FakeEnqueue, make_settings

pytest_plugins = ("tests.fakes.callback_server",)

# PLATFORMS §13 / §15: the reference test suite's vector.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TS = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
VECTOR_FORGED = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="

SECRET = "whsec_" + base64.b64encode(b"generic-webhook-test-key-0123456").decode()
NOW = 1_764_400_000.0


def vector_headers(signature: str = VECTOR_SIGNATURE, **overrides: str) -> dict[str, str]:
    headers = {"webhook-id": VECTOR_ID, "webhook-timestamp": str(VECTOR_TS), "webhook-signature": signature}
    headers.update(overrides)
    return headers


def signed(payload: Any, *, msg_id: str = "msg_1", ts: float = NOW, secret: str = SECRET) -> HttpRequest:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(ts)),
        "webhook-signature": sign(secret, msg_id, int(ts), body),
    }
    return HttpRequest(method="POST", path="/webhooks/webhook", headers=headers, body=body)


def settings(**env: str) -> Settings:
    return make_settings({"WEBHOOK_ENABLED": "true", **env})


def adapter(secrets: Mapping[str, str] | None = None) -> Any:
    chosen = {"WEBHOOK_SIGNING_SECRET": SECRET} if secrets is None else secrets
    return platforms.adapter("webhook", settings(), chosen, clock=lambda: NOW)


# --- the scheme: published vector ---------------------------------------------------------------


def test_sign_reproduces_the_published_vector() -> None:
    assert sign(VECTOR_SECRET, VECTOR_ID, VECTOR_TS, VECTOR_BODY) == VECTOR_SIGNATURE
    assert len(secret_key(VECTOR_SECRET)) == 24


def test_published_vector_verifies_at_its_timestamp() -> None:
    verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_TS)


def test_published_negative_vector_is_refused() -> None:
    with pytest.raises(Unauthorized, match="no matching webhook signature"):
        verify(VECTOR_SECRET, vector_headers(VECTOR_FORGED), VECTOR_BODY, now=VECTOR_TS)


def test_a_secret_without_the_prefix_is_the_same_key() -> None:
    verify(VECTOR_SECRET.removeprefix("whsec_"), vector_headers(), VECTOR_BODY, now=VECTOR_TS)


def test_any_matching_v1_entry_in_the_list_is_enough() -> None:
    # Given key rotation: an ed25519 entry, an old key's signature, then the current one
    listed = f"v1a,{VECTOR_SIGNATURE[3:]} {VECTOR_FORGED} {VECTOR_SIGNATURE}"
    verify(VECTOR_SECRET, vector_headers(listed), VECTOR_BODY, now=VECTOR_TS)


def test_only_v1_entries_count() -> None:
    with pytest.raises(Unauthorized, match="no matching"):
        verify(VECTOR_SECRET, vector_headers("v1a," + VECTOR_SIGNATURE[3:]), VECTOR_BODY, now=VECTOR_TS)


def test_header_names_are_matched_case_insensitively() -> None:
    headers = {k.title(): v for k, v in vector_headers().items()}
    verify(VECTOR_SECRET, headers, VECTOR_BODY, now=VECTOR_TS)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"body": b'{"test": 2432232315}'}, "no matching"),
        ({"headers": vector_headers(**{"webhook-id": "msg_other"})}, "no matching"),
        ({"headers": vector_headers(**{"webhook-timestamp": str(VECTOR_TS + 1)})}, "no matching"),
        ({"now": VECTOR_TS + 301}, "stale"),
        ({"now": VECTOR_TS - 301}, "future"),
        ({"headers": vector_headers(**{"webhook-timestamp": "1614265330.5"})}, "malformed webhook-timestamp"),
        ({"headers": vector_headers(**{"webhook-timestamp": "-1614265330"})}, "malformed webhook-timestamp"),
        ({"headers": vector_headers(""), "now": VECTOR_TS}, "missing webhook-signature"),
        (
            {"headers": {"webhook-timestamp": str(VECTOR_TS), "webhook-signature": VECTOR_SIGNATURE}},
            "missing webhook-id",
        ),
        ({"headers": {"webhook-id": VECTOR_ID, "webhook-signature": VECTOR_SIGNATURE}}, "missing webhook-timestamp"),
        ({"headers": vector_headers("v1,not-base64")}, "no matching"),
        ({"headers": vector_headers("garbage")}, "no matching"),
    ],
)
def test_refusals_name_the_reason(change: dict[str, Any], reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason) as caught:
        verify(
            VECTOR_SECRET,
            change.get("headers", vector_headers()),
            change.get("body", VECTOR_BODY),
            now=change.get("now", VECTOR_TS),
        )
    assert VECTOR_SECRET.removeprefix("whsec_") not in str(caught.value)


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_the_tolerance_is_five_minutes_both_ways(offset: int) -> None:
    verify(VECTOR_SECRET, vector_headers(), VECTOR_BODY, now=VECTOR_TS + offset)


@pytest.mark.parametrize("bad", ["whsec_not base64!", "whsec_", "whsec_@@@@"])
def test_an_unusable_secret_refuses_everything(bad: str) -> None:
    with pytest.raises(ConfigError):
        secret_key(bad)
    with pytest.raises(Unauthorized, match="unusable"):
        verify(bad, vector_headers(), VECTOR_BODY, now=VECTOR_TS)


# --- the generic webhook platform ---------------------------------------------------------------


def test_not_configured_refuses_everything() -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        adapter({}).verify(signed({"text": "hi"}))


def test_adapter_verifies_with_its_clock() -> None:
    adapter().verify(signed({"text": "hi"}))
    with pytest.raises(Unauthorized, match="stale"):
        adapter().verify(signed({"text": "hi"}, ts=NOW - 301))
    with pytest.raises(Unauthorized, match="no matching"):
        adapter().verify(signed({"text": "hi"}, secret="whsec_" + base64.b64encode(b"x" * 32).decode()))


def test_full_payload_is_normalized_as_a_trusted_message() -> None:
    payload = {
        "text": "deploy finished",
        "chat_id": "ops",
        "user_id": "ci",
        "user_name": "CI bot",
        "thread_id": "build-42",
        "chat_type": "group",
    }
    message = adapter().parse(signed(payload, msg_id="msg_abc"), NOW)

    assert isinstance(message, InboundMessage)
    assert message.text == "deploy finished"
    assert message.event_id == "webhook:msg_abc"
    assert message.facts == ("trusted",)
    assert message.received_at == NOW
    source = message.source
    assert (source.platform, source.chat_id, source.chat_type, source.thread_id) == (
        "webhook",
        "ops",
        "group",
        "build-42",
    )
    assert (source.user_id, source.user_name, source.message_id) == ("ci", "CI bot", "msg_abc")
    assert InboundMessage.from_dict(message.to_dict()) == message


def test_minimal_payload_gets_the_defaults() -> None:
    message = adapter().parse(signed({"text": "hello"}), NOW)
    assert isinstance(message, InboundMessage)
    source = message.source
    assert (source.chat_id, source.chat_type, source.user_id, source.thread_id) == ("default", "dm", None, None)


def test_blank_text_is_ignored() -> None:
    assert adapter().parse(signed({"text": "  "}), NOW) == Ignored("no_text")


@pytest.mark.parametrize("payload", [{}, {"type": "invoice.paid", "data": {"id": "in_1"}}, {"text": None}])
def test_an_event_without_text_is_acknowledged_and_ignored(payload: dict[str, Any]) -> None:
    # A sender treats a 400 as a failed delivery and retries it for a day: the event is
    # acknowledged instead, with the reason in the log.
    enqueue = FakeEnqueue()
    assert adapter().parse(signed(payload), NOW) == Ignored("no_text")
    response = call(signed(payload), enqueue)
    assert (response.status, response.body) == (200, {"ok": True, "ignored": "no_text"})
    assert enqueue.sent == []


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        {"text": 42},
        {"text": "hi", "chat_id": 7},
        {"text": "hi", "user_id": ["a"]},
        {"text": "hi", "chat_type": "channel"},
        {"text": "hi", "thread_id": "x" * 257},
    ],
)
def test_malformed_payloads_are_bad_requests(payload: Any) -> None:
    with pytest.raises(BadRequest):
        adapter().parse(signed(payload), NOW)


def call(request: HttpRequest, enqueue: FakeEnqueue, secrets: Mapping[str, str] | None = None) -> HttpResponse:
    chosen = {"WEBHOOK_SIGNING_SECRET": SECRET} if secrets is None else secrets
    config = settings()
    return handle_webhook(
        "webhook",
        request,
        settings=config,
        adapters=platforms.adapters(config, chosen, clock=lambda: NOW),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def test_handle_webhook_enqueues_a_signed_message_once() -> None:
    enqueue = FakeEnqueue()
    request = signed({"text": "hello", "chat_id": "c1"}, msg_id="msg_once")

    first = call(request, enqueue)
    again = call(request, enqueue)  # the sender retries with the same webhook-id

    assert (first.status, first.body) == (200, {"ok": True})
    assert (again.status, again.body) == (200, {"ok": True, "duplicate": True})
    assert len(enqueue.sent) == 1
    envelope = enqueue.sent[0]
    assert envelope["event_id"] == "webhook:msg_once"
    assert envelope["facts"] == ["trusted"]
    assert envelope["source"]["platform"] == "webhook"
    assert envelope["session_key"] == "agent:main:webhook:dm:c1"


def test_handle_webhook_refuses_a_forged_request() -> None:
    enqueue = FakeEnqueue()
    request = signed({"text": "hello"}, secret="whsec_" + base64.b64encode(b"attacker-key-000000000000000000").decode())
    response = call(request, enqueue)
    assert response.status == 401
    assert enqueue.calls == 0


def test_handle_webhook_refuses_everything_without_a_secret() -> None:
    enqueue = FakeEnqueue()
    assert call(signed({"text": "hello"}), enqueue, secrets={}).status == 401
    assert enqueue.calls == 0


# --- the callback sender ------------------------------------------------------------------------


def callback_sender(fake: FakeCallback, secret: str | None = None) -> CallbackSender:
    config = settings(WEBHOOK_CALLBACK_URL=fake.url)
    built = platforms.sender("webhook", config, {"WEBHOOK_SIGNING_SECRET": secret or fake.secret})
    assert isinstance(built, CallbackSender)
    return built


def test_no_sender_without_both_url_and_secret() -> None:
    assert platforms.sender("webhook", settings(), {"WEBHOOK_SIGNING_SECRET": SECRET}) is None
    assert platforms.sender("webhook", settings(WEBHOOK_CALLBACK_URL="https://example.org/cb"), {}) is None


def test_a_malformed_secret_fails_when_the_sender_is_built() -> None:
    with pytest.raises(ConfigError):
        platforms.sender(
            "webhook", settings(WEBHOOK_CALLBACK_URL="https://example.org/cb"), {"WEBHOOK_SIGNING_SECRET": "whsec_!"}
        )


def test_send_posts_a_signed_reply_and_returns_the_receivers_id(fake_callback: FakeCallback) -> None:
    sender = callback_sender(fake_callback)

    first = sender.send(Target("webhook", "ops", "build-42"), "done")
    second = sender.send(Target("webhook", "ops"), "again")

    assert (first, second) == ("cb-1", "cb-2")
    assert all(r.verified for r in fake_callback.requests), [r.reason for r in fake_callback.requests]
    assert fake_callback.delivered == [
        {"chat_id": "ops", "thread_id": "build-42", "text": "done"},
        {"chat_id": "ops", "thread_id": None, "text": "again"},
    ]
    ids = [r.headers["webhook-id"] for r in fake_callback.requests]
    assert ids[0] != ids[1]
    assert all(i.startswith("msg_") for i in ids)
    assert fake_callback.requests[0].path == "/hooks/replies"
    assert fake_callback.requests[0].headers["content-type"] == "application/json"


@pytest.mark.parametrize(("status", "body"), [(204, b""), (200, {"ok": True}), (202, "accepted")])
def test_a_2xx_without_an_id_returns_the_webhook_id_sent(fake_callback: FakeCallback, status: int, body: Any) -> None:
    fake_callback.answer_next(status, body)
    message_id = callback_sender(fake_callback).send(Target("webhook", "ops"), "done")
    assert message_id == fake_callback.requests[0].headers["webhook-id"]


def test_the_receiver_refuses_a_reply_signed_with_another_secret(fake_callback: FakeCallback) -> None:
    other = "whsec_" + base64.b64encode(b"some-other-secret-0000000000000").decode()
    with pytest.raises(PermanentError, match="HTTP 401") as caught:
        callback_sender(fake_callback, secret=other).send(Target("webhook", "ops"), "done")
    assert not fake_callback.requests[0].verified
    assert other not in str(caught.value)


def test_410_means_the_endpoint_is_gone(fake_callback: FakeCallback) -> None:
    fake_callback.answer_next(410, {"error": "gone"})
    with pytest.raises(TargetGone, match="410"):
        callback_sender(fake_callback).send(Target("webhook", "ops"), "done")


@pytest.mark.parametrize("status", [429, 502, 504])
def test_throttling_answers_honour_retry_after(fake_callback: FakeCallback, status: int) -> None:
    fake_callback.answer_next(status, "slow down", headers={"Retry-After": "7"})
    with pytest.raises(RateLimited) as caught:
        callback_sender(fake_callback).send(Target("webhook", "ops"), "done")
    assert caught.value.retry_after == 7.0


def test_429_without_retry_after_is_still_rate_limited(fake_callback: FakeCallback) -> None:
    fake_callback.answer_next(429, "slow down")
    with pytest.raises(RateLimited):
        callback_sender(fake_callback).send(Target("webhook", "ops"), "done")


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_transient(fake_callback: FakeCallback, status: int) -> None:
    fake_callback.answer_next(status, {"error": "boom"})
    with pytest.raises(TransientError) as caught:
        callback_sender(fake_callback).send(Target("webhook", "ops"), "done")
    assert not isinstance(caught.value, RateLimited)
    assert fake_callback.secret not in str(caught.value)


@pytest.mark.parametrize("status", [400, 403, 404, 422])
def test_other_client_errors_are_permanent(fake_callback: FakeCallback, status: int) -> None:
    fake_callback.answer_next(status, {"error": "no"})
    with pytest.raises(PermanentError) as caught:
        callback_sender(fake_callback).send(Target("webhook", "ops"), "done")
    assert not isinstance(caught.value, TargetGone)


def test_an_unreachable_receiver_is_transient_and_leaks_nothing(fake_callback: FakeCallback) -> None:
    sender = callback_sender(fake_callback)
    fake_callback.stop()
    with pytest.raises(TransientError) as caught:
        sender.send(Target("webhook", "ops"), "done")
    assert fake_callback.secret not in str(caught.value)
    assert fake_callback.secret not in repr(sender)
