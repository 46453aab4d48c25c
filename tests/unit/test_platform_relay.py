"""Relay platform: Standard Webhooks verification with the relay secret, the normalized payload,
trust and reply routing, and the signed callback sender."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import BadRequest, RateLimited, TargetGone, Unauthorized
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.standard_webhook import CallbackSender, sign
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, Ignored, handle_webhook
from hermes_gateway.settings import Settings
from tests.fakes import platforms
from tests.fakes.callback_server import FakeCallback
from tests.fakes.services import FakeEnqueue, make_settings

pytest_plugins = ("tests.fakes.callback_server",)

SECRET = "whsec_" + base64.b64encode(b"relay-signing-secret-for-tests!!").decode()
NOW = 1_764_400_000.0

THREAD_MESSAGE: dict[str, Any] = {
    "platform": "discord",
    "event_id": "1300000000000000042",
    "text": "<@1100000000000000001> what changed?",
    "source": {
        "chat_id": "1300000000000000007",
        "chat_type": "thread",
        "user_id": "4242",
        "user_name": "Alice",
        "thread_id": "1300000000000000007",
        "chat_name": "deploys",
        "scope_id": "1300000000000000001",
        "parent_chat_id": "1300000000000000002",
        "message_id": "1300000000000000042",
        "is_bot": False,
    },
    "reply_to_message_id": "1300000000000000040",
    "mentions_bot": True,
}
SIGNAL_DM: dict[str, Any] = {
    "platform": "signal",
    "event_id": "1764399999000:+15551234567",
    "text": "hi",
    "source": {"chat_id": "+15551234567", "chat_type": "dm", "user_id": "+15551234567", "user_name": "Bob"},
}


def signed(payload: Any, *, msg_id: str = "msg_r1", ts: float = NOW, secret: str = SECRET) -> HttpRequest:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(ts)),
        "webhook-signature": sign(secret, msg_id, int(ts), body),
    }
    return HttpRequest(method="POST", path="/webhooks/relay", headers=headers, body=body)


def settings(**env: str) -> Settings:
    return make_settings({"RELAY_ENABLED": "true", **env})


def adapter(secrets: Mapping[str, str] | None = None, **env: str) -> Any:
    chosen = {"RELAY_SIGNING_SECRET": SECRET} if secrets is None else secrets
    return platforms.adapter("relay", settings(**env), chosen, clock=lambda: NOW)


def parse(payload: Any, **env: str) -> Any:
    return adapter(**env).parse(signed(payload), NOW)


def with_changes(payload: dict[str, Any], **changes: Any) -> dict[str, Any]:
    changed = copy.deepcopy(payload)
    for key, value in changes.items():
        if key.startswith("source__"):
            changed["source"][key.removeprefix("source__")] = value
        else:
            changed[key] = value
    return changed


# --- verification -------------------------------------------------------------------------------


def test_a_request_signed_with_the_relay_secret_verifies() -> None:
    adapter().verify(signed(SIGNAL_DM))


def test_not_configured_refuses_everything() -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        adapter({}).verify(signed(SIGNAL_DM))


def test_forged_and_stale_requests_are_refused() -> None:
    other = "whsec_" + base64.b64encode(b"not-the-relay-secret-00000000000").decode()
    with pytest.raises(Unauthorized, match="no matching"):
        adapter().verify(signed(SIGNAL_DM, secret=other))
    with pytest.raises(Unauthorized, match="stale"):
        adapter().verify(signed(SIGNAL_DM, ts=NOW - 600))
    with pytest.raises(Unauthorized, match="missing webhook-signature"):
        request = signed(SIGNAL_DM)
        adapter().verify(HttpRequest("POST", request.path, {"webhook-id": "x", "webhook-timestamp": "1"}, b"{}"))


def test_the_generic_webhook_secret_does_not_open_the_relay() -> None:
    webhook_secret = "whsec_" + base64.b64encode(b"generic-webhook-test-key-0123456").decode()
    relay = adapter({"RELAY_SIGNING_SECRET": SECRET, "WEBHOOK_SIGNING_SECRET": webhook_secret})
    with pytest.raises(Unauthorized):
        relay.verify(signed(SIGNAL_DM, secret=webhook_secret))


# --- normalization ------------------------------------------------------------------------------


def test_a_discord_thread_message_keeps_every_id() -> None:
    message = parse(THREAD_MESSAGE)

    assert isinstance(message, InboundMessage)
    assert message.event_id == "relay:discord:1300000000000000042"
    assert message.text == THREAD_MESSAGE["text"]
    assert message.reply_to_message_id == "1300000000000000040"
    assert message.facts == ("trusted", "mentions_bot")
    assert message.reply_context == {"via": "relay"}
    source = message.source
    assert source.platform == "discord"
    assert (source.chat_type, source.chat_id, source.thread_id) == (
        "thread",
        "1300000000000000007",
        "1300000000000000007",
    )
    assert (source.scope_id, source.parent_chat_id) == ("1300000000000000001", "1300000000000000002")
    assert (source.user_id, source.user_name, source.chat_name) == ("4242", "Alice", "deploys")
    assert source.message_id == "1300000000000000042"
    assert InboundMessage.from_dict(message.to_dict()) == message


def test_a_signal_dm_is_trusted_without_a_mention() -> None:
    message = parse(SIGNAL_DM)
    assert isinstance(message, InboundMessage)
    assert message.facts == ("trusted",)
    assert message.event_id == "relay:signal:1764399999000:+15551234567"
    assert (message.source.platform, message.source.chat_type, message.source.chat_id) == (
        "signal",
        "dm",
        "+15551234567",
    )


def test_discord_replies_can_go_through_the_platform_api() -> None:
    message = parse(with_changes(THREAD_MESSAGE, reply_via="platform"))
    assert isinstance(message, InboundMessage)
    assert message.reply_context == {}  # no `via`: delivery uses the Discord sender


def test_explicit_relay_replies_keep_the_via() -> None:
    message = parse(with_changes(SIGNAL_DM, reply_via="relay"))
    assert message.reply_context == {"via": "relay"}


def test_the_relay_cannot_choose_the_platform_or_profile_inside_the_source() -> None:
    message = parse(with_changes(SIGNAL_DM, source__platform="telegram", source__profile="coder"))
    assert message.source.platform == "signal"
    assert message.source.profile is None


def test_the_platforms_option_limits_what_a_relay_may_deliver() -> None:
    with pytest.raises(BadRequest, match="not in RELAY_PLATFORMS"):
        parse(with_changes(SIGNAL_DM, platform="whatsapp"))
    message = parse(with_changes(SIGNAL_DM, platform="whatsapp"), RELAY_PLATFORMS="whatsapp")
    assert message.source.platform == "whatsapp"
    with pytest.raises(BadRequest, match="not in RELAY_PLATFORMS"):
        parse(SIGNAL_DM, RELAY_PLATFORMS="whatsapp")


def test_blank_text_is_ignored() -> None:
    assert parse(with_changes(SIGNAL_DM, text=" ")) == Ignored("no_text")


@pytest.mark.parametrize(
    "payload",
    [
        b"{",
        b"[]",
        with_changes(SIGNAL_DM, platform=None),
        with_changes(SIGNAL_DM, platform="Signal!"),
        with_changes(SIGNAL_DM, event_id=""),
        with_changes(SIGNAL_DM, event_id=12),
        with_changes(SIGNAL_DM, event_id="x" * 300),
        with_changes(SIGNAL_DM, text=None),
        with_changes(SIGNAL_DM, source="+1555"),
        with_changes(SIGNAL_DM, source__chat_id=None),
        with_changes(SIGNAL_DM, source__chat_id=15551234567),
        with_changes(SIGNAL_DM, source__chat_type="room"),
        with_changes(SIGNAL_DM, source__is_bot="no"),
        with_changes(SIGNAL_DM, source__user_name=["Bob"]),
        with_changes(SIGNAL_DM, mentions_bot="yes"),
        with_changes(SIGNAL_DM, reply_to_message_id=5),
        with_changes(SIGNAL_DM, reply_via="email"),
        with_changes(SIGNAL_DM, reply_via="platform"),  # only Discord has a REST path here
    ],
)
def test_malformed_payloads_are_bad_requests(payload: Any) -> None:
    with pytest.raises(BadRequest):
        parse(payload)


# --- through the ingress ------------------------------------------------------------------------


def call(request: HttpRequest, enqueue: FakeEnqueue) -> HttpResponse:
    config = settings()
    return handle_webhook(
        "relay",
        request,
        settings=config,
        adapters=platforms.adapters(config, {"RELAY_SIGNING_SECRET": SECRET}, clock=lambda: NOW),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def test_handle_webhook_enqueues_once_under_the_origin_platform() -> None:
    enqueue = FakeEnqueue()

    first = call(signed(SIGNAL_DM, msg_id="msg_a"), enqueue)
    # The relay retries the same event, even under a fresh webhook-id: the origin's id de-duplicates.
    again = call(signed(SIGNAL_DM, msg_id="msg_b"), enqueue)

    assert (first.status, again.status) == (200, 200)
    assert again.body == {"ok": True, "duplicate": True}
    assert len(enqueue.sent) == 1
    envelope = enqueue.sent[0]
    assert envelope["source"]["platform"] == "signal"
    assert envelope["facts"] == ["trusted"]
    assert envelope["reply_context"] == {"via": "relay"}
    assert envelope["session_key"] == "agent:main:signal:dm:+15551234567"


def test_handle_webhook_refuses_a_forged_relay() -> None:
    enqueue = FakeEnqueue()
    forged = signed(SIGNAL_DM, secret="whsec_" + base64.b64encode(b"forger" * 6).decode())
    assert call(forged, enqueue).status == 401
    assert enqueue.calls == 0


def test_handle_webhook_answers_400_for_a_platform_outside_the_list() -> None:
    enqueue = FakeEnqueue()
    assert call(signed(with_changes(SIGNAL_DM, platform="line")), enqueue).status == 400
    assert enqueue.calls == 0


# --- the relay's callback sender ----------------------------------------------------------------


def relay_sender(fake: FakeCallback) -> CallbackSender:
    built = platforms.sender("relay", settings(RELAY_CALLBACK_URL=fake.url), {"RELAY_SIGNING_SECRET": fake.secret})
    assert isinstance(built, CallbackSender)
    return built


def test_no_sender_without_a_callback_url_or_secret() -> None:
    assert platforms.sender("relay", settings(), {"RELAY_SIGNING_SECRET": SECRET}) is None
    assert platforms.sender("relay", settings(RELAY_CALLBACK_URL="https://relay.example.org/replies"), {}) is None


def test_send_posts_the_platform_and_target_signed(fake_callback: FakeCallback) -> None:
    message_id = relay_sender(fake_callback).send(Target("signal", "+15551234567", None, {"via": "relay"}), "hello")

    assert message_id == "cb-1"
    request = fake_callback.requests[0]
    assert request.verified, request.reason
    assert request.json == {"platform": "signal", "chat_id": "+15551234567", "thread_id": None, "text": "hello"}


def test_send_maps_gone_and_throttled(fake_callback: FakeCallback) -> None:
    sender = relay_sender(fake_callback)
    fake_callback.answer_next(410, "")
    with pytest.raises(TargetGone):
        sender.send(Target("matrix", "!room:hs"), "hi")
    fake_callback.answer_next(429, "", headers={"Retry-After": "12"})
    with pytest.raises(RateLimited) as caught:
        sender.send(Target("matrix", "!room:hs"), "hi")
    assert caught.value.retry_after == 12.0
