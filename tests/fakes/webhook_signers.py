"""Well-formed webhook bodies for every platform of the catalog, and how each platform signs them
(or forges a signature), as the platforms do it. Shared by the e2e bad-input suite (through local
mode's HTTP front) and the unit hostile-input properties (straight into `handle_webhook`).

Every secret and key is made at run time; nothing is written anywhere. Bodies that carry the time
they were sent carry the present (an event older than ingress remembers event ids is dropped).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from hermes_gateway.platforms.standard_webhook import sign as standard_sign
from tests.fakes.jwt import SigningKeyPair
from tests.fakes.teams_server import DEFAULT_APP_ID

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
    "BLUEBUBBLES_WEBHOOK_SECRET": "bad-input-bluebubbles-secret",
    "SIGNAL_RELAY_SECRET": "whsec_" + base64.b64encode(b"bad-input-signal-relay-key-32byt").decode(),
}
GOOGLE_PROJECT = "123456789012"
TEAMS_SERVICE_URL = "https://smba.trafficmanager.net/emea/"


@dataclass(frozen=True)
class Keys:
    """Keys made at run time; nothing is written anywhere."""

    discord: Any
    teams: SigningKeyPair
    google: SigningKeyPair
    forger: SigningKeyPair  # never published; signs under the published keys' ids

    @classmethod
    def generate(cls) -> Keys:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return cls(
            Ed25519PrivateKey.generate(), SigningKeyPair("bf-key-1"), SigningKeyPair("chat-key-1"), SigningKeyPair()
        )

    def discord_public_hex(self) -> str:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        return str(self.discord.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex())


def environment(keys: Keys, *, openid_url: str, certs_url: str) -> dict[str, str]:
    """The settings and secrets under which every platform accepts what these signers sign; the
    Bot Framework's and Google's keys are served at `openid_url` and `certs_url` (loopback fakes)."""
    return {
        **SECRETS,
        "DISCORD_PUBLIC_KEY": keys.discord_public_hex(),
        "TEAMS_APP_ID": DEFAULT_APP_ID,
        "TEAMS_OPENID_URL": openid_url,
        "GOOGLE_CHAT_AUDIENCE": GOOGLE_PROJECT,
        "GOOGLE_CHAT_CERTS_URL": certs_url,
    }


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
    chat_id: int | str = int(chat) if chat.lstrip("-").isdigit() else chat
    message = {"message_id": n, "date": 1700000000, "chat": {"id": chat_id, "type": "private", "first_name": "Al"},
               "from": {"id": 42, "is_bot": False, "first_name": "Al"}, "text": f"hello telegram {n}"}  # fmt: skip
    return _json({"update_id": n, "message": message})


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
                  "messages": [{"from": chat, "id": f"wamid.bad{n}", "timestamp": str(int(time.time())),
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
        "deliveryContext": {"isRedelivery": False}, "timestamp": int(time.time() * 1000), "replyToken": "rt",
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
              "text": f"hello mattermost {n}", "timestamp": str(int(time.time()))}  # fmt: skip
    return urllib.parse.urlencode(params).encode()


def mattermost_sign(s: Sign, n: int, body: bytes) -> Request:
    # The token travels in the body: a forged request carries another one.
    if s.forged:
        body = body.replace(urllib.parse.quote_plus(SECRETS["MATTERMOST_OUTGOING_TOKEN"]).encode(), b"forged")
    return Request("POST", "/webhooks/mattermost", body, {"content-type": "application/x-www-form-urlencoded"})


def bluebubbles_payload(n: int, chat: str) -> bytes:
    """A `new-message` as the BlueBubbles server posts it (tests/fixtures/bluebubbles/), sent now."""
    from tests.fakes.bluebubbles_server import FIXTURES

    event = json.loads((FIXTURES / "new_message_dm_text.json").read_text())
    data = event["data"]
    data.update(guid=f"BAD-INPUT-{n:08d}", text=f"hello imessage {n}", dateCreated=int(time.time() * 1000))
    data["chats"][0]["guid"] = chat
    return _json(event)


def bluebubbles_sign(s: Sign, n: int, body: bytes) -> Request:
    # BlueBubbles signs nothing: the registered URL carries the secret.
    secret = "forged" if s.forged else SECRETS["BLUEBUBBLES_WEBHOOK_SECRET"]
    path = "/webhooks/bluebubbles?" + urllib.parse.urlencode({"password": secret})
    return Request("POST", path, body, {"content-type": "application/json"})


def signal_payload(n: int, chat: str) -> bytes:
    """A signal-cli `receive` notification as the forwarder posts it (tests/fixtures/signal/), sent now."""
    sent = int(time.time() * 1000) + n
    envelope = {"source": chat, "sourceNumber": chat, "sourceUuid": f"a1b2c3d4-e5f6-4a7b-8c9d-{n:012d}",
                "sourceName": "Al", "sourceDevice": 1, "timestamp": sent,
                "dataMessage": {"timestamp": sent, "message": f"hello signal {n}", "expiresInSeconds": 0,
                                "viewOnce": False}}  # fmt: skip
    return _json({"jsonrpc": "2.0", "method": "receive", "params": {"envelope": envelope, "account": "+15555550100"}})


WEBCHAT_TOKEN = "hostile-webchat-page-token"


def webchat_payload(n: int, chat: str) -> bytes:
    return _json({"chat_id": chat, "user_id": chat, "user_name": "You", "message_id": f"m{n}", "text": f"hi {n}"})


def webchat_sign(s: Sign, n: int, body: bytes) -> Request:
    token = "forged" if s.forged else WEBCHAT_TOKEN
    return Request(
        "POST", "/webhooks/webchat", body, {"content-type": "application/json", "x-hermes-local-token": token}
    )


# Local mode's web chat page: a platform only local mode serves, so not among PLATFORMS (the
# deployed ones); the unit hostile-input properties cover it too.
WEBCHAT = Platform("webchat", webchat_payload, webchat_sign, "web-1")


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
        Platform("signal", signal_payload, standard_signer("signal", "SIGNAL_RELAY_SECRET"), "+15550003333", True),
        Platform(
            "mattermost",
            mattermost_payload,
            mattermost_sign,
            "ch1",
            malformed=urllib.parse.urlencode({"token": SECRETS["MATTERMOST_OUTGOING_TOKEN"], "text": "x"}).encode(),
        ),
        Platform("bluebubbles", bluebubbles_payload, bluebubbles_sign, "iMessage;-;+15555550177"),
    )
}
EVERY_PLATFORM = {**PLATFORMS, WEBCHAT.name: WEBCHAT}  # the deployed ones and the local web chat


@contextmanager
def accepting_every_platform(keys: Keys) -> Iterator[dict[str, str]]:
    """The environment under which every platform of EVERY_PLATFORM accepts what these signers
    sign, from anyone, with the Bot Framework's and Google's keys served by loopback fakes."""
    from tests.fakes.google_server import FakeGoogle
    from tests.fakes.teams_server import FakeBotFramework

    with (
        FakeBotFramework(keys=[keys.teams.jwk(endorsements=["msteams"])]) as bot_framework,
        FakeGoogle(keys=[keys.google.jwk(alg="RS256")]) as google,
    ):
        yield {
            **environment(keys, openid_url=bot_framework.openid_url, certs_url=google.certs_url),
            **{f"{name.upper()}_ENABLED": "true" for name in EVERY_PLATFORM},
            "GATEWAY_ALLOW_ALL_USERS": "true",
            "WEBCHAT_TOKEN": WEBCHAT_TOKEN,
        }
