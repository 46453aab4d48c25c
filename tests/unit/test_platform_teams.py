"""Microsoft Teams (Bot Framework): token verification, activity normalization, the webhook path and
the sender, against a fake Bot Framework on loopback. No test vectors are published (PLATFORMS §6):
tokens are signed with RSA keys generated here and served as the platform's OpenID keys."""

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
from hermes_gateway.platforms import teams
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.teams import TeamsInbound, TeamsSender, build_sender, parse_activity
from hermes_gateway.services.ingress import HttpRequest, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.jwt import NOW, Clock, SigningKeyPair, hs256_with_public_key, with_changes
from tests.fakes.services import FakeEnqueue, make_settings
from tests.fakes.teams_server import DEFAULT_APP_ID, DEFAULT_APP_PASSWORD, FakeBotFramework

SERVICE_URL = "https://smba.trafficmanager.net/emea/"
BOT_ID = "28:" + DEFAULT_APP_ID
ALICE = {"id": "29:1alice-teams-id", "name": "Alice Liddell", "aadObjectId": "aad-0000-alice"}
TENANT = "tenant-0000-contoso"
CHANNEL = "19:abc123def@thread.tacv2"


@pytest.fixture(scope="module")
def key() -> SigningKeyPair:
    return SigningKeyPair("bf-key-1")


@pytest.fixture(scope="module")
def forger() -> SigningKeyPair:
    return SigningKeyPair("bf-key-1")  # the same key id, another key


@pytest.fixture
def fake_bot_framework(key: SigningKeyPair) -> Iterator[FakeBotFramework]:
    with FakeBotFramework(keys=[key.jwk(endorsements=["msteams"])]) as fake:
        yield fake


def env(fake: FakeBotFramework, **extra: str) -> dict[str, str]:
    return {"TEAMS_ENABLED": "true", "TEAMS_APP_ID": DEFAULT_APP_ID, "TEAMS_OPENID_URL": fake.openid_url, **extra}


@pytest.fixture
def adapter(fake_bot_framework: FakeBotFramework) -> TeamsInbound:
    built = platforms.adapter("teams", make_settings(env(fake_bot_framework)), {}, Clock())
    assert isinstance(built, TeamsInbound)
    return built


def token_claims(**changes: Any) -> dict[str, Any]:
    base = {
        "iss": "https://api.botframework.com",
        "aud": DEFAULT_APP_ID,
        "exp": int(NOW) + 3600,
        "nbf": int(NOW) - 300,
        "serviceurl": SERVICE_URL,
    }
    return with_changes(base, **changes)


def activity(**changes: Any) -> dict[str, Any]:
    """A personal-chat message from Alice to the bot, with `changes` applied."""
    body: dict[str, Any] = {
        "type": "message",
        "id": "1764399999123",
        "timestamp": "2025-11-29T06:26:39.123Z",
        "serviceUrl": SERVICE_URL,
        "channelId": "msteams",
        "from": dict(ALICE),
        "conversation": {"conversationType": "personal", "tenantId": TENANT, "id": "a:1personal-conversation"},
        "recipient": {"id": BOT_ID, "name": "Hermes"},
        "text": "hello there",
        "channelData": {"tenant": {"id": TENANT}},
    }
    body.update(changes)
    return body


def channel_activity(**changes: Any) -> dict[str, Any]:
    body = activity(
        id="1764399999555",
        conversation={
            "conversationType": "channel",
            "isGroup": True,
            "tenantId": TENANT,
            "id": f"{CHANNEL};messageid=1764399990000",
        },
        text="<at>Hermes</at> deploy status?",
        entities=[{"type": "mention", "text": "<at>Hermes</at>", "mentioned": {"id": BOT_ID, "name": "Hermes"}}],
        channelData={
            "tenant": {"id": TENANT},
            "team": {"id": "19:team@thread.tacv2", "name": "Ops"},
            "channel": {"id": CHANNEL, "name": "Deploys"},
        },
    )
    body.update(changes)
    return body


def request(body: Any, token: str | None, *, raw: bytes | None = None) -> HttpRequest:
    headers = {"content-type": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return HttpRequest("POST", "/webhooks/teams", headers, raw if raw is not None else json.dumps(body).encode())


def parse(body: Any) -> InboundMessage:
    parsed = parse_activity(body, received_at=NOW)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- verification -------------------------------------------------------------------------------


def test_a_connector_token_for_this_bot_is_accepted(adapter: TeamsInbound, key: SigningKeyPair) -> None:
    adapter.verify(request(activity(), key.sign(token_claims())))


def test_the_camel_case_service_url_claim_is_accepted(adapter: TeamsInbound, key: SigningKeyPair) -> None:
    claims = token_claims(serviceurl=None, serviceUrl=SERVICE_URL)
    adapter.verify(request(activity(), key.sign(claims)))


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        (token_claims(aud="another-bots-app-id"), "wrong audience"),
        (token_claims(iss="https://sts.windows.net/tenant/"), "wrong issuer"),
        (token_claims(exp=int(NOW) - 301), "expired"),
        (token_claims(serviceurl="https://attacker.example/"), "serviceUrl"),
        (token_claims(serviceurl=None), "serviceUrl"),
    ],
)
def test_tokens_with_wrong_claims_are_refused(
    adapter: TeamsInbound, key: SigningKeyPair, claims: dict[str, Any], reason: str
) -> None:
    with pytest.raises(Unauthorized, match=reason):
        adapter.verify(request(activity(), key.sign(claims)))


def test_a_token_signed_by_another_key_is_refused(adapter: TeamsInbound, forger: SigningKeyPair) -> None:
    with pytest.raises(Unauthorized, match="signature"):
        adapter.verify(request(activity(), forger.sign(token_claims())))


def test_the_activity_cannot_change_its_service_url_under_a_valid_token(
    adapter: TeamsInbound, key: SigningKeyPair
) -> None:
    # Given a genuine token replayed with an activity pointing replies (and the bot's token) elsewhere
    with pytest.raises(Unauthorized, match="serviceUrl"):
        adapter.verify(request(activity(serviceUrl="https://attacker.example/"), key.sign(token_claims())))


def test_the_key_must_be_endorsed_for_the_activity_channel(adapter: TeamsInbound, key: SigningKeyPair) -> None:
    with pytest.raises(Unauthorized, match="not endorsed"):
        adapter.verify(request(activity(channelId="webchat"), key.sign(token_claims())))


def test_alg_confusion_with_the_published_key_is_refused(adapter: TeamsInbound, key: SigningKeyPair) -> None:
    with pytest.raises(Unauthorized, match="RS256"):
        adapter.verify(request(activity(), hs256_with_public_key(key, token_claims())))


@pytest.mark.parametrize("authorization", [None, "Basic Ym90OnBhc3M=", "Bearer", "Bearer garbage"])
def test_missing_or_malformed_authorization_is_refused(adapter: TeamsInbound, authorization: str | None) -> None:
    headers = {"authorization": authorization} if authorization is not None else {}
    with pytest.raises(Unauthorized):
        adapter.verify(HttpRequest("POST", "/webhooks/teams", headers, json.dumps(activity()).encode()))


def test_without_an_app_id_everything_is_refused(fake_bot_framework: FakeBotFramework, key: SigningKeyPair) -> None:
    settings = make_settings(env(fake_bot_framework, TEAMS_APP_ID=""))
    adapter = platforms.adapter("teams", settings, {}, Clock())
    with pytest.raises(Unauthorized, match="not configured"):
        adapter.verify(request(activity(), key.sign(token_claims(aud=""))))
    assert fake_bot_framework.requests == []


def test_a_body_that_is_not_json_is_left_to_parse(adapter: TeamsInbound, key: SigningKeyPair) -> None:
    # The token is still checked; the malformed body is then refused by parse (400, nothing enqueued)
    bad = request(None, key.sign(token_claims()), raw=b"{not json")
    adapter.verify(bad)
    with pytest.raises(BadRequest):
        adapter.parse(bad, NOW)


def test_signing_keys_are_fetched_once_per_cold_start(
    adapter: TeamsInbound, key: SigningKeyPair, fake_bot_framework: FakeBotFramework
) -> None:
    for _ in range(3):
        adapter.verify(request(activity(), key.sign(token_claims())))
    assert fake_bot_framework.paths("GET") == ["/v1/.well-known/openidconfiguration", "/v1/.well-known/keys"]


# --- normalization ------------------------------------------------------------------------------


def test_a_personal_chat_message_is_a_dm() -> None:
    message = parse(activity())

    assert message.text == "hello there"
    assert message.event_id == "teams:a:1personal-conversation:1764399999123"
    assert message.received_at == NOW
    assert message.facts == ()
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id) == ("teams", "dm", "a:1personal-conversation")
    assert (source.user_id, source.user_id_alt, source.user_name) == (ALICE["id"], "aad-0000-alice", "Alice Liddell")
    assert source.scope_id == TENANT
    assert source.message_id == "1764399999123"
    assert source.thread_id is None
    assert source.chat_name == "Alice Liddell"
    assert source.is_bot is False
    assert message.reply_context == {
        "service_url": SERVICE_URL,
        "conversation_id": "a:1personal-conversation",
        "reply_to_id": "1764399999123",
    }


def test_a_group_chat_mention_is_stripped_and_recorded() -> None:
    body = activity(
        conversation={"conversationType": "groupChat", "id": "19:groupchat@thread.v2", "name": "Lunch crew"},
        text="<at>Hermes</at> ask <at>Bob Smith</at> about lunch",
        entities=[
            {"type": "mention", "text": "<at>Hermes</at>", "mentioned": {"id": BOT_ID, "name": "Hermes"}},
            {"type": "mention", "text": "<at>Bob Smith</at>", "mentioned": {"id": "29:bob", "name": "Bob Smith"}},
            {"type": "clientInfo", "locale": "en-GB"},
        ],
    )
    message = parse(body)

    assert message.text == "ask Bob Smith about lunch"
    assert message.facts == ("mentions_bot",)
    assert (message.source.chat_type, message.source.chat_id) == ("group", "19:groupchat@thread.v2")
    assert message.source.chat_name == "Lunch crew"
    assert message.source.thread_id is None


def test_a_mention_of_someone_else_is_not_a_mention_of_the_bot() -> None:
    body = activity(
        text="<at>Bob</at> hi",
        entities=[{"type": "mention", "text": "<at>Bob</at>", "mentioned": {"id": "29:bob"}}],
    )
    message = parse(body)
    assert message.facts == ()
    assert message.text == "Bob hi"


def test_a_channel_message_is_a_group_message_in_the_thread_it_belongs_to() -> None:
    message = parse(channel_activity(replyToId="1764399990000"))

    source = message.source
    assert (source.chat_type, source.chat_id, source.thread_id) == ("group", CHANNEL, "1764399990000")
    assert source.chat_name == "Deploys"
    assert message.text == "deploy status?"
    assert message.facts == ("mentions_bot",)
    assert message.reply_to_message_id == "1764399990000"
    assert message.event_id == f"teams:{CHANNEL};messageid=1764399990000:1764399999555"
    assert message.reply_context["conversation_id"] == f"{CHANNEL};messageid=1764399990000"
    assert source.description == "group: Deploys, thread: 1764399990000"


def test_activities_without_a_conversation_type_use_is_group() -> None:
    group = parse(activity(conversation={"id": "19:legacy@thread.skype", "isGroup": True}))
    personal = parse(activity(conversation={"id": "a:legacy"}))
    assert (group.source.chat_type, personal.source.chat_type) == ("group", "dm")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (activity(type="conversationUpdate", membersAdded=[{"id": BOT_ID}]), "conversation_update"),
        (activity(type="typing"), "typing"),
        (activity(type="messageReaction", reactionsAdded=[{"type": "like"}]), "reaction"),
        (activity(type="messageUpdate"), "edited"),
        (activity(type="messageDelete"), "deleted"),
        (activity(type="invoke", name="adaptiveCard/action"), "invoke"),
        (activity(type="somethingNew"), "unsupported_activity"),
        (activity(channelId="webchat"), "other_channel"),
        (activity(**{"from": {"id": BOT_ID, "name": "Hermes"}}), "own_message"),
        (activity(text=""), "no_text"),
        (activity(text=None, attachments=[{"contentType": "image/png"}]), "no_text"),
        (channel_activity(text="<at>Hermes</at>"), "no_text"),
        (activity(conversation={"id": "x", "conversationType": "meeting"}), "unsupported_conversation"),
    ],
)
def test_activities_that_are_not_messages_to_answer_are_ignored(body: dict[str, Any], reason: str) -> None:
    assert parse_activity(body, received_at=NOW) == Ignored(reason)


def _without(body: dict[str, Any], *path: str) -> dict[str, Any]:
    broken = copy.deepcopy(body)
    target = broken
    for part in path[:-1]:
        target = target[part]
    del target[path[-1]]
    return broken


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        "activity",
        _without(activity(), "type"),
        activity(type=7),
        _without(activity(), "id"),
        _without(activity(), "conversation"),
        activity(conversation="a:1"),
        _without(activity(), "conversation", "id"),
        _without(activity(), "from"),
        activity(**{"from": {"name": "no id"}}),
        _without(activity(), "serviceUrl"),
        activity(serviceUrl="file:///etc/passwd"),
        activity(text=42),
    ],
)
def test_malformed_activities_are_bad_requests(body: Any) -> None:
    with pytest.raises(BadRequest):
        parse_activity(body, received_at=NOW)


def test_round_trip_through_the_queue_envelope() -> None:
    message = parse(channel_activity())
    assert InboundMessage.from_dict(message.to_dict()) == message


# --- through the webhook ------------------------------------------------------------------------


def call(fake: FakeBotFramework, enqueue: FakeEnqueue, req: HttpRequest, adapters: Any = None) -> Any:
    settings = make_settings(env(fake))
    return handle_webhook(
        "teams",
        req,
        settings=settings,
        adapters=adapters or platforms.adapters(settings, {}, Clock()),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def test_webhook_accepts_a_verified_activity_once(fake_bot_framework: FakeBotFramework, key: SigningKeyPair) -> None:
    enqueue = FakeEnqueue()
    settings = make_settings(env(fake_bot_framework))
    adapters = platforms.adapters(settings, {}, Clock())
    good = request(channel_activity(), key.sign(token_claims()))

    first = call(fake_bot_framework, enqueue, good, adapters)
    again = call(fake_bot_framework, enqueue, good, adapters)

    assert (first.status, again.status) == (200, 200)
    assert again.body == {"ok": True, "duplicate": True}
    assert len(enqueue.sent) == 1
    envelope = enqueue.sent[0]
    assert envelope["session_key"] == f"agent:main:teams:group:{CHANNEL}:1764399990000"
    assert envelope["reply_context"]["service_url"] == SERVICE_URL


def test_webhook_refuses_a_forged_activity(fake_bot_framework: FakeBotFramework, forger: SigningKeyPair) -> None:
    enqueue = FakeEnqueue()
    response = call(fake_bot_framework, enqueue, request(activity(), forger.sign(token_claims())))
    assert response.status == 401
    assert enqueue.calls == 0


def test_webhook_acknowledges_an_ignored_activity(fake_bot_framework: FakeBotFramework, key: SigningKeyPair) -> None:
    enqueue = FakeEnqueue()
    response = call(fake_bot_framework, enqueue, request(activity(type="typing"), key.sign(token_claims())))
    assert (response.status, response.body) == (200, {"ok": True, "ignored": "typing"})
    assert enqueue.calls == 0


def test_webhook_answers_400_for_a_verified_but_malformed_activity(
    fake_bot_framework: FakeBotFramework, key: SigningKeyPair
) -> None:
    enqueue = FakeEnqueue()
    response = call(fake_bot_framework, enqueue, request(activity(id=None), key.sign(token_claims())))
    assert response.status == 400
    assert enqueue.calls == 0


# --- sender -------------------------------------------------------------------------------------


LOOPBACK = ("127.0.0.1",)  # the fake Bot Framework's host; plain http is allowed on loopback only


def target(**context: str) -> Target:
    base = {"service_url": "", "conversation_id": "a:1personal-conversation", "reply_to_id": "1764399999123"}
    return Target("teams", "a:1personal-conversation", None, {**base, **context})


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sender(fake_bot_framework: FakeBotFramework, clock: Clock) -> TeamsSender:
    return TeamsSender(
        app_id=DEFAULT_APP_ID,
        password=DEFAULT_APP_PASSWORD,
        token_url=fake_bot_framework.token_url,
        clock=clock,
        timeout=2.0,
        service_url_hosts=LOOPBACK,
    )


def to_fake(fake: FakeBotFramework, **context: str) -> Target:
    return target(service_url=fake.base_url + "/", **context)


def assert_no_secret(exc: BaseException, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in str(exc)
        assert secret not in repr(exc)
    assert exc.__cause__ is None


def test_send_posts_the_activity_with_a_client_credentials_token(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender
) -> None:
    first = sender.send(to_fake(fake_bot_framework), "hello")
    second = sender.send(to_fake(fake_bot_framework), "again")

    assert (first, second) == ("activity-1", "activity-2")
    # One token for both sends, requested with the documented form
    tokens = fake_bot_framework.token_requests()
    assert len(tokens) == 1
    assert tokens[0].headers["content-type"] == "application/x-www-form-urlencoded"
    assert tokens[0].json == {
        "grant_type": "client_credentials",
        "client_id": DEFAULT_APP_ID,
        "client_secret": DEFAULT_APP_PASSWORD,
        "scope": "https://api.botframework.com/.default",
    }
    posted = [r for r in fake_bot_framework.requests if "/v3/conversations/" in r.path]
    assert posted[0].path == "/v3/conversations/a%3A1personal-conversation/activities"
    assert posted[0].headers["authorization"] == "Bearer bf-token-1"
    assert posted[0].json == {"type": "message", "text": "hello", "replyToId": "1764399999123"}


def test_a_channel_thread_reply_goes_to_the_full_conversation_id(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender
) -> None:
    conversation = f"{CHANNEL};messageid=1764399990000"
    sender.send(to_fake(fake_bot_framework, conversation_id=conversation), "in the thread")
    assert fake_bot_framework.activities[0][0] == conversation
    path = next(r.path for r in fake_bot_framework.requests if "/v3/" in r.path)
    assert path == "/v3/conversations/19%3Aabc123def%40thread.tacv2%3Bmessageid%3D1764399990000/activities"


def test_without_a_recorded_conversation_id_the_thread_is_rebuilt(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender
) -> None:
    bare = Target("teams", CHANNEL, "1764399990000", {"service_url": fake_bot_framework.base_url})
    sender.send(bare, "proactive")
    assert fake_bot_framework.activities[0] == (
        f"{CHANNEL};messageid=1764399990000",
        {"type": "message", "text": "proactive"},
    )


def test_the_token_is_renewed_before_it_expires(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender, clock: Clock
) -> None:
    sender.send(to_fake(fake_bot_framework), "one")
    clock.now += 3600 - 301
    sender.send(to_fake(fake_bot_framework), "two")
    assert len(fake_bot_framework.token_requests()) == 1
    clock.now += 2
    sender.send(to_fake(fake_bot_framework), "three")
    assert len(fake_bot_framework.token_requests()) == 2


def test_a_401_from_the_connector_renews_the_token_and_retries_once(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender
) -> None:
    sender.send(to_fake(fake_bot_framework), "warm up")
    fake_bot_framework.answer_next(401, {"message": "Authorization has been denied for this request."})

    assert sender.send(to_fake(fake_bot_framework), "retried") == "activity-2"
    assert len(fake_bot_framework.token_requests()) == 2
    last = fake_bot_framework.requests[-1]
    assert last.headers["authorization"] == "Bearer bf-token-2"


def test_a_second_401_is_permanent(fake_bot_framework: FakeBotFramework, sender: TeamsSender) -> None:
    denied = {"message": "Authorization has been denied for this request."}
    fake_bot_framework.answer_next(200, {"access_token": "t-1", "expires_in": 3600})
    fake_bot_framework.answer_next(401, denied)
    fake_bot_framework.answer_next(200, {"access_token": "t-2", "expires_in": 3600})
    fake_bot_framework.answer_next(401, denied)
    with pytest.raises(PermanentError) as caught:
        sender.send(to_fake(fake_bot_framework), "x")
    assert not isinstance(caught.value, TargetGone)
    assert_no_secret(caught.value, "t-1", "t-2", DEFAULT_APP_PASSWORD)


def test_429_raises_rate_limited_with_retry_after(fake_bot_framework: FakeBotFramework, sender: TeamsSender) -> None:
    sender.send(to_fake(fake_bot_framework), "warm up")
    fake_bot_framework.answer_next(429, {"message": "Too many requests"}, headers={"Retry-After": "7"})
    with pytest.raises(RateLimited) as caught:
        sender.send(to_fake(fake_bot_framework), "x")
    assert caught.value.retry_after == 7.0
    assert_no_secret(caught.value, "bf-token-1", DEFAULT_APP_PASSWORD)


@pytest.mark.parametrize(("status", "body"), [(500, {"message": "boom"}), (502, "<html>bad gateway</html>"), (412, "")])
def test_server_errors_and_412_are_transient(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender, status: int, body: Any
) -> None:
    sender.send(to_fake(fake_bot_framework), "warm up")
    fake_bot_framework.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender.send(to_fake(fake_bot_framework), "x")
    assert not isinstance(caught.value, RateLimited)
    assert_no_secret(caught.value, "bf-token-1", DEFAULT_APP_PASSWORD)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (403, {"error": {"code": "BotNotInConversationRoster", "message": "The bot is not part of the roster."}}),
        (404, {"error": {"code": "ConversationNotFound", "message": "Conversation not found."}}),
    ],
)
def test_removed_bot_or_unknown_conversation_is_target_gone(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender, status: int, body: Any
) -> None:
    sender.send(to_fake(fake_bot_framework), "warm up")
    fake_bot_framework.answer_next(status, body)
    with pytest.raises(TargetGone) as caught:
        sender.send(to_fake(fake_bot_framework), "x")
    assert_no_secret(caught.value, "bf-token-1", DEFAULT_APP_PASSWORD)


def test_a_refused_app_password_is_permanent_and_never_echoed(fake_bot_framework: FakeBotFramework) -> None:
    wrong = "wrong-password-that-must-stay-secret"
    sender = TeamsSender(
        app_id=DEFAULT_APP_ID, password=wrong, token_url=fake_bot_framework.token_url, service_url_hosts=LOOPBACK
    )
    with pytest.raises(PermanentError) as caught:
        sender.send(to_fake(fake_bot_framework), "x")
    assert not isinstance(caught.value, TargetGone)
    assert "invalid_client" in str(caught.value) or "AADSTS" in str(caught.value)
    assert_no_secret(caught.value, wrong)
    assert wrong not in repr(sender)


def test_token_endpoint_outages_are_transient(fake_bot_framework: FakeBotFramework, sender: TeamsSender) -> None:
    fake_bot_framework.answer_next(503, "unavailable")
    with pytest.raises(TransientError):
        sender.send(to_fake(fake_bot_framework), "x")


@pytest.mark.parametrize("body", [{"id": ""}, {}, "<html>ok</html>"])
def test_a_success_without_an_id_is_an_unknown_outcome(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender, body: Any
) -> None:
    sender.send(to_fake(fake_bot_framework), "warm up")
    fake_bot_framework.answer_next(201, body)
    with pytest.raises(OutcomeUnknown, match="without an activity id"):
        sender.send(to_fake(fake_bot_framework), "x")


@pytest.mark.parametrize("service_url", ["", "ftp://smba.example/", "javascript:alert(1)"])
def test_a_target_without_an_http_service_url_cannot_be_sent_to(sender: TeamsSender, service_url: str) -> None:
    with pytest.raises(PermanentError, match="service URL"):
        sender.send(target(service_url=service_url), "x")


# --- wiring -------------------------------------------------------------------------------------


def test_build_sender_needs_the_app_password_and_id(fake_bot_framework: FakeBotFramework) -> None:
    settings = make_settings(env(fake_bot_framework))
    assert platforms.sender("teams", settings, {}) is None
    no_id = make_settings(env(fake_bot_framework, TEAMS_APP_ID=""))
    assert platforms.sender("teams", no_id, {"TEAMS_APP_PASSWORD": DEFAULT_APP_PASSWORD}) is None


def test_the_catalog_sender_sends(fake_bot_framework: FakeBotFramework) -> None:
    settings = make_settings(
        env(fake_bot_framework, TEAMS_TOKEN_URL=fake_bot_framework.token_url, TEAMS_SERVICE_URL_HOSTS="127.0.0.1")
    )
    built = platforms.sender("teams", settings, {"TEAMS_APP_PASSWORD": DEFAULT_APP_PASSWORD})
    assert built is not None
    assert built.send(to_fake(fake_bot_framework), "hi") == "activity-1"


@pytest.mark.parametrize(
    ("extra", "url"),
    [
        ({}, "https://login.microsoftonline.com/botframework.com/oauth2/v2.0/token"),
        (
            {"TEAMS_TENANT_ID": "contoso.onmicrosoft.com"},
            "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token",
        ),
        ({"TEAMS_TENANT_ID": "x", "TEAMS_TOKEN_URL": "https://token.example/t"}, "https://token.example/t"),
    ],
)
def test_the_token_url_follows_the_tenant(extra: dict[str, str], url: str) -> None:
    settings = make_settings({"TEAMS_ENABLED": "true", "TEAMS_APP_ID": DEFAULT_APP_ID, **extra})
    assert teams.token_url(platforms.context("teams", settings, {})) == url


@pytest.mark.parametrize("extra", [{"TEAMS_TENANT_ID": "../evil"}, {"TEAMS_TOKEN_URL": "file:///token"}])
def test_unsafe_token_settings_fail_when_the_sender_is_built(extra: dict[str, str]) -> None:
    settings = make_settings({"TEAMS_ENABLED": "true", "TEAMS_APP_ID": DEFAULT_APP_ID, **extra})
    with pytest.raises(ConfigError):
        build_sender(platforms.context("teams", settings, {"TEAMS_APP_PASSWORD": "p"}))


def test_an_answer_is_edited_with_the_connectors_update_activity(
    fake_bot_framework: FakeBotFramework, sender: TeamsSender
) -> None:
    activity_id = sender.send(to_fake(fake_bot_framework), "Hel")
    sender.edit(to_fake(fake_bot_framework), activity_id, "Hello")
    assert fake_bot_framework.updates == [
        ("a:1personal-conversation", activity_id, {"type": "message", "id": activity_id, "text": "Hello"})
    ]
    with pytest.raises(TargetGone):  # 404: the activity is not in the conversation
        sender.edit(to_fake(fake_bot_framework), "activity-99", "gone")
