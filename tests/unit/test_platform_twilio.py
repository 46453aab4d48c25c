"""Twilio SMS: X-Twilio-Signature over the rebuilt URL, form normalization, TwiML acknowledgement,
the sender and webhook registration against a fake Twilio REST API."""

from __future__ import annotations

import base64
import hashlib
import hmac
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
from hermes_gateway.platforms.base import AdapterContext, Target
from hermes_gateway.platforms.twilio import (
    EMPTY_TWIML,
    SIGNATURE_HEADER,
    parse_message,
    signed_url,
    twilio_signature,
)
from hermes_gateway.services.ingress import Accepted, HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.services import FakeEnqueue, make_settings
from tests.fakes.twilio_server import DEFAULT_NUMBER, FakeTwilio, twilio_error

AUTH_TOKEN = "twilio-auth-token-for-tests"
NOW = 1_764_400_000.0
ENV = {"SMS_ENABLED": "true"}
HOST = "abc123.execute-api.eu-west-1.amazonaws.com"

# Twilio's documented example (PLATFORMS §11 and §15)
VECTOR_URL = "https://mycompany.com/myapp.php?foo=1&bar=2"
VECTOR_PARAMS = {
    "CallSid": "CA1234567890ABCDE",
    "Caller": "+12349013030",
    "Digits": "1234",
    "From": "+12349013030",
    "To": "+18005551212",
}
VECTOR_SIGNATURE = "0/KCTR6DLpKmkAf8muzZqo1nDgQ="


def sms(**overrides: str) -> dict[str, str]:
    """The parameters of an incoming SMS as Twilio posts them."""
    params = {
        "ToCountry": "US",
        "SmsMessageSid": "SM0123456789abcdef0123456789abcdef",
        "NumMedia": "0",
        "SmsSid": "SM0123456789abcdef0123456789abcdef",
        "SmsStatus": "received",
        "Body": "Hello there",
        "To": "+15005550006",
        "NumSegments": "1",
        "MessageSid": "SM0123456789abcdef0123456789abcdef",
        "AccountSid": "AC0123456789abcdef0123456789abcdef",
        "From": "+14155552671",
        "ApiVersion": "2010-04-01",
    }
    params.update(overrides)
    return params


def request(
    params: dict[str, str],
    *,
    token: str | None = AUTH_TOKEN,
    url: str | None = None,
    headers: dict[str, str] | None = None,
    path: str = "/webhooks/sms",
    raw_query: str = "",
) -> HttpRequest:
    """A request as the ingress sees it, signed by Twilio over `url` (default: the host-based URL)."""
    sent = {"host": HOST, "content-type": "application/x-www-form-urlencoded", **(headers or {})}
    if token is not None:
        signed = url or f"https://{HOST}{path}" + (f"?{raw_query}" if raw_query else "")
        sent[SIGNATURE_HEADER] = twilio_signature(token, signed, params.items())
    body = urllib.parse.urlencode(params).encode()
    return HttpRequest(method="POST", path=path, headers=sent, body=body, raw_query=raw_query)


def adapter(env: dict[str, str] | None = None, secrets: dict[str, str] | None = None) -> Any:
    settings = make_settings({**ENV, **(env or {})})
    return platforms.adapter("sms", settings, {"TWILIO_AUTH_TOKEN": AUTH_TOKEN} if secrets is None else secrets)


def call(req: HttpRequest, enqueue: FakeEnqueue, secrets: dict[str, str] | None = None) -> HttpResponse:
    settings = make_settings(ENV)
    return handle_webhook(
        "sms",
        req,
        settings=settings,
        adapters=platforms.adapters(settings, {"TWILIO_AUTH_TOKEN": AUTH_TOKEN} if secrets is None else secrets),
        enqueue_once=enqueue,
        received_at=NOW,
    )


# --- signature ----------------------------------------------------------------------------------


def test_twilios_published_vector() -> None:
    assert twilio_signature("12345", VECTOR_URL, VECTOR_PARAMS.items()) == VECTOR_SIGNATURE


def test_the_published_vector_verifies_with_the_url_rebuilt_from_the_request() -> None:
    # Given Twilio's example request arriving with host mycompany.com and path /myapp.php
    body = urllib.parse.urlencode(VECTOR_PARAMS).encode()
    req = HttpRequest(
        method="POST",
        path="/myapp.php",
        headers={"host": "mycompany.com", SIGNATURE_HEADER: VECTOR_SIGNATURE},
        body=body,
        raw_query="foo=1&bar=2",
    )
    assert signed_url(req) == VECTOR_URL
    adapter(secrets={"TWILIO_AUTH_TOKEN": "12345"}).verify(req)


def test_the_public_url_option_wins_and_gets_the_request_query() -> None:
    req = HttpRequest(
        method="POST",
        path="/webhooks/sms",
        headers={"host": HOST, SIGNATURE_HEADER: VECTOR_SIGNATURE},
        body=urllib.parse.urlencode(VECTOR_PARAMS).encode(),
        raw_query="foo=1&bar=2",
    )
    env = {"TWILIO_PUBLIC_URL": "https://mycompany.com/myapp.php"}
    adapter(env, secrets={"TWILIO_AUTH_TOKEN": "12345"}).verify(req)
    assert signed_url(req, "https://mycompany.com/myapp.php?x=1") == "https://mycompany.com/myapp.php?x=1"


def test_a_signed_request_is_accepted() -> None:
    adapter().verify(request(sms()))


def test_the_forwarded_scheme_is_honoured() -> None:
    # Given a local tunnel that forwards plain http and says so
    url = f"http://{HOST}/webhooks/sms"
    adapter().verify(request(sms(), url=url, headers={"x-forwarded-proto": "http"}))
    with pytest.raises(Unauthorized, match="does not match"):
        adapter().verify(request(sms(), headers={"x-forwarded-proto": "http"}))


def test_a_url_signed_with_the_default_port_is_accepted() -> None:
    adapter().verify(request(sms(), url=f"https://{HOST}:443/webhooks/sms"))


def test_repeated_parameters_sign_sorted() -> None:
    params = [("b", "2"), ("a", "9"), ("a", "1")]
    assert twilio_signature("t", "https://x/y", params) == twilio_signature("t", "https://x/y", reversed(params))
    manual = base64.b64encode(hmac.new(b"t", b"https://x/ya1a9b2", hashlib.sha1).digest()).decode()
    assert twilio_signature("t", "https://x/y", params) == manual


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda r: {**r.headers, SIGNATURE_HEADER: ""}, "missing"),
        (lambda r: {k: v for k, v in r.headers.items() if k != SIGNATURE_HEADER}, "missing"),
        (lambda r: {**r.headers, SIGNATURE_HEADER: "AAAA"}, "does not match"),
        (lambda r: {**r.headers, SIGNATURE_HEADER: "é"}, "does not match"),
        (lambda r: {**r.headers, "host": "evil.example.com"}, "does not match"),
        (lambda r: {k: v for k, v in r.headers.items() if k != "host"}, "host"),
    ],
)
def test_missing_or_forged_signatures_are_refused(mutate: Any, reason: str) -> None:
    good = request(sms())
    forged = HttpRequest(good.method, good.path, mutate(good), good.body)
    with pytest.raises(Unauthorized, match=reason):
        adapter().verify(forged)


def test_a_tampered_body_or_another_token_is_refused() -> None:
    good = request(sms())
    with pytest.raises(Unauthorized, match="does not match"):
        adapter().verify(HttpRequest(good.method, good.path, good.headers, good.body.replace(b"Hello", b"Hellp")))
    with pytest.raises(Unauthorized, match="does not match"):
        adapter().verify(request(sms(), token="another-token"))


def test_a_body_that_is_not_utf8_is_refused() -> None:
    good = request(sms())
    with pytest.raises(Unauthorized, match="form-encoded"):
        adapter().verify(HttpRequest(good.method, good.path, good.headers, b"\xff\xfe"))


@pytest.mark.parametrize("secrets", [{}, {"TWILIO_AUTH_TOKEN": ""}])
def test_no_auth_token_refuses_everything(secrets: dict[str, str]) -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        adapter(secrets=secrets).verify(request(sms()))


# --- normalization ------------------------------------------------------------------------------


def _message(params: dict[str, str]) -> InboundMessage:
    parsed = parse_message(list(params.items()), received_at=NOW)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


def test_an_sms_becomes_a_dm_from_the_sender() -> None:
    message = _message(sms())

    assert message.text == "Hello there"
    assert message.event_id == "sms:SM0123456789abcdef0123456789abcdef"
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id, source.user_id) == (
        "sms",
        "dm",
        "+14155552671",
        "+14155552671",
    )
    assert source.scope_id == "+15005550006"
    assert source.message_id == "SM0123456789abcdef0123456789abcdef"
    assert message.reply_context == {"from_number": "+15005550006"}
    assert InboundMessage.from_dict(message.to_dict()) == message


def test_media_is_listed_and_its_text_kept() -> None:
    params = sms(
        NumMedia="2",
        MediaUrl0="https://api.twilio.com/m0",
        MediaContentType0="image/jpeg",
        MediaUrl1="https://api.twilio.com/m1",
        MediaContentType1="image/png",
        Body="",
    )
    message = _message(params)
    assert message.text == ""
    assert message.attachments == (
        {"kind": "image", "mime": "image/jpeg", "ref": {"url": "https://api.twilio.com/m0"}},
        {"kind": "image", "mime": "image/png", "ref": {"url": "https://api.twilio.com/m1"}},
    )


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        (sms(Body=""), "no_text"),
        (sms(Body="   "), "no_text"),
        (sms(Body="STOP"), "opt_keyword"),
        (sms(Body=" help "), "opt_keyword"),
        ({k: v for k, v in sms(MessageStatus="delivered").items() if k != "Body"}, "status_callback"),
    ],
)
def test_messages_without_text_keywords_and_status_callbacks_are_ignored(params: dict[str, str], reason: str) -> None:
    assert parse_message(list(params.items()), received_at=NOW) == Ignored(reason)


@pytest.mark.parametrize(
    "params",
    [
        {k: v for k, v in sms().items() if k not in ("MessageSid", "SmsSid")},
        {k: v for k, v in sms().items() if k != "From"},
        sms(NumMedia="lots"),
    ],
)
def test_malformed_messages_are_bad_requests(params: dict[str, str]) -> None:
    with pytest.raises(BadRequest):
        parse_message(list(params.items()), received_at=NOW)


def test_parse_always_answers_empty_twiml() -> None:
    ack = HttpResponse.text(200, EMPTY_TWIML, "text/xml")
    assert adapter().parse(request(sms(Body="")), NOW) == Accepted(items=(Ignored("no_text"),), ack=ack)


# --- through the ingress ------------------------------------------------------------------------


def test_a_signed_sms_is_enqueued_once_and_answered_with_empty_twiml() -> None:
    enqueue = FakeEnqueue()

    response = call(request(sms()), enqueue)

    assert response.status == 200
    assert response.body == '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
    assert response.headers["content-type"] == "text/xml"
    assert len(enqueue.sent) == 1
    assert enqueue.sent[0]["session_key"] == "agent:main:sms:dm:+14155552671"


def test_a_forged_sms_is_401_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    forged = call(request(sms(), token="guessed"), enqueue)
    unconfigured = call(request(sms()), enqueue, secrets={})

    assert (forged.status, unconfigured.status) == (401, 401)
    assert enqueue.calls == 0


def test_a_repeated_sms_is_not_enqueued_twice() -> None:
    enqueue = FakeEnqueue()

    first = call(request(sms()), enqueue)
    second = call(request(sms()), enqueue)

    assert (first.status, second.status) == (200, 200)
    assert second.body == EMPTY_TWIML
    assert len(enqueue.sent) == 1


def test_a_signed_but_malformed_sms_is_400() -> None:
    enqueue = FakeEnqueue()
    response = call(request({"Body": "no ids"}), enqueue)
    assert response.status == 400
    assert enqueue.calls == 0


# --- sender and registration --------------------------------------------------------------------


@pytest.fixture
def fake_twilio() -> Iterator[FakeTwilio]:
    with FakeTwilio() as fake:
        yield fake


def context(fake: FakeTwilio, *, token: str | None = None, **env: str) -> AdapterContext:
    settings = make_settings(
        {
            **ENV,
            "SMS_API_BASE_URL": fake.base_url,
            "TWILIO_ACCOUNT_SID": fake.account_sid,
            "TWILIO_FROM_NUMBER": DEFAULT_NUMBER,
            **env,
        }
    )
    return platforms.context("sms", settings, {"TWILIO_AUTH_TOKEN": token or fake.auth_token})


def sender(fake: FakeTwilio, **env: str) -> Any:
    built = platforms.sender("sms", context(fake, **env).settings, {"TWILIO_AUTH_TOKEN": fake.auth_token})
    assert built is not None
    return built


def target(**context: str) -> Target:
    return Target("sms", "+14155552671", context=context)


def _assert_no_token(exc: BaseException, token: str) -> None:
    assert token not in str(exc)
    assert token not in repr(exc)
    assert exc.__cause__ is None


def test_send_posts_the_form_with_basic_auth_and_returns_the_sid(fake_twilio: FakeTwilio) -> None:
    assert sender(fake_twilio).send(target(), "hello there") == "SMfake1"

    sent = fake_twilio.requests[0]
    assert (sent.http_method, sent.path) == ("POST", f"/2010-04-01/Accounts/{fake_twilio.account_sid}/Messages.json")
    credentials = base64.b64encode(f"{fake_twilio.account_sid}:{fake_twilio.auth_token}".encode()).decode()
    assert sent.headers["authorization"] == f"Basic {credentials}"
    assert sent.headers["content-type"] == "application/x-www-form-urlencoded"
    assert sent.form == {"To": "+14155552671", "From": DEFAULT_NUMBER, "Body": "hello there"}


def test_the_reply_goes_out_from_the_number_the_user_wrote_to(fake_twilio: FakeTwilio) -> None:
    sender(fake_twilio).send(target(from_number="+15005550009"), "hi")
    assert fake_twilio.requests[0].form["From"] == "+15005550009"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        (21610, "Attempt to send to unsubscribed recipient"),
        (21211, "The 'To' number +1 is not a valid phone number."),
        (21614, "'To' number is not a valid mobile number"),
    ],
)
def test_unsubscribed_or_invalid_numbers_are_gone(fake_twilio: FakeTwilio, code: int, message: str) -> None:
    fake_twilio.answer_next(400, twilio_error(400, code, message))
    with pytest.raises(TargetGone, match=str(code)):
        sender(fake_twilio).send(target(), "hi")


@pytest.mark.parametrize("status", [429, 400])
def test_too_many_requests_is_rate_limited_with_retry_after(fake_twilio: FakeTwilio, status: int) -> None:
    fake_twilio.answer_next(status, twilio_error(status, 20429, "Too Many Requests"), headers={"Retry-After": "4"})
    with pytest.raises(RateLimited) as caught:
        sender(fake_twilio).send(target(), "hi")
    assert caught.value.retry_after == 4.0


@pytest.mark.parametrize(("status", "body"), [(500, twilio_error(500, 20500, "Internal Server Error")), (503, "")])
def test_server_errors_are_transient(fake_twilio: FakeTwilio, status: int, body: Any) -> None:
    fake_twilio.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender(fake_twilio).send(target(), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_token(caught.value, fake_twilio.auth_token)


def test_wrong_credentials_are_permanent_and_never_echoed(fake_twilio: FakeTwilio) -> None:
    wrong = "wrong-twilio-token-that-must-stay-secret"
    built = platforms.sender("sms", context(fake_twilio).settings, {"TWILIO_AUTH_TOKEN": wrong})
    assert built is not None
    with pytest.raises(PermanentError, match="20003") as caught:
        built.send(target(), "hi")
    assert not isinstance(caught.value, TargetGone)
    _assert_no_token(caught.value, wrong)
    credentials = base64.b64encode(f"{fake_twilio.account_sid}:{wrong}".encode()).decode()
    assert credentials not in str(caught.value)
    assert wrong not in repr(built)


def test_an_echoed_token_is_scrubbed(fake_twilio: FakeTwilio) -> None:
    fake_twilio.answer_next(400, twilio_error(400, 21602, f"bad {fake_twilio.auth_token}"))
    with pytest.raises(PermanentError) as caught:
        sender(fake_twilio).send(target(), "hi")
    _assert_no_token(caught.value, fake_twilio.auth_token)


@pytest.mark.parametrize("body", [{"status": "queued"}, "Created", {"sid": ""}])
def test_a_success_without_a_sid_is_an_unknown_outcome(fake_twilio: FakeTwilio, body: Any) -> None:
    fake_twilio.answer_next(201, body)
    with pytest.raises(OutcomeUnknown):
        sender(fake_twilio).send(target(), "hi")


def test_no_number_to_send_from_is_permanent(fake_twilio: FakeTwilio) -> None:
    with pytest.raises(PermanentError, match="TWILIO_FROM_NUMBER"):
        sender(fake_twilio, TWILIO_FROM_NUMBER="").send(target(), "hi")
    assert fake_twilio.requests == []


def test_no_sender_without_credentials(fake_twilio: FakeTwilio) -> None:
    settings = context(fake_twilio).settings
    assert platforms.sender("sms", settings, {}) is None
    no_sid = make_settings({**ENV, "TWILIO_FROM_NUMBER": DEFAULT_NUMBER})
    assert platforms.sender("sms", no_sid, {"TWILIO_AUTH_TOKEN": fake_twilio.auth_token}) is None
