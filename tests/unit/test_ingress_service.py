"""Webhook ingress (services/ingress.py) with the real Telegram and web chat adapters.

The order of the checks is the contract: 404, 405, 413, 401 (nothing enqueued), 400, ignored 200,
duplicate 200, accepted 200, 503 when the queue is down.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import pytest

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import BadRequest, PayloadTooLarge, TransientError
from hermes_gateway.platforms.telegram import SECRET_HEADER
from hermes_gateway.platforms.webchat import TOKEN_HEADER
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, decode_body, handle_webhook
from hermes_gateway.settings import Settings
from tests.fakes import platforms
from tests.fakes.services import FakeEnqueue, make_settings

TG_SECRET = "tg-webhook-secret"
WC_TOKEN = "local-page-token"
NOW = 1_764_400_000.0
SECRETS = {"TELEGRAM_WEBHOOK_SECRET": TG_SECRET, "WEBCHAT_TOKEN": WC_TOKEN}


def tg_update(update_id: int = 1001, text: str | None = "hello", **message: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "message_id": 5,
        "date": 1_764_400_000,
        "chat": {"id": 99, "type": "private", "first_name": "Alice"},
        "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
    }
    if text is not None:
        msg["text"] = text
    msg.update(message)
    return {"update_id": update_id, "message": msg}


def tg_request(
    payload: Any, *, secret: str | None = TG_SECRET, method: str = "POST", raw: bytes | None = None
) -> HttpRequest:
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    body = raw if raw is not None else json.dumps(payload).encode()
    return HttpRequest(method=method, path="/webhooks/telegram", headers=headers, body=body)


def wc_request(payload: Any, *, token: str | None = WC_TOKEN) -> HttpRequest:
    headers = {TOKEN_HEADER: token} if token is not None else {}
    return HttpRequest(method="POST", path="/webhooks/webchat", headers=headers, body=json.dumps(payload).encode())


def call(
    platform: str,
    request: HttpRequest,
    enqueue: FakeEnqueue,
    *,
    settings: Settings | None = None,
    secrets: Mapping[str, str] = SECRETS,
) -> HttpResponse:
    settings = settings or make_settings({"WEBCHAT_ENABLED": "true"})
    return handle_webhook(
        platform,
        request,
        settings=settings,
        adapters=platforms.adapters(settings, secrets),
        enqueue_once=enqueue,
        received_at=NOW,
    )


# --- refusals, in contract order ----------------------------------------------------------------


@pytest.mark.parametrize("platform", ["slack", "", "../telegram"])
def test_unknown_platform_is_404(platform: str) -> None:
    enqueue = FakeEnqueue()

    response = call(platform, tg_request(tg_update()), enqueue)

    assert response.status == 404
    assert response.body["ok"] is False
    assert enqueue.calls == 0


def test_disabled_platform_is_404_even_with_a_valid_update() -> None:
    enqueue = FakeEnqueue()

    response = call("telegram", tg_request(tg_update()), enqueue, settings=make_settings({"TELEGRAM_ENABLED": "false"}))

    assert response.status == 404
    assert enqueue.calls == 0


def test_webchat_is_404_unless_enabled() -> None:
    enqueue = FakeEnqueue()
    payload = {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "hi"}

    response = call("webchat", wc_request(payload), enqueue, settings=make_settings({}))

    assert response.status == 404
    assert enqueue.calls == 0


@pytest.mark.parametrize("method", ["GET", "PUT", "post"])
def test_a_method_other_than_post_is_405(method: str) -> None:
    enqueue = FakeEnqueue()

    response = call("telegram", tg_request(tg_update(), method=method), enqueue)

    assert response.status == 405
    assert enqueue.calls == 0


def test_a_body_over_the_limit_is_413_before_verification() -> None:
    # Given a body one byte over the limit and no secret at all
    settings = make_settings({"GATEWAY_MAX_BODY_BYTES": "1024"})
    request = tg_request(None, raw=b"x" * 1025, secret=None)
    enqueue = FakeEnqueue()

    # When it arrives
    response = call("telegram", request, enqueue, settings=settings)

    # Then the size decides (413), not the missing secret
    assert response.status == 413
    assert enqueue.calls == 0


def test_a_body_at_the_limit_is_not_413() -> None:
    # Given a valid update padded to exactly the 1024-byte limit
    settings = make_settings({"GATEWAY_MAX_BODY_BYTES": "1024"})
    bare = len(json.dumps(tg_update(text="")).encode())
    body = json.dumps(tg_update(text="a" * (1024 - bare))).encode()
    assert len(body) == 1024

    # When it arrives, Then it is accepted
    response = call("telegram", tg_request(None, raw=body), FakeEnqueue(), settings=settings)

    assert response.status == 200


@pytest.mark.parametrize(
    ("secret", "configured"),
    [("wrong-secret", TG_SECRET), (None, TG_SECRET), ("", TG_SECRET), (TG_SECRET.upper(), TG_SECRET), ("x", None)],
)
def test_telegram_wrong_or_missing_secret_is_401_and_nothing_is_enqueued(
    secret: str | None, configured: str | None
) -> None:
    secrets = {"TELEGRAM_WEBHOOK_SECRET": configured} if configured else {}
    enqueue = FakeEnqueue()

    response = call("telegram", tg_request(tg_update(), secret=secret), enqueue, secrets=secrets)

    assert response.status == 401
    assert enqueue.calls == 0


def test_verification_comes_before_parsing() -> None:
    # Given malformed JSON with a wrong secret, Then 401 (an attacker learns nothing about parsing)
    response = call("telegram", tg_request(None, raw=b"{not json", secret="nope"), FakeEnqueue())

    assert response.status == 401


@pytest.mark.parametrize("token", ["wrong", "", None])
def test_webchat_wrong_or_missing_token_is_401(token: str | None) -> None:
    enqueue = FakeEnqueue()
    payload = {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "hi"}

    response = call("webchat", wc_request(payload, token=token), enqueue)

    assert response.status == 401
    assert enqueue.calls == 0


@pytest.mark.parametrize("raw", [b"{not json", b"", b"\xff\xfe{}", b"[1, 2"])
def test_malformed_json_is_400(raw: bytes) -> None:
    enqueue = FakeEnqueue()

    response = call("telegram", tg_request(None, raw=raw), enqueue)

    assert response.status == 400
    assert enqueue.calls == 0


@pytest.mark.parametrize(
    "update",
    [
        [],
        {"message": {"text": "no update id"}},
        {"update_id": "7", "message": {}},
        {"update_id": True, "message": {}},
        {"update_id": 7, "message": "text"},
        {"update_id": 7, "message": {"message_id": 1, "text": "x"}},
        {"update_id": 7, "message": {"message_id": 1, "chat": {"id": "99", "type": "private"}, "text": "x"}},
        {"update_id": 7, "message": {"chat": {"id": 99, "type": "private"}, "text": "x"}},
        {"update_id": 7, "message": {"message_id": 1, "chat": {"id": 99, "type": "private"}, "text": 5}},
        {
            "update_id": 7,
            "message": {"message_id": 1, "chat": {"id": 99, "type": "private"}, "text": "x", "from": {"id": "42"}},
        },
    ],
)
def test_malformed_update_is_400(update: Any) -> None:
    enqueue = FakeEnqueue()

    response = call("telegram", tg_request(update), enqueue)

    assert response.status == 400
    assert enqueue.calls == 0


@pytest.mark.parametrize(
    "payload",
    [
        {"chat_id": "c 1", "user_id": "u1", "message_id": "m1", "text": "hi"},
        {"chat_id": "c1", "user_id": "u1", "text": "hi"},
        {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": 3},
        {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "x" * 8001},
        ["not", "an", "object"],
    ],
)
def test_malformed_webchat_payload_is_400(payload: Any) -> None:
    enqueue = FakeEnqueue()

    response = call("webchat", wc_request(payload), enqueue)

    assert response.status == 400
    assert enqueue.calls == 0


@pytest.mark.parametrize(
    ("update", "reason"),
    [
        (tg_update(text=None, new_chat_members=[{"id": 1, "is_bot": False, "first_name": "A"}]), "no_text"),
        ({"update_id": 8, "edited_message": tg_update()["message"]}, "edited"),
        ({"update_id": 9, "poll": {"id": "q"}}, "unsupported_update"),
    ],
)
def test_ignorable_update_is_200_and_nothing_is_enqueued(update: dict[str, Any], reason: str) -> None:
    enqueue = FakeEnqueue()

    response = call("telegram", tg_request(update), enqueue)

    assert (response.status, response.body) == (200, {"ok": True, "ignored": reason})
    assert enqueue.calls == 0


def test_blank_webchat_text_is_ignored() -> None:
    enqueue = FakeEnqueue()

    payload = {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "  "}

    response = call("webchat", wc_request(payload), enqueue)

    assert response.status == 200 and response.body["ignored"] == "empty_text"
    assert enqueue.calls == 0


# --- acceptance -------------------------------------------------------------------------------


def test_accepted_telegram_update_enqueues_one_envelope_with_session_key_and_event_id() -> None:
    enqueue = FakeEnqueue()

    response = call("telegram", tg_request(tg_update(update_id=1001, text="hello")), enqueue)

    assert (response.status, response.body) == (200, {"ok": True})
    assert len(enqueue.sent) == 1
    envelope = enqueue.sent[0]
    assert envelope["session_key"] == "agent:main:telegram:dm:99"
    assert envelope["event_id"] == "telegram:default:1001"
    assert envelope["text"] == "hello"
    assert envelope["received_at"] == NOW
    # The envelope is what the router reads back.
    message = InboundMessage.from_dict(envelope)
    assert (message.source.platform, message.source.chat_id, message.source.user_id) == ("telegram", "99", "42")
    assert message.source.message_id == "5"


def test_the_session_key_follows_the_settings() -> None:
    # Given a profile and shared group sessions
    settings = make_settings({"GATEWAY_PROFILE": "coder", "GATEWAY_GROUP_SESSIONS_PER_USER": "false"})
    update = tg_update(chat={"id": -100123, "type": "supergroup", "title": "Ops"})
    enqueue = FakeEnqueue()

    call("telegram", tg_request(update), enqueue, settings=settings)

    assert enqueue.sent[0]["session_key"] == "agent:coder:telegram:group:-100123"


def test_accepted_webchat_message() -> None:
    enqueue = FakeEnqueue()
    payload = {"chat_id": "c1", "user_id": "u1", "message_id": "m1", "text": "hi", "user_name": "Sam"}

    response = call("webchat", wc_request(payload), enqueue)

    assert response.status == 200
    [envelope] = enqueue.sent
    assert envelope["event_id"] == "webchat:c1:m1"
    assert envelope["session_key"] == "agent:main:webchat:dm:c1"
    assert envelope["source"]["user_name"] == "Sam"


def test_a_duplicate_is_200_and_enqueued_once() -> None:
    # Given Telegram delivers the same update twice (it retries until it gets a 200)
    enqueue = FakeEnqueue()
    request = tg_request(tg_update(update_id=77))

    # When both arrive
    first = call("telegram", request, enqueue)
    second = call("telegram", request, enqueue)

    # Then both are acknowledged, the second as a duplicate, and one envelope went out
    assert (first.status, first.body) == (200, {"ok": True})
    assert (second.status, second.body) == (200, {"ok": True, "duplicate": True})
    assert len(enqueue.sent) == 1


def test_queue_down_is_503_with_retry_after() -> None:
    enqueue = FakeEnqueue(fail_with=TransientError("SQS throttled"))

    response = call("telegram", tg_request(tg_update()), enqueue)

    assert response.status == 503
    assert response.headers.get("retry-after") == "5"
    assert response.body["ok"] is False
    assert enqueue.sent == []


# --- decode_body ------------------------------------------------------------------------------


def test_decode_plain_and_base64_bodies() -> None:
    assert decode_body('{"a": 1}', False, 1024) == b'{"a": 1}'
    assert decode_body(base64.b64encode(b"\xff\x00raw").decode(), True, 1024) == b"\xff\x00raw"
    assert decode_body(None, False, 1024) == b""
    assert decode_body("", True, 1024) == b""


def test_decode_counts_bytes_not_characters() -> None:
    # 400 three-byte characters are 1200 bytes: over a 1024-byte limit although only 400 characters
    with pytest.raises(PayloadTooLarge):
        decode_body("€" * 400, False, 1024)
    assert decode_body("€" * 341, False, 1024) == ("€" * 341).encode()


@pytest.mark.parametrize("raw", ["not base64!", "abc", "YQ==YQ==", "YW Jj"])
def test_invalid_base64_is_bad_request(raw: str) -> None:
    with pytest.raises(BadRequest):
        decode_body(raw, True, 1024)


def test_base64_at_the_limit_decodes() -> None:
    body = bytes(range(256)) * 4  # exactly 1024 bytes, not UTF-8

    assert decode_body(base64.b64encode(body).decode(), True, 1024) == body


def test_base64_over_the_limit_after_decoding_is_too_large() -> None:
    # 1025 bytes encode to 1368 characters: within the encoded bound, so only the decoded check catches it
    encoded = base64.b64encode(b"x" * 1025).decode()

    with pytest.raises(PayloadTooLarge):
        decode_body(encoded, True, 1024)


def test_an_oversize_body_is_refused_before_decoding() -> None:
    # Characters that are not base64 at all: refused for size, so the decoder never runs (no 400)
    with pytest.raises(PayloadTooLarge):
        decode_body("!" * 5000, True, 1024)
    with pytest.raises(PayloadTooLarge):
        decode_body("x" * 4097, False, 1024)
