"""LINE: x-line-signature, event normalization, reply-or-push sending and webhook registration
against a fake Messaging API."""

from __future__ import annotations

import json
from collections.abc import Iterator
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
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.line import (
    REPLY_TOKEN_SECONDS,
    SIGNATURE_HEADER,
    LineSender,
    line_signature,
    parse_event,
    parse_webhook,
    verify_signature,
)
from hermes_gateway.services.ingress import Accepted, Handshake, HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.line_server import FakeLine
from tests.fakes.services import FakeEnqueue, make_settings

CHANNEL_SECRET = "line-channel-secret-for-tests"
NOW = 1_764_400_000.0
ENV = {"LINE_ENABLED": "true"}
SECRETS = {"LINE_CHANNEL_SECRET": CHANNEL_SECRET}
BOT = "U0123456789abcdef0123456789abcdef"
ALICE = "U4af4980629a0b1c2d3e4f5a6b7c8d9e0"


def text_event(
    text: str = "hello",
    *,
    event_id: str = "01FZ74A0TDDPYRVKNK77XKC3ZR",
    source: dict[str, Any] | None = None,
    redelivery: bool = False,
    **message: Any,
) -> dict[str, Any]:
    return {
        "type": "message",
        "mode": "active",
        "timestamp": 1_764_399_999_000,
        "source": source or {"type": "user", "userId": ALICE},
        "webhookEventId": event_id,
        "deliveryContext": {"isRedelivery": redelivery},
        "replyToken": "nHuyWiB7yP5Zw52FIkcQobQuGDXCTA",
        "message": {"id": "444573844083572737", "type": "text", "quoteToken": "q3Plxr4AgKd", "text": text, **message},
    }


def webhook(*events: dict[str, Any]) -> dict[str, Any]:
    return {"destination": BOT, "events": list(events)}


def post(payload: Any, *, secret: str | None = CHANNEL_SECRET, raw: bytes | None = None) -> HttpRequest:
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers[SIGNATURE_HEADER] = line_signature(secret, body)
    return HttpRequest(method="POST", path="/webhooks/line", headers=headers, body=body)


def call(req: HttpRequest, enqueue: FakeEnqueue, secrets: dict[str, str] = SECRETS) -> HttpResponse:
    settings = make_settings(ENV)
    return handle_webhook(
        "line",
        req,
        settings=settings,
        adapters=platforms.adapters(settings, secrets),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def message_of(event: dict[str, Any]) -> InboundMessage:
    parsed = parse_event(event, bot=BOT, received_at=NOW)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- signature ----------------------------------------------------------------------------------

VECTOR_BODY = b'{"destination":"U1","events":[]}'


def test_line_self_made_vector() -> None:
    # PLATFORMS §15: secret "testsecret" over the console's Verify body
    assert line_signature("testsecret", VECTOR_BODY) == "fk04R+/mpftGJmD9sP4idCYMIzrMD3nZfOnKIbAqqbw="
    verify_signature({SIGNATURE_HEADER: "fk04R+/mpftGJmD9sP4idCYMIzrMD3nZfOnKIbAqqbw="}, VECTOR_BODY, "testsecret")


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing"),
        ({SIGNATURE_HEADER: ""}, "missing"),
        ({SIGNATURE_HEADER: "fk04R+/mpftGJmD9sP4idCYMIzrMD3nZfOnKIbAqqbx="}, "does not match"),
        ({SIGNATURE_HEADER: "not base64 é"}, "does not match"),
    ],
)
def test_missing_or_forged_signatures_are_refused(headers: dict[str, str], reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason):
        verify_signature(headers, VECTOR_BODY, "testsecret")


def test_a_reserialized_body_does_not_verify() -> None:
    # The signature covers the raw bytes: the same JSON with other spacing is another body
    signature = line_signature(CHANNEL_SECRET, VECTOR_BODY)
    with pytest.raises(Unauthorized, match="does not match"):
        verify_signature({SIGNATURE_HEADER: signature}, b'{"destination": "U1", "events": []}', CHANNEL_SECRET)


@pytest.mark.parametrize("secret", [None, ""])
def test_no_channel_secret_refuses_everything(secret: str | None) -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        verify_signature({SIGNATURE_HEADER: line_signature("x", VECTOR_BODY)}, VECTOR_BODY, secret)


# --- normalization ------------------------------------------------------------------------------


def test_a_user_message_becomes_a_dm() -> None:
    message = message_of(text_event("hello"))

    assert message.text == "hello"
    assert message.event_id == "line:01FZ74A0TDDPYRVKNK77XKC3ZR"
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id, source.user_id) == ("line", "dm", ALICE, ALICE)
    assert source.message_id == "444573844083572737"
    assert source.scope_id == BOT
    assert message.reply_context == {"reply_token": "nHuyWiB7yP5Zw52FIkcQobQuGDXCTA", "received_at": repr(NOW)}
    assert message.extra == {}
    assert message.facts == ()
    assert InboundMessage.from_dict(message.to_dict()) == message


@pytest.mark.parametrize(("kind", "field"), [("group", "groupId"), ("room", "roomId")])
def test_group_and_room_messages_are_groups(kind: str, field: str) -> None:
    message = message_of(text_event(source={"type": kind, field: "Ca56f94637c", "userId": ALICE}))
    assert (message.source.chat_type, message.source.chat_id, message.source.user_id) == ("group", "Ca56f94637c", ALICE)


def test_a_mention_of_the_bot_in_a_group_is_a_fact() -> None:
    mention = {"mentionees": [{"index": 0, "length": 4, "type": "user", "userId": BOT, "isSelf": True}]}
    other = {"mentionees": [{"index": 0, "length": 4, "type": "user", "userId": ALICE, "isSelf": False}]}
    group = {"type": "group", "groupId": "C1", "userId": ALICE}

    assert message_of(text_event("@Bot hi", source=group, mention=mention)).facts == ("mentions_bot",)
    assert message_of(text_event("@Al hi", source=group, mention=other)).facts == ()


def test_a_redelivery_is_processed_and_marked() -> None:
    message = message_of(text_event(redelivery=True))
    assert message.extra == {"redelivery": True}
    assert message.event_id == "line:01FZ74A0TDDPYRVKNK77XKC3ZR"


def test_a_quote_is_the_replied_message() -> None:
    assert message_of(text_event(quotedMessageId="4000")).reply_to_message_id == "4000"


def test_without_a_webhook_event_id_the_message_id_dedupes() -> None:
    event = text_event()
    del event["webhookEventId"]
    assert message_of(event).event_id == "line:message:444573844083572737"


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"type": "follow", "source": {"type": "user", "userId": ALICE}, "replyToken": "r"}, "unsupported_event"),
        ({"type": "postback", "postback": {"data": "x"}}, "unsupported_event"),
        ({"type": "unsend", "unsend": {"messageId": "1"}}, "unsupported_event"),
        ({**text_event(), "mode": "standby"}, "standby"),
        ({**text_event(), "message": {"id": "1", "type": "sticker", "packageId": "1"}}, "no_text"),
        (text_event("  "), "no_text"),
        (text_event(source={"type": "unknown", "id": "x"}), "unsupported_source"),
    ],
)
def test_events_without_usable_text_are_ignored(event: dict[str, Any], reason: str) -> None:
    assert parse_event(event, bot=BOT, received_at=NOW) == Ignored(reason)


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [],
        {"destination": BOT},
        {"events": {}},
        webhook("event"),  # type: ignore[arg-type]
        webhook({**text_event(), "message": "hi"}),
        webhook({**text_event(), "message": {"type": "text", "text": "no id"}}),
        webhook(text_event(text=42)),  # type: ignore[arg-type]
        webhook({**text_event(), "source": None}),
        webhook(text_event(source={"type": "user"})),
        webhook(text_event(source={"type": "group", "userId": ALICE})),
    ],
)
def test_malformed_webhooks_are_bad_requests(payload: Any) -> None:
    with pytest.raises(BadRequest):
        parse_webhook(payload, received_at=NOW)


def test_the_consoles_verify_request_is_a_handshake() -> None:
    assert parse_webhook({"destination": "U1", "events": []}, received_at=NOW) == Handshake(
        HttpResponse(200, {"ok": True})
    )


def test_a_batch_yields_every_event() -> None:
    parsed = parse_webhook(
        webhook(text_event("one", event_id="E1"), {"type": "follow"}, text_event("two", event_id="E2")),
        received_at=NOW,
    )
    assert isinstance(parsed, Accepted)
    assert [getattr(item, "event_id", item) for item in parsed.items] == [
        "line:E1",
        Ignored("unsupported_event"),
        "line:E2",
    ]


# --- through the ingress ------------------------------------------------------------------------


def test_the_verify_button_gets_200_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()
    response = call(
        post(None, raw=VECTOR_BODY, secret="testsecret"), enqueue, secrets={"LINE_CHANNEL_SECRET": "testsecret"}
    )
    assert response.status == 200
    assert enqueue.calls == 0


def test_a_signed_message_is_enqueued_once() -> None:
    enqueue = FakeEnqueue()

    response = call(post(webhook(text_event())), enqueue)

    assert response.status == 200
    assert len(enqueue.sent) == 1
    assert enqueue.sent[0]["session_key"] == f"agent:main:line:dm:{ALICE}"
    assert enqueue.sent[0]["reply_context"]["reply_token"] == "nHuyWiB7yP5Zw52FIkcQobQuGDXCTA"


def test_a_forged_webhook_is_401_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    forged = call(post(webhook(text_event()), secret="guessed"), enqueue)
    unsigned = call(post(webhook(text_event()), secret=None), enqueue)
    unconfigured = call(post(webhook(text_event())), enqueue, secrets={})

    assert (forged.status, unsigned.status, unconfigured.status) == (401, 401, 401)
    assert enqueue.calls == 0


def test_a_redelivery_of_an_enqueued_event_is_dropped() -> None:
    enqueue = FakeEnqueue()

    first = call(post(webhook(text_event())), enqueue)
    again = call(post(webhook(text_event(redelivery=True))), enqueue)

    assert (first.status, again.status) == (200, 200)
    assert len(enqueue.sent) == 1


def test_a_batch_enqueues_each_message() -> None:
    enqueue = FakeEnqueue()
    payload = webhook(text_event("a", event_id="E1"), {"type": "follow"}, text_event("b", event_id="E2"))

    response = call(post(payload), enqueue)

    assert response.status == 200
    assert [e["event_id"] for e in enqueue.sent] == ["line:E1", "line:E2"]


# --- sender -------------------------------------------------------------------------------------


@pytest.fixture
def fake_line() -> Iterator[FakeLine]:
    with FakeLine() as fake:
        yield fake


def make_sender(fake: FakeLine, now: float = NOW + 5) -> LineSender:
    return LineSender(fake.base_url, fake.token, clock=lambda: now, timeout=2.0)


def target(chat_id: str = ALICE, **context: str) -> Target:
    return Target("line", chat_id, context=context)


def _assert_no_token(exc: BaseException, token: str) -> None:
    assert token not in str(exc)
    assert token not in repr(exc)
    assert exc.__cause__ is None


def test_a_fresh_reply_token_replies(fake_line: FakeLine) -> None:
    token = fake_line.issue_reply_token()

    message_id = make_sender(fake_line).send(target(reply_token=token, received_at=repr(NOW)), "hello")

    assert message_id == "100001"
    request = fake_line.requests[0]
    assert (request.http_method, request.path) == ("POST", "/v2/bot/message/reply")
    assert request.headers["authorization"] == f"Bearer {fake_line.token}"
    assert request.json == {"replyToken": token, "messages": [{"type": "text", "text": "hello"}]}


def test_the_second_chunk_is_pushed_without_wasting_a_reply(fake_line: FakeLine) -> None:
    sender = make_sender(fake_line)
    context = {"reply_token": fake_line.issue_reply_token(), "received_at": repr(NOW)}

    first = sender.send(target(**context), "part 1")
    second = sender.send(target(**context), "part 2")

    assert (first, second) == ("100001", "100002")
    assert fake_line.paths() == ["/v2/bot/message/reply", "/v2/bot/message/push"]
    assert fake_line.requests[1].json == {"to": ALICE, "messages": [{"type": "text", "text": "part 2"}]}


@pytest.mark.parametrize(
    "context",
    [
        {},
        {"reply_token": "r1"},
        {"reply_token": "r1", "received_at": "soon"},
        {"reply_token": "r1", "received_at": repr(NOW - REPLY_TOKEN_SECONDS)},
        {"reply_token": "r1", "received_at": repr(NOW + 60)},
    ],
)
def test_without_a_fresh_reply_token_the_message_is_pushed(fake_line: FakeLine, context: dict[str, str]) -> None:
    fake_line.reply_tokens.add("r1")
    assert make_sender(fake_line, now=NOW).send(target("C-group-1", **context), "hi") == "100001"
    assert fake_line.paths() == ["/v2/bot/message/push"]
    assert fake_line.requests[0].json["to"] == "C-group-1"


def test_a_refused_reply_token_falls_back_to_push_once(fake_line: FakeLine) -> None:
    # Given a token LINE no longer accepts (used by another worker, or expired early)
    message_id = make_sender(fake_line).send(target(reply_token="spent", received_at=repr(NOW)), "hi")

    assert message_id == "100001"
    assert fake_line.paths() == ["/v2/bot/message/reply", "/v2/bot/message/push"]
    assert fake_line.sent == [("push", {"to": ALICE, "messages": [{"type": "text", "text": "hi"}]})]


def test_a_reply_server_error_is_transient_and_not_pushed(fake_line: FakeLine) -> None:
    fake_line.answer_next(500, {"message": "Internal error"})
    with pytest.raises(TransientError):
        make_sender(fake_line).send(target(reply_token=fake_line.issue_reply_token(), received_at=repr(NOW)), "hi")
    assert fake_line.paths() == ["/v2/bot/message/reply"]


def test_429_with_retry_after_is_rate_limited(fake_line: FakeLine) -> None:
    fake_line.answer_next(
        429, {"message": "The API rate limit has been exceeded. Try again later."}, headers={"Retry-After": "3"}
    )
    with pytest.raises(RateLimited) as caught:
        make_sender(fake_line).send(target(), "hi")
    assert caught.value.retry_after == 3.0


def test_the_monthly_quota_is_permanent_not_a_rate_limit(fake_line: FakeLine) -> None:
    fake_line.answer_next(429, {"message": "You have reached your monthly limit."})
    with pytest.raises(PermanentError, match="monthly") as caught:
        make_sender(fake_line).send(target(), "hi")
    assert not isinstance(caught.value, TransientError)


@pytest.mark.parametrize(("status", "body"), [(500, {"message": "Internal error"}), (502, "bad gateway")])
def test_server_errors_are_transient(fake_line: FakeLine, status: int, body: Any) -> None:
    fake_line.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        make_sender(fake_line).send(target(), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_token(caught.value, fake_line.token)


@pytest.mark.parametrize("status", [403, 404])
def test_a_push_to_an_unreachable_chat_is_gone(fake_line: FakeLine, status: int) -> None:
    fake_line.answer_next(status, {"message": "Not found"})
    with pytest.raises(TargetGone):
        make_sender(fake_line).send(target(), "hi")


def test_a_bad_request_is_permanent_not_gone(fake_line: FakeLine) -> None:
    with pytest.raises(PermanentError, match="'to'") as caught:
        make_sender(fake_line).send(target(""), "hi")
    assert not isinstance(caught.value, TargetGone)


def test_a_wrong_token_is_permanent_and_never_echoed(fake_line: FakeLine) -> None:
    wrong = "wrong-line-token-that-must-stay-secret"
    sender = LineSender(fake_line.base_url, wrong)
    with pytest.raises(PermanentError) as caught:
        sender.send(target(), "hi")
    _assert_no_token(caught.value, wrong)
    assert wrong not in repr(sender)


@pytest.mark.parametrize("body", [{}, {"sentMessages": []}, {"sentMessages": [{"quoteToken": "q"}]}, "OK"])
def test_a_success_without_a_message_id_is_an_unknown_outcome(fake_line: FakeLine, body: Any) -> None:
    fake_line.answer_next(200, body)
    with pytest.raises(OutcomeUnknown, match="sentMessages"):
        make_sender(fake_line).send(target(), "hi")


def test_built_from_settings_like_production(fake_line: FakeLine) -> None:
    settings = make_settings({**ENV, "LINE_API_BASE_URL": fake_line.base_url})
    built = platforms.sender("line", settings, {"LINE_CHANNEL_ACCESS_TOKEN": fake_line.token})
    assert built is not None
    assert built.send(target(), "hi") == "100001"
    assert platforms.sender("line", settings, {}) is None
