"""Google Chat: bearer-token verification (project-number and endpoint-URL audiences), event
normalization (classic and add-on shapes), the webhook path with slash-bearing ids, and the sender
against a fake Google on loopback. No test vectors are published (PLATFORMS §7): tokens are signed
with RSA keys generated here and served as Google's signing keys."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import (
    BadRequest,
    ConfigError,
    OutcomeUnknown,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms import google_chat
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.google_chat import (
    CHAT_CERTS_URL,
    GOOGLE_OIDC_CERTS_URL,
    GoogleChatInbound,
    GoogleChatSender,
    ServiceAccount,
    key_source,
    parse_event,
)
from hermes_gateway.services.ingress import HttpRequest, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.google_server import SERVICE_ACCOUNT_EMAIL, FakeGoogle
from tests.fakes.jwt import NOW, Clock, SigningKeyPair, with_changes
from tests.fakes.services import FakeEnqueue, make_settings

PROJECT = "123456789012"
ENDPOINT = "https://abc123.execute-api.eu-west-1.amazonaws.com/webhooks/google_chat"
SPACE = "spaces/AAAAbbbb123"
THREAD = f"{SPACE}/threads/tTtT-9_x"
ALICE = {"name": "users/111222333", "displayName": "Alice Liddell", "type": "HUMAN", "email": "alice@example.com"}
BOT = {"name": "users/app", "displayName": "Hermes", "type": "BOT"}


@pytest.fixture(scope="module")
def key() -> SigningKeyPair:
    return SigningKeyPair("chat-key-1")


@pytest.fixture(scope="module")
def forger() -> SigningKeyPair:
    return SigningKeyPair("chat-key-1")


@pytest.fixture
def fake_google(key: SigningKeyPair) -> Iterator[FakeGoogle]:
    with FakeGoogle(keys=[key.jwk(alg="RS256")]) as fake:
        yield fake


def env(fake: FakeGoogle, audience: str = PROJECT, **extra: str) -> dict[str, str]:
    return {
        "GOOGLE_CHAT_ENABLED": "true",
        "GOOGLE_CHAT_AUDIENCE": audience,
        "GOOGLE_CHAT_CERTS_URL": fake.certs_url,
        "GOOGLE_CHAT_API_BASE_URL": fake.api_base_url,
        **extra,
    }


def inbound(fake: FakeGoogle, audience: str = PROJECT) -> GoogleChatInbound:
    built = platforms.adapter("google_chat", make_settings(env(fake, audience)), {}, Clock())
    assert isinstance(built, GoogleChatInbound)
    return built


def chat_claims(**changes: Any) -> dict[str, Any]:
    """The project-number token: a JWT issued by Chat's system service account."""
    base = {"iss": "chat@system.gserviceaccount.com", "aud": PROJECT, "iat": int(NOW) - 10, "exp": int(NOW) + 3600}
    return with_changes(base, **changes)


def oidc_claims(**changes: Any) -> dict[str, Any]:
    """The endpoint-URL token: a Google OIDC ID token for Chat's service account."""
    base = {
        "iss": "https://accounts.google.com",
        "aud": ENDPOINT,
        "azp": "1000000000000000000",
        "sub": "1000000000000000000",
        "email": "chat@system.gserviceaccount.com",
        "email_verified": True,
        "iat": int(NOW) - 10,
        "exp": int(NOW) + 3600,
    }
    return with_changes(base, **changes)


def event(**message_changes: Any) -> dict[str, Any]:
    """A classic MESSAGE event: Alice @mentions the app at the top level of a space."""
    message: dict[str, Any] = {
        "name": f"{SPACE}/messages/msg-1.msg-1",
        "sender": ALICE,
        "createTime": "2025-11-29T06:26:40.000000Z",
        "text": "@Hermes what is the status?",
        "argumentText": " what is the status?",
        "thread": {"name": f"{SPACE}/threads/msg-1"},
        "threadReply": False,
        "annotations": [
            {"type": "USER_MENTION", "startIndex": 0, "length": 7, "userMention": {"user": BOT, "type": "MENTION"}}
        ],
        "space": {"name": SPACE, "type": "ROOM", "spaceType": "SPACE", "displayName": "Ops"},
    }
    message.update(message_changes)
    body = {
        "type": "MESSAGE",
        "eventTime": "2025-11-29T06:26:40.000000Z",
        "space": {"name": SPACE, "type": "ROOM", "spaceType": "SPACE", "displayName": "Ops"},
        "message": message,
        "user": ALICE,
    }
    return copy.deepcopy(body)  # tests change events in place; the shared dicts stay as they are


def dm_event(**message_changes: Any) -> dict[str, Any]:
    body = event(argumentText="hello", text="hello", annotations=[], **message_changes)
    dm = {"name": "spaces/DmDmDm42", "type": "DM", "spaceType": "DIRECT_MESSAGE", "singleUserBotDm": True}
    body["space"] = dm
    body["message"]["space"] = dm
    body["message"]["name"] = "spaces/DmDmDm42/messages/dm-1"
    body["message"]["thread"] = {"name": "spaces/DmDmDm42/threads/dm-1"}
    return body


def addon_event(payload_key: str = "messagePayload", **payload: Any) -> dict[str, Any]:
    classic = event()
    chat: dict[str, Any] = {"user": ALICE, "eventTime": classic["eventTime"]}
    chat[payload_key] = payload or {"space": classic["space"], "message": classic["message"]}
    return {
        "commonEventObject": {"hostApp": "CHAT", "platform": "WEB"},
        "authorizationEventObject": {"systemIdToken": "not-read"},
        "chat": chat,
    }


def request(body: Any, token: str | None) -> HttpRequest:
    headers = {"content-type": "application/json", "user-agent": "Google-Dynamite"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return HttpRequest("POST", "/webhooks/google_chat", headers, json.dumps(body).encode())


def parse(body: Any) -> InboundMessage:
    parsed = parse_event(body, received_at=NOW)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- verification: project-number audience -------------------------------------------------------


def test_a_chat_token_for_the_project_number_is_accepted(fake_google: FakeGoogle, key: SigningKeyPair) -> None:
    inbound(fake_google).verify(request(event(), key.sign(chat_claims())))


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        (chat_claims(aud="999999999999"), "wrong audience"),
        (chat_claims(aud=ENDPOINT), "wrong audience"),
        (chat_claims(iss="attacker@evil.iam.gserviceaccount.com"), "wrong issuer"),
        (chat_claims(iss="https://accounts.google.com"), "wrong issuer"),
        (chat_claims(exp=int(NOW) - 301), "expired"),
        (chat_claims(exp=None), "no expiry"),
    ],
)
def test_project_number_tokens_with_wrong_claims_are_refused(
    fake_google: FakeGoogle, key: SigningKeyPair, claims: dict[str, Any], reason: str
) -> None:
    with pytest.raises(Unauthorized, match=reason):
        inbound(fake_google).verify(request(event(), key.sign(claims)))


def test_a_token_signed_by_another_key_is_refused(fake_google: FakeGoogle, forger: SigningKeyPair) -> None:
    with pytest.raises(Unauthorized, match="signature"):
        inbound(fake_google).verify(request(event(), forger.sign(chat_claims())))


@pytest.mark.parametrize("authorization", [None, "Basic eDp5", "Bearer", "Bearer AbCdEf123456"])
def test_missing_or_malformed_authorization_is_refused(fake_google: FakeGoogle, authorization: str | None) -> None:
    headers = {"authorization": authorization} if authorization is not None else {}
    with pytest.raises(Unauthorized):
        inbound(fake_google).verify(HttpRequest("POST", "/webhooks/google_chat", headers, b"{}"))


def test_without_an_audience_everything_is_refused(fake_google: FakeGoogle, key: SigningKeyPair) -> None:
    adapter = inbound(fake_google, audience="")
    with pytest.raises(Unauthorized, match="not configured"):
        adapter.verify(request(event(), key.sign(chat_claims(aud=""))))
    assert fake_google.requests == []


# --- verification: endpoint-URL audience (OIDC ID token) -----------------------------------------


def test_an_oidc_id_token_for_the_endpoint_is_accepted(fake_google: FakeGoogle, key: SigningKeyPair) -> None:
    adapter = inbound(fake_google, audience=ENDPOINT)
    adapter.verify(request(event(), key.sign(oidc_claims())))
    adapter.verify(request(event(), key.sign(oidc_claims(iss="accounts.google.com"))))


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        (oidc_claims(email="someone-else@project.iam.gserviceaccount.com"), "service account"),
        (oidc_claims(email="service-123456789012@gcp-sa-gsuiteaddons.iam.gserviceaccount.com"), "service account"),
        (oidc_claims(email_verified=False), "service account"),
        (oidc_claims(email=None), "service account"),
        (oidc_claims(aud=PROJECT), "wrong audience"),
        (oidc_claims(aud="https://other.example/hook"), "wrong audience"),
        (oidc_claims(iss="chat@system.gserviceaccount.com"), "wrong issuer"),
    ],
)
def test_oidc_tokens_must_be_googles_for_chat_and_this_endpoint(
    fake_google: FakeGoogle, key: SigningKeyPair, claims: dict[str, Any], reason: str
) -> None:
    with pytest.raises(Unauthorized, match=reason):
        inbound(fake_google, audience=ENDPOINT).verify(request(event(), key.sign(claims)))


def test_the_key_source_follows_the_audience_mode() -> None:
    assert key_source(CHAT_CERTS_URL, oidc=False) == CHAT_CERTS_URL
    assert key_source(CHAT_CERTS_URL, oidc=True) == GOOGLE_OIDC_CERTS_URL
    assert key_source("", oidc=True) == GOOGLE_OIDC_CERTS_URL
    assert key_source("", oidc=False) == CHAT_CERTS_URL
    # A certs URL set to anything else is the key source in both modes (a proxy, a test server)
    assert key_source("https://keys.example/jwks", oidc=True) == "https://keys.example/jwks"
    assert key_source("https://keys.example/jwks", oidc=False) == "https://keys.example/jwks"


def test_signing_keys_are_fetched_once_per_cold_start(fake_google: FakeGoogle, key: SigningKeyPair) -> None:
    adapter = inbound(fake_google)
    for _ in range(3):
        adapter.verify(request(event(), key.sign(chat_claims())))
    assert fake_google.paths("GET") == ["/certs"]


# --- normalization ------------------------------------------------------------------------------


def test_a_top_level_mention_in_a_space_is_a_group_message() -> None:
    message = parse(event())

    assert message.text == "what is the status?"
    assert message.event_id == f"google_chat:{SPACE}/messages/msg-1.msg-1"
    assert message.facts == ("mentions_bot",)
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id) == ("google_chat", "group", SPACE)
    assert (source.user_id, source.user_name, source.is_bot) == ("users/111222333", "Alice Liddell", False)
    assert source.chat_name == "Ops"
    assert source.message_id == f"{SPACE}/messages/msg-1.msg-1"
    # Every Chat message names a thread; a top-level one is not "in" it
    assert source.thread_id is None


def test_a_reply_in_a_thread_carries_the_thread() -> None:
    message = parse(event(thread={"name": THREAD}, threadReply=True))
    assert message.source.thread_id == THREAD
    assert message.source.description == f"group: Ops, thread: {THREAD}"


def test_a_direct_message_is_a_dm_and_addresses_the_bot() -> None:
    message = parse(dm_event())
    assert (message.source.chat_type, message.source.chat_id) == ("dm", "spaces/DmDmDm42")
    assert message.source.chat_name == "Alice Liddell"
    assert message.facts == ("mentions_bot",)
    assert message.text == "hello"


@pytest.mark.parametrize(
    "space",
    [
        {"name": "spaces/DmDmDm42", "type": "DM"},
        {"name": "spaces/DmDmDm42", "spaceType": "DIRECT_MESSAGE"},
        {"name": "spaces/DmDmDm42", "singleUserBotDm": True},
    ],
)
def test_each_dm_marker_makes_a_dm(space: dict[str, Any]) -> None:
    body = event()
    body["space"] = space
    assert parse(body).source.chat_type == "dm"


def test_text_falls_back_when_there_is_no_argument_text() -> None:
    body = event(text="plain words")
    del body["message"]["argumentText"]
    assert parse(body).text == "plain words"


def test_a_mention_of_a_person_is_not_a_mention_of_a_bot() -> None:
    annotations = [{"type": "USER_MENTION", "userMention": {"user": {"name": "users/9", "type": "HUMAN"}}}]
    assert parse(event(annotations=annotations)).facts == ()


def test_a_bot_sender_is_marked() -> None:
    body = event()
    body["user"] = {"name": "users/777", "displayName": "Other bot", "type": "BOT"}
    assert parse(body).source.is_bot is True


def test_the_add_on_event_shape_is_read_like_the_classic_one() -> None:
    classic, addon = parse(event()), parse(addon_event())
    assert addon.source == classic.source
    assert (addon.text, addon.event_id, addon.facts) == (classic.text, classic.event_id, classic.facts)


def test_the_space_and_sender_may_come_from_the_message_itself() -> None:
    body = event()
    del body["space"], body["user"]
    message = parse(body)
    assert (message.source.chat_id, message.source.user_id) == (SPACE, "users/111222333")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({**event(), "type": "ADDED_TO_SPACE"}, "added_to_space"),
        ({**event(), "type": "REMOVED_FROM_SPACE"}, "removed_from_space"),
        ({**event(), "type": "CARD_CLICKED"}, "card_clicked"),
        ({**event(), "type": "SOMETHING_NEW"}, "unsupported_event"),
        (addon_event("addedToSpacePayload", space={"name": SPACE}), "added_to_space"),
        (addon_event("removedFromSpacePayload", space={"name": SPACE}), "removed_from_space"),
        (addon_event("buttonClickedPayload", space={"name": SPACE}), "card_clicked"),
        (addon_event("appCommandPayload", space={"name": SPACE}), "app_command"),
        (addon_event("somethingNewPayload", x=1), "unsupported_event"),
        (event(argumentText="   ", text="@Hermes"), "no_text"),
        ({**event(), "message": {k: v for k, v in event()["message"].items() if "ext" not in k}}, "no_text"),
    ],
)
def test_events_that_are_not_messages_to_answer_are_ignored(body: dict[str, Any], reason: str) -> None:
    assert parse_event(body, received_at=NOW) == Ignored(reason)


def _broken(path: tuple[str, ...], value: Any = ...) -> dict[str, Any]:
    body = event()
    target = body
    for part in path[:-1]:
        target = target[part]
    if value is ...:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"type": 1},
        {},
        _broken(("message",)),
        _broken(("message",), "text"),
        _broken(("message", "name")),
        _broken(("message", "name"), "messages/1"),
        _broken(("space", "name"), "rooms/1"),
        _broken(("space", "name"), "spaces/../../v1/other"),
        _broken(("space", "name"), "spaces/"),
        _broken(("user", "name"), "alice"),
        _broken(("message", "argumentText"), 7),
        event(threadReply=True, thread={"name": "spaces/OTHER/threads/x"}),
        {"chat": {"user": ALICE, "messagePayload": {"space": {"name": SPACE}}}},
    ],
)
def test_malformed_events_are_bad_requests(body: Any) -> None:
    with pytest.raises(BadRequest):
        parse_event(body, received_at=NOW)


def test_round_trip_through_the_queue_envelope() -> None:
    message = parse(event(thread={"name": THREAD}, threadReply=True))
    assert InboundMessage.from_dict(message.to_dict()) == message


# --- through the webhook ------------------------------------------------------------------------


def test_webhook_builds_session_keys_from_slash_bearing_ids(fake_google: FakeGoogle, key: SigningKeyPair) -> None:
    enqueue = FakeEnqueue()
    settings = make_settings(env(fake_google))
    adapters = platforms.adapters(settings, {}, Clock())
    token = key.sign(chat_claims())

    def call(body: dict[str, Any]) -> Any:
        return handle_webhook(
            "google_chat",
            request(body, token),
            settings=settings,
            adapters=adapters,
            enqueue_once=enqueue,
            received_at=NOW,
        )

    responses = [
        call(event(thread={"name": THREAD}, threadReply=True, name=f"{SPACE}/messages/m2")),
        call(event()),
        call(dm_event()),
    ]

    assert [r.status for r in responses] == [200, 200, 200]
    assert [e["session_key"] for e in enqueue.sent] == [
        f"agent:main:google_chat:group:{SPACE}:{THREAD}",
        f"agent:main:google_chat:group:{SPACE}:users/111222333",
        "agent:main:google_chat:dm:spaces/DmDmDm42",
    ]


def test_webhook_accepts_once_and_drops_the_duplicate(fake_google: FakeGoogle, key: SigningKeyPair) -> None:
    enqueue = FakeEnqueue()
    settings = make_settings(env(fake_google))
    adapters = platforms.adapters(settings, {}, Clock())
    good = request(event(), key.sign(chat_claims()))
    first = handle_webhook(
        "google_chat", good, settings=settings, adapters=adapters, enqueue_once=enqueue, received_at=NOW
    )
    again = handle_webhook(
        "google_chat", good, settings=settings, adapters=adapters, enqueue_once=enqueue, received_at=NOW
    )
    # Chat posts a synchronous answer as a message: every acknowledgement is an empty object
    assert (first.status, first.body, again.status, again.body) == (200, {}, 200, {})
    assert len(enqueue.sent) == 1


def test_webhook_acknowledges_ignored_events_with_an_empty_object(fake_google: FakeGoogle, key: SigningKeyPair) -> None:
    enqueue = FakeEnqueue()
    settings = make_settings(env(fake_google))
    added = request({**event(), "type": "ADDED_TO_SPACE"}, key.sign(chat_claims()))
    response = handle_webhook(
        "google_chat",
        added,
        settings=settings,
        adapters=platforms.adapters(settings, {}, Clock()),
        enqueue_once=enqueue,
        received_at=NOW,
    )
    assert (response.status, response.body) == (200, {})
    assert enqueue.calls == 0


def test_webhook_refuses_a_forged_event(fake_google: FakeGoogle, forger: SigningKeyPair) -> None:
    enqueue = FakeEnqueue()
    settings = make_settings(env(fake_google))
    response = handle_webhook(
        "google_chat",
        request(event(), forger.sign(chat_claims())),
        settings=settings,
        adapters=platforms.adapters(settings, {}, Clock()),
        enqueue_once=enqueue,
        received_at=NOW,
    )
    assert response.status == 401
    assert enqueue.calls == 0


# --- sender -------------------------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sender(fake_google: FakeGoogle, clock: Clock) -> GoogleChatSender:
    account = ServiceAccount.from_json(fake_google.service_account_json())
    return GoogleChatSender(account, api_base_url=fake_google.api_base_url, clock=clock, timeout=2.0)


def assert_no_secret(exc: BaseException, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in str(exc)
        assert secret not in repr(exc)
    assert exc.__cause__ is None


def test_send_creates_a_message_with_a_service_account_token(
    fake_google: FakeGoogle, sender: GoogleChatSender, clock: Clock
) -> None:
    first = sender.send(Target("google_chat", SPACE), "hello")
    second = sender.send(Target("google_chat", SPACE), "again")

    assert (first, second) == (f"{SPACE}/messages/m1", f"{SPACE}/messages/m2")
    # One token, from an assertion the fake verified with the service account's public key
    assert fake_google.issued == ["ya29.fake-1"]
    assertion = fake_google.assertions[0]
    assert assertion["iss"] == SERVICE_ACCOUNT_EMAIL
    assert assertion["aud"] == fake_google.token_uri
    assert assertion["scope"] == "https://www.googleapis.com/auth/chat.bot"
    assert (assertion["iat"], assertion["exp"]) == (int(clock.now), int(clock.now) + 3600)
    token_request = next(r for r in fake_google.requests if r.path == "/token")
    assert token_request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert token_request.json["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    posted = [r for r in fake_google.requests if r.path.startswith("/v1/")]
    assert posted[0].path == f"/v1/{SPACE}/messages"
    assert posted[0].headers["authorization"] == "Bearer ya29.fake-1"
    assert posted[0].json == {"text": "hello"}


def test_a_thread_reply_names_the_thread_and_falls_back_to_a_new_one(
    fake_google: FakeGoogle, sender: GoogleChatSender
) -> None:
    sender.send(Target("google_chat", SPACE, THREAD), "in the thread")
    space, query, body = fake_google.messages[0]
    assert space == SPACE
    assert query == {"messageReplyOption": "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD"}
    assert body == {"text": "in the thread", "thread": {"name": THREAD}}


def test_the_token_is_renewed_before_it_expires(
    fake_google: FakeGoogle, sender: GoogleChatSender, clock: Clock
) -> None:
    sender.send(Target("google_chat", SPACE), "one")
    clock.now += 3599 - 301
    sender.send(Target("google_chat", SPACE), "two")
    assert len(fake_google.issued) == 1
    clock.now += 2
    sender.send(Target("google_chat", SPACE), "three")
    assert len(fake_google.issued) == 2


def test_a_401_renews_the_token_and_retries_once(fake_google: FakeGoogle, sender: GoogleChatSender) -> None:
    sender.send(Target("google_chat", SPACE), "warm up")
    fake_google.answer_next(401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}})
    assert sender.send(Target("google_chat", SPACE), "retried") == f"{SPACE}/messages/m2"
    assert fake_google.issued == ["ya29.fake-1", "ya29.fake-2"]


def test_429_raises_rate_limited_with_retry_after(fake_google: FakeGoogle, sender: GoogleChatSender) -> None:
    sender.send(Target("google_chat", SPACE), "warm up")
    body = {"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}
    fake_google.answer_next(429, body, headers={"Retry-After": "12"})
    with pytest.raises(RateLimited) as caught:
        sender.send(Target("google_chat", SPACE), "x")
    assert caught.value.retry_after == 12.0
    assert_no_secret(caught.value, "ya29.fake-1")


@pytest.mark.parametrize(("status", "body"), [(500, {"error": {"code": 500, "message": "boom"}}), (503, "")])
def test_server_errors_are_transient(fake_google: FakeGoogle, sender: GoogleChatSender, status: int, body: Any) -> None:
    sender.send(Target("google_chat", SPACE), "warm up")
    fake_google.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender.send(Target("google_chat", SPACE), "x")
    assert not isinstance(caught.value, RateLimited)
    assert_no_secret(caught.value, "ya29.fake-1")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            403,
            {"error": {"code": 403, "message": "The caller does not have permission", "status": "PERMISSION_DENIED"}},
        ),
        (404, {"error": {"code": 404, "message": "Space not found", "status": "NOT_FOUND"}}),
    ],
)
def test_removed_app_or_missing_space_is_target_gone(
    fake_google: FakeGoogle, sender: GoogleChatSender, status: int, body: Any
) -> None:
    sender.send(Target("google_chat", SPACE), "warm up")
    fake_google.answer_next(status, body)
    with pytest.raises(TargetGone) as caught:
        sender.send(Target("google_chat", SPACE), "x")
    assert_no_secret(caught.value, "ya29.fake-1")


def test_an_assertion_signed_with_the_wrong_key_is_permanent_and_no_key_is_echoed(
    fake_google: FakeGoogle, forger: SigningKeyPair
) -> None:
    account = ServiceAccount(SERVICE_ACCOUNT_EMAIL, forger.private_pem(), fake_google.token_uri, "sa-key-1")
    with pytest.raises(PermanentError) as caught:
        GoogleChatSender(account, api_base_url=fake_google.api_base_url).send(Target("google_chat", SPACE), "x")
    assert not isinstance(caught.value, TargetGone)
    assert "HTTP 400" in str(caught.value)
    assert_no_secret(caught.value, forger.private_pem())
    assert "PRIVATE KEY" not in repr(account)


def test_token_endpoint_outages_are_transient(fake_google: FakeGoogle, sender: GoogleChatSender) -> None:
    fake_google.answer_next(502, "bad gateway")
    with pytest.raises(TransientError):
        sender.send(Target("google_chat", SPACE), "x")


@pytest.mark.parametrize("body", [{"name": ""}, {}, "<html>ok</html>"])
def test_a_success_without_a_name_is_an_unknown_outcome(
    fake_google: FakeGoogle, sender: GoogleChatSender, body: Any
) -> None:
    sender.send(Target("google_chat", SPACE), "warm up")
    fake_google.answer_next(200, body)
    with pytest.raises(OutcomeUnknown, match="without a message name"):
        sender.send(Target("google_chat", SPACE), "x")


@pytest.mark.parametrize(
    "target",
    [
        Target("google_chat", "users/123"),
        Target("google_chat", "spaces/../../v1/other"),
        Target("google_chat", "spaces/A?x=1"),
        Target("google_chat", SPACE, "spaces/OTHER/threads/t"),
        Target("google_chat", SPACE, f"{SPACE}/threads/a/b"),
    ],
)
def test_targets_that_are_not_a_space_and_its_thread_are_refused(sender: GoogleChatSender, target: Target) -> None:
    with pytest.raises(PermanentError):
        sender.send(target, "x")


# --- service account and wiring -----------------------------------------------------------------


PEM_HEADER = "-----BEGIN " + "PRIVATE KEY-----"  # a header with no key: malformed input, assembled


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps({"client_email": "a@b"}),
        json.dumps({"private_key": PEM_HEADER}),
        json.dumps({"client_email": "a@b", "private_key": "not a key"}),
        json.dumps({"client_email": "a@b", "private_key": PEM_HEADER, "token_uri": "file:///x"}),
    ],
)
def test_unusable_service_account_json_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ServiceAccount.from_json(text)
    assert "BEGIN PRIVATE KEY" not in str(caught.value)


def test_the_token_uri_defaults_to_googles() -> None:
    account = ServiceAccount.from_json(json.dumps({"client_email": "a@b", "private_key": PEM_HEADER[:-4]}))
    assert account.token_uri == "https://oauth2.googleapis.com/token"


def test_build_sender_needs_the_service_account(fake_google: FakeGoogle) -> None:
    settings = make_settings(env(fake_google))
    assert platforms.sender("google_chat", settings, {}) is None
    secrets = {"GOOGLE_CHAT_SERVICE_ACCOUNT_JSON": fake_google.service_account_json()}
    built = platforms.sender("google_chat", settings, secrets)
    assert isinstance(built, google_chat.GoogleChatSender)
    assert "PRIVATE KEY" not in repr(built)
    assert built.send(Target("google_chat", SPACE), "hi") == f"{SPACE}/messages/m1"


def test_every_try_of_one_outbox_chunk_carries_one_request_id(
    fake_google: FakeGoogle, sender: GoogleChatSender
) -> None:
    # Chat answers a request id it has seen with the message it created: the outbox's retry after a
    # timeout Chat had taken posts nothing new
    chunk = Target("google_chat", SPACE, THREAD, delivery_id="turn-1#1")
    first = sender.send(chunk, "answer")
    assert sender.send(chunk, "answer") == first
    assert len(fake_google.messages) == 1
    _, query, _ = fake_google.messages[0]
    assert query["messageReplyOption"] == "REPLY_MESSAGE_FALLBACK_TO_NEW_THREAD" and len(query["requestId"]) == 32
    assert sender.send(Target("google_chat", SPACE, delivery_id="turn-1#2"), "more") != first
    sender.send(Target("google_chat", SPACE), "plain")  # no outbox row: no request id
    assert fake_google.messages[-1][1] == {}
    assert len(fake_google.messages) == 3
