"""Slack Events API: signing (Slack's published vector), event normalization, the ingress path,
and chat.postMessage against a fake Web API on loopback."""

from __future__ import annotations

import copy
import json
import logging
import secrets
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

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
from hermes_gateway.platforms.base import Target, send_key
from hermes_gateway.platforms.slack import SlackSender, parse_event, signature, verify_request
from hermes_gateway.services.ingress import Handshake, HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.services import FakeEnqueue, make_settings
from tests.fakes.slack_server import FakeSlack, slack_error

# Slack's worked example (PLATFORMS §2 and §15), a slash-command body signed at 1531420618.
VECTOR_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
VECTOR_TS = "1531420618"
VECTOR_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
VECTOR_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"

SECRET = "test-signing-secret-0123456789ab"
NOW = 1_764_400_000.0
BOT = "UBOT0001"
ALICE = "UALICE01"


def envelope(event: dict[str, Any], *, event_id: str = "Ev001", team: str = "T1") -> dict[str, Any]:
    return {
        "token": "legacy-verification-token",
        "team_id": team,
        "api_app_id": "A0APP",
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(NOW),
        "authorizations": [{"team_id": team, "user_id": BOT, "is_bot": True, "is_enterprise_install": False}],
    }


def channel_message(text: str = "hello", **fields: Any) -> dict[str, Any]:
    event = {
        "type": "message",
        "channel": "C123",
        "user": ALICE,
        "text": text,
        "ts": "1764400000.000100",
        "channel_type": "channel",
        "event_ts": "1764400000.000100",
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


def parse(payload: Any) -> Any:
    return parse_event(payload, received_at=NOW)


def parse_message(payload: Any) -> InboundMessage:
    parsed = parse(payload)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


def signed(payload: Any, *, ts: float = NOW, secret: str = SECRET, extra: dict[str, str] | None = None) -> HttpRequest:
    body = json.dumps(payload).encode()
    timestamp = str(int(ts))
    headers = {
        "content-type": "application/json",
        "x-slack-request-timestamp": timestamp,
        "x-slack-signature": signature(secret, timestamp, body),
        **(extra or {}),
    }
    return HttpRequest(method="POST", path="/webhooks/slack", headers=headers, body=body)


# --- verification ---------------------------------------------------------------------------------


def test_published_vector_signature_is_reproduced() -> None:
    assert signature(VECTOR_SECRET, VECTOR_TS, VECTOR_BODY) == VECTOR_SIGNATURE


def test_published_vector_is_accepted_with_a_clock_fixed_at_its_timestamp() -> None:
    # Given the adapter built from the catalog, with a clock frozen at the vector's timestamp
    settings = make_settings({"SLACK_ENABLED": "true"})
    adapter = platforms.adapter("slack", settings, {"SLACK_SIGNING_SECRET": VECTOR_SECRET}, lambda: float(VECTOR_TS))
    headers = {"x-slack-request-timestamp": VECTOR_TS, "x-slack-signature": VECTOR_SIGNATURE}

    adapter.verify(HttpRequest("POST", "/webhooks/slack", headers, VECTOR_BODY))


def test_published_vector_is_stale_with_todays_clock() -> None:
    headers = {"x-slack-request-timestamp": VECTOR_TS, "x-slack-signature": VECTOR_SIGNATURE}
    with pytest.raises(Unauthorized, match="stale timestamp"):
        verify_request(headers, VECTOR_BODY, VECTOR_SECRET, NOW)


@pytest.mark.parametrize("skew", [-300, 0, 300])
def test_timestamps_within_five_minutes_either_way_are_accepted(skew: int) -> None:
    request = signed({"type": "event_callback"}, ts=NOW + skew)
    verify_request(request.headers, request.body, SECRET, NOW)


@pytest.mark.parametrize("skew", [-301, 301, -86_400])
def test_timestamps_outside_the_window_are_stale(skew: int) -> None:
    # A replay signed correctly but captured earlier (or a request from a clock far ahead)
    request = signed({"type": "event_callback"}, ts=NOW + skew)
    with pytest.raises(Unauthorized, match="stale timestamp"):
        verify_request(request.headers, request.body, SECRET, NOW)


def test_a_tampered_body_fails() -> None:
    request = signed(envelope(channel_message("hello")))
    tampered = request.body.replace(b"hello", b"hellO")
    with pytest.raises(Unauthorized, match="does not match"):
        verify_request(request.headers, tampered, SECRET, NOW)


def test_a_signature_made_with_another_secret_fails() -> None:
    request = signed(envelope(channel_message()), secret="someone-elses-secret")
    with pytest.raises(Unauthorized, match="does not match"):
        verify_request(request.headers, request.body, SECRET, NOW)


def test_a_signature_over_another_timestamp_fails() -> None:
    # Given a valid signature whose timestamp header was moved forward to dodge the window
    request = signed(envelope(channel_message()), ts=NOW - 3600)
    headers = {**request.headers, "x-slack-request-timestamp": str(int(NOW))}
    with pytest.raises(Unauthorized, match="does not match"):
        verify_request(headers, request.body, SECRET, NOW)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"x-slack-signature": None}, "signature header is missing"),
        ({"x-slack-signature": ""}, "signature header is missing"),
        ({"x-slack-request-timestamp": None}, "missing x-slack-request-timestamp header"),
        ({"x-slack-request-timestamp": "1764400000.5"}, "malformed"),
        ({"x-slack-request-timestamp": "-1764400000"}, "malformed"),
        ({"x-slack-request-timestamp": "9" * 40}, "malformed"),
        ({"x-slack-request-timestamp": "١٧٦٤٤٠٠٠٠٠"}, "malformed"),
        ({"x-slack-signature": "v1=abc"}, "does not match"),
        ({"x-slack-signature": "v0=é"}, "does not match"),
    ],
)
def test_malformed_headers_are_refused(change: dict[str, str | None], reason: str) -> None:
    request = signed(envelope(channel_message()))
    headers = {k: v for k, v in {**request.headers, **change}.items() if v is not None}
    with pytest.raises(Unauthorized, match=reason):
        verify_request(headers, request.body, SECRET, NOW)


@pytest.mark.parametrize("secret", [None, ""])
def test_without_a_signing_secret_everything_is_refused(secret: str | None) -> None:
    request = signed(envelope(channel_message()))
    with pytest.raises(Unauthorized, match="not configured"):
        verify_request(request.headers, request.body, secret, NOW)


def test_refusals_never_carry_the_secret() -> None:
    request = signed(envelope(channel_message()), secret="wrong")
    with pytest.raises(Unauthorized) as caught:
        verify_request(request.headers, request.body, SECRET, NOW)
    assert SECRET not in str(caught.value)


# --- normalization --------------------------------------------------------------------------------


def test_channel_message_becomes_a_group_message_in_its_workspace() -> None:
    message = parse_message(envelope(channel_message("deploy?")))

    assert message.text == "deploy?"
    assert message.event_id == "slack:T1:C123:1764400000.000100"
    assert message.received_at == NOW
    assert message.facts == ()
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id, source.user_id) == ("slack", "group", "C123", ALICE)
    assert (source.scope_id, source.message_id, source.thread_id) == ("T1", "1764400000.000100", None)
    assert source.is_bot is False


def test_im_becomes_a_dm() -> None:
    message = parse_message(envelope(channel_message("hi", channel="D456", channel_type="im")))
    assert message.source.chat_type == "dm"
    assert message.source.chat_id == "D456"


@pytest.mark.parametrize("channel_type", ["channel", "group", "mpim"])
def test_every_other_conversation_is_a_group(channel_type: str) -> None:
    message = parse_message(envelope(channel_message("hi", channel="G789", channel_type=channel_type)))
    assert message.source.chat_type == "group"


def test_a_thread_reply_carries_its_thread() -> None:
    message = parse_message(envelope(channel_message("+1", ts="1764400050.000200", thread_ts="1764400000.000100")))
    assert message.source.thread_id == "1764400000.000100"
    assert message.source.message_id == "1764400050.000200"
    assert message.source.description == "group: C123, thread: 1764400000.000100"


def test_a_thread_parent_is_not_in_a_thread() -> None:
    message = parse_message(envelope(channel_message("start", thread_ts="1764400000.000100")))
    assert message.source.thread_id is None


def test_file_share_and_thread_broadcast_are_still_messages() -> None:
    assert parse_message(envelope(channel_message("look", subtype="file_share"))).text == "look"
    broadcast = channel_message("fyi", subtype="thread_broadcast", ts="1764400060.0", thread_ts="1764400000.000100")
    assert parse_message(envelope(broadcast)).source.thread_id == "1764400000.000100"


def test_mention_and_message_events_normalize_to_the_same_turn() -> None:
    # Given the two deliveries of one channel message that mentions the app
    text = f"<@{BOT}> what is the status?"
    as_message = parse_message(envelope(channel_message(text), event_id="Ev100"))
    mention = channel_message(text, type="app_mention", channel_type=None)
    as_mention = parse_message(envelope(mention, event_id="Ev101"))

    assert as_message.event_id == as_mention.event_id == "slack:T1:C123:1764400000.000100"
    assert as_message.text == as_mention.text == "what is the status?"
    assert as_message.facts == as_mention.facts == ("mentions_bot",)
    assert as_message.source == as_mention.source


def test_an_install_that_sends_only_the_legacy_authed_users_has_its_mention_stripped() -> None:
    # Given the envelopes of an older install: no `authorizations`, the bot user in `authed_users`
    text = f"<@{BOT}> what is the status?"
    legacy = {"authed_users": [BOT]}
    as_mention = envelope(channel_message(text, type="app_mention", channel_type=None), event_id="Ev200")
    as_message = envelope(channel_message(text), event_id="Ev201")
    for payload in (as_mention, as_message):
        del payload["authorizations"]
        payload.update(legacy)
    # Then both deliveries read as the one message to the bot, without its mention
    mention, message = parse_message(as_mention), parse_message(as_message)
    assert mention.text == message.text == "what is the status?"
    assert mention.facts == message.facts == ("mentions_bot",)
    assert mention.event_id == message.event_id


def test_a_person_among_the_legacy_authed_users_is_not_taken_for_the_bot() -> None:
    # (`authed_users` may name whoever installed the app: their own messages are still theirs)
    payload = envelope(channel_message("hello"))
    del payload["authorizations"]
    payload["authed_users"] = [ALICE, BOT]
    assert parse_message(payload).text == "hello"


def test_a_mention_elsewhere_in_the_text_is_kept_but_noted() -> None:
    message = parse_message(envelope(channel_message(f"ask <@{BOT}|hermes> about it")))
    assert message.text == f"ask <@{BOT}|hermes> about it"
    assert message.facts == ("mentions_bot",)


def test_a_leading_mention_of_someone_else_is_not_stripped() -> None:
    message = parse_message(envelope(channel_message("<@UOTHER01> can you look?")))
    assert message.text == "<@UOTHER01> can you look?"
    assert message.facts == ()


def test_a_leading_mention_with_a_label_and_colon_is_stripped() -> None:
    assert parse_message(envelope(channel_message(f"<@{BOT}|hermes>: hi"))).text == "hi"


def test_app_mention_in_a_dm_channel_is_a_dm() -> None:
    mention = channel_message(f"<@{BOT}> hi", type="app_mention", channel="D456", channel_type=None)
    assert parse_message(envelope(mention)).source.chat_type == "dm"


def test_a_person_listed_in_authorizations_is_not_taken_for_the_bot() -> None:
    # Slack lists one installing party, which may be a person who installed the app
    payload = envelope(channel_message(f"<@{ALICE}> hi"))
    payload["authorizations"] = [{"team_id": "T1", "user_id": ALICE, "is_bot": False}]
    message = parse_message(payload)
    assert message.text == f"<@{ALICE}> hi"
    assert message.facts == ()


def test_team_falls_back_to_the_events_team() -> None:
    payload = envelope(channel_message("hi", team="T9"))
    del payload["team_id"]
    assert parse_message(payload).source.scope_id == "T9"


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (channel_message("beep", bot_id="B0OTHER"), "bot_message"),
        (channel_message("beep", subtype="bot_message", user=None, bot_id="B0OTHER"), "bot_message"),
        (channel_message("my own reply", user=BOT), "own_message"),
        (channel_message("my own reply", user=BOT, bot_id="B0SELF"), "own_message"),
        (channel_message("x", subtype="message_changed", user=None), "edited"),
        (channel_message("", subtype="message_deleted", user=None), "deleted"),
        (channel_message("<@UALICE01> has joined the channel", subtype="channel_join"), "unsupported_subtype"),
        (channel_message("", subtype="channel_topic"), "unsupported_subtype"),
        ({"type": "reaction_added", "user": ALICE, "reaction": "+1"}, "unsupported_event"),
        ({"type": "app_home_opened", "user": ALICE}, "unsupported_event"),
        (channel_message(""), "no_text"),
        (channel_message(f"<@{BOT}>"), "no_text"),
    ],
)
def test_events_without_a_person_writing_are_ignored(event: dict[str, Any], reason: str) -> None:
    assert parse(envelope(event)) == Ignored(reason)


def test_other_envelope_types_are_ignored() -> None:
    assert parse({"type": "app_rate_limited", "team_id": "T1", "minute_rate_limited": 1}) == Ignored("unsupported_type")


def test_url_verification_is_a_handshake_answering_the_challenge() -> None:
    challenge = "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    parsed = parse({"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "challenge": challenge, "type": "url_verification"})
    assert parsed == Handshake(HttpResponse(200, {"challenge": challenge}))


GOOD = envelope(channel_message())


def _broken(*path: str, value: Any = None) -> dict[str, Any]:
    payload = copy.deepcopy(GOOD)
    target = payload
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return payload


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [],
        "event_callback",
        {"type": "url_verification"},
        {"type": "url_verification", "challenge": 5},
        {"type": "event_callback"},
        {"type": "event_callback", "event": "message"},
        _broken("event", "channel"),
        _broken("event", "ts"),
        _broken("event", "user"),
        _broken("event", "ts", value=1764400000.0001),
        _broken("event", "text", value=["hi"]),
        _broken("team_id"),
        _broken("event", "user", value={"id": ALICE}),
    ],
)
def test_malformed_payloads_are_bad_requests(payload: Any) -> None:
    with pytest.raises(BadRequest):
        parse(payload)


def test_round_trip_through_the_queue_envelope() -> None:
    message = parse_message(envelope(channel_message(f"<@{BOT}> hi", thread_ts="1764399999.000001")))
    assert InboundMessage.from_dict(message.to_dict()) == message


# --- through the ingress --------------------------------------------------------------------------

SECRETS = {"SLACK_SIGNING_SECRET": SECRET}


def call(request: HttpRequest, enqueue: FakeEnqueue) -> HttpResponse:
    settings = make_settings({"SLACK_ENABLED": "true"})
    return handle_webhook(
        "slack",
        request,
        settings=settings,
        adapters=platforms.adapters(settings, SECRETS, lambda: NOW),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def test_a_signed_message_is_enqueued_once_with_its_workspace_session_key() -> None:
    enqueue = FakeEnqueue()

    response = call(signed(envelope(channel_message("hi"))), enqueue)

    assert response.status == 200
    assert len(enqueue.sent) == 1
    assert enqueue.sent[0]["event_id"] == "slack:T1:C123:1764400000.000100"
    assert enqueue.sent[0]["session_key"] == f"agent:main:slack:group:T1:C123:{ALICE}"


def test_a_forged_request_is_401_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    response = call(signed(envelope(channel_message("hi")), secret="forged"), enqueue)

    assert response.status == 401
    assert enqueue.calls == 0


def test_a_replayed_request_is_401() -> None:
    enqueue = FakeEnqueue()
    response = call(signed(envelope(channel_message("hi")), ts=NOW - 600), enqueue)
    assert response.status == 401
    assert "stale timestamp" in str(response.body)
    assert enqueue.calls == 0


def test_url_verification_is_answered_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    response = call(signed({"token": "t", "challenge": "abc123", "type": "url_verification"}), enqueue)

    assert response == HttpResponse(200, {"challenge": "abc123"})
    assert enqueue.calls == 0


def test_a_retry_of_an_enqueued_event_is_a_duplicate() -> None:
    enqueue = FakeEnqueue()
    first = call(signed(envelope(channel_message("hi"))), enqueue)
    retry_headers = {"x-slack-retry-num": "1", "x-slack-retry-reason": "http_timeout"}

    second = call(signed(envelope(channel_message("hi")), extra=retry_headers), enqueue)

    assert (first.status, second.status) == (200, 200)
    assert second.body == {"ok": True, "duplicate": True}
    assert len(enqueue.sent) == 1


def test_a_retry_after_a_failed_enqueue_is_processed() -> None:
    # Given the first delivery failed before it was durable (queue down: 503, Slack retries)
    failing = FakeEnqueue(fail_with=TransientError("queue down"))
    assert call(signed(envelope(channel_message("hi"))), failing).status == 503
    enqueue = FakeEnqueue()
    retry_headers = {"x-slack-retry-num": "1", "x-slack-retry-reason": "http_error"}

    response = call(signed(envelope(channel_message("hi")), extra=retry_headers), enqueue)

    assert response.status == 200
    assert len(enqueue.sent) == 1


def test_the_message_and_app_mention_deliveries_make_one_turn() -> None:
    enqueue = FakeEnqueue()
    text = f"<@{BOT}> status?"
    mention = channel_message(text, type="app_mention", channel_type=None)

    responses = [
        call(signed(envelope(mention, event_id="Ev201")), enqueue),
        call(signed(envelope(channel_message(text), event_id="Ev200")), enqueue),
    ]

    assert [r.status for r in responses] == [200, 200]
    assert len(enqueue.sent) == 1
    assert enqueue.sent[0]["text"] == "status?"
    assert enqueue.sent[0]["facts"] == ["mentions_bot"]


def test_the_apps_own_reply_echoed_back_logs_at_debug_another_bots_message_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # with a message.* subscription every reply the app posts comes back as an event: no message,
    # and one INFO line each would be a line a reply (ingress.RECEIPT_REASONS)
    caplog.set_level(logging.DEBUG, logger="hermes-gateway")
    own = envelope(channel_message("my reply", user=BOT, bot_id="B0SELF"), event_id="Ev301")
    other = envelope(channel_message("beep", bot_id="B0OTHER"), event_id="Ev302")
    for payload in (own, other):
        assert call(signed(payload), FakeEnqueue()).status == 200
    ignored = [(r.levelname, getattr(r, "reason", None)) for r in caplog.records if r.getMessage() == "webhook ignored"]
    assert ignored == [("DEBUG", "own_message"), ("INFO", "bot_message")]


def test_own_messages_are_acknowledged_and_not_enqueued() -> None:
    enqueue = FakeEnqueue()
    response = call(signed(envelope(channel_message("my reply", user=BOT))), enqueue)
    assert response.status == 200
    assert response.body == {"ok": True, "ignored": "own_message"}
    assert enqueue.calls == 0


def test_a_malformed_but_signed_body_is_400() -> None:
    enqueue = FakeEnqueue()
    body = b"not json"
    headers = {"x-slack-request-timestamp": str(int(NOW)), "x-slack-signature": signature(SECRET, str(int(NOW)), body)}
    response = call(HttpRequest("POST", "/webhooks/slack", headers, body), enqueue)
    assert response.status == 400
    assert enqueue.calls == 0


# --- sender ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def sender(fake_slack: FakeSlack) -> SlackSender:
    return SlackSender(fake_slack.base_url, fake_slack.token, timeout=2.0)


def _assert_no_token(exc: BaseException, token: str) -> None:
    assert token not in str(exc)
    assert token not in repr(exc)
    assert exc.__cause__ is None


def test_the_catalog_sender_posts_and_returns_the_ts(fake_slack: FakeSlack) -> None:
    # Given the sender the delivery function builds from settings and secrets
    settings = make_settings({"SLACK_ENABLED": "true", "SLACK_API_BASE_URL": fake_slack.base_url})
    built = platforms.sender("slack", settings, {"SLACK_BOT_TOKEN": fake_slack.token})
    assert built is not None

    first = built.send(Target("slack", "C123"), "hello")
    second = built.send(Target("slack", "C123", thread_id="1764400000.000100"), "in thread")

    assert (first, second) == ("1700000000.000001", "1700000000.000002")
    request = fake_slack.requests[0]
    assert (request.http_method, request.path) == ("POST", "/api/chat.postMessage")
    assert request.headers["authorization"] == f"Bearer {fake_slack.token}"
    assert request.headers["content-type"] == "application/json; charset=utf-8"
    assert fake_slack.calls("chat.postMessage") == [
        {"channel": "C123", "text": "hello"},
        {"channel": "C123", "text": "in thread", "thread_ts": "1764400000.000100"},
    ]


def test_a_chunk_of_the_outbox_carries_its_send_key_in_the_messages_metadata(
    fake_slack: FakeSlack, sender: SlackSender
) -> None:
    sender.send(Target("slack", "C123", delivery_id="turn-1#1"), "answer")
    sender.send(Target("slack", "C123"), "no row")  # a stream's first post has no key
    first, plain = fake_slack.calls("chat.postMessage")
    key = send_key(Target("slack", "C123", delivery_id="turn-1#1"))
    assert first["metadata"] == {"event_type": "hermes_outbox_chunk", "event_payload": {"send_key": key}}
    assert "metadata" not in plain
    # a first try posts at once: no look at the history
    assert fake_slack.calls("conversations.history") == []


@pytest.mark.parametrize("thread", [None, "1764400000.000100"], ids=["channel", "thread"])
def test_a_retried_chunk_an_earlier_try_posted_is_found_not_posted_again(
    fake_slack: FakeSlack, sender: SlackSender, thread: str | None
) -> None:
    # Given a chunk an earlier try posted (its answer lost to a timeout), and other messages since
    recorded_at = time.time()
    chunk = Target("slack", "C123", thread_id=thread, delivery_id="turn-1#1")
    posted = sender.send(chunk, "answer")
    sender.send(Target("slack", "C123", thread_id=thread, delivery_id="turn-2#1"), "a later one")
    # When the chunk is tried again
    again = sender.send(replace(chunk, earlier_try_at=recorded_at), "answer")
    # Then the message that try posted is the chunk's, and nothing is posted again
    assert again == posted
    assert [m["text"] for m in fake_slack.sent] == ["answer", "a later one"]
    method = "conversations.replies" if thread else "conversations.history"
    [look] = fake_slack.calls(method)
    assert look["include_all_metadata"] == "true" and look["channel"] == "C123"
    assert look.get("ts") == thread
    assert float(look["oldest"]) == pytest.approx(recorded_at - 60, abs=0.01)  # since the row, with a margin


def test_a_retried_chunk_no_earlier_try_posted_is_posted(fake_slack: FakeSlack, sender: SlackSender) -> None:
    sender.send(Target("slack", "C123", delivery_id="turn-2#1"), "another chunk")
    ts = sender.send(Target("slack", "C123", delivery_id="turn-1#1", earlier_try_at=time.time()), "answer")
    assert [m["text"] for m in fake_slack.sent] == ["another chunk", "answer"]
    assert ts == fake_slack.sent[-1]["ts"]


def test_a_look_slack_refuses_posts_the_chunk(fake_slack: FakeSlack, sender: SlackSender) -> None:
    # Given a bot without the history scope of the conversation: it cannot tell, so it posts
    chunk = Target("slack", "C123", delivery_id="turn-1#1")
    sender.send(chunk, "answer")
    fake_slack.history_refused.add("C123")
    sender.send(replace(chunk, earlier_try_at=time.time()), "answer")
    assert [m["text"] for m in fake_slack.sent] == ["answer", "answer"]


def test_a_look_that_meets_a_server_error_posts_nothing(fake_slack: FakeSlack, sender: SlackSender) -> None:
    fake_slack.answer_next(503, "")
    with pytest.raises(TransientError):
        sender.send(Target("slack", "C123", delivery_id="turn-1#1", earlier_try_at=time.time()), "answer")
    assert [r.api_method for r in fake_slack.requests] == ["conversations.history"]  # no post after it
    assert fake_slack.sent == []


def test_no_sender_without_a_bot_token() -> None:
    settings = make_settings({"SLACK_ENABLED": "true"})
    assert platforms.sender("slack", settings, {}) is None


def test_http_429_is_rate_limited_with_retry_after(fake_slack: FakeSlack, sender: SlackSender) -> None:
    fake_slack.answer_next(429, slack_error("ratelimited"), headers={"Retry-After": "7"})

    with pytest.raises(RateLimited) as caught:
        sender.send(Target("slack", "C123"), "hi")

    assert caught.value.retry_after == 7.0
    _assert_no_token(caught.value, fake_slack.token)


@pytest.mark.parametrize("code", ["ratelimited", "rate_limited"])
def test_ok_false_rate_limited_is_rate_limited(fake_slack: FakeSlack, sender: SlackSender, code: str) -> None:
    fake_slack.answer_next(200, slack_error(code), headers={"Retry-After": "3"})
    with pytest.raises(RateLimited) as caught:
        sender.send(Target("slack", "C123"), "hi")
    assert caught.value.retry_after == 3.0


@pytest.mark.parametrize(("status", "body"), [(500, "oops"), (502, b""), (503, slack_error("service_unavailable"))])
def test_server_errors_are_transient(fake_slack: FakeSlack, sender: SlackSender, status: int, body: Any) -> None:
    fake_slack.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender.send(Target("slack", "C123"), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_token(caught.value, fake_slack.token)


@pytest.mark.parametrize(
    "code", ["channel_not_found", "not_in_channel", "is_archived", "channel_is_archived", "account_inactive"]
)
def test_gone_answers_are_target_gone(fake_slack: FakeSlack, sender: SlackSender, code: str) -> None:
    fake_slack.answer_next(200, slack_error(code))
    with pytest.raises(TargetGone, match=code):
        sender.send(Target("slack", "C123"), "hi")


def test_an_unknown_channel_is_target_gone(fake_slack: FakeSlack, sender: SlackSender) -> None:
    fake_slack.gone_channels.add("C404")
    with pytest.raises(TargetGone, match="channel_not_found"):
        sender.send(Target("slack", "C404"), "hi")


@pytest.mark.parametrize("code", ["invalid_auth", "not_authed", "msg_too_long", "missing_scope", "fatal_error"])
def test_other_refusals_are_permanent(fake_slack: FakeSlack, sender: SlackSender, code: str) -> None:
    fake_slack.answer_next(200, slack_error(code))
    with pytest.raises(PermanentError, match=code) as caught:
        sender.send(Target("slack", "C123"), "hi")
    assert not isinstance(caught.value, TargetGone)


def test_a_wrong_token_is_permanent_and_never_echoed(fake_slack: FakeSlack) -> None:
    wrong = f"test-wrong-{secrets.token_hex(8)}"
    with pytest.raises(PermanentError, match="invalid_auth") as caught:
        SlackSender(fake_slack.base_url, wrong, timeout=2.0).send(Target("slack", "C123"), "hi")
    assert not isinstance(caught.value, TargetGone)
    _assert_no_token(caught.value, wrong)


def test_a_token_echoed_in_an_answer_is_scrubbed(fake_slack: FakeSlack, sender: SlackSender) -> None:
    fake_slack.answer_next(200, slack_error(f"bad_token_{fake_slack.token}"))
    with pytest.raises(PermanentError) as caught:
        sender.send(Target("slack", "C123"), "hi")
    _assert_no_token(caught.value, fake_slack.token)


@pytest.mark.parametrize("body", [{"ok": True, "channel": "C123"}, {"ok": True, "ts": ""}, "<html>ok</html>"])
def test_a_success_without_a_ts_is_not_reported_as_sent(fake_slack: FakeSlack, sender: SlackSender, body: Any) -> None:
    fake_slack.answer_next(200, body)
    with pytest.raises(OutcomeUnknown, match="may have been sent"):
        sender.send(Target("slack", "C123"), "hi")


def test_an_unexpected_http_status_is_permanent(fake_slack: FakeSlack, sender: SlackSender) -> None:
    fake_slack.answer_next(404, slack_error("unknown_method"))
    with pytest.raises(PermanentError) as caught:
        sender.send(Target("slack", "C123"), "hi")
    assert not isinstance(caught.value, TargetGone)


def test_connection_refused_is_transient(fake_slack: FakeSlack) -> None:
    url, token = fake_slack.base_url, fake_slack.token
    fake_slack.stop()
    with pytest.raises(TransientError) as caught:
        SlackSender(url, token, timeout=1.0).send(Target("slack", "C123"), "hi")
    _assert_no_token(caught.value, token)
