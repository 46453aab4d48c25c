"""Mattermost outgoing webhooks: the body token (form and JSON bodies), post normalization, the
ingress path with Mattermost's empty acknowledgement, and REST posts against a fake server."""

from __future__ import annotations

import json
import urllib.parse
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
from hermes_gateway.platforms.mattermost import (
    MattermostSender,
    parse_post,
    read_fields,
    strip_trigger_word,
    verify_token,
)
from hermes_gateway.services.ingress import Accepted, HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.mattermost_server import (
    ARCHIVED,
    FORBIDDEN,
    RATE_LIMITED,
    FakeMattermost,
    app_error,
    rate_limit_headers,
)
from tests.fakes.services import FakeEnqueue, make_settings

TOKEN = "hookt0ken5ecret0000000000a"
NOW = 1_764_400_000.0
POST_ID = "p1a2b3c4d5e6f7g8h9i0j1k2l3"
CHANNEL_ID = "c1a2b3c4d5e6f7g8h9i0j1k2l3"
TEAM_ID = "t1a2b3c4d5e6f7g8h9i0j1k2l3"
ALICE_ID = "u1a2b3c4d5e6f7g8h9i0j1k2l3"
BOT_ID = "b1a2b3c4d5e6f7g8h9i0j1k2l3"


def fields(**changes: Any) -> dict[str, Any]:
    """The payload Mattermost sends for Alice's post in town-square (form values, as strings)."""
    base: dict[str, Any] = {
        "token": TOKEN,
        "team_id": TEAM_ID,
        "team_domain": "acme",
        "channel_id": CHANNEL_ID,
        "channel_name": "town-square",
        "timestamp": "1764400000",
        "user_id": ALICE_ID,
        "user_name": "alice",
        "post_id": POST_ID,
        "text": "hermes what is the status?",
        "trigger_word": "hermes",
        "file_ids": "",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def form_request(payload: dict[str, Any], *, raw: bytes | None = None) -> HttpRequest:
    body = raw if raw is not None else urllib.parse.urlencode(payload).encode()
    headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
    return HttpRequest("POST", "/webhooks/mattermost", headers, body)


def json_request(payload: Any, *, raw: bytes | None = None) -> HttpRequest:
    body = raw if raw is not None else json.dumps(payload).encode()
    return HttpRequest("POST", "/webhooks/mattermost", {"content-type": "application/json"}, body)


def json_fields(**changes: Any) -> dict[str, Any]:
    """As Mattermost's JSON encoder sends it: the timestamp is the post's create_at in milliseconds."""
    return fields(**{"timestamp": 1_764_400_000_123, **changes})


def parse(payload: dict[str, Any], bot_user_id: str = "") -> InboundMessage | Ignored:
    return parse_post(payload, received_at=NOW, bot_user_id=bot_user_id)


def parse_message(payload: dict[str, Any]) -> InboundMessage:
    parsed = parse(payload)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- verification ---------------------------------------------------------------------------------


@pytest.mark.parametrize("request_of", [lambda: form_request(fields()), lambda: json_request(json_fields())])
def test_the_configured_token_is_accepted_in_either_encoding(request_of: Any) -> None:
    verify_token(request_of(), TOKEN)


@pytest.mark.parametrize(
    ("request_of", "reason"),
    [
        (lambda: form_request(fields(token="x" * 26)), "does not match"),
        (lambda: form_request(fields(token=TOKEN[:-1])), "does not match"),
        (lambda: form_request(fields(token=TOKEN + "é")), "does not match"),
        (lambda: form_request(fields(token=None)), "missing"),
        (lambda: form_request(fields(token="")), "missing"),
        (lambda: json_request(json_fields(token=None)), "missing"),
        (lambda: json_request(json_fields(token=123)), "missing"),
        (lambda: json_request(json_fields(token=[TOKEN])), "missing"),
    ],
)
def test_a_wrong_or_missing_token_is_refused(request_of: Any, reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason) as caught:
        verify_token(request_of(), TOKEN)
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize(
    "request_of",
    [
        lambda: form_request({}, raw=b"token=" + TOKEN.encode() + b"&text=\xff\xfe"),
        lambda: form_request({}, raw=b"token=" + TOKEN.encode() + b"&text=%FF"),
        lambda: form_request({}, raw=b"token=" + TOKEN.encode() + b"&&text=hi"),
        lambda: form_request({}, raw=b"token=" + TOKEN.encode() + b"&token=" + TOKEN.encode()),
        lambda: form_request({}, raw=b"&".join(b"f%d=1" % i for i in range(100)) + b"&token=" + TOKEN.encode()),
        lambda: json_request(None, raw=b"{not json"),
        lambda: json_request(None, raw=b'["token"]'),
        lambda: json_request(None, raw=b"[" * 100_000),
    ],
)
def test_an_unreadable_body_is_unauthorized_because_it_carries_no_checkable_token(request_of: Any) -> None:
    # A body that cannot be parsed proves nothing about its sender: 401, and nothing parsed further
    with pytest.raises(Unauthorized, match="unreadable"):
        verify_token(request_of(), TOKEN)


@pytest.mark.parametrize("expected", [None, ""])
def test_without_a_configured_token_everything_is_refused(expected: str | None) -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        verify_token(form_request(fields(token="")), expected)


def test_json_is_chosen_by_the_content_type() -> None:
    # A form body labelled JSON is not read as a form (and vice versa)
    with pytest.raises(BadRequest):
        read_fields(json_request(None, raw=urllib.parse.urlencode(fields()).encode()))
    assert read_fields(form_request(fields()))["token"] == TOKEN


# --- normalization --------------------------------------------------------------------------------


def test_a_triggered_post_becomes_a_group_message() -> None:
    message = parse_message(fields())

    assert message.text == "what is the status?"
    assert message.event_id == f"mattermost:{POST_ID}"
    assert message.received_at == NOW
    assert message.facts == ("mentions_bot",)
    assert message.extra == {"sent_at": 1_764_400_000.0}
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id, source.chat_name) == (
        "mattermost",
        "group",
        CHANNEL_ID,
        "town-square",
    )
    assert (source.user_id, source.user_name, source.scope_id, source.message_id) == (
        ALICE_ID,
        "alice",
        TEAM_ID,
        POST_ID,
    )
    assert source.thread_id is None
    assert source.description == "group: town-square"


def test_json_payload_normalizes_the_same_with_a_millisecond_timestamp() -> None:
    from_form = parse_message(fields())
    from_json = parse_message(json_fields())
    assert from_json.source == from_form.source
    assert from_json.text == from_form.text
    assert from_json.extra == {"sent_at": 1_764_400_000.123}


def test_a_channel_webhook_without_trigger_word_keeps_the_text() -> None:
    message = parse_message(fields(text="good morning", trigger_word=""))
    assert message.text == "good morning"
    assert message.facts == ()


@pytest.mark.parametrize(
    ("text", "trigger", "expected"),
    [
        ("hermes what now", "hermes", "what now"),
        ("  Hermes, what now", "hermes", "what now"),
        ("hermes: what now", "hermes", "what now"),
        ("#buildnow please", "#build", "please"),  # a "starts with" webhook: the whole first word goes
        ("hermes\nline two", "hermes", "line two"),
        ("ask hermes later", "hermes", "ask hermes later"),  # not the first word: kept
        ("hermes", "hermes", ""),
        ("", "hermes", ""),
        ("what now", "", "what now"),
    ],
)
def test_a_leading_trigger_word_is_stripped(text: str, trigger: str, expected: str) -> None:
    assert strip_trigger_word(text, trigger) == expected


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (fields(text="hermes", trigger_word="hermes"), "no_text"),
        (fields(text="   "), "no_text"),
    ],
)
def test_posts_without_text_are_ignored(payload: dict[str, Any], reason: str) -> None:
    assert parse(payload) == Ignored(reason)


def test_the_bots_own_posts_are_ignored_when_its_user_id_is_known() -> None:
    assert parse(fields(user_id=BOT_ID, text="hermes my reply"), bot_user_id=BOT_ID) == Ignored("own_message")
    assert isinstance(parse(fields(), bot_user_id=BOT_ID), InboundMessage)


@pytest.mark.parametrize(
    "payload",
    [
        fields(post_id=None),
        fields(post_id=""),
        fields(post_id="../../etc"),
        fields(channel_id=None),
        fields(channel_id="c" * 65),
        fields(user_id=None),
        fields(team_id="t:1"),
        json_fields(post_id=12345),
        json_fields(text=["hi"]),
        json_fields(user_name={"name": "alice"}),
    ],
)
def test_malformed_posts_are_bad_requests(payload: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        parse(payload)


def test_an_odd_timestamp_is_left_out() -> None:
    assert parse_message(fields(timestamp="soon")).extra == {}
    assert parse_message(json_fields(timestamp=True)).extra == {}


def test_round_trip_through_the_queue_envelope() -> None:
    message = parse_message(fields())
    assert InboundMessage.from_dict(message.to_dict()) == message


def test_the_adapter_acknowledges_with_an_empty_object() -> None:
    settings = make_settings({"MATTERMOST_ENABLED": "true"})
    adapter = platforms.adapter("mattermost", settings, {"MATTERMOST_OUTGOING_TOKEN": TOKEN})

    parsed = adapter.parse(form_request(fields()), NOW)

    assert isinstance(parsed, Accepted)
    assert parsed.ack == HttpResponse(200, {})
    assert [m.event_id for m in parsed.items if isinstance(m, InboundMessage)] == [f"mattermost:{POST_ID}"]


# --- through the ingress --------------------------------------------------------------------------


def call(request: HttpRequest, enqueue: FakeEnqueue, secrets: dict[str, str] | None = None) -> HttpResponse:
    settings = make_settings({"MATTERMOST_ENABLED": "true"})
    return handle_webhook(
        "mattermost",
        request,
        settings=settings,
        adapters=platforms.adapters(settings, {"MATTERMOST_OUTGOING_TOKEN": TOKEN} if secrets is None else secrets),
        enqueue_once=enqueue,
        received_at=NOW,
    )


@pytest.mark.parametrize("request_of", [lambda: form_request(fields()), lambda: json_request(json_fields())])
def test_a_good_post_is_enqueued_once_and_answered_with_nothing_to_post(request_of: Any) -> None:
    enqueue = FakeEnqueue()

    response = call(request_of(), enqueue)

    # Mattermost would post an answer's "text" as a reply; an empty object posts nothing
    assert response == HttpResponse(200, {})
    assert len(enqueue.sent) == 1
    assert enqueue.sent[0]["event_id"] == f"mattermost:{POST_ID}"
    assert enqueue.sent[0]["session_key"] == f"agent:main:mattermost:group:{CHANNEL_ID}:{ALICE_ID}"


def test_a_forged_post_is_401_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    response = call(form_request(fields(token="forged-token-value-000000")), enqueue)

    assert response.status == 401
    assert "text" not in response.body
    assert enqueue.calls == 0


def test_an_unreadable_body_is_401() -> None:
    enqueue = FakeEnqueue()
    response = call(json_request(None, raw=b"{broken"), enqueue)
    assert response.status == 401
    assert enqueue.calls == 0


def test_without_a_token_configured_everything_is_401() -> None:
    enqueue = FakeEnqueue()
    response = call(form_request(fields()), enqueue, secrets={})
    assert response.status == 401
    assert enqueue.calls == 0


def test_a_duplicate_post_is_not_enqueued_again() -> None:
    enqueue = FakeEnqueue()

    first = call(form_request(fields()), enqueue)
    second = call(json_request(json_fields()), enqueue)

    assert first == second == HttpResponse(200, {})
    assert len(enqueue.sent) == 1


def test_a_malformed_authentic_post_is_400() -> None:
    enqueue = FakeEnqueue()
    response = call(form_request(fields(post_id=None)), enqueue)
    assert response.status == 400
    assert "text" not in response.body
    assert enqueue.calls == 0


def test_a_post_without_text_is_acknowledged_and_not_enqueued() -> None:
    enqueue = FakeEnqueue()
    response = call(form_request(fields(text="hermes")), enqueue)
    assert response == HttpResponse(200, {})
    assert enqueue.calls == 0


# --- sender ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_mattermost() -> Iterator[FakeMattermost]:
    with FakeMattermost() as fake:
        yield fake


@pytest.fixture
def sender(fake_mattermost: FakeMattermost) -> MattermostSender:
    return MattermostSender(fake_mattermost.base_url, fake_mattermost.token, timeout=2.0)


def _assert_no_token(exc: BaseException, token: str) -> None:
    assert token not in str(exc)
    assert token not in repr(exc)
    assert exc.__cause__ is None


def test_the_catalog_sender_creates_a_post_and_returns_its_id(fake_mattermost: FakeMattermost) -> None:
    settings = make_settings({"MATTERMOST_ENABLED": "true", "MATTERMOST_API_BASE_URL": fake_mattermost.base_url})
    built = platforms.sender("mattermost", settings, {"MATTERMOST_BOT_TOKEN": fake_mattermost.token})
    assert built is not None

    first = built.send(Target("mattermost", CHANNEL_ID), "hello")
    second = built.send(Target("mattermost", CHANNEL_ID, thread_id=POST_ID), "in thread")

    assert (first, second) == ("post" + "0" * 21 + "1", "post" + "0" * 21 + "2")
    request = fake_mattermost.requests[0]
    assert (request.http_method, request.path) == ("POST", "/api/v4/posts")
    assert request.headers["authorization"] == f"Bearer {fake_mattermost.token}"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {"channel_id": CHANNEL_ID, "message": "hello"}
    assert fake_mattermost.requests[1].json == {"channel_id": CHANNEL_ID, "message": "in thread", "root_id": POST_ID}


def test_a_server_url_given_with_the_api_path_still_works(fake_mattermost: FakeMattermost) -> None:
    sender = MattermostSender(fake_mattermost.base_url + "/api/v4/", fake_mattermost.token, timeout=2.0)
    assert sender.send(Target("mattermost", CHANNEL_ID), "hi")
    assert fake_mattermost.requests[0].path == "/api/v4/posts"


@pytest.mark.parametrize(
    ("env", "secrets"),
    [
        ({"MATTERMOST_API_BASE_URL": "https://chat.example.com"}, {}),
        ({}, {"MATTERMOST_BOT_TOKEN": "some-token"}),
    ],
)
def test_no_sender_without_a_token_or_a_server_url(env: dict[str, str], secrets: dict[str, str]) -> None:
    settings = make_settings({"MATTERMOST_ENABLED": "true", **env})
    assert platforms.sender("mattermost", settings, secrets) is None


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (rate_limit_headers(4), 4.0),
        ({"X-RateLimit-Reset": "9"}, 9.0),
        ({}, 1.0),
    ],
)
def test_429_is_rate_limited_with_the_limiters_wait(
    fake_mattermost: FakeMattermost, sender: MattermostSender, headers: dict[str, str], expected: float
) -> None:
    fake_mattermost.answer_next(429, RATE_LIMITED, headers=headers)

    with pytest.raises(RateLimited) as caught:
        sender.send(Target("mattermost", CHANNEL_ID), "hi")

    assert caught.value.retry_after == expected
    _assert_no_token(caught.value, fake_mattermost.token)


@pytest.mark.parametrize(("status", "body"), [(500, {"id": "app_error", "message": "x"}), (502, "<html>"), (503, b"")])
def test_server_errors_are_transient(
    fake_mattermost: FakeMattermost, sender: MattermostSender, status: int, body: Any
) -> None:
    fake_mattermost.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender.send(Target("mattermost", CHANNEL_ID), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_token(caught.value, fake_mattermost.token)


def test_every_try_of_one_outbox_chunk_carries_one_pending_post_id(
    fake_mattermost: FakeMattermost, sender: MattermostSender
) -> None:
    # Mattermost answers a pending_post_id it saw in the last 30 s with the post it created then,
    # so the outbox's retry after a timeout the server had taken posts nothing new
    chunk = Target("mattermost", CHANNEL_ID, delivery_id="turn-1#1")
    first = sender.send(chunk, "answer")
    assert sender.send(chunk, "answer") == first
    assert [post["message"] for post in fake_mattermost.sent] == ["answer"]
    keys = [request.json.get("pending_post_id") for request in fake_mattermost.requests]
    assert keys[0] == keys[1] and isinstance(keys[0], str) and 0 < len(keys[0]) <= 64
    assert "turn-1" not in keys[0]  # derived from the row, not the row's id itself
    assert sender.send(Target("mattermost", CHANNEL_ID, delivery_id="turn-1#2"), "more") != first
    # a send with no outbox row (a stream's first post) has no key
    sender.send(Target("mattermost", CHANNEL_ID), "plain")
    assert "pending_post_id" not in fake_mattermost.requests[-1].json
    assert [post["message"] for post in fake_mattermost.sent] == ["answer", "more", "plain"]


def test_a_repeat_while_the_first_is_still_being_saved_is_retried(
    fake_mattermost: FakeMattermost, sender: MattermostSender
) -> None:
    # the server's answer to a pending_post_id whose post it has not saved yet
    pending = app_error("api.post.deduplicate_create_post.pending", "Post rejected: a post is pending.", 500)
    fake_mattermost.answer_next(500, pending)
    with pytest.raises(TransientError, match="500"):
        sender.send(Target("mattermost", CHANNEL_ID, delivery_id="turn-1#1"), "answer")


def test_a_channel_the_bot_cannot_post_in_is_target_gone(
    fake_mattermost: FakeMattermost, sender: MattermostSender
) -> None:
    fake_mattermost.forbidden_channels.add(CHANNEL_ID)
    with pytest.raises(TargetGone, match="403"):
        sender.send(Target("mattermost", CHANNEL_ID), "hi")


def test_an_archived_channel_is_target_gone(fake_mattermost: FakeMattermost, sender: MattermostSender) -> None:
    fake_mattermost.archived_channels.add(CHANNEL_ID)
    with pytest.raises(TargetGone, match="archived"):
        sender.send(Target("mattermost", CHANNEL_ID), "hi")


@pytest.mark.parametrize(("status", "body"), [(404, FORBIDDEN), (403, ARCHIVED)])
def test_404_and_403_are_target_gone_whatever_the_body(
    fake_mattermost: FakeMattermost, sender: MattermostSender, status: int, body: Any
) -> None:
    fake_mattermost.answer_next(status, body)
    with pytest.raises(TargetGone):
        sender.send(Target("mattermost", CHANNEL_ID), "hi")


def test_a_wrong_token_is_permanent_and_never_echoed(fake_mattermost: FakeMattermost) -> None:
    wrong = "wrongmattermosttoken000000"
    with pytest.raises(PermanentError, match="401") as caught:
        MattermostSender(fake_mattermost.base_url, wrong, timeout=2.0).send(Target("mattermost", CHANNEL_ID), "hi")
    assert not isinstance(caught.value, TargetGone)
    _assert_no_token(caught.value, wrong)


def test_a_token_echoed_in_an_answer_is_scrubbed(fake_mattermost: FakeMattermost, sender: MattermostSender) -> None:
    fake_mattermost.answer_next(400, {"id": "x", "message": f"bad token {fake_mattermost.token}"})
    with pytest.raises(PermanentError) as caught:
        sender.send(Target("mattermost", CHANNEL_ID), "hi")
    _assert_no_token(caught.value, fake_mattermost.token)


@pytest.mark.parametrize("body", [{"channel_id": CHANNEL_ID}, {"id": ""}, "created"])
def test_a_success_without_a_post_id_is_not_reported_as_sent(
    fake_mattermost: FakeMattermost, sender: MattermostSender, body: Any
) -> None:
    fake_mattermost.answer_next(201, body)
    with pytest.raises(OutcomeUnknown, match="without a post id"):
        sender.send(Target("mattermost", CHANNEL_ID), "hi")


def test_connection_refused_is_transient(fake_mattermost: FakeMattermost) -> None:
    url, token = fake_mattermost.base_url, fake_mattermost.token
    fake_mattermost.stop()
    with pytest.raises(TransientError) as caught:
        MattermostSender(url, token, timeout=1.0).send(Target("mattermost", CHANNEL_ID), "hi")
    _assert_no_token(caught.value, token)
