"""Discord interactions: Ed25519 verification (RFC 8032 and the Discord-shaped vector), the
interaction kinds, the ingress contract, the sender against a fake Discord API, and registration."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import (
    BadRequest,
    OutcomeUnknown,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.discord import (
    DiscordSender,
    build_sender,
    verify_signature,
)
from hermes_gateway.services.ingress import Accepted, Handshake, HttpRequest, HttpResponse, Ignored, handle_webhook
from hermes_gateway.settings import Settings
from tests.fakes import platforms
from tests.fakes.discord_server import (
    APPLICATION_ID,
    SERVER_ERROR,
    FakeDiscord,
    too_many_requests,
)
from tests.fakes.services import FakeEnqueue, make_settings

pytest_plugins = ("tests.fakes.discord_server",)

# RFC 8032 §7.1 TEST 1 (PLATFORMS §3 / §15).
RFC_SECRET = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
RFC_PUBLIC = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
RFC_SIGNATURE = (
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
    "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)
# The self-made Discord-shaped vector (RFC key, timestamp 1700000000, body {"type":1}).
DISCORD_TS = "1700000000"
DISCORD_BODY = b'{"type":1}'
DISCORD_SIGNATURE = (
    "1695961a47c91a1ec033b819b7e87e3dbc583dd0cee6d1fd0216f58ac87b6228"
    "ae531ddbf91fb7bc28d7edf7f08604da16f54624f38a6bc0614e4dc13cd47f0f"
)
NOW = 1_700_000_000.0
SIGNING_KEY = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(RFC_SECRET))

GUILD_ID = "1300000000000000001"
CHANNEL_ID = "1300000000000000002"
THREAD_ID = "1300000000000000007"
INTERACTION_TOKEN = "aW50ZXJhY3Rpb246MTMwMDAwMDAwMDAwMDAwMDA5OTpzZWNyZXQtdG9rZW4tdmFsdWU"
ALICE = {"id": "4242", "username": "alice", "global_name": "Alice", "discriminator": "0"}


def interaction(kind: int = 2, **fields: Any) -> dict[str, Any]:
    """A slash command `/ask prompt:hello` by Alice in a guild text channel."""
    payload: dict[str, Any] = {
        "id": "1300000000000000099",
        "application_id": APPLICATION_ID,
        "type": kind,
        "token": INTERACTION_TOKEN,
        "version": 1,
        "guild_id": GUILD_ID,
        "channel_id": CHANNEL_ID,
        "channel": {"id": CHANNEL_ID, "type": 0, "name": "general", "guild_id": GUILD_ID},
        "member": {"user": ALICE, "roles": [], "nick": None},
        "data": {"id": "1", "name": "ask", "type": 1, "options": [{"name": "prompt", "type": 3, "value": "hello"}]},
        "locale": "en-US",
        "context": 0,
    }
    payload.update(fields)
    return payload


def signed(payload: Any, *, ts: str = DISCORD_TS, key: Ed25519PrivateKey = SIGNING_KEY) -> HttpRequest:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {"x-signature-ed25519": key.sign(ts.encode() + body).hex(), "x-signature-timestamp": ts}
    return HttpRequest(method="POST", path="/webhooks/discord", headers=headers, body=body)


def settings(**env: str) -> Settings:
    base = {"DISCORD_ENABLED": "true", "DISCORD_PUBLIC_KEY": RFC_PUBLIC, "DISCORD_APPLICATION_ID": APPLICATION_ID}
    return make_settings({**base, **env})


def adapter(**env: str) -> Any:
    return platforms.adapter("discord", settings(**env), {}, clock=lambda: NOW)


def parse(payload: Any, **env: str) -> Any:
    return adapter(**env).parse(signed(payload), NOW)


# --- verification -------------------------------------------------------------------------------


def test_rfc8032_test1_is_reproduced_by_the_primitive() -> None:
    # The library Discord verification relies on, checked against the RFC's own vector
    assert SIGNING_KEY.public_key().public_bytes_raw().hex() == RFC_PUBLIC
    assert SIGNING_KEY.sign(b"").hex() == RFC_SIGNATURE
    SIGNING_KEY.public_key().verify(bytes.fromhex(RFC_SIGNATURE), b"")


def test_the_discord_shaped_vector_verifies() -> None:
    headers = {"x-signature-ed25519": DISCORD_SIGNATURE, "x-signature-timestamp": DISCORD_TS}
    verify_signature(RFC_PUBLIC, headers, DISCORD_BODY, now=NOW)
    assert SIGNING_KEY.sign(DISCORD_TS.encode() + DISCORD_BODY).hex() == DISCORD_SIGNATURE


def test_the_vector_answers_the_ping_through_the_adapter() -> None:
    request = HttpRequest(
        "POST",
        "/webhooks/discord",
        {"x-signature-ed25519": DISCORD_SIGNATURE, "x-signature-timestamp": DISCORD_TS},
        DISCORD_BODY,
    )
    discord = adapter()
    discord.verify(request)
    assert discord.parse(request, NOW) == Handshake(HttpResponse(200, {"type": 1}))


def _flipped(signature: str) -> str:
    return signature[:-2] + format(int(signature[-2:], 16) ^ 1, "02x")


@pytest.mark.parametrize(
    ("headers", "body", "now", "reason"),
    [
        ({"x-signature-ed25519": _flipped(DISCORD_SIGNATURE)}, DISCORD_BODY, NOW, "bad discord signature"),
        ({}, b'{"type":2}', NOW, "bad discord signature"),
        ({"x-signature-timestamp": "1700000001"}, DISCORD_BODY, NOW, "bad discord signature"),
        ({}, DISCORD_BODY, NOW + 301, "stale"),
        ({}, DISCORD_BODY, NOW - 301, "stale"),
        ({"x-signature-ed25519": "zz" * 64}, DISCORD_BODY, NOW, "malformed x-signature-ed25519 header: not hex"),
        ({"x-signature-ed25519": DISCORD_SIGNATURE[:-2]}, DISCORD_BODY, NOW, "not 64 bytes"),
        ({"x-signature-timestamp": "17e8"}, DISCORD_BODY, NOW, "malformed x-signature-timestamp"),
        ({"x-signature-ed25519": ""}, DISCORD_BODY, NOW, "missing x-signature-ed25519"),
        ({"x-signature-timestamp": ""}, DISCORD_BODY, NOW, "missing x-signature-timestamp"),
    ],
)
def test_forged_stale_and_malformed_requests_are_refused(
    headers: dict[str, str], body: bytes, now: float, reason: str
) -> None:
    sent = {"x-signature-ed25519": DISCORD_SIGNATURE, "x-signature-timestamp": DISCORD_TS, **headers}
    with pytest.raises(Unauthorized, match=reason):
        verify_signature(RFC_PUBLIC, sent, body, now=now)


@pytest.mark.parametrize("offset", [-300, 300])
def test_the_window_is_five_minutes(offset: int) -> None:
    headers = {"x-signature-ed25519": DISCORD_SIGNATURE, "x-signature-timestamp": DISCORD_TS}
    verify_signature(RFC_PUBLIC, headers, DISCORD_BODY, now=NOW + offset)


def test_a_request_signed_by_another_key_is_refused() -> None:
    with pytest.raises(Unauthorized, match="bad discord signature"):
        adapter().verify(signed(interaction(), key=Ed25519PrivateKey.generate()))


def test_not_configured_refuses_everything() -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        adapter(DISCORD_PUBLIC_KEY="").verify(signed({"type": 1}))


@pytest.mark.parametrize("key", ["not-hex", "abcd"])
def test_an_unusable_public_key_refuses_everything(key: str) -> None:
    with pytest.raises(Unauthorized, match="public key"):
        adapter(DISCORD_PUBLIC_KEY=key).verify(signed({"type": 1}))


# --- normalization ------------------------------------------------------------------------------


def _message(parsed: Any) -> InboundMessage:
    assert isinstance(parsed, Accepted), parsed
    (item,) = parsed.items
    assert isinstance(item, InboundMessage), item
    return item


def test_a_guild_command_becomes_a_group_message_with_a_deferred_ack() -> None:
    parsed = parse(interaction())

    assert isinstance(parsed, Accepted)
    assert parsed.ack == HttpResponse(200, {"type": 5})
    message = _message(parsed)
    assert message.text == "hello"
    assert message.event_id == "discord:1300000000000000099"
    assert message.reply_context == {"interaction_token": INTERACTION_TOKEN, "application_id": APPLICATION_ID}
    assert message.facts == ()
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id, source.scope_id) == (
        "discord",
        "group",
        CHANNEL_ID,
        GUILD_ID,
    )
    assert (source.user_id, source.user_name, source.chat_name) == ("4242", "Alice", "general")
    assert (source.thread_id, source.parent_chat_id, source.is_bot) == (None, None, False)
    assert InboundMessage.from_dict(message.to_dict()) == message


def test_a_dm_command_uses_the_user_object() -> None:
    payload = interaction(channel={"id": "1300000000000000050", "type": 1}, channel_id="1300000000000000050", context=1)
    del payload["guild_id"], payload["member"]
    payload["user"] = {"id": "4242", "username": "alice", "global_name": None}

    source = _message(parse(payload)).source

    assert (source.chat_type, source.chat_id, source.scope_id) == ("dm", "1300000000000000050", None)
    assert (source.user_id, source.user_name, source.chat_name) == ("4242", "alice", "alice")


@pytest.mark.parametrize("thread_type", [10, 11, 12])
def test_a_command_in_a_thread_keeps_the_parent_channel(thread_type: int) -> None:
    channel = {"id": THREAD_ID, "type": thread_type, "name": "deploys", "parent_id": CHANNEL_ID, "guild_id": GUILD_ID}
    source = _message(parse(interaction(channel=channel, channel_id=THREAD_ID))).source

    assert (source.chat_type, source.chat_id, source.thread_id) == ("thread", THREAD_ID, THREAD_ID)
    assert (source.parent_chat_id, source.scope_id, source.chat_name) == (CHANNEL_ID, GUILD_ID, "deploys")


def test_a_group_dm_is_a_group() -> None:
    payload = interaction(channel={"id": "1300000000000000060", "type": 3}, channel_id="1300000000000000060", context=2)
    del payload["guild_id"], payload["member"]
    payload["user"] = ALICE
    assert _message(parse(payload)).source.chat_type == "group"


def test_the_command_name_is_configurable() -> None:
    payload = interaction(data={"name": "hermes", "type": 1, "options": [{"name": "prompt", "type": 3, "value": "x"}]})
    assert _message(parse(payload, DISCORD_COMMAND_NAME="hermes")).text == "x"


def test_another_command_gets_an_ephemeral_unknown_command_answer() -> None:
    parsed = parse(interaction(data={"name": "weather", "type": 1}))
    assert isinstance(parsed, Handshake)
    assert parsed.response.status == 200
    assert parsed.response.body == {"type": 4, "data": {"content": "Unknown command /weather. Use /ask.", "flags": 64}}


@pytest.mark.parametrize(
    "options", [None, [], [{"name": "prompt", "type": 3, "value": "  "}], [{"name": "x", "value": "y"}]]
)
def test_a_command_without_a_prompt_gets_the_usage(options: Any) -> None:
    parsed = parse(interaction(data={"name": "ask", "type": 1, "options": options}))
    assert isinstance(parsed, Handshake)
    assert parsed.response.body["data"]["flags"] == 64  # type: ignore[index]
    assert "Usage: /ask prompt:" in parsed.response.body["data"]["content"]  # type: ignore[index]


def test_a_hermes_button_sends_its_text_and_acks_without_a_visible_change() -> None:
    payload = interaction(
        3, data={"custom_id": "hermes:/approve", "component_type": 2}, message={"id": "1300000000000000070"}
    )
    parsed = parse(payload)

    assert isinstance(parsed, Accepted)
    assert parsed.ack == HttpResponse(200, {"type": 6})
    message = _message(parsed)
    assert message.text == "/approve"
    assert message.source.message_id == "1300000000000000070"
    assert message.reply_context["interaction_token"] == INTERACTION_TOKEN


@pytest.mark.parametrize("custom_id", ["other:thing", "hermes:", "hermes: "])
def test_other_buttons_are_acknowledged_and_ignored(custom_id: str) -> None:
    parsed = parse(interaction(3, data={"custom_id": custom_id, "component_type": 2}))
    assert parsed == Accepted(items=(Ignored("unknown_component"),), ack=HttpResponse(200, {"type": 6}))


@pytest.mark.parametrize("kind", [4, 5, 99])
def test_other_interaction_types_are_ignored(kind: int) -> None:
    assert parse(interaction(kind)) == Ignored("unsupported_interaction")


def _without(payload: dict[str, Any], *keys: str) -> dict[str, Any]:
    broken = copy.deepcopy(payload)
    for key in keys:
        broken.pop(key, None)
    return broken


@pytest.mark.parametrize(
    "payload",
    [
        b"{",
        b"[1]",
        {"type": "2"},
        {},
        _without(interaction(), "id"),
        interaction(id=1300000000000000099),
        _without(interaction(), "token"),
        interaction(token="abc/../../channels"),
        interaction(token="abc\n"),
        _without(interaction(), "channel_id", "channel"),
        interaction(channel_id="general"),
        _without(interaction(), "member"),
        interaction(member={"user": {"id": "not-a-snowflake"}}),
        interaction(member="alice"),
        interaction(guild_id=5),
        interaction(data="ask"),
        interaction(data={"name": 1}),
        interaction(data={"name": "ask", "options": "prompt"}),
        interaction(3, data={"component_type": 2}),
    ],
)
def test_malformed_interactions_are_bad_requests(payload: Any) -> None:
    with pytest.raises(BadRequest):
        parse(payload)


def test_the_application_id_falls_back_to_the_setting() -> None:
    message = _message(parse(_without(interaction(), "application_id")))
    assert message.reply_context["application_id"] == APPLICATION_ID


# --- through the ingress ------------------------------------------------------------------------


def call(request: HttpRequest, enqueue: FakeEnqueue, **env: str) -> HttpResponse:
    config = settings(**env)
    return handle_webhook(
        "discord",
        request,
        settings=config,
        adapters=platforms.adapters(config, {}, clock=lambda: NOW),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def test_handle_webhook_defers_and_enqueues_once() -> None:
    enqueue = FakeEnqueue()
    request = signed(interaction())

    first = call(request, enqueue)
    again = call(request, enqueue)

    assert (first.status, first.body) == (200, {"type": 5})
    assert (again.status, again.body) == (200, {"type": 5})
    assert len(enqueue.sent) == 1
    envelope = enqueue.sent[0]
    assert envelope["event_id"] == "discord:1300000000000000099"
    assert envelope["session_key"] == f"agent:main:discord:group:{CHANNEL_ID}:4242"
    assert envelope["reply_context"]["interaction_token"] == INTERACTION_TOKEN


def test_handle_webhook_answers_the_ping_without_enqueueing() -> None:
    enqueue = FakeEnqueue()
    response = call(signed({"type": 1}), enqueue)
    assert (response.status, response.body, response.headers["content-type"]) == (200, {"type": 1}, "application/json")
    assert enqueue.calls == 0


def test_handle_webhook_refuses_forged_and_stale_requests() -> None:
    enqueue = FakeEnqueue()
    assert call(signed(interaction(), key=Ed25519PrivateKey.generate()), enqueue).status == 401
    assert call(signed(interaction(), ts=str(int(NOW) - 3600)), enqueue).status == 401
    assert call(signed(interaction()), enqueue, DISCORD_PUBLIC_KEY="").status == 401
    assert enqueue.calls == 0


# --- sending ------------------------------------------------------------------------------------


def sender(fake: FakeDiscord, *, token: str | None = "default") -> DiscordSender:
    return DiscordSender(
        fake.base_url, bot_token=fake.token if token == "default" else token, application_id=APPLICATION_ID, timeout=2.0
    )


def interaction_target(chat_id: str = CHANNEL_ID, token: str = INTERACTION_TOKEN) -> Target:
    return Target("discord", chat_id, None, {"interaction_token": token, "application_id": APPLICATION_ID})


def _assert_secret_free(exc: BaseException, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in str(exc)
        assert secret not in repr(exc)
    assert exc.__cause__ is None


def test_channel_send_posts_with_the_bot_token(fake_discord: FakeDiscord) -> None:
    message_id = sender(fake_discord).send(Target("discord", CHANNEL_ID), "hello")

    (request,) = fake_discord.requests
    assert [(m["id"], m["content"]) for m in fake_discord.channel_messages(CHANNEL_ID)] == [(message_id, "hello")]
    assert request.http_method == "POST"
    assert request.path == f"/channels/{CHANNEL_ID}/messages"
    assert request.headers["authorization"] == f"Bot {fake_discord.token}"
    assert request.headers["user-agent"].startswith("DiscordBot (")
    assert request.json == {"content": "hello", "allowed_mentions": {"parse": ["users"]}}


def test_a_thread_target_posts_in_the_thread(fake_discord: FakeDiscord) -> None:
    sender(fake_discord).send(Target("discord", CHANNEL_ID, THREAD_ID), "in thread")
    assert fake_discord.channel_texts(THREAD_ID) == ["in thread"]


def test_a_multi_chunk_interaction_reply_reads_in_order(fake_discord: FakeDiscord) -> None:
    # Given an interaction acknowledged with "thinking…", and no bot token at all
    fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
    discord = sender(fake_discord, token=None)

    ids = [discord.send(interaction_target(), f"part {i} (of 3)") for i in (1, 2, 3)]

    assert fake_discord.channel_texts(CHANNEL_ID) == ["part 1 (of 3)", "part 2 (of 3)", "part 3 (of 3)"]
    assert ids == [m["id"] for m in fake_discord.channel_messages(CHANNEL_ID)]
    methods = [(r.http_method, r.path.split(APPLICATION_ID)[-1], r.query) for r in fake_discord.requests]
    webhook = f"/{INTERACTION_TOKEN}"
    assert methods == [
        ("GET", webhook + "/messages/@original", ""),
        ("PATCH", webhook + "/messages/@original", ""),
        ("POST", webhook, "wait=true"),
        ("POST", webhook, "wait=true"),
    ]
    assert all("authorization" not in r.headers for r in fake_discord.requests)


def test_a_retry_on_a_fresh_instance_never_overwrites_the_first_chunk(fake_discord: FakeDiscord) -> None:
    fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
    sender(fake_discord).send(interaction_target(), "part 1")

    # A new delivery instance (nothing remembered) sends the second chunk
    sender(fake_discord).send(interaction_target(), "part 2")

    assert fake_discord.channel_texts(CHANNEL_ID) == ["part 1", "part 2"]


@pytest.mark.parametrize("expire", ["expired", "unknown"])
def test_an_expired_interaction_falls_back_to_the_channel(fake_discord: FakeDiscord, expire: str) -> None:
    if expire == "expired":
        fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
        fake_discord.expired_tokens.add(INTERACTION_TOKEN)

    message_id = sender(fake_discord).send(interaction_target(), "late answer")

    assert message_id.isdigit()
    assert fake_discord.channel_texts(CHANNEL_ID)[-1] == "late answer"
    assert fake_discord.requests[-1].path == f"/channels/{CHANNEL_ID}/messages"


def test_an_expired_interaction_without_a_bot_token_is_gone(fake_discord: FakeDiscord) -> None:
    fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
    fake_discord.expired_tokens.add(INTERACTION_TOKEN)
    with pytest.raises(TargetGone, match="expired") as caught:
        sender(fake_discord, token=None).send(interaction_target(), "late")
    _assert_secret_free(caught.value, INTERACTION_TOKEN)


def test_an_expired_token_on_a_follow_up_also_falls_back(fake_discord: FakeDiscord) -> None:
    fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
    discord = sender(fake_discord)
    discord.send(interaction_target(), "part 1")
    fake_discord.expired_tokens.add(INTERACTION_TOKEN)

    discord.send(interaction_target(), "part 2")

    assert fake_discord.channel_texts(CHANNEL_ID) == ["part 1", "part 2"]
    assert fake_discord.requests[-1].path == f"/channels/{CHANNEL_ID}/messages"


def test_429_uses_the_body_retry_after(fake_discord: FakeDiscord) -> None:
    fake_discord.answer_next(429, too_many_requests(2.5), headers={"Retry-After": "3"})
    with pytest.raises(RateLimited) as caught:
        sender(fake_discord).send(Target("discord", CHANNEL_ID), "hi")
    assert caught.value.retry_after == 2.5
    _assert_secret_free(caught.value, fake_discord.token)


def test_429_without_a_body_uses_the_header(fake_discord: FakeDiscord) -> None:
    fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
    fake_discord.answer_next(429, "slow down", headers={"Retry-After": "4"})
    with pytest.raises(RateLimited) as caught:
        sender(fake_discord).send(interaction_target(), "hi")
    assert caught.value.retry_after == 4.0
    _assert_secret_free(caught.value, INTERACTION_TOKEN)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_are_transient(fake_discord: FakeDiscord, status: int) -> None:
    fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
    fake_discord.answer_next(status, SERVER_ERROR)
    with pytest.raises(TransientError) as caught:
        sender(fake_discord).send(interaction_target(), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_secret_free(caught.value, INTERACTION_TOKEN, fake_discord.token)
    fake_discord.answer_next(status, SERVER_ERROR)
    with pytest.raises(TransientError) as caught:
        sender(fake_discord).send(Target("discord", CHANNEL_ID), "hi")
    _assert_secret_free(caught.value, INTERACTION_TOKEN, fake_discord.token)


def test_unknown_channel_and_missing_access_are_gone(fake_discord: FakeDiscord) -> None:
    fake_discord.gone_channels.add("1300000000000000003")
    fake_discord.forbidden_channels.add("1300000000000000004")
    with pytest.raises(TargetGone, match="Unknown Channel"):
        sender(fake_discord).send(Target("discord", "1300000000000000003"), "hi")
    with pytest.raises(TargetGone, match="Missing Access") as caught:
        sender(fake_discord).send(Target("discord", "1300000000000000004"), "hi")
    _assert_secret_free(caught.value, fake_discord.token)


def test_other_refusals_are_permanent(fake_discord: FakeDiscord) -> None:
    with pytest.raises(PermanentError, match="Invalid Form Body") as caught:
        sender(fake_discord).send(Target("discord", CHANNEL_ID), "x" * 2001)
    assert not isinstance(caught.value, TargetGone)


def test_a_wrong_bot_token_is_permanent_and_not_echoed(fake_discord: FakeDiscord) -> None:
    wrong = "MTAw.wrong.bot-token-that-must-stay-secret"
    with pytest.raises(PermanentError, match="401") as caught:
        sender(fake_discord, token=wrong).send(Target("discord", CHANNEL_ID), "hi")
    _assert_secret_free(caught.value, wrong)


def test_a_channel_send_needs_the_bot_token(fake_discord: FakeDiscord) -> None:
    with pytest.raises(PermanentError, match="DISCORD_BOT_TOKEN"):
        sender(fake_discord, token=None).send(Target("discord", CHANNEL_ID), "hi")
    assert fake_discord.requests == []


def test_a_target_that_is_not_a_channel_id_is_refused(fake_discord: FakeDiscord) -> None:
    with pytest.raises(PermanentError, match="not a channel id"):
        sender(fake_discord).send(Target("discord", "../../users/@me"), "hi")
    assert fake_discord.requests == []


@pytest.mark.parametrize("body", [{"content": "hi"}, "<html>ok</html>"])
def test_a_success_without_an_id_is_an_unknown_outcome(fake_discord: FakeDiscord, body: Any) -> None:
    fake_discord.answer_next(200, body)
    with pytest.raises(OutcomeUnknown, match="without a message id"):
        sender(fake_discord).send(Target("discord", CHANNEL_ID), "hi")


def test_connection_failures_are_transient_and_leak_no_token(fake_discord: FakeDiscord) -> None:
    discord = sender(fake_discord)
    fake_discord.stop()
    with pytest.raises(TransientError) as caught:
        discord.send(interaction_target(), "hi")
    _assert_secret_free(caught.value, INTERACTION_TOKEN, fake_discord.token)
    assert fake_discord.token not in repr(discord)


def test_build_sender_needs_a_bot_token_or_an_application_id() -> None:
    no_app = settings(DISCORD_APPLICATION_ID="")
    assert platforms.sender("discord", no_app, {}) is None
    assert isinstance(platforms.sender("discord", settings(), {}), DiscordSender)
    assert isinstance(platforms.sender("discord", no_app, {"DISCORD_BOT_TOKEN": "t"}), DiscordSender)
    assert build_sender(platforms.context("discord", no_app, {})) is None


def test_a_sender_without_the_application_setting_uses_the_targets(fake_discord: FakeDiscord) -> None:
    fake_discord.defer(INTERACTION_TOKEN, CHANNEL_ID)
    discord = DiscordSender(fake_discord.base_url, bot_token=None, application_id=None, timeout=2.0)
    discord.send(interaction_target(), "answer")
    assert fake_discord.channel_texts(CHANNEL_ID) == ["answer"]


def test_every_try_of_one_outbox_chunk_carries_one_enforced_nonce(fake_discord: FakeDiscord) -> None:
    # Discord answers a repeated enforced nonce (of the last few minutes) with the message it
    # created, so the outbox's retry after a timeout Discord had taken posts nothing new
    discord = sender(fake_discord)
    chunk = Target("discord", CHANNEL_ID, delivery_id="turn-1#1")
    first = discord.send(chunk, "answer")
    assert discord.send(chunk, "answer") == first
    assert fake_discord.channel_texts(CHANNEL_ID) == ["answer"]
    body = fake_discord.calls("POST", f"/channels/{CHANNEL_ID}/messages")[0].json
    assert body["enforce_nonce"] is True and len(body["nonce"]) == 25
    assert discord.send(Target("discord", CHANNEL_ID, delivery_id="turn-1#2"), "more") != first
    # a send with no outbox row has no nonce
    discord.send(Target("discord", CHANNEL_ID), "plain")
    assert "nonce" not in fake_discord.calls("POST", f"/channels/{CHANNEL_ID}/messages")[-1].json
    assert fake_discord.channel_texts(CHANNEL_ID) == ["answer", "more", "plain"]
