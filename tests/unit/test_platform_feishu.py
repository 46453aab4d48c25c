"""Feishu / Lark: signature, decryption and token checks, event normalization, and the sender
against a fake Open API."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
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
from hermes_gateway.platforms.feishu import (
    FeishuInbound,
    FeishuRejected,
    FeishuSender,
    decrypt,
    parse_event,
    resolve_mentions,
    signature,
)
from hermes_gateway.services.ingress import Handshake, HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.feishu_server import RATE_LIMITED, SEND_PATH, TOKEN_PATH, FakeFeishu
from tests.fakes.services import FakeEnqueue, make_settings

NOW = 1_764_400_000.0
ENCRYPT_KEY = "test-encrypt-key-" + "k" * 16
VERIFICATION_TOKEN = "test-verification-token-Jhj5dZrV"
APP_ID = "cli_a1b2c3d4e5f60718"
BOTH = {"FEISHU_ENCRYPT_KEY": ENCRYPT_KEY, "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN}
ENV = {"FEISHU_ENABLED": "true", "FEISHU_APP_ID": APP_ID}

# PLATFORMS §15, self-made: a consistency check of the documented algorithm.
VECTOR = ("1700000000", "nonce123", "testkey", b'{"a":1}')
VECTOR_SIGNATURE = "3452dbcba9e7afaca54db14d6ed69d9fcf66577b4730d576b8fb8a6acf7bc846"
# The encrypted example event on Feishu's "配置 Encrypt Key" page; it decrypts with "kudryavka",
# the Encrypt Key of Feishu's SDK samples, to a schema 1.0 user_status_change event.
PUBLISHED_KEY = "kudryavka"
PUBLISHED_TOKEN = "GzhQEyfUcx7eEungQFWtXgCbxSpUOJIb"
PUBLISHED_CIPHERTEXT = (
    "FIAfJPGRmFZWkaxPQ1XrJZVbv2JwdjfLk4jx0k/U1deAqYK3AXOZ5zcHt/cC4ZNTqYwWUW/EoL+b2hW/C4zoAQQ5CeMtbxX2zHjm+E4nX/Aww+FHUL"
    "6iuIMaeL2KLxqdtbHRC50vgC2YI7xohnb3KuCNBMUzLiPeNIpVdnYaeteCmSaESb+AZpJB9PExzTpRDzCRv+T6o5vlzaE8UgIneC1sYu85BnPBEMTSu"
    "j1ZZzfdQi7ZW992Z4dmJxn9e8FL2VArNm99f5Io3c2O4AcNsQENNKtfAAxVjCqc3mg5jF0nKabA+u/5vrUD76flX1UOF5fzJ0sApG2OEn9wfyPDRBs"
    "Apn9o+fceF9hNrYBGsdtZrZYyGG387CGOtKsuj8e2E8SNp+Pn4E9oYejOTR+ZNLNi+twxaXVlJhr6l+RXYwEiMGQE9zGFBD6h2dOhKh3W84p1GEYnS"
    "RIz1+9/Hp66arjC7RCrhuW5OjCj4QFEQJiwgL45XryxHtiZ7JdAlPmjVsL03CxxFZarzxzffryrWUG3VkRdHRHbTsC34+ScoL5MTDU1QAWdqUC1T7x"
    "T0lCvQELaIhBTXAYrznJl6PlA83oqlMxpHh0gZBB1jFbfoUr7OQbBs1xqzpYK6Yjux6diwpQB1zlZErYJUfCqK7G/zI9yK/60b4HW0k3M+AvzMcw="
)


def encrypt(plain: bytes, key: str = ENCRYPT_KEY) -> str:
    """As Feishu does: base64(iv + AES-256-CBC(PKCS#7(plain))) with key SHA-256(encrypt_key)."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plain) + padder.finalize()
    encryptor = Cipher(algorithms.AES(hashlib.sha256(key.encode()).digest()), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + encryptor.update(padded) + encryptor.finalize()).decode()


def event(
    event_id: str = "5e3702a84e847582be8db7fb73283c02",
    *,
    chat_type: str = "p2p",
    text: str = "hello",
    token: str = VERIFICATION_TOKEN,
    **message: Any,
) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id,
            "event_type": "im.message.receive_v1",
            "create_time": "1608725989000",
            "token": token,
            "app_id": APP_ID,
            "tenant_key": "2ca1d211f64f6438",
        },
        "event": {
            "sender": {
                "sender_id": {
                    "union_id": "on_8ed6aa67826108097d9ee143816345",
                    "user_id": "e33ggbyz",
                    "open_id": "ou_84aad35d084aa403a838cf73ee18467",
                },
                "sender_type": "user",
                "tenant_key": "2ca1d211f64f6438",
            },
            "message": {
                "message_id": "om_5ce6d572455d361153b7cb51da133945",
                "create_time": "1609073151345",
                "chat_id": "oc_5ce6d572455d361153b7xx51da133945",
                "chat_type": chat_type,
                "message_type": "text",
                "content": json.dumps({"text": text}),
                **message,
            },
        },
    }


def challenge(token: str = VERIFICATION_TOKEN) -> dict[str, Any]:
    return {"challenge": "ajls384kdjx98XX", "token": token, "type": "url_verification"}


def request(
    payload: Any,
    *,
    encrypt_with: str | None = None,
    sign_with: str | None = None,
    timestamp: float = NOW,
    raw: bytes | None = None,
) -> HttpRequest:
    body = raw if raw is not None else json.dumps(payload).encode()
    if encrypt_with is not None:
        body = json.dumps({"encrypt": encrypt(body, encrypt_with)}).encode()
    headers = {"content-type": "application/json"}
    if sign_with is not None:
        ts, nonce = str(int(timestamp)), "nonce-" + os.urandom(4).hex()
        headers |= {
            "x-lark-request-timestamp": ts,
            "x-lark-request-nonce": nonce,
            "x-lark-signature": signature(ts, nonce, sign_with, body),
        }
    return HttpRequest(method="POST", path="/webhooks/feishu", headers=headers, body=body)


def sealed(payload: Any, key: str = ENCRYPT_KEY, timestamp: float = NOW) -> HttpRequest:
    """Encrypted and signed, as Feishu sends with an Encrypt Key."""
    return request(payload, encrypt_with=key, sign_with=key, timestamp=timestamp)


def adapter(secrets: Mapping[str, str] = BOTH, env: Mapping[str, str] = ENV) -> FeishuInbound:
    built = platforms.adapter("feishu", make_settings(env), secrets, clock=lambda: NOW)
    assert isinstance(built, FeishuInbound)
    return built


def message(payload: dict[str, Any]) -> InboundMessage:
    parsed = parse_event(payload, app_id=APP_ID, received_at=NOW)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- signature and decryption ---------------------------------------------------------------------


def test_the_signature_matches_the_self_made_vector() -> None:
    assert signature(*VECTOR) == VECTOR_SIGNATURE


def test_the_vector_verifies_through_the_adapter() -> None:
    ts, nonce, key, body = VECTOR
    headers = {"x-lark-request-timestamp": ts, "x-lark-request-nonce": nonce, "x-lark-signature": VECTOR_SIGNATURE}
    signed = HttpRequest(method="POST", path="/webhooks/feishu", headers=headers, body=body)
    built = platforms.adapter("feishu", make_settings(ENV), {"FEISHU_ENCRYPT_KEY": key}, clock=lambda: 1_700_000_000)
    built.verify(signed)
    assert built.parse(signed, NOW) == Ignored("unsupported_schema")


def test_the_published_example_decrypts() -> None:
    plain = json.loads(decrypt(PUBLISHED_CIPHERTEXT, PUBLISHED_KEY))
    assert plain["uuid"] == "5226cd85b4d843dccee2e279d93f3ed3"
    assert plain["token"] == PUBLISHED_TOKEN
    assert plain["type"] == "event_callback"


def test_the_published_example_is_verified_and_ignored_as_schema_1() -> None:
    secrets = {"FEISHU_ENCRYPT_KEY": PUBLISHED_KEY, "FEISHU_VERIFICATION_TOKEN": PUBLISHED_TOKEN}
    sealed_example = request(None, raw=json.dumps({"encrypt": PUBLISHED_CIPHERTEXT}).encode(), sign_with=PUBLISHED_KEY)
    built = adapter(secrets)
    built.verify(sealed_example)
    assert built.parse(sealed_example, NOW) == Ignored("unsupported_schema")


def test_a_sealed_event_verifies_and_decrypts() -> None:
    req = sealed(event())
    built = adapter()
    built.verify(req)
    assert isinstance(built.parse(req, NOW), InboundMessage)


def test_a_forged_signature_is_refused() -> None:
    req = sealed(event())
    forged = HttpRequest(req.method, req.path, {**req.headers, "x-lark-signature": "0" * 64}, req.body)
    with pytest.raises(Unauthorized, match="signature does not match"):
        adapter().verify(forged)


def test_a_signature_by_another_key_is_refused() -> None:
    with pytest.raises(Unauthorized, match="signature does not match"):
        adapter().verify(request(event(), sign_with="another-key"))


def test_a_tampered_body_is_refused() -> None:
    req = sealed(event())
    tampered = HttpRequest(req.method, req.path, req.headers, req.body.replace(b'"}', b'x"}'))
    with pytest.raises(Unauthorized, match="signature does not match"):
        adapter().verify(tampered)


@pytest.mark.parametrize("skew", [-301, 301, -3600])
def test_a_replayed_or_stale_timestamp_is_refused(skew: int) -> None:
    with pytest.raises(Unauthorized, match="outside the 5-minute window"):
        adapter().verify(sealed(event(), timestamp=NOW + skew))


@pytest.mark.parametrize("skew", [-300, 0, 300])
def test_timestamps_inside_the_window_are_accepted(skew: int) -> None:
    adapter().verify(sealed(event(), timestamp=NOW + skew))


@pytest.mark.parametrize("missing", ["x-lark-request-timestamp", "x-lark-request-nonce"])
def test_a_signature_without_its_timestamp_or_nonce_is_refused(missing: str) -> None:
    req = sealed(event())
    headers = {k: v for k, v in req.headers.items() if k != missing}
    with pytest.raises(Unauthorized, match="missing"):
        adapter().verify(HttpRequest(req.method, req.path, headers, req.body))


def test_a_malformed_timestamp_is_refused() -> None:
    req = sealed(event())
    with pytest.raises(Unauthorized, match="malformed x-lark-request-timestamp"):
        adapter().verify(
            HttpRequest(req.method, req.path, {**req.headers, "x-lark-request-timestamp": "soon"}, req.body)
        )


def test_an_unsigned_event_is_refused_when_an_encrypt_key_is_configured() -> None:
    with pytest.raises(Unauthorized, match="signature headers are missing"):
        adapter().verify(request(event(), encrypt_with=ENCRYPT_KEY))


@pytest.mark.parametrize("secrets", [{}, {"FEISHU_ENCRYPT_KEY": "", "FEISHU_VERIFICATION_TOKEN": ""}])
def test_everything_is_refused_when_nothing_is_configured(secrets: dict[str, str]) -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        adapter(secrets).verify(sealed(event()))


# --- the verification token -----------------------------------------------------------------------


def test_a_signed_event_with_a_wrong_token_is_refused_when_both_secrets_are_set() -> None:
    with pytest.raises(Unauthorized, match="verification token does not match"):
        adapter().verify(sealed(event(token="stolen-token")))


def test_with_only_a_token_a_plain_event_is_accepted_on_its_token() -> None:
    adapter({"FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN}).verify(request(event()))


@pytest.mark.parametrize(("token", "reason"), [("wrong", "does not match"), ("", "no verification token")])
def test_with_only_a_token_a_wrong_or_missing_token_is_refused(token: str, reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason):
        adapter({"FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN}).verify(request(event(token=token)))


def test_with_only_a_token_an_encrypted_event_cannot_be_read() -> None:
    with pytest.raises(Unauthorized, match="FEISHU_ENCRYPT_KEY is not configured"):
        adapter({"FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN}).verify(request(event(), encrypt_with=ENCRYPT_KEY))


def test_with_only_a_key_a_signed_event_needs_no_token() -> None:
    adapter({"FEISHU_ENCRYPT_KEY": ENCRYPT_KEY}).verify(sealed(event(token="")))


def test_a_signed_but_malformed_body_passes_verification_and_is_a_bad_request() -> None:
    req = request(None, raw=b'{"encrypt": "not base64!"}', sign_with=ENCRYPT_KEY)
    built = adapter()
    built.verify(req)
    with pytest.raises(BadRequest, match="not base64"):
        built.parse(req, NOW)


def test_an_unsigned_body_that_does_not_decrypt_is_refused() -> None:
    with pytest.raises(Unauthorized, match="cannot be verified"):
        adapter({"FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN}).verify(request(None, raw=b"{"))


# --- the url_verification challenge ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("secrets", "encrypt_with"),
    [
        (BOTH, ENCRYPT_KEY),
        ({"FEISHU_ENCRYPT_KEY": ENCRYPT_KEY}, ENCRYPT_KEY),
        ({"FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN}, None),
    ],
)
def test_the_unsigned_challenge_is_answered(secrets: dict[str, str], encrypt_with: str | None) -> None:
    req = request(challenge(), encrypt_with=encrypt_with)
    built = adapter(secrets)
    built.verify(req)
    assert built.parse(req, NOW) == Handshake(HttpResponse(200, {"challenge": "ajls384kdjx98XX"}))


def test_a_challenge_with_a_wrong_token_is_refused() -> None:
    with pytest.raises(Unauthorized, match="does not match"):
        adapter().verify(request(challenge("wrong"), encrypt_with=ENCRYPT_KEY))


def test_a_plain_challenge_cannot_be_checked_with_only_a_key() -> None:
    with pytest.raises(Unauthorized, match="neither encrypted nor checkable"):
        adapter({"FEISHU_ENCRYPT_KEY": ENCRYPT_KEY}).verify(request(challenge()))


def test_a_challenge_encrypted_with_another_key_is_refused() -> None:
    with pytest.raises(Unauthorized, match="cannot be verified"):
        adapter().verify(request(challenge(), encrypt_with="another-key"))


def test_a_challenge_without_a_challenge_is_a_bad_request() -> None:
    with pytest.raises(BadRequest):
        adapter().parse(request({"type": "url_verification", "token": VERIFICATION_TOKEN}), NOW)


# --- normalization --------------------------------------------------------------------------------


def test_a_p2p_text_message_is_a_dm() -> None:
    parsed = message(event())

    assert parsed.text == "hello"
    assert parsed.event_id == "feishu:5e3702a84e847582be8db7fb73283c02"
    assert parsed.received_at == NOW
    source = parsed.source
    assert (source.platform, source.chat_type) == ("feishu", "dm")
    assert source.chat_id == "oc_5ce6d572455d361153b7xx51da133945"
    assert source.user_id == "ou_84aad35d084aa403a838cf73ee18467"
    assert source.user_id_alt == "on_8ed6aa67826108097d9ee143816345"
    assert source.message_id == "om_5ce6d572455d361153b7cb51da133945"
    assert source.scope_id == "2ca1d211f64f6438"
    assert (source.thread_id, source.is_bot) == (None, False)
    assert parsed.facts == ()


def test_a_group_mention_is_stripped_and_marks_the_bot_mentioned() -> None:
    mentions = [
        {"key": "@_user_1", "id": {"open_id": "ou_bot"}, "name": "Hermes", "tenant_key": "t"},
        {"key": "@_user_2", "id": {"open_id": "ou_bob"}, "name": "Bob", "tenant_key": "t"},
    ]
    parsed = message(event(chat_type="group", text="@_user_1  ask @_user_2 about it", mentions=mentions))

    assert parsed.source.chat_type == "group"
    assert parsed.text == "ask @Bob about it"
    assert parsed.facts == ("mentions_bot",)


def test_a_group_message_without_mentions_is_not_a_mention() -> None:
    assert message(event(chat_type="group")).facts == ()


def test_resolve_mentions_handles_unknown_keys_and_bare_mentions() -> None:
    assert resolve_mentions("@_user_1", [{"key": "@_user_1", "name": "Hermes"}]) == ""
    assert resolve_mentions("hi @_user_3 there", []) == "hi there"


def test_a_message_in_a_thread_is_keyed_by_the_thread_root() -> None:
    parsed = message(event(thread_id="omt_1a2b", root_id="om_root", parent_id="om_root"))
    assert parsed.source.thread_id == "om_root"
    assert parsed.reply_to_message_id is None


def test_a_reply_inside_a_thread_keeps_the_replied_message() -> None:
    parsed = message(event(thread_id="omt_1a2b", root_id="om_root", parent_id="om_middle"))
    assert (parsed.source.thread_id, parsed.reply_to_message_id) == ("om_root", "om_middle")


def test_the_first_message_of_a_topic_is_its_own_root() -> None:
    assert message(event(thread_id="omt_1a2b")).source.thread_id == "om_5ce6d572455d361153b7cb51da133945"


def test_a_quote_reply_outside_a_thread_is_not_a_thread() -> None:
    parsed = message(event(chat_type="group", root_id="om_q", parent_id="om_q"))
    assert (parsed.source.thread_id, parsed.reply_to_message_id) == (None, "om_q")


def test_another_app_is_a_bot() -> None:
    payload = event(chat_type="group")
    payload["event"]["sender"] = {"sender_id": {"open_id": "ou_other_bot"}, "sender_type": "app"}
    parsed = message(payload)
    assert parsed.source.is_bot is True
    assert parsed.source.user_id == "ou_other_bot"


def _with(payload: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(payload)
    target = changed
    for key in path[:-1]:
        target = target[key]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return changed


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (_with(event(), ("header", "event_type"), "im.message.message_read_v1"), "unsupported_event"),
        (_with(event(), ("header", "app_id"), "cli_someone_else"), "other_app"),
        (_with(event(), ("event", "message", "message_type"), "sticker"), "unsupported_message_type"),
        (_with(event(), ("event", "message", "chat_type"), "topic"), "unsupported_chat_type"),
        (_with(event(), ("event", "sender"), {"sender_id": {"app_id": APP_ID}, "sender_type": "app"}), "own_message"),
        (event(text="  "), "no_text"),
        (event(text="@_user_1", mentions=[{"key": "@_user_1", "name": "Hermes"}]), "no_text"),
    ],
)
def test_events_the_gateway_does_not_answer_are_ignored(payload: dict[str, Any], reason: str) -> None:
    assert parse_event(payload, app_id=APP_ID, received_at=NOW) == Ignored(reason)


@pytest.mark.parametrize(
    "payload",
    [
        _with(event(), ("header",), None),
        _with(event(), ("header", "event_id"), None),
        _with(event(), ("event",), None),
        _with(event(), ("event", "message"), "x"),
        _with(event(), ("event", "message", "chat_id"), None),
        _with(event(), ("event", "message", "message_id"), 5),
        _with(event(), ("event", "message", "content"), "{not json"),
        _with(event(), ("event", "message", "content"), json.dumps({"title": "no text"})),
        _with(event(), ("event", "message", "content"), json.dumps(["text"])),
    ],
)
def test_malformed_events_are_bad_requests(payload: dict[str, Any]) -> None:
    with pytest.raises(BadRequest):
        parse_event(payload, app_id=APP_ID, received_at=NOW)


def test_the_envelope_round_trips() -> None:
    parsed = message(event(chat_type="group", thread_id="omt_1", root_id="om_root", mentions=[{"key": "@_user_1"}]))
    assert InboundMessage.from_dict(parsed.to_dict()) == parsed


# --- through the ingress --------------------------------------------------------------------------


def call(req: HttpRequest, enqueue: FakeEnqueue) -> HttpResponse:
    settings = make_settings(ENV)
    return handle_webhook(
        "feishu",
        req,
        settings=settings,
        adapters=platforms.adapters(settings, BOTH, clock=lambda: NOW),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def test_a_good_event_is_200_with_exactly_one_envelope() -> None:
    enqueue = FakeEnqueue()

    response = call(sealed(event()), enqueue)

    assert response.status == 200
    assert len(enqueue.sent) == 1
    assert enqueue.sent[0]["event_id"] == "feishu:5e3702a84e847582be8db7fb73283c02"
    assert enqueue.sent[0]["session_key"] == "agent:main:feishu:dm:oc_5ce6d572455d361153b7xx51da133945"


def test_a_forged_event_is_401_and_nothing_is_enqueued() -> None:
    enqueue = FakeEnqueue()

    response = call(request(event(), encrypt_with=ENCRYPT_KEY, sign_with="forged-key"), enqueue)

    assert response.status == 401
    assert enqueue.calls == 0


def test_a_redelivered_event_is_not_enqueued_twice() -> None:
    # Given Feishu retries an event whose 200 it did not see (a new signature, the same event_id)
    enqueue = FakeEnqueue()

    first = call(sealed(event()), enqueue)
    second = call(sealed(event()), enqueue)

    assert (first.status, second.status) == (200, 200)
    assert second.body == {"ok": True, "duplicate": True}
    assert len(enqueue.sent) == 1


def test_the_challenge_is_answered_through_the_ingress_and_enqueues_nothing() -> None:
    enqueue = FakeEnqueue()
    response = call(request(challenge(), encrypt_with=ENCRYPT_KEY), enqueue)
    assert (response.status, response.body) == (200, {"challenge": "ajls384kdjx98XX"})
    assert enqueue.calls == 0


# --- sender ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_feishu() -> Iterator[FakeFeishu]:
    with FakeFeishu(app_id=APP_ID) as fake:
        yield fake


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sender(fake_feishu: FakeFeishu, clock: Clock) -> FeishuSender:
    return FeishuSender(fake_feishu.base_url, APP_ID, fake_feishu.app_secret, timeout=2.0, clock=clock)


def _assert_no_secret(exc: BaseException, fake: FakeFeishu) -> None:
    for secret in (fake.app_secret, "t-fake-tenant-token"):
        assert secret not in str(exc)
        assert secret not in repr(exc)
    assert exc.__cause__ is None


def test_send_fetches_a_token_once_and_posts_text_to_the_chat(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    first = sender.send(Target("feishu", "oc_group"), "hello 你好")
    second = sender.send(Target("feishu", "oc_p2p"), "again")

    assert (first, second) == ("om_1", "om_2")
    token_calls = fake_feishu.calls(TOKEN_PATH)
    assert len(token_calls) == 1
    assert token_calls[0].json == {"app_id": APP_ID, "app_secret": fake_feishu.app_secret}
    sent = fake_feishu.calls(SEND_PATH)[0]
    assert sent.query == {"receive_id_type": "chat_id"}
    assert sent.headers["authorization"] == "Bearer t-fake-tenant-token-0001"
    assert sent.headers["content-type"] == "application/json; charset=utf-8"
    assert sent.json == {"receive_id": "oc_group", "msg_type": "text", "content": '{"text": "hello 你好"}'}
    assert json.loads(sent.json["content"]) == {"text": "hello 你好"}


def test_the_token_is_fetched_again_near_its_expiry(
    fake_feishu: FakeFeishu, sender: FeishuSender, clock: Clock
) -> None:
    sender.send(Target("feishu", "oc_group"), "one")
    clock.now += 7200 - 301
    sender.send(Target("feishu", "oc_group"), "two")
    clock.now += 2
    sender.send(Target("feishu", "oc_group"), "three")

    assert len(fake_feishu.calls(TOKEN_PATH)) == 2
    assert fake_feishu.calls(SEND_PATH)[-1].headers["authorization"] == "Bearer t-fake-tenant-token-0002"


def test_a_token_feishu_calls_invalid_is_replaced_once(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    sender.send(Target("feishu", "oc_group"), "one")
    fake_feishu.revoke_tokens()

    assert sender.send(Target("feishu", "oc_group"), "two") == "om_2"
    assert len(fake_feishu.calls(TOKEN_PATH)) == 2


def test_a_token_refused_twice_is_permanent(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    sender.send(Target("feishu", "oc_group"), "one")
    fake_feishu.tokens_work = False
    with pytest.raises(FeishuRejected) as caught:
        sender.send(Target("feishu", "oc_group"), "two")
    assert caught.value.code == 99991663
    assert len(fake_feishu.calls(TOKEN_PATH)) == 2


def test_a_thread_reply_goes_to_the_root_message_in_thread(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    assert sender.send(Target("feishu", "oc_group", "om_root"), "in thread") == "om_1"

    reply = fake_feishu.requests[-1]
    assert reply.path == "/im/v1/messages/om_root/reply"
    assert reply.json == {"msg_type": "text", "content": '{"text": "in thread"}', "reply_in_thread": True}


def test_a_recalled_thread_root_falls_back_to_the_chat(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    fake_feishu.recalled.add("om_root")
    assert sender.send(Target("feishu", "oc_group", "om_root"), "still answered") == "om_1"
    assert fake_feishu.sent[0]["receive_id"] == "oc_group"


@pytest.mark.parametrize(
    ("status", "body", "headers", "expected"),
    [
        (429, RATE_LIMITED, {"x-ogw-ratelimit-limit": "100", "x-ogw-ratelimit-reset": "52"}, 52.0),
        (400, RATE_LIMITED, {"x-ogw-ratelimit-reset": "3"}, 3.0),
        (400, {"code": 230020, "msg": "This operation triggers the frequency limit."}, {}, 1.0),
        (429, "Too Many Requests", {"Retry-After": "9"}, 9.0),
    ],
)
def test_rate_limits_honour_the_reset_header(
    fake_feishu: FakeFeishu,
    sender: FeishuSender,
    status: int,
    body: Any,
    headers: dict[str, str],
    expected: float,
) -> None:
    sender.send(Target("feishu", "oc_group"), "warm the token")
    fake_feishu.answer_next(status, body, headers=headers)
    with pytest.raises(RateLimited) as caught:
        sender.send(Target("feishu", "oc_group"), "hi")
    assert caught.value.retry_after == expected
    _assert_no_secret(caught.value, fake_feishu)


@pytest.mark.parametrize(("status", "body"), [(500, {"code": 1500, "msg": "internal error"}), (502, "bad gateway")])
def test_server_errors_are_transient(fake_feishu: FakeFeishu, sender: FeishuSender, status: int, body: Any) -> None:
    sender.send(Target("feishu", "oc_group"), "warm the token")
    fake_feishu.answer_next(status, body)
    with pytest.raises(TransientError) as caught:
        sender.send(Target("feishu", "oc_group"), "hi")
    assert not isinstance(caught.value, RateLimited)
    _assert_no_secret(caught.value, fake_feishu)


def test_a_chat_the_bot_is_not_in_is_gone(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    with pytest.raises(TargetGone, match="230002") as caught:
        sender.send(Target("feishu", "oc_elsewhere"), "hi")
    _assert_no_secret(caught.value, fake_feishu)


@pytest.mark.parametrize("code", [230013, 232009])
def test_unreachable_users_and_dissolved_chats_are_gone(
    fake_feishu: FakeFeishu, sender: FeishuSender, code: int
) -> None:
    sender.send(Target("feishu", "oc_group"), "warm the token")
    fake_feishu.answer_next(400, {"code": code, "msg": "unreachable"})
    with pytest.raises(TargetGone):
        sender.send(Target("feishu", "oc_group"), "hi")


def test_other_business_errors_are_permanent_but_not_gone(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    with pytest.raises(FeishuRejected) as caught:
        sender.send(Target("feishu", "oc_group", "om_unknown"), "hi")
    assert not isinstance(caught.value, TargetGone)
    assert caught.value.code == 230001


def test_wrong_app_credentials_are_permanent_and_never_echoed(fake_feishu: FakeFeishu) -> None:
    wrong = "wrong-app-secret-that-must-stay-secret"
    with pytest.raises(PermanentError, match="FEISHU_APP_SECRET") as caught:
        FeishuSender(fake_feishu.base_url, APP_ID, wrong).send(Target("feishu", "oc_group"), "hi")
    assert wrong not in str(caught.value)
    assert not fake_feishu.calls(SEND_PATH)


def test_a_token_echoed_in_an_error_is_scrubbed(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    sender.send(Target("feishu", "oc_group"), "warm the token")
    echo = {"code": 99992402, "msg": f"bad header Bearer t-fake-tenant-token-0001 for {fake_feishu.app_secret}"}
    fake_feishu.answer_next(400, echo)
    with pytest.raises(FeishuRejected) as caught:
        sender.send(Target("feishu", "oc_group"), "hi")
    _assert_no_secret(caught.value, fake_feishu)


def test_a_rate_limited_token_request_is_rate_limited(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    fake_feishu.answer_next(429, RATE_LIMITED, headers={"x-ogw-ratelimit-reset": "4"})
    with pytest.raises(RateLimited) as caught:
        sender.send(Target("feishu", "oc_group"), "hi")
    assert caught.value.retry_after == 4.0


def test_a_success_without_a_message_id_is_permanent(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    sender.send(Target("feishu", "oc_group"), "warm the token")
    fake_feishu.answer_next(200, {"code": 0, "msg": "success", "data": {}})
    with pytest.raises(OutcomeUnknown, match="without a message_id"):
        sender.send(Target("feishu", "oc_group"), "hi")


def test_build_sender_needs_the_app_id_and_secret(fake_feishu: FakeFeishu) -> None:
    env = {**ENV, "FEISHU_API_BASE_URL": fake_feishu.base_url}
    secret = {"FEISHU_APP_SECRET": fake_feishu.app_secret}
    assert platforms.sender("feishu", make_settings(env), {}) is None
    assert platforms.sender("feishu", make_settings({"FEISHU_ENABLED": "true"}), secret) is None
    built = platforms.sender("feishu", make_settings(env), secret)
    assert built is not None
    assert built.send(Target("feishu", "oc_group"), "wired") == "om_1"
    assert fake_feishu.app_secret not in repr(built)


def test_the_default_api_base_url_is_feishu_open_apis() -> None:
    assert make_settings(ENV).platforms["feishu"].api_base_url == "https://open.feishu.cn/open-apis"


def test_every_try_of_one_outbox_chunk_carries_one_uuid(fake_feishu: FakeFeishu, sender: FeishuSender) -> None:
    # Feishu sends at most one message per uuid within an hour: the outbox's retry after a timeout
    # Feishu had taken answers the first message
    chunk = Target("feishu", "oc_group", delivery_id="turn-1#1")
    first = sender.send(chunk, "answer")
    assert sender.send(chunk, "answer") == first
    assert [json.loads(s["content"])["text"] for s in fake_feishu.sent] == ["answer"]
    uuids = {call.json["uuid"] for call in fake_feishu.calls(SEND_PATH)}
    assert len(uuids) == 1 and len(next(iter(uuids))) <= 50
    assert sender.send(Target("feishu", "oc_group", delivery_id="turn-1#2"), "more") != first
    sender.send(Target("feishu", "oc_group"), "plain")  # no outbox row: no uuid
    assert "uuid" not in fake_feishu.calls(SEND_PATH)[-1].json
    assert len(fake_feishu.sent) == 3
