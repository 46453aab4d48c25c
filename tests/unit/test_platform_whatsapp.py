"""WhatsApp Cloud API: the GET handshake, X-Hub-Signature-256, batch normalization, and the sender
against a fake Graph API."""

from __future__ import annotations

import copy
import json
import logging
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
from hermes_gateway.platforms.whatsapp import (
    SIGNATURE_HEADER,
    WhatsAppSender,
    build_sender,
    meta_signature,
    parse_notification,
    verify_signature,
    verify_subscription,
)
from hermes_gateway.services.ingress import Accepted, Handshake, HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.services import FakeEnqueue, make_settings
from tests.fakes.whatsapp_server import FakeWhatsApp, meta_error

APP_SECRET = "whatsapp-app-secret-for-tests"
VERIFY_TOKEN = "my-verify-token"
NOW = 1_764_400_000.0
SECRETS = {"WHATSAPP_APP_SECRET": APP_SECRET, "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN}
ENV = {"WHATSAPP_ENABLED": "true", "WHATSAPP_PHONE_NUMBER_ID": "123456123"}


def notification(*messages: dict[str, Any], **value: Any) -> dict[str, Any]:
    """Meta's canonical example (PLATFORMS §4), with `messages` and value fields replaced."""
    base: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": "16505551111", "phone_number_id": "123456123"},
        "contacts": [{"profile": {"name": "test user name"}, "wa_id": "16315551181"}],
        "messages": list(messages)
        or [
            {
                "from": "16315551181",
                "id": "ABGGFlA5Fpa",
                "timestamp": "1764399990",
                "type": "text",
                "text": {"body": "this is a text message"},
            }
        ],
    }
    base.update(value)
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": "WABA_ID", "changes": [{"value": base, "field": "messages"}]}],
    }


def text_message(
    wamid: str = "wamid.1", body: str = "hi", sender: str = "16315551181", **fields: Any
) -> dict[str, Any]:
    return {"from": sender, "id": wamid, "timestamp": "1764399990", "type": "text", "text": {"body": body}, **fields}


def post(payload: Any, *, secret: str | None = APP_SECRET, raw: bytes | None = None) -> HttpRequest:
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers[SIGNATURE_HEADER] = meta_signature(secret, body)
    return HttpRequest(method="POST", path="/webhooks/whatsapp", headers=headers, body=body)


def get(**query: str) -> HttpRequest:
    return HttpRequest(method="GET", path="/webhooks/whatsapp", headers={}, body=b"", query=query)


def handshake_query(token: str = VERIFY_TOKEN, challenge: str = "1158201444") -> dict[str, str]:
    return {"hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": challenge}


def call(request: HttpRequest, enqueue: FakeEnqueue, secrets: dict[str, str] = SECRETS) -> HttpResponse:
    settings = make_settings(ENV)
    return handle_webhook(
        "whatsapp",
        request,
        settings=settings,
        adapters=platforms.adapters(settings, secrets),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def messages_of(parsed: Any) -> list[InboundMessage]:
    assert isinstance(parsed, Accepted), parsed
    return [item for item in parsed.items if isinstance(item, InboundMessage)]


def only_message(payload: Any) -> InboundMessage:
    found = messages_of(parse_notification(payload, received_at=NOW))
    assert len(found) == 1
    return found[0]


# --- signature ----------------------------------------------------------------------------------


def test_meta_hmac_published_vector() -> None:
    # PLATFORMS §15 "Meta HMAC (generic)": key "secret", message "test"
    assert meta_signature("secret", b"test") == (
        "sha256=0329a06b62cd16b33eb6792be8c60b158d89a2ee3a876fce9a881ebb488c0914"
    )


def test_signature_over_the_raw_body_is_accepted() -> None:
    body = b'{"object":"whatsapp_business_account", "entry": []}'
    verify_signature({SIGNATURE_HEADER: meta_signature(APP_SECRET, body)}, body, APP_SECRET)
    # Meta's hex is lower case; an upper-case rendering of the same digest is the same signature
    verify_signature({SIGNATURE_HEADER: "sha256=" + meta_signature(APP_SECRET, body)[7:].upper()}, body, APP_SECRET)


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({}, "missing"),
        ({SIGNATURE_HEADER: ""}, "missing"),
        ({SIGNATURE_HEADER: "0329a06b62cd16b33eb6792be8c60b158d89a2ee3a876fce9a881ebb488c0914"}, "malformed"),
        ({SIGNATURE_HEADER: "sha1=abc"}, "malformed"),
        ({SIGNATURE_HEADER: "sha256=" + "0" * 64}, "does not match"),
        ({SIGNATURE_HEADER: "sha256=zz é"}, "does not match"),
    ],
)
def test_missing_malformed_or_forged_signatures_are_refused(headers: dict[str, str], reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason):
        verify_signature(headers, b"{}", APP_SECRET)


def test_a_signature_made_with_another_secret_or_over_another_body_is_refused() -> None:
    body = b'{"a":1}'
    with pytest.raises(Unauthorized, match="does not match"):
        verify_signature({SIGNATURE_HEADER: meta_signature("other", body)}, body, APP_SECRET)
    with pytest.raises(Unauthorized, match="does not match"):
        verify_signature({SIGNATURE_HEADER: meta_signature(APP_SECRET, body)}, b'{"a": 1}', APP_SECRET)


@pytest.mark.parametrize("secret", [None, ""])
def test_no_app_secret_refuses_everything(secret: str | None) -> None:
    body = b"{}"
    with pytest.raises(Unauthorized, match="not configured") as caught:
        verify_signature({SIGNATURE_HEADER: meta_signature("x", body)}, body, secret)
    assert APP_SECRET not in str(caught.value)


# --- handshake ----------------------------------------------------------------------------------


def test_subscription_handshake_echoes_the_challenge() -> None:
    adapter = platforms.adapter("whatsapp", make_settings(ENV), SECRETS)
    request = get(**handshake_query())

    adapter.verify(request)
    parsed = adapter.parse(request, NOW)

    assert parsed == Handshake(HttpResponse.text(200, "1158201444"))


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        (handshake_query(token="wrong"), "does not match"),
        (handshake_query(token=VERIFY_TOKEN + "x"), "does not match"),
        ({**handshake_query(), "hub.mode": "unsubscribe"}, "not subscribe"),
        ({"hub.verify_token": VERIFY_TOKEN, "hub.challenge": "1"}, "not subscribe"),
        ({"hub.mode": "subscribe", "hub.challenge": "1"}, "missing"),
    ],
)
def test_handshake_with_a_wrong_token_or_mode_is_refused(query: dict[str, str], reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason):
        verify_subscription(query, VERIFY_TOKEN)


def test_handshake_without_a_configured_verify_token_is_refused() -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        verify_subscription(handshake_query(token=""), "")


def test_handshake_through_the_ingress() -> None:
    enqueue = FakeEnqueue()

    answered = call(get(**handshake_query(challenge="987654321")), enqueue)
    refused = call(get(**handshake_query(token="guess")), enqueue)

    assert (answered.status, answered.body, answered.headers["content-type"]) == (200, "987654321", "text/plain")
    assert refused.status == 401
    assert enqueue.calls == 0


@pytest.mark.parametrize("challenge", ["", "x" * 257, "line\nbreak"])
def test_a_malformed_challenge_is_a_bad_request(challenge: str) -> None:
    response = call(get(**handshake_query(challenge=challenge)), FakeEnqueue())
    assert response.status == 400


# --- normalization ------------------------------------------------------------------------------


def test_metas_example_becomes_a_dm() -> None:
    message = only_message(notification())

    assert message.text == "this is a text message"
    assert message.event_id == "whatsapp:ABGGFlA5Fpa"
    assert message.received_at == NOW
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id, source.user_id) == (
        "whatsapp",
        "dm",
        "16315551181",
        "16315551181",
    )
    assert source.user_name == "test user name"
    assert source.scope_id == "123456123"
    assert source.message_id == "ABGGFlA5Fpa"
    assert message.reply_context == {"phone_number_id": "123456123"}
    assert message.reply_to_message_id is None
    assert InboundMessage.from_dict(message.to_dict()) == message


def test_sender_ids_are_canonical_phone_numbers() -> None:
    message = only_message(notification(text_message(sender="+16315551181")))
    assert (message.source.user_id, message.source.chat_id) == ("16315551181", "16315551181")
    assert message.source.user_name == "test user name"


def test_a_group_message_is_a_group_with_its_participant() -> None:
    group = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
    message = only_message(notification(text_message(group_id=group)))

    assert message.source.chat_type == "group"
    assert message.source.chat_id == group
    assert message.source.user_id == "16315551181"
    assert message.reply_context == {"phone_number_id": "123456123", "recipient_type": "group"}


def test_a_reply_keeps_the_replied_message() -> None:
    message = only_message(notification(text_message(context={"from": "16505551111", "id": "wamid.earlier"})))
    assert message.reply_to_message_id == "wamid.earlier"


def test_a_batch_yields_one_message_per_message() -> None:
    payload = notification(text_message("wamid.1", "one"), text_message("wamid.2", "two"))
    payload["entry"].append(copy.deepcopy(payload["entry"][0]))
    payload["entry"][1]["changes"][0]["value"]["messages"] = [text_message("wamid.3", "three")]

    found = messages_of(parse_notification(payload, received_at=NOW))

    assert [(m.event_id, m.text) for m in found] == [
        ("whatsapp:wamid.1", "one"),
        ("whatsapp:wamid.2", "two"),
        ("whatsapp:wamid.3", "three"),
    ]


def test_status_callbacks_are_ignored() -> None:
    status = {"id": "wamid.out", "status": "delivered", "timestamp": "1", "recipient_id": "16315551181"}
    payload = notification(statuses=[status])
    del payload["entry"][0]["changes"][0]["value"]["messages"]

    assert parse_notification(payload, received_at=NOW) == Accepted(items=(Ignored("message_status"),))


def test_a_status_report_logs_at_debug_and_a_message_ignored_for_its_content_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Meta reports sent, delivered and read for every reply the gateway sends: those are no
    # message, and one INFO line each would be two or three lines a reply (bench/receipts_cost.py)
    caplog.set_level(logging.DEBUG, logger="hermes-gateway")
    status = {"id": "wamid.out", "status": "read", "timestamp": "1", "recipient_id": "16315551181"}
    payload = notification(statuses=[status])
    del payload["entry"][0]["changes"][0]["value"]["messages"]
    reaction = notification({"from": "16315551181", "id": "wamid.r", "type": "reaction", "reaction": {"emoji": "👍"}})

    for body in (payload, reaction):
        assert call(post(body), FakeEnqueue()).status == 200

    ignored = [(r.levelname, getattr(r, "reason", None)) for r in caplog.records if r.getMessage() == "webhook ignored"]
    assert ignored == [("DEBUG", "message_status"), ("INFO", "reaction")]


def test_media_with_a_caption_is_text_with_an_attachment() -> None:
    image = {"caption": "look", "mime_type": "image/jpeg", "sha256": "abc", "id": "media-1"}
    message = only_message(notification({"from": "16315551181", "id": "wamid.9", "type": "image", "image": image}))

    assert message.text == "look"
    assert message.attachments == ({"kind": "image", "mime": "image/jpeg", "ref": {"media_id": "media-1"}},)


@pytest.mark.parametrize(
    ("kind", "content", "text"),
    [
        ("button", {"text": "Yes please", "payload": "yes"}, "Yes please"),
        ("interactive", {"type": "button_reply", "button_reply": {"id": "b1", "title": "Option A"}}, "Option A"),
        ("interactive", {"type": "list_reply", "list_reply": {"id": "r1", "title": "Row 1"}}, "Row 1"),
    ],
)
def test_button_and_interactive_replies_carry_their_title(kind: str, content: dict[str, Any], text: str) -> None:
    message = only_message(notification({"from": "16315551181", "id": "wamid.b", "type": kind, kind: content}))
    assert message.text == text


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({"type": "location", "location": {"latitude": 1, "longitude": 2}}, "no_text"),
        ({"type": "reaction", "reaction": {"message_id": "wamid.x", "emoji": "👍"}}, "reaction"),
        ({"type": "system", "system": {"body": "changed number"}}, "system"),
        ({"type": "unsupported", "errors": [{"code": 131051}]}, "unsupported_message_type"),
        ({"type": "text", "text": {"body": ""}}, "no_text"),
    ],
)
def test_messages_without_usable_text_are_ignored(message: dict[str, Any], reason: str) -> None:
    payload = notification({"from": "16315551181", "id": "wamid.z", **message})
    assert parse_notification(payload, received_at=NOW) == Accepted(items=(Ignored(reason),))


def test_the_business_numbers_own_messages_are_ignored() -> None:
    payload = notification(text_message(sender="16505551111", group_id="G1"))
    assert parse_notification(payload, received_at=NOW) == Accepted(items=(Ignored("own_message"),))


def test_other_objects_and_fields_are_ignored() -> None:
    assert parse_notification({"object": "page", "entry": []}, received_at=NOW) == Ignored("unsupported_object")
    payload = notification()
    payload["entry"][0]["changes"][0]["field"] = "account_update"
    assert parse_notification(payload, received_at=NOW) == Accepted(items=(Ignored("unsupported_field"),))
    empty = {"object": "whatsapp_business_account", "entry": []}
    assert parse_notification(empty, received_at=NOW) == Accepted(items=(Ignored("no_messages"),))


GOOD = notification()


def _broken(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(GOOD)
    target: Any = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return broken


MESSAGE = ("entry", 0, "changes", 0, "value", "messages", 0)


@pytest.mark.parametrize(
    "payload",
    [
        None,
        [],
        "text",
        _broken(("entry",), {"id": "x"}),
        _broken(("entry", 0), "entry"),
        _broken(("entry", 0, "changes"), "changes"),
        _broken(("entry", 0, "changes", 0, "value"), None),
        _broken(("entry", 0, "changes", 0, "value", "messages"), {"id": "x"}),
        _broken(("entry", 0, "changes", 0, "value", "contacts", 0), "contact"),
        _broken(MESSAGE, "message"),
        _broken((*MESSAGE, "id"), 42),
        _broken((*MESSAGE, "from"), None),
        _broken((*MESSAGE, "text"), {"body": 42}),
    ],
)
def test_malformed_notifications_are_bad_requests(payload: Any) -> None:
    with pytest.raises(BadRequest):
        parse_notification(payload, received_at=NOW)


# --- through the ingress ------------------------------------------------------------------------


def test_a_signed_message_is_enqueued_once() -> None:
    enqueue = FakeEnqueue()

    response = call(post(notification()), enqueue)

    assert response.status == 200
    assert len(enqueue.sent) == 1
    envelope = enqueue.sent[0]
    assert envelope["event_id"] == "whatsapp:ABGGFlA5Fpa"
    assert envelope["session_key"] == "agent:main:whatsapp:dm:16315551181"
    assert envelope["reply_context"] == {"phone_number_id": "123456123"}


def test_a_forged_message_is_401_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    forged = call(post(notification(), secret="guessed"), enqueue)
    unsigned = call(post(notification(), secret=None), enqueue)
    unconfigured = call(post(notification()), enqueue, secrets={"WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN})

    assert (forged.status, unsigned.status, unconfigured.status) == (401, 401, 401)
    assert enqueue.calls == 0


def test_a_redelivered_message_is_not_enqueued_twice() -> None:
    enqueue = FakeEnqueue()

    first = call(post(notification()), enqueue)
    second = call(post(notification()), enqueue)

    assert (first.status, second.status) == (200, 200)
    assert len(enqueue.sent) == 1


def test_a_batch_with_a_status_enqueues_only_the_message() -> None:
    enqueue = FakeEnqueue()
    payload = notification(statuses=[{"id": "wamid.out", "status": "read"}])

    response = call(post(payload), enqueue)

    assert response.status == 200
    assert [e["event_id"] for e in enqueue.sent] == ["whatsapp:ABGGFlA5Fpa"]


def test_signed_but_malformed_json_is_400() -> None:
    enqueue = FakeEnqueue()
    response = call(post(None, raw=b"{not json"), enqueue)
    assert response.status == 400
    assert enqueue.calls == 0


# --- sender -------------------------------------------------------------------------------------


@pytest.fixture
def fake_whatsapp() -> Iterator[FakeWhatsApp]:
    with FakeWhatsApp() as fake:
        yield fake


@pytest.fixture
def sender(fake_whatsapp: FakeWhatsApp) -> WhatsAppSender:
    return WhatsAppSender(fake_whatsapp.base_url, fake_whatsapp.token, "123456123", timeout=2.0)


def _assert_no_token(exc: BaseException, token: str) -> None:
    assert token not in str(exc)
    assert token not in repr(exc)
    assert exc.__cause__ is None


def dm(chat_id: str = "16315551181", **context: str) -> Target:
    return Target("whatsapp", chat_id, context=context)


def test_send_posts_a_text_message_and_returns_the_wamid(fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender) -> None:
    assert sender.send(dm(), "hello") == "wamid.fake-1"

    request = fake_whatsapp.requests[0]
    assert (request.http_method, request.path) == ("POST", "/v21.0/123456123/messages")
    assert request.headers["authorization"] == f"Bearer {fake_whatsapp.token}"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "16315551181",
        "type": "text",
        "text": {"body": "hello", "preview_url": False},
    }


def test_the_number_that_received_the_message_answers(fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender) -> None:
    sender.send(dm("+16315551181", phone_number_id="999000"), "hi")
    assert fake_whatsapp.requests[0].path == "/v21.0/999000/messages"
    assert fake_whatsapp.requests[0].json["to"] == "16315551181"


def test_a_group_is_addressed_as_a_group(fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender) -> None:
    sender.send(dm("Y2FwaV9ncm91cDox", recipient_type="group"), "hi all")
    sender.send(dm("Y2FwaV9ncm91cDox"), "again")  # a group id is never a phone number
    assert [r.json["recipient_type"] for r in fake_whatsapp.requests] == ["group", "group"]
    assert fake_whatsapp.requests[0].json["to"] == "Y2FwaV9ncm91cDox"


def test_built_from_settings_like_production(fake_whatsapp: FakeWhatsApp) -> None:
    settings = make_settings({**ENV, "WHATSAPP_API_BASE_URL": fake_whatsapp.base_url})
    built = platforms.sender("whatsapp", settings, {"WHATSAPP_ACCESS_TOKEN": fake_whatsapp.token})
    assert built is not None
    assert built.send(dm(), "hi") == "wamid.fake-1"
    assert platforms.sender("whatsapp", settings, {}) is None
    assert fake_whatsapp.token not in repr(built)


def test_outside_the_24_hour_window_is_permanent_and_says_why(
    fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender
) -> None:
    fake_whatsapp.answer_next(
        400,
        meta_error(131047, "(#131047) Re-engagement message", "Message failed to send because more than 24 hours"),
    )
    with pytest.raises(PermanentError, match="user must write first") as caught:
        sender.send(dm(), "hi")
    assert not isinstance(caught.value, TargetGone)
    assert "template" in str(caught.value)


def test_429_with_retry_after_is_rate_limited(fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender) -> None:
    fake_whatsapp.answer_next(429, meta_error(130429, "(#130429) Rate limit hit"), headers={"Retry-After": "7"})
    with pytest.raises(RateLimited) as caught:
        sender.send(dm(), "hi")
    assert caught.value.retry_after == 7.0


@pytest.mark.parametrize(("code", "floor"), [(130429, 1.0), (131056, 6.0), (80007, 1.0)])
def test_rate_limit_codes_are_rate_limited(
    fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender, code: int, floor: float
) -> None:
    # Given Meta reports the limit with HTTP 400 and its own code, without Retry-After
    fake_whatsapp.answer_next(400, meta_error(code, f"(#{code}) rate limit"))
    with pytest.raises(RateLimited) as caught:
        sender.send(dm(), "hi")
    assert caught.value.retry_after == floor


@pytest.mark.parametrize(
    ("status", "body"), [(500, meta_error(1, "An unknown error occurred")), (503, "busy"), (400, meta_error(2, "x"))]
)
def test_server_errors_are_transient(
    fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender, status: int, body: Any
) -> None:
    fake_whatsapp.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender.send(dm(), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_token(caught.value, fake_whatsapp.token)


def test_an_undeliverable_recipient_is_gone(fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender) -> None:
    fake_whatsapp.answer_next(400, meta_error(131026, "(#131026) Message Undeliverable"))
    with pytest.raises(TargetGone, match="131026"):
        sender.send(dm(), "hi")


@pytest.mark.parametrize("status", [403, 404])
def test_other_refusals_are_permanent_not_gone(
    fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender, status: int
) -> None:
    fake_whatsapp.answer_next(status, meta_error(100, "(#100) Invalid parameter"))
    with pytest.raises(PermanentError) as caught:
        sender.send(dm(), "hi")
    assert not isinstance(caught.value, TargetGone)


def test_a_wrong_token_is_permanent_and_never_echoed(fake_whatsapp: FakeWhatsApp) -> None:
    wrong = "EAAG-wrong-token-that-must-stay-secret"
    with pytest.raises(PermanentError, match="access token") as caught:
        WhatsAppSender(fake_whatsapp.base_url, wrong, "123456123").send(dm(), "hi")
    _assert_no_token(caught.value, wrong)


def test_a_token_echoed_by_the_platform_is_scrubbed(fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender) -> None:
    fake_whatsapp.answer_next(400, meta_error(100, f"bad request for {fake_whatsapp.token}"))
    with pytest.raises(PermanentError) as caught:
        sender.send(dm(), "hi")
    _assert_no_token(caught.value, fake_whatsapp.token)


@pytest.mark.parametrize("body", [{"messaging_product": "whatsapp", "messages": []}, "ok", {"messages": [{}]}])
def test_a_success_without_a_message_id_is_an_unknown_outcome(
    fake_whatsapp: FakeWhatsApp, sender: WhatsAppSender, body: Any
) -> None:
    fake_whatsapp.answer_next(200, body)
    with pytest.raises(OutcomeUnknown, match="without a message id"):
        sender.send(dm(), "hi")


@pytest.mark.parametrize("number_id", ["", "../me"])
def test_no_usable_phone_number_id_is_permanent(fake_whatsapp: FakeWhatsApp, number_id: str) -> None:
    with pytest.raises(PermanentError, match="WHATSAPP_PHONE_NUMBER_ID"):
        WhatsAppSender(fake_whatsapp.base_url, fake_whatsapp.token, number_id).send(dm(), "hi")
    assert fake_whatsapp.requests == []


def test_no_access_token_means_no_sender() -> None:
    settings = make_settings(ENV)
    assert build_sender(platforms.context("whatsapp", settings, SECRETS)) is None
