"""Matrix application service: hs_token check, routes, transaction normalization, and the sender
against a fake homeserver."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
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
from hermes_gateway.platforms.matrix import MatrixInbound, MatrixSender, parse_event, route
from hermes_gateway.services.ingress import Accepted, Handshake, HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.matrix_server import FakeMatrix, limit_exceeded
from tests.fakes.services import FakeEnqueue, make_settings

# The spec's example registration tokens (PLATFORMS §10).
HS_TOKEN = "312df522183efd404ec1cd22d2ffa4bbc76a8c1ccf541dd692eef281356bb74e"
AS_TOKEN = "30c05ae90a248a4188e620216fa72e349803310ec83e2a77b34fe90be6081f46"
BOT = "@hermes:example.org"
ROOM = "!636q39766251:example.org"
NOW = 1_764_400_000.0
ENV = {"MATRIX_ENABLED": "true", "MATRIX_BOT_USER_ID": BOT}
TXN_PATH = "/webhooks/matrix/_matrix/app/v1/transactions/35"


def message_event(
    event_id: str = "$ev1:example.org",
    body: Any = "hello",
    sender: str = "@alice:example.org",
    *,
    msgtype: str = "m.text",
    content: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": event_id,
        "room_id": ROOM,
        "sender": sender,
        "origin_server_ts": 1_764_400_000_000,
        "content": {"msgtype": msgtype, "body": body, **(content or {})},
    }


def request(
    body: Any = None,
    *,
    method: str = "PUT",
    path: str = TXN_PATH,
    token: str | None = HS_TOKEN,
    query: Mapping[str, str] | None = None,
) -> HttpRequest:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    raw = b"" if body is None else json.dumps(body).encode()
    return HttpRequest(method=method, path=path, headers=headers, body=raw, query=dict(query or {}))


def adapter(secrets: Mapping[str, str] | None = None, env: Mapping[str, str] = ENV) -> MatrixInbound:
    secrets = {"MATRIX_HS_TOKEN": HS_TOKEN} if secrets is None else secrets
    built = platforms.adapter("matrix", make_settings(env), secrets)
    assert isinstance(built, MatrixInbound)
    return built


def parse_one(event: dict[str, Any]) -> InboundMessage | Ignored:
    return parse_event(event, bot_user_id=BOT, received_at=NOW)


def message(event: dict[str, Any]) -> InboundMessage:
    parsed = parse_one(event)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- verification ---------------------------------------------------------------------------------


def test_the_bearer_hs_token_is_accepted() -> None:
    adapter().verify(request({"events": []}))


def test_the_legacy_access_token_query_parameter_is_accepted() -> None:
    adapter().verify(request({"events": []}, token=None, query={"access_token": HS_TOKEN}))


def test_header_and_query_must_both_match_when_both_are_sent() -> None:
    adapter().verify(request({"events": []}, query={"access_token": HS_TOKEN}))
    with pytest.raises(Unauthorized, match="does not match"):
        adapter().verify(request({"events": []}, query={"access_token": "other"}))


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "no Authorization"),
        ({"authorization": f"Basic {HS_TOKEN}"}, "not a Bearer"),
        ({"authorization": "Bearer "}, "not a Bearer"),
        ({"authorization": "Bearer wrong"}, "does not match"),
        ({"authorization": f"Bearer {AS_TOKEN}"}, "does not match"),
        ({"authorization": f"Bearer {HS_TOKEN[:-1]}"}, "does not match"),
    ],
)
def test_missing_malformed_or_wrong_tokens_are_refused(headers: dict[str, str], reason: str) -> None:
    forged = HttpRequest(method="PUT", path=TXN_PATH, headers=headers, body=b'{"events": []}')
    with pytest.raises(Unauthorized, match=reason) as caught:
        adapter().verify(forged)
    assert HS_TOKEN not in str(caught.value)


@pytest.mark.parametrize("secrets", [{}, {"MATRIX_HS_TOKEN": ""}])
def test_everything_is_refused_without_a_configured_hs_token(secrets: dict[str, str]) -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        adapter(secrets).verify(request({"events": []}))


# --- routes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/webhooks/matrix/_matrix/app/v1/transactions/35", ("transaction", "35")),
        ("/webhooks/matrix/transactions/35", ("transaction", "35")),
        ("/prod/webhooks/matrix/_matrix/app/v1/transactions/35", ("transaction", "35")),
        ("/webhooks/matrix/_matrix/app/v1/ping", ("ping", None)),
        ("/webhooks/matrix/_matrix/app/v1/users/%40bob%3Aexample.org", ("query", "users")),
        ("/webhooks/matrix/users/%40bob%3Aexample.org", ("query", "users")),
        ("/webhooks/matrix/_matrix/app/v1/rooms/%23ops%3Aexample.org", ("query", "rooms")),
        ("/webhooks/matrix", ("unknown", None)),
        ("/webhooks/matrix/_matrix/app/v1/thirdparty/protocol/irc", ("unknown", None)),
        ("/webhooks/matrix/_matrix/app/v1/transactions", ("unknown", None)),
    ],
)
def test_routes_under_the_as_url(path: str, expected: tuple[str, str | None]) -> None:
    assert route(path) == expected


def test_ping_is_answered_with_an_empty_object() -> None:
    parsed = adapter().parse(
        request({"transaction_id": "mautrix-go_1"}, method="POST", path="/webhooks/matrix/_matrix/app/v1/ping"), NOW
    )
    assert parsed == Handshake(HttpResponse(200, {}))


@pytest.mark.parametrize("kind", ["users/%40bob%3Aexample.org", "rooms/%23ops%3Aexample.org"])
def test_user_and_room_queries_answer_not_found(kind: str) -> None:
    parsed = adapter().parse(request(method="GET", path=f"/webhooks/matrix/_matrix/app/v1/{kind}"), NOW)
    assert isinstance(parsed, Handshake)
    assert parsed.response.status == 404
    assert isinstance(parsed.response.body, dict) and parsed.response.body["errcode"] == "M_NOT_FOUND"


def test_unknown_routes_and_wrong_methods_answer_m_unrecognized() -> None:
    unknown = adapter().parse(request(method="GET", path="/webhooks/matrix/_matrix/app/v1/thirdparty/user"), NOW)
    wrong_method = adapter().parse(request({"events": []}, method="POST"), NOW)
    assert isinstance(unknown, Handshake) and isinstance(wrong_method, Handshake)
    assert (unknown.response.status, wrong_method.response.status) == (404, 405)
    for parsed in (unknown, wrong_method):
        assert isinstance(parsed.response.body, dict) and parsed.response.body["errcode"] == "M_UNRECOGNIZED"


@pytest.mark.parametrize("body", [[], {"ephemeral": []}, {"events": {"a": 1}}, "x"])
def test_a_transaction_without_an_events_list_is_a_bad_request(body: Any) -> None:
    with pytest.raises(BadRequest):
        adapter().parse(request(body), NOW)


def test_a_transaction_body_that_is_not_json_is_a_bad_request() -> None:
    broken = HttpRequest(method="PUT", path=TXN_PATH, headers={"authorization": f"Bearer {HS_TOKEN}"}, body=b"{")
    with pytest.raises(BadRequest):
        adapter().parse(broken, NOW)


def test_a_transaction_is_accepted_event_by_event_with_an_empty_200() -> None:
    body = {"events": [message_event("$a"), {"type": "m.room.member", "state_key": BOT}, message_event("$b")]}
    parsed = adapter().parse(request(body), NOW)

    assert isinstance(parsed, Accepted)
    assert parsed.ack == HttpResponse(200, {})
    assert [getattr(item, "event_id", item) for item in parsed.items] == [
        "matrix:$a",
        Ignored("unsupported_event"),
        "matrix:$b",
    ]


# --- normalization --------------------------------------------------------------------------------


def test_a_text_message_is_normalized_as_a_room_message() -> None:
    parsed = message(message_event())

    assert parsed.text == "hello"
    assert parsed.event_id == "matrix:$ev1:example.org"
    assert parsed.received_at == NOW
    source = parsed.source
    assert (source.platform, source.chat_type, source.chat_id) == ("matrix", "group", ROOM)
    assert (source.user_id, source.user_name) == ("@alice:example.org", "alice")
    assert source.message_id == "$ev1:example.org"
    assert source.scope_id == "example.org"
    assert source.thread_id is None
    assert parsed.facts == ()
    assert parsed.reply_context == {}


def test_a_thread_message_carries_the_thread_root_and_the_event_to_answer() -> None:
    relation = {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$previous"},
    }
    parsed = message(message_event("$ev2", "in thread", content={"m.relates_to": relation}))

    assert parsed.source.thread_id == "$root"
    assert parsed.reply_to_message_id is None  # a thread fallback is not a real reply
    assert parsed.reply_context == {"in_reply_to": "$ev2"}


def test_a_reply_keeps_the_replied_event_and_drops_the_quoted_fallback() -> None:
    body = "> <@bob:example.org> lunch?\n> at noon\n\nyes please"
    parsed = message(message_event(body=body, content={"m.relates_to": {"m.in_reply_to": {"event_id": "$q"}}}))
    assert parsed.reply_to_message_id == "$q"
    assert parsed.text == "yes please"


def test_a_room_version_12_id_has_no_server_scope() -> None:
    event = {**message_event(), "room_id": "!31hneApxJ_1o-63DmFrpeqnkFfWppnzWso1JvH3ogLM"}
    assert message(event).source.scope_id is None


@pytest.mark.parametrize(
    "content",
    [
        {"m.mentions": {"user_ids": [BOT]}},
        {"body": f"{BOT}: what's the plan?"},
    ],
)
def test_a_mention_of_the_bot_is_a_fact(content: dict[str, Any]) -> None:
    assert message(message_event(content=content)).facts == ("mentions_bot",)


def test_a_mention_of_someone_else_is_not() -> None:
    assert message(message_event(content={"m.mentions": {"user_ids": ["@bob:example.org"]}})).facts == ()


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (message_event(sender=BOT), "own_message"),
        (message_event(msgtype="m.notice"), "notice"),
        (message_event(msgtype="m.location"), "unsupported_msgtype"),
        (message_event(content={"m.relates_to": {"rel_type": "m.replace", "event_id": "$x"}}), "edited"),
        (message_event(body="   "), "no_text"),
        ({**message_event(), "type": "m.reaction"}, "unsupported_event"),
        ({**message_event(), "state_key": ""}, "unsupported_event"),
        ({**message_event(), "content": {}}, "unsupported_msgtype"),
        ({**message_event(), "content": "x"}, "malformed_event"),
        ({**message_event(), "event_id": 5}, "malformed_event"),
        ({**message_event(), "room_id": ""}, "malformed_event"),
        (message_event(body=None), "malformed_event"),
        ("event", "malformed_event"),
    ],
)
def test_events_the_gateway_does_not_answer_are_ignored(event: Any, reason: str) -> None:
    assert parse_one(event) == Ignored(reason)


def test_the_envelope_round_trips() -> None:
    parsed = message(message_event(content={"m.relates_to": {"rel_type": "m.thread", "event_id": "$root"}}))
    assert InboundMessage.from_dict(parsed.to_dict()) == parsed


# --- through the ingress --------------------------------------------------------------------------


def call(req: HttpRequest, enqueue: FakeEnqueue) -> HttpResponse:
    settings = make_settings(ENV)
    return handle_webhook(
        "matrix",
        req,
        settings=settings,
        adapters=platforms.adapters(settings, {"MATRIX_HS_TOKEN": HS_TOKEN}),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def test_a_good_transaction_is_acknowledged_after_one_envelope_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    response = call(request({"events": [message_event()]}), enqueue)

    assert (response.status, response.body) == (200, {})
    assert len(enqueue.sent) == 1
    assert enqueue.sent[0]["event_id"] == "matrix:$ev1:example.org"
    assert enqueue.sent[0]["session_key"].startswith(f"agent:main:matrix:group:{ROOM}")


def test_a_forged_transaction_is_401_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    response = call(request({"events": [message_event()]}, token="forged"), enqueue)

    assert response.status == 401
    assert enqueue.calls == 0


def test_a_retried_transaction_enqueues_each_event_once() -> None:
    # Given the homeserver lost our 200 and retries the same transaction
    enqueue = FakeEnqueue()
    body = {"events": [message_event("$a"), message_event("$b")]}

    first = call(request(body), enqueue)
    second = call(request(body), enqueue)

    assert (first.status, second.status) == (200, 200)
    assert [e["event_id"] for e in enqueue.sent] == ["matrix:$a", "matrix:$b"]
    assert enqueue.calls == 4


def test_a_ping_through_the_ingress_enqueues_nothing() -> None:
    enqueue = FakeEnqueue()
    response = call(request({}, method="POST", path="/webhooks/matrix/_matrix/app/v1/ping"), enqueue)
    assert (response.status, response.body) == (200, {})
    assert enqueue.calls == 0


# --- sender ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_matrix() -> Iterator[FakeMatrix]:
    with FakeMatrix(as_token=AS_TOKEN, bot_user_id=BOT, joined={ROOM}) as fake:
        yield fake


@pytest.fixture
def sender(fake_matrix: FakeMatrix) -> MatrixSender:
    return MatrixSender(fake_matrix.base_url, AS_TOKEN, BOT, timeout=2.0)


def _assert_no_token(exc: BaseException) -> None:
    assert AS_TOKEN not in str(exc)
    assert AS_TOKEN not in repr(exc)
    assert exc.__cause__ is None


def test_send_puts_an_m_text_event_as_the_bot_and_returns_the_event_id(
    fake_matrix: FakeMatrix, sender: MatrixSender
) -> None:
    first = sender.send(Target("matrix", ROOM), "hello")
    second = sender.send(Target("matrix", ROOM), "again")

    assert (first, second) == ("$1", "$2")
    request_ = fake_matrix.requests[0]
    assert request_.http_method == "PUT"
    assert request_.path.startswith("/_matrix/client/v3/rooms/%21636q39766251%3Aexample.org/send/m.room.message/")
    assert request_.room_id == ROOM
    assert request_.headers["authorization"] == f"Bearer {AS_TOKEN}"
    assert request_.query == {"user_id": BOT}
    assert request_.json == {"msgtype": "m.text", "body": "hello"}
    assert fake_matrix.requests[0].txn_id != fake_matrix.requests[1].txn_id


def test_a_threaded_reply_relates_to_the_thread_and_falls_back_to_the_last_event(
    fake_matrix: FakeMatrix, sender: MatrixSender
) -> None:
    sender.send(Target("matrix", ROOM, "$root", {"in_reply_to": "$ev2"}), "answer")
    sender.send(Target("matrix", ROOM, "$root"), "later")

    assert fake_matrix.requests[0].json["m.relates_to"] == {
        "rel_type": "m.thread",
        "event_id": "$root",
        "is_falling_back": True,
        "m.in_reply_to": {"event_id": "$ev2"},
    }
    assert fake_matrix.requests[1].json["m.relates_to"]["m.in_reply_to"] == {"event_id": "$root"}


def test_without_a_bot_user_the_as_sender_localpart_is_used(fake_matrix: FakeMatrix) -> None:
    MatrixSender(fake_matrix.base_url, AS_TOKEN).send(Target("matrix", ROOM), "hi")
    assert fake_matrix.requests[0].query == {}


@pytest.mark.parametrize(
    ("body", "headers", "expected"),
    [
        (limit_exceeded(2500), {}, 2.5),
        ({"errcode": "M_LIMIT_EXCEEDED"}, {"Retry-After": "7"}, 7.0),
        (limit_exceeded(2500), {"Retry-After": "3"}, 3.0),
    ],
)
def test_rate_limits_honour_retry_after(
    fake_matrix: FakeMatrix, sender: MatrixSender, body: dict[str, Any], headers: dict[str, str], expected: float
) -> None:
    fake_matrix.answer_next(429, body, headers=headers)
    with pytest.raises(RateLimited) as caught:
        sender.send(Target("matrix", ROOM), "hi")
    assert caught.value.retry_after == expected
    _assert_no_token(caught.value)


@pytest.mark.parametrize("status", [500, 502])
def test_server_errors_are_transient(fake_matrix: FakeMatrix, sender: MatrixSender, status: int) -> None:
    fake_matrix.answer_next(status, {"errcode": "M_UNKNOWN", "error": "boom"})
    with pytest.raises(TransientError) as caught:
        sender.send(Target("matrix", ROOM), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_token(caught.value)


def test_a_room_the_bot_is_not_in_is_gone(sender: MatrixSender) -> None:
    with pytest.raises(TargetGone, match="M_FORBIDDEN") as caught:
        sender.send(Target("matrix", "!elsewhere:example.org"), "hi")
    _assert_no_token(caught.value)


def test_an_unknown_room_is_gone(fake_matrix: FakeMatrix, sender: MatrixSender) -> None:
    fake_matrix.answer_next(404, {"errcode": "M_NOT_FOUND", "error": "Unknown room"})
    with pytest.raises(TargetGone):
        sender.send(Target("matrix", ROOM), "hi")


def test_a_wrong_as_token_is_permanent_and_never_echoed(fake_matrix: FakeMatrix) -> None:
    wrong = "wrong-as-token-that-must-stay-secret"
    with pytest.raises(PermanentError) as caught:
        MatrixSender(fake_matrix.base_url, wrong, BOT).send(Target("matrix", ROOM), "hi")
    assert not isinstance(caught.value, TargetGone)
    assert wrong not in str(caught.value)


def test_a_token_echoed_by_the_server_is_scrubbed(fake_matrix: FakeMatrix, sender: MatrixSender) -> None:
    fake_matrix.answer_next(400, {"errcode": "M_BAD_JSON", "error": f"bad token {AS_TOKEN}"})
    with pytest.raises(PermanentError) as caught:
        sender.send(Target("matrix", ROOM), "hi")
    _assert_no_token(caught.value)


def test_a_success_without_an_event_id_is_permanent(fake_matrix: FakeMatrix, sender: MatrixSender) -> None:
    fake_matrix.answer_next(200, {})
    with pytest.raises(OutcomeUnknown, match="without an event_id"):
        sender.send(Target("matrix", ROOM), "hi")


def test_build_sender_needs_the_as_token_and_the_homeserver_url(fake_matrix: FakeMatrix) -> None:
    env = {**ENV, "MATRIX_API_BASE_URL": fake_matrix.base_url}
    assert platforms.sender("matrix", make_settings(env), {}) is None
    assert platforms.sender("matrix", make_settings(ENV), {"MATRIX_AS_TOKEN": AS_TOKEN}) is None
    built = platforms.sender("matrix", make_settings(env), {"MATRIX_AS_TOKEN": AS_TOKEN})
    assert built is not None
    assert built.send(Target("matrix", ROOM), "wired") == "$1"
    assert fake_matrix.requests[0].query == {"user_id": BOT}
    assert AS_TOKEN not in repr(built)


def test_every_try_of_one_outbox_chunk_has_one_transaction_id(sender: MatrixSender, fake_matrix: FakeMatrix) -> None:
    # The outbox sends a chunk again after a timeout; the homeserver may have taken the first try,
    # and answers a transaction id it has seen with that event instead of posting again
    chunk = Target("matrix", ROOM, delivery_id="turn-1#1")
    first = sender.send(chunk, "answer")
    assert sender.send(chunk, "answer") == first
    assert [event["body"] for event in fake_matrix.sent] == ["answer"]
    assert sender.send(Target("matrix", ROOM, delivery_id="turn-1#2"), "more") != first
    # sends with no outbox row (a streamed answer's first post) each get a fresh transaction id
    assert sender.send(Target("matrix", ROOM), "x") != sender.send(Target("matrix", ROOM), "x")
    assert len(fake_matrix.sent) == 4


def test_each_edit_of_a_chunk_is_an_event_of_its_own(sender: MatrixSender, fake_matrix: FakeMatrix) -> None:
    chunk = Target("matrix", ROOM, delivery_id="turn-1#1")
    event_id = sender.send(chunk, "ans")
    sender.edit(chunk, event_id, "answer")
    sender.edit(chunk, event_id, "answer!")
    assert [event["body"] for event in fake_matrix.sent] == ["ans", "* answer", "* answer!"]
