"""Bad input through local mode's HTTP front, on every platform of the catalog (the web chat page
aside): a forged signature, a replayed request and a timestamp outside the platform's window, a
malformed body, an oversize body, path-traversal ids, and unknown platforms. Each gets its expected
status and nothing is enqueued (no SendMessage to the inbound queue, counted at the adapter, so no
turn and no outbox row can follow). A correctly signed request per platform is the control: it is
accepted and enqueued exactly once, so each refusal below is the check's, not a broken signer's.

Platforms whose signature carries no time (Telegram, WhatsApp, LINE, Twilio, Matrix, Mattermost)
cannot refuse a replay by its age: a byte-identical replay is answered as a duplicate and enqueues
nothing. Those that sign a time (Slack, Discord, Standard Webhooks, relays, Feishu) and the bearer
token platforms (Teams, Google Chat: `exp`) refuse a request an hour old.

Pairing brute force: five wrong codes lock approvals on the platform, and then even the right code
is refused (`hermes-gateway pairing approve … --local`, run in-process).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.platforms.standard_webhook import sign as standard_sign
from hermes_gateway.resources import QUEUES
from hermes_local.runtime import LocalGateway
from tests.e2e.conftest import BASE_ENV, Client, telegram_update
from tests.fakes.google_server import FakeGoogle
from tests.fakes.jwt import SigningKeyPair
from tests.fakes.teams_server import DEFAULT_APP_ID, FakeBotFramework

pytestmark = pytest.mark.e2e

SECRETS = {
    "TELEGRAM_WEBHOOK_SECRET": "bad-input-telegram-secret",
    "SLACK_SIGNING_SECRET": "bad-input-slack-signing-secret",
    "WHATSAPP_APP_SECRET": "bad-input-meta-app-secret",
    "WHATSAPP_VERIFY_TOKEN": "bad-input-meta-verify",
    "WEBHOOK_SIGNING_SECRET": "whsec_" + base64.b64encode(b"bad-input-generic-webhook-key-32").decode(),
    "RELAY_SIGNING_SECRET": "whsec_" + base64.b64encode(b"bad-input-relay-signing-key-32by").decode(),
    "LINE_CHANNEL_SECRET": "bad-input-line-channel-secret",
    "TWILIO_AUTH_TOKEN": "bad-input-twilio-auth-token",
    "MATRIX_HS_TOKEN": "bad-input-matrix-hs-token",
    "FEISHU_ENCRYPT_KEY": "bad-input-feishu-encrypt-key",
    "FEISHU_VERIFICATION_TOKEN": "bad-input-feishu-verification",
    "MATTERMOST_OUTGOING_TOKEN": "bad-input-mattermost-token",
}
GOOGLE_PROJECT = "123456789012"
TEAMS_SERVICE_URL = "https://smba.trafficmanager.net/emea/"
TRAVERSAL = "../../etc/passwd"
HOUR = 3600.0


@dataclass(frozen=True)
class Keys:
    """Keys made for this module at run time; nothing is written anywhere."""

    discord: Any
    teams: SigningKeyPair
    google: SigningKeyPair
    forger: SigningKeyPair  # never published; signs under the published keys' ids


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True)
class Sign:
    """What a platform's signer needs: the keys, the gateway's host, the signing time, forged or not."""

    keys: Keys
    host: str
    at: float
    forged: bool


@dataclass(frozen=True)
class Platform:
    name: str
    payload: Callable[[int, str], bytes]  # (a unique number, the chat id) -> a well-formed body
    sign: Callable[[Sign, int, bytes], Request]  # signs any body, well-formed or not
    chat: str  # a well-formed chat id
    signs_time: bool = False  # the signature (or token) carries a time the platform bounds
    malformed: bytes = b'{"oops": '


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _hmac_hex(key: str, message: bytes) -> str:
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def _jwt(s: Sign, key: SigningKeyPair, claims: dict[str, Any]) -> str:
    lifetime = {"iat": int(s.at) - 10, "nbf": int(s.at) - 10, "exp": int(s.at) + 300}
    # A forger signs under the published key's id with a key of its own.
    return s.keys.forger.sign({**claims, **lifetime}, kid=key.kid) if s.forged else key.sign({**claims, **lifetime})


# --- each platform: a well-formed payload and how it is signed --------------------------------


def telegram_payload(n: int, chat: str) -> bytes:
    update = telegram_update(n, f"hello telegram {n}")
    update["message"]["chat"]["id"] = int(chat) if chat.lstrip("-").isdigit() else chat
    return _json(update)


def telegram_sign(s: Sign, n: int, body: bytes) -> Request:
    secret = "forged" if s.forged else SECRETS["TELEGRAM_WEBHOOK_SECRET"]
    headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": secret}
    return Request("POST", "/webhooks/telegram", body, headers)


def slack_payload(n: int, chat: str) -> bytes:
    return _json({
        "type": "event_callback", "team_id": "T1", "event_id": f"EvBad{n}",
        "event": {"type": "message", "channel_type": "im", "channel": chat, "user": "U7",
                  "text": f"hello slack {n}", "ts": f"1700000000.{n:06d}"},
    })  # fmt: skip


def slack_sign(s: Sign, n: int, body: bytes) -> Request:
    ts = str(int(s.at))
    signature = "v0=" + _hmac_hex(SECRETS["SLACK_SIGNING_SECRET"], f"v0:{ts}:".encode() + body)
    if s.forged:
        signature = signature[:-4] + "0000"
    headers = {"content-type": "application/json", "x-slack-request-timestamp": ts, "x-slack-signature": signature}
    return Request("POST", "/webhooks/slack", body, headers)


def whatsapp_payload(n: int, chat: str) -> bytes:
    return _json({"object": "whatsapp_business_account", "entry": [{"id": "W", "changes": [{"field": "messages",
        "value": {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "555"},
                  "contacts": [{"wa_id": chat, "profile": {"name": "Wa"}}],
                  "messages": [{"from": chat, "id": f"wamid.bad{n}", "timestamp": "1700000000",
                                "type": "text", "text": {"body": f"hello whatsapp {n}"}}]}}]}]})  # fmt: skip


def whatsapp_sign(s: Sign, n: int, body: bytes) -> Request:
    key = "forged" if s.forged else SECRETS["WHATSAPP_APP_SECRET"]
    headers = {"content-type": "application/json", "x-hub-signature-256": "sha256=" + _hmac_hex(key, body)}
    return Request("POST", "/webhooks/whatsapp", body, headers)


def discord_payload(n: int, chat: str) -> bytes:
    return _json({
        "type": 2, "id": str(1200000000000000000 + n), "application_id": "1100000000000000001", "token": f"tok-{n}",
        "guild_id": "1000000000000000001", "channel_id": chat,
        "member": {"user": {"id": "1000000000000000003", "username": "al"}},
        "data": {"name": "ask", "options": [{"name": "prompt", "type": 3, "value": f"hello discord {n}"}]},
    })  # fmt: skip


def discord_sign(s: Sign, n: int, body: bytes) -> Request:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    ts = str(int(s.at))
    signer = Ed25519PrivateKey.generate() if s.forged else s.keys.discord
    headers = {
        "content-type": "application/json",
        "x-signature-ed25519": signer.sign(ts.encode() + body).hex(),
        "x-signature-timestamp": ts,
    }
    return Request("POST", "/webhooks/discord", body, headers)


def standard_signer(platform: str, secret_name: str) -> Callable[[Sign, int, bytes], Request]:
    def sign(s: Sign, n: int, body: bytes) -> Request:
        msg_id, ts = f"msg_bad_{platform}_{n}", int(s.at)
        signature = standard_sign(SECRETS[secret_name], msg_id, ts, body + (b" " if s.forged else b""))
        headers = {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(ts),
            "webhook-signature": signature,
        }
        return Request("POST", f"/webhooks/{platform}", body, headers)

    return sign


def webhook_payload(n: int, chat: str) -> bytes:
    return _json({"text": f"hello webhook {n}", "chat_id": chat})


def relay_payload(n: int, chat: str) -> bytes:
    source = {"chat_id": chat, "chat_type": "dm", "user_id": chat}
    return _json({"platform": "signal", "event_id": f"sig-bad-{n}", "text": f"hello relay {n}", "source": source})


def line_payload(n: int, chat: str) -> bytes:
    return _json({"destination": "Ubot", "events": [{"type": "message", "webhookEventId": f"01BAD{n}",
        "deliveryContext": {"isRedelivery": False}, "timestamp": 1700000000000, "replyToken": "rt",
        "source": {"type": "user", "userId": chat}, "mode": "active",
        "message": {"type": "text", "id": f"{n}", "text": f"hello line {n}"}}]})  # fmt: skip


def line_sign(s: Sign, n: int, body: bytes) -> Request:
    key = "forged" if s.forged else SECRETS["LINE_CHANNEL_SECRET"]
    signature = base64.b64encode(hmac.new(key.encode(), body, hashlib.sha256).digest()).decode()
    return Request("POST", "/webhooks/line", body, {"content-type": "application/json", "x-line-signature": signature})


def sms_payload(n: int, chat: str) -> bytes:
    params = {"MessageSid": f"SM{n:032d}", "AccountSid": "AC1", "From": chat, "To": "+15559990000",
              "Body": f"hello sms {n}", "NumMedia": "0"}  # fmt: skip
    return urllib.parse.urlencode(params).encode()


def sms_sign(s: Sign, n: int, body: bytes) -> Request:
    params = dict(urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    signed = f"http://{s.host}/webhooks/sms" + "".join(k + params[k] for k in sorted(params))
    key = "forged" if s.forged else SECRETS["TWILIO_AUTH_TOKEN"]
    signature = base64.b64encode(hmac.new(key.encode(), signed.encode(), hashlib.sha1).digest()).decode()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-twilio-signature": signature,
        "x-forwarded-proto": "http",
    }
    return Request("POST", "/webhooks/sms", body, headers)


def teams_payload(n: int, chat: str) -> bytes:
    return _json({
        "type": "message", "id": f"17643999{n:05d}", "timestamp": "2025-11-29T06:26:39.123Z",
        "serviceUrl": TEAMS_SERVICE_URL, "channelId": "msteams",
        "from": {"id": "29:1alice-teams-id", "name": "Alice", "aadObjectId": "aad-0000-alice"},
        "conversation": {"conversationType": "personal", "tenantId": "tenant-0", "id": chat},
        "recipient": {"id": "28:" + DEFAULT_APP_ID, "name": "Hermes"},
        "text": f"hello teams {n}", "channelData": {"tenant": {"id": "tenant-0"}},
    })  # fmt: skip


def teams_sign(s: Sign, n: int, body: bytes) -> Request:
    claims = {"iss": "https://api.botframework.com", "aud": DEFAULT_APP_ID, "serviceurl": TEAMS_SERVICE_URL}
    headers = {"content-type": "application/json", "authorization": "Bearer " + _jwt(s, s.keys.teams, claims)}
    return Request("POST", "/webhooks/teams", body, headers)


def google_chat_payload(n: int, chat: str) -> bytes:
    space = {"name": chat, "type": "DM", "spaceType": "DIRECT_MESSAGE", "singleUserBotDm": True}
    sender = {"name": "users/111222333", "displayName": "Alice", "type": "HUMAN"}
    message = {"name": f"{chat}/messages/bad-{n}", "sender": sender, "text": f"hello google {n}",
               "argumentText": f"hello google {n}", "thread": {"name": f"{chat}/threads/bad-{n}"},
               "space": space, "createTime": "2025-11-29T06:26:40.000000Z"}  # fmt: skip
    return _json({"type": "MESSAGE", "eventTime": "2025-11-29T06:26:40.000000Z", "space": space,
                  "message": message, "user": sender})  # fmt: skip


def google_chat_sign(s: Sign, n: int, body: bytes) -> Request:
    claims = {"iss": "chat@system.gserviceaccount.com", "aud": GOOGLE_PROJECT}
    headers = {"content-type": "application/json", "authorization": "Bearer " + _jwt(s, s.keys.google, claims)}
    return Request("POST", "/webhooks/google_chat", body, headers)


def matrix_payload(n: int, chat: str) -> bytes:
    return _json({"events": [{"type": "m.room.message", "room_id": chat, "sender": "@al:example.org",
        "event_id": f"$bad{n}", "origin_server_ts": 1700000000000,
        "content": {"msgtype": "m.text", "body": f"hello matrix {n}"}}]})  # fmt: skip


def matrix_sign(s: Sign, n: int, body: bytes) -> Request:
    token = "forged" if s.forged else SECRETS["MATRIX_HS_TOKEN"]
    headers = {"content-type": "application/json", "authorization": f"Bearer {token}"}
    return Request("PUT", f"/webhooks/matrix/_matrix/app/v1/transactions/bad{n}", body, headers)


def feishu_payload(n: int, chat: str) -> bytes:
    header = {"event_id": f"fe-bad-{n}", "event_type": "im.message.receive_v1", "tenant_key": "tk",
              "token": SECRETS["FEISHU_VERIFICATION_TOKEN"], "app_id": "cli_1", "create_time": "1"}  # fmt: skip
    message = {"message_id": f"om_bad_{n}", "chat_id": chat, "chat_type": "p2p", "message_type": "text",
               "content": json.dumps({"text": f"hello feishu {n}"})}  # fmt: skip
    sender = {"sender_id": {"open_id": "ou_1", "union_id": "on_1"}, "sender_type": "user"}
    return _json({"schema": "2.0", "header": header, "event": {"sender": sender, "message": message}})


def feishu_sign(s: Sign, n: int, body: bytes) -> Request:
    ts, nonce = str(int(s.at)), f"nonce{n}"
    key = "forged" if s.forged else SECRETS["FEISHU_ENCRYPT_KEY"]
    signature = hashlib.sha256(ts.encode() + nonce.encode() + key.encode() + body).hexdigest()
    headers = {
        "content-type": "application/json",
        "x-lark-request-timestamp": ts,
        "x-lark-request-nonce": nonce,
        "x-lark-signature": signature,
    }
    return Request("POST", "/webhooks/feishu", body, headers)


def mattermost_payload(n: int, chat: str) -> bytes:
    params = {"token": SECRETS["MATTERMOST_OUTGOING_TOKEN"], "team_id": "tm", "channel_id": chat,
              "channel_name": "town-square", "post_id": f"postbad{n}", "user_id": "u1", "user_name": "al",
              "text": f"hello mattermost {n}", "timestamp": "1700000000"}  # fmt: skip
    return urllib.parse.urlencode(params).encode()


def mattermost_sign(s: Sign, n: int, body: bytes) -> Request:
    # The token travels in the body: a forged request carries another one.
    if s.forged:
        body = body.replace(urllib.parse.quote_plus(SECRETS["MATTERMOST_OUTGOING_TOKEN"]).encode(), b"forged")
    return Request("POST", "/webhooks/mattermost", body, {"content-type": "application/x-www-form-urlencoded"})


PLATFORMS = {
    p.name: p
    for p in (
        Platform("telegram", telegram_payload, telegram_sign, "4242"),
        Platform("slack", slack_payload, slack_sign, "D1", signs_time=True),
        Platform("whatsapp", whatsapp_payload, whatsapp_sign, "15551234567"),
        Platform("discord", discord_payload, discord_sign, "1000000000000000002", signs_time=True),
        Platform("webhook", webhook_payload, standard_signer("webhook", "WEBHOOK_SIGNING_SECRET"), "crm-7", True),
        Platform("relay", relay_payload, standard_signer("relay", "RELAY_SIGNING_SECRET"), "+15550002222", True),
        Platform("line", line_payload, line_sign, "Uline"),
        Platform(
            "sms",
            sms_payload,
            sms_sign,
            "+15550001111",
            malformed=urllib.parse.urlencode({"Body": "no sid, no sender"}).encode(),
        ),
        Platform("teams", teams_payload, teams_sign, "a:1personal-conversation", signs_time=True),
        Platform("google_chat", google_chat_payload, google_chat_sign, "spaces/DmBadInput", signs_time=True),
        Platform("matrix", matrix_payload, matrix_sign, "!room:example.org"),
        Platform("feishu", feishu_payload, feishu_sign, "oc_1", signs_time=True),
        Platform(
            "mattermost",
            mattermost_payload,
            mattermost_sign,
            "ch1",
            malformed=urllib.parse.urlencode({"token": SECRETS["MATTERMOST_OUTGOING_TOKEN"], "text": "x"}).encode(),
        ),
    )
}
# What each case is answered with, on every platform: the platform retries nothing it should not.
STATUS = {"forged": 401, "stale": 401, "malformed": 400, "oversize": 413, "traversal": 400}


# --- the gateway, with every platform on ------------------------------------------------------


@dataclass
class Gateway:
    client: Client
    keys: Keys
    enqueued: list[dict[str, Any]]  # every envelope the ingress sent to the inbound queue
    numbers: Iterator[int]

    def send(self, request: Request) -> tuple[int, Any]:
        return self.client.request(request.method, request.path, request.body, request.headers)

    def signed(
        self, platform: Platform, n: int, body: bytes, *, at: float | None = None, forged: bool = False
    ) -> Request:
        host = self.client.gateway.url.removeprefix("http://")
        return platform.sign(Sign(self.keys, host, time.time() if at is None else at, forged), n, body)

    def sent_now(self, request: Request) -> tuple[int, int]:
        """The status, and how many envelopes the request enqueued."""
        before = len(self.enqueued)
        status, _ = self.send(request)
        return status, len(self.enqueued) - before


@pytest.fixture(scope="class")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    from hermes_gateway.adapters import aws as aws_adapters
    from hermes_gateway.resources import INBOUND_QUEUE

    keys = Keys(
        Ed25519PrivateKey.generate(), SigningKeyPair("bf-key-1"), SigningKeyPair("chat-key-1"), SigningKeyPair()
    )
    discord_public = keys.discord.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    with (
        FakeBotFramework(keys=[keys.teams.jwk(endorsements=["msteams"])]) as bot_framework,
        FakeGoogle(keys=[keys.google.jwk(alg="RS256")]) as google,
    ):
        environ = {
            **BASE_ENV,
            **SECRETS,
            "GATEWAY_ALLOW_ALL_USERS": "true",
            "HERMES_LOCAL_STATE": str(tmp_path_factory.mktemp("bad-input") / "local.json"),
            "DISCORD_PUBLIC_KEY": discord_public,
            "TEAMS_APP_ID": DEFAULT_APP_ID,
            "TEAMS_OPENID_URL": bot_framework.openid_url,
            "GOOGLE_CHAT_AUDIENCE": GOOGLE_PROJECT,
            "GOOGLE_CHAT_CERTS_URL": google.certs_url,
        }
        local = LocalGateway(port=0, environ=environ, tick_seconds=3600, poll_wait_seconds=1).start()
        inbound_url = os.environ[INBOUND_QUEUE.env_var]
        enqueued: list[dict[str, Any]] = []
        original_send = aws_adapters.SqsQueue.send

        def send(queue: Any, body: dict[str, Any], **kwargs: Any) -> str:
            message_id = original_send(queue, body, **kwargs)
            if queue.url == inbound_url:
                enqueued.append(body)
            return str(message_id)

        aws_adapters.SqsQueue.send = send  # type: ignore[method-assign]
        try:
            yield Gateway(Client(local), keys, enqueued, iter(range(1, 1_000_000)))
        finally:
            aws_adapters.SqsQueue.send = original_send  # type: ignore[method-assign]
            _wait_idle()  # nothing of this gateway's left in flight for the next test's
            local.stop()


class TestEveryPlatform:
    """One gateway with every platform on, for the whole class (stopped before the pairing test's)."""

    def test_every_platform_of_the_catalog_is_covered(self, gateway: Gateway) -> None:
        served = {spec.name for spec in CATALOG if not spec.local_only}
        assert served == set(PLATFORMS)
        assert set(gateway.client.gateway.enabled_platforms()) >= served

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_correctly_signed_request_is_enqueued_once(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        assert gateway.sent_now(gateway.signed(platform, n, platform.payload(n, platform.chat))) == (200, 1)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_forged_signature_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat), forged=True)
        assert gateway.sent_now(request) == (STATUS["forged"], 0)

    @pytest.mark.parametrize("name", sorted(name for name, p in PLATFORMS.items() if p.signs_time))
    def test_a_request_signed_an_hour_ago_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat), at=time.time() - HOUR)
        assert gateway.sent_now(request) == (STATUS["stale"], 0)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_replayed_request_enqueues_nothing_more(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat))
        assert gateway.sent_now(request) == (200, 1)
        assert gateway.sent_now(request) == (200, 0)  # the same bytes, within the window: a duplicate

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_a_malformed_body_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        assert gateway.sent_now(gateway.signed(platform, n, platform.malformed)) == (STATUS["malformed"], 0)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_an_oversize_body_is_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        request = gateway.signed(platform, n, platform.payload(n, platform.chat) + b" " * 70_000)
        assert gateway.sent_now(request) == (STATUS["oversize"], 0)

    @pytest.mark.parametrize("name", sorted(PLATFORMS))
    def test_path_traversal_ids_are_refused(self, gateway: Gateway, name: str) -> None:
        platform, n = PLATFORMS[name], next(gateway.numbers)
        chat = "spaces/../../etc" if name == "google_chat" else TRAVERSAL
        # Matrix: an authenticated homeserver's transaction; a bad event in it is ignored, never a 400
        expected = 200 if name == "matrix" else STATUS["traversal"]
        assert gateway.sent_now(gateway.signed(platform, n, platform.payload(n, chat))) == (expected, 0)

    @pytest.mark.parametrize("path", ["/webhooks/nowhere", "/webhooks/..%2Ftelegram", "/webhooks/../webhooks/telegram"])
    def test_an_unknown_platform_is_not_found(self, gateway: Gateway, path: str) -> None:
        request = gateway.signed(PLATFORMS["telegram"], 1, telegram_payload(1, "4242"))
        assert gateway.sent_now(Request("POST", path, request.body, request.headers)) == (404, 0)

    def test_a_valid_matrix_user_id_with_two_dots_does_not_block_the_transaction(self, gateway: Gateway) -> None:
        n = next(gateway.numbers)
        events = json.loads(matrix_payload(n, "!room:example.org"))["events"]
        odd = {**events[0], "sender": "@john..doe:example.org", "event_id": f"$odd{n}"}
        body = _json({"events": [odd, events[0]]})  # then a message from @al
        status, enqueued = gateway.sent_now(gateway.signed(PLATFORMS["matrix"], n, body))
        # Both are answered: @john..doe's session is keyed by a reversible form of the id without '..'
        # (the session key's safety rule refuses '..'), and @al's message goes through.
        assert (status, enqueued) == (200, 2)

    def test_an_unsafe_id_alone_in_a_matrix_transaction_does_not_block_it(self, gateway: Gateway) -> None:
        # A 400 would make the homeserver resend the transaction unchanged forever, blocking the bot
        n = next(gateway.numbers)
        [event] = json.loads(matrix_payload(n, "!room:example.org"))["events"]
        valid = _json({"events": [{**event, "sender": "@john..doe:example.org"}]})
        assert gateway.sent_now(gateway.signed(PLATFORMS["matrix"], n, valid)) == (200, 1)
        n = next(gateway.numbers)
        [event] = json.loads(matrix_payload(n, "!room:example.org"))["events"]
        unusable = _json({"events": [{**event, "room_id": "!../../etc:example.org"}]})
        assert gateway.sent_now(gateway.signed(PLATFORMS["matrix"], n, unusable)) == (200, 0)

    def test_only_the_accepted_requests_were_answered(self, gateway: Gateway) -> None:
        # Every refused request left no trace: the outbox holds replies to the accepted chats only
        accepted = len(gateway.enqueued)
        rows = gateway.client.wait_outbox(accepted, timeout=30)
        assert len(rows) == accepted
        assert not any(".." in str(row["chat_id"]) for row in rows)


# --- pairing brute force ----------------------------------------------------------------------

CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


def test_pairing_brute_force_ends_in_lockout(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hermes_gateway.cli import main as cli

    client = start_gateway(
        TELEGRAM_ALLOWED_USERS="7", TELEGRAM_UNAUTHORIZED_DM="pair", HERMES_LOCAL_STATE=str(tmp_path / "local.json")
    )
    # Given user 42 holds a real pending code
    assert client.telegram(telegram_update(1, "let me in", user_id=42))[0] == 200
    # (the Telegram row: a turn the previous test left running may still land in this process's outbox)
    code = CODE.search(client.wait_outbox(1, platform="telegram")[0]["text"]).group(1)  # type: ignore[union-attr]
    wrong = "AAAA2222" if code != "AAAA2222" else "BBBB3333"
    # When an attacker tries five wrong codes
    exits = [cli(["pairing", "approve", "telegram", wrong, "--local"]) for _ in range(5)]
    assert exits == [1] * 5
    capsys.readouterr()
    # Then approvals are locked: even the right code is refused, and nobody was approved
    assert cli(["pairing", "approve", "telegram", code, "--local"]) == 3
    assert "locked after too many wrong codes" in capsys.readouterr().out
    assert client.telegram(telegram_update(2, "now?", user_id=42))[0] == 200
    _wait_idle()
    assert not any(row["text"].startswith("Echo:") for row in client.outbox(platform="telegram"))


def _wait_idle(timeout: float = 15.0) -> None:
    """Until nothing is queued or in flight (so the gateway stops between invocations)."""
    sqs, deadline, calm = boto3.client("sqs"), time.time() + timeout, 0
    while calm < 3 and time.time() < deadline:
        time.sleep(0.3)
        counts = [
            sqs.get_queue_attributes(QueueUrl=os.environ[q.env_var], AttributeNames=["All"])["Attributes"]
            for q in QUEUES
        ]
        busy = any(
            int(c["ApproximateNumberOfMessages"]) + int(c["ApproximateNumberOfMessagesNotVisible"]) for c in counts
        )
        calm = 0 if busy else calm + 1
