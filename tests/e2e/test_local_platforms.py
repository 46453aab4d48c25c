"""Local mode accepts every platform's webhook, verified as deployed, and answers it.

One local gateway with the verification secrets of each platform in its environment (which turns
those platforms on), a signed request per platform, and the echo agent's reply recorded in the
outbox for that platform's chat (local mode records what it has no send credentials for). A
forged request is refused on each platform.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from hermes_gateway.platforms.standard_webhook import sign
from tests.e2e.conftest import Client

pytestmark = pytest.mark.e2e

SECRETS = {
    "SLACK_SIGNING_SECRET": "slack-signing-secret",
    "WHATSAPP_APP_SECRET": "meta-app-secret",
    "WHATSAPP_VERIFY_TOKEN": "meta-verify",
    "WEBHOOK_SIGNING_SECRET": "whsec_" + base64.b64encode(b"e2e-generic-webhook-key-32-bytes").decode(),
    "RELAY_SIGNING_SECRET": "whsec_" + base64.b64encode(b"e2e-relay-signing-key-of-32-byte").decode(),
    "LINE_CHANNEL_SECRET": "line-channel-secret",
    "TWILIO_AUTH_TOKEN": "twilio-auth-token",
    "MATRIX_HS_TOKEN": "matrix-hs-token",
    "FEISHU_ENCRYPT_KEY": "feishu-encrypt-key",
    "FEISHU_VERIFICATION_TOKEN": "feishu-verification",
    "MATTERMOST_OUTGOING_TOKEN": "mattermost-token",
    "BLUEBUBBLES_WEBHOOK_SECRET": "bluebubbles-secret",
}
Request = tuple[str, bytes, dict[str, str]]  # path, body, headers


def hmac_hex(key: str, message: bytes, digest: Any = hashlib.sha256) -> str:
    return hmac.new(key.encode(), message, digest).hexdigest()


def slack(n: int, host: str, forged: bool) -> Request:
    body = json.dumps({
        "type": "event_callback", "team_id": "T1", "event_id": f"Ev{n}",
        "event": {"type": "message", "channel_type": "im", "channel": "D1", "user": "U7", "text": "hello slack",
                  "ts": f"1700000000.{n:06d}"},
    }).encode()  # fmt: skip
    ts = str(int(time.time()))
    signature = "v0=" + hmac_hex(SECRETS["SLACK_SIGNING_SECRET"], f"v0:{ts}:".encode() + body)
    if forged:
        signature = signature[:-4] + "0000"
    return "/webhooks/slack", body, {"x-slack-request-timestamp": ts, "x-slack-signature": signature}


def whatsapp(n: int, host: str, forged: bool) -> Request:
    body = json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "W", "changes": [{"field": "messages",
        "value": {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "555"},
                  "contacts": [{"wa_id": "15551234567", "profile": {"name": "Wa"}}],
                  "messages": [{"from": "15551234567", "id": f"wamid.{n}", "timestamp": str(int(time.time())),
                                "type": "text", "text": {"body": "hello whatsapp"}}]}}]}]}).encode()  # fmt: skip
    key = "wrong" if forged else SECRETS["WHATSAPP_APP_SECRET"]
    return "/webhooks/whatsapp", body, {"x-hub-signature-256": "sha256=" + hmac_hex(key, body)}


def standard(platform: str, secret: str, payload: dict[str, Any]) -> Callable[[int, str, bool], Request]:
    def build(n: int, host: str, forged: bool) -> Request:
        body = json.dumps(payload).encode()
        msg_id, ts = f"msg_{platform}_{n}", int(time.time())
        signature = sign(secret, msg_id, ts, body if not forged else body + b" ")
        headers = {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signature}
        return f"/webhooks/{platform}", body, headers

    return build


def line(n: int, host: str, forged: bool) -> Request:
    body = json.dumps({"destination": "Ubot", "events": [{"type": "message", "webhookEventId": f"01LINE{n}",
        "deliveryContext": {"isRedelivery": False}, "timestamp": int(time.time() * 1000), "replyToken": "rt",
        "source": {"type": "user", "userId": "Uline"}, "mode": "active",
        "message": {"type": "text", "id": f"{n}", "text": "hello line"}}]}).encode()  # fmt: skip
    digest = hmac.new(SECRETS["LINE_CHANNEL_SECRET"].encode(), body, hashlib.sha256).digest()
    signature = base64.b64encode(digest).decode()
    return "/webhooks/line", body, {"x-line-signature": signature if not forged else "A" + signature[1:]}


def sms(n: int, host: str, forged: bool) -> Request:
    params = {"MessageSid": f"SM{n:032d}", "AccountSid": "AC1", "From": "+15550001111", "To": "+15559990000",
              "Body": "hello sms", "NumMedia": "0"}  # fmt: skip
    url = f"http://{host}/webhooks/sms"
    signed = url + "".join(k + params[k] for k in sorted(params))
    key = SECRETS["TWILIO_AUTH_TOKEN"] if not forged else "nope"
    signature = base64.b64encode(hmac.new(key.encode(), signed.encode(), hashlib.sha1).digest()).decode()
    headers = {"content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature,
               "x-forwarded-proto": "http"}  # fmt: skip
    return "/webhooks/sms", urllib.parse.urlencode(params).encode(), headers


def matrix(n: int, host: str, forged: bool) -> Request:
    body = json.dumps({"events": [{"type": "m.room.message", "room_id": "!room:example.org",
        "sender": "@al:example.org", "event_id": f"$ev{n}", "origin_server_ts": 1700000000000,
        "content": {"msgtype": "m.text", "body": "hello matrix"}}]}).encode()  # fmt: skip
    token = SECRETS["MATRIX_HS_TOKEN"] if not forged else "nope"
    return f"/webhooks/matrix/_matrix/app/v1/transactions/txn{n}", body, {"authorization": f"Bearer {token}"}


def feishu(n: int, host: str, forged: bool) -> Request:
    body = json.dumps({"schema": "2.0", "header": {"event_id": f"fe{n}", "event_type": "im.message.receive_v1",
        "token": SECRETS["FEISHU_VERIFICATION_TOKEN"], "tenant_key": "tk", "app_id": "cli_1", "create_time": "1"},
        "event": {"sender": {"sender_id": {"open_id": "ou_1", "union_id": "on_1"}, "sender_type": "user"},
                  "message": {"message_id": f"om_{n}", "chat_id": "oc_1", "chat_type": "p2p", "message_type": "text",
                              "content": json.dumps({"text": "hello feishu"})}}}).encode()  # fmt: skip
    ts, nonce = str(int(time.time())), "nonce"
    key = SECRETS["FEISHU_ENCRYPT_KEY"] if not forged else "nope"
    signature = hashlib.sha256(ts.encode() + nonce.encode() + key.encode() + body).hexdigest()
    headers = {"x-lark-request-timestamp": ts, "x-lark-request-nonce": nonce, "x-lark-signature": signature}
    return "/webhooks/feishu", body, headers


def mattermost(n: int, host: str, forged: bool) -> Request:
    params = {"token": SECRETS["MATTERMOST_OUTGOING_TOKEN"] if not forged else "nope", "team_id": "tm",
              "channel_id": "ch1", "channel_name": "town-square", "post_id": f"post{n}", "user_id": "u1",
              "user_name": "al", "text": "hello mattermost", "timestamp": str(int(time.time()))}  # fmt: skip
    return (
        "/webhooks/mattermost",
        urllib.parse.urlencode(params).encode(),
        {"content-type": "application/x-www-form-urlencoded"},
    )


def bluebubbles(n: int, host: str, forged: bool) -> Request:
    from tests.fakes.bluebubbles_server import FIXTURES

    event = json.loads((FIXTURES / "new_message_dm_text.json").read_text())
    event["data"].update(guid=f"E2E-PLATFORMS-{n}", text="hello imessage", dateCreated=int(time.time() * 1000))
    secret = SECRETS["BLUEBUBBLES_WEBHOOK_SECRET"] if not forged else "nope"
    path = "/webhooks/bluebubbles?" + urllib.parse.urlencode({"password": secret})
    return path, json.dumps(event).encode(), {"content-type": "application/json"}


RELAYED = {
    "platform": "signal",
    "event_id": "sig-1",
    "text": "hello signal",
    "source": {"chat_id": "+15550002222", "chat_type": "dm", "user_id": "+15550002222"},
}
PLATFORMS: dict[str, tuple[Callable[[int, str, bool], Request], str]] = {
    "slack": (slack, "D1"),
    "whatsapp": (whatsapp, "15551234567"),
    "webhook": (standard("webhook", SECRETS["WEBHOOK_SIGNING_SECRET"], {"text": "hello", "chat_id": "crm-7"}), "crm-7"),
    "relay": (standard("relay", SECRETS["RELAY_SIGNING_SECRET"], RELAYED), "+15550002222"),
    "line": (line, "Uline"),
    "sms": (sms, "+15550001111"),
    "matrix": (matrix, "!room:example.org"),
    "feishu": (feishu, "oc_1"),
    "mattermost": (mattermost, "ch1"),
    "bluebubbles": (bluebubbles, "iMessage;-;+15555550123"),
}


def test_every_platform_webhook_is_verified_and_answered(start_gateway: Callable[..., Client]) -> None:
    client = start_gateway(GATEWAY_ALLOW_ALL_USERS="true", **SECRETS)
    host = client.gateway.url.removeprefix("http://")
    for n, (name, (build, _)) in enumerate(PLATFORMS.items(), start=1):
        path, body, headers = build(n, host, True)
        status, _ = client.request("POST" if name != "matrix" else "PUT", path, body, headers)
        assert status == 401, (name, status)
        path, body, headers = build(n, host, False)
        status, answer = client.request("POST" if name != "matrix" else "PUT", path, body, headers)
        assert status == 200, (name, status, answer)
    for name, (_, chat_id) in PLATFORMS.items():
        platform = "signal" if name == "relay" else name
        rows = client.wait_outbox(1, platform=platform, chat_id=urllib.parse.quote(chat_id))
        assert len(rows) == 1 and rows[0]["text"].startswith("Echo: hello"), (name, rows)


def test_whatsapp_get_handshake_in_local_mode(start_gateway: Callable[..., Client]) -> None:
    client = start_gateway(**SECRETS)
    query = "hub.mode=subscribe&hub.verify_token=meta-verify&hub.challenge=1158201444"
    assert client.request("GET", f"/webhooks/whatsapp?{query}") == (200, 1158201444)
    assert client.request("GET", "/webhooks/whatsapp?hub.mode=subscribe&hub.verify_token=x&hub.challenge=1")[0] == 401


def test_a_discord_slash_command_is_deferred_then_answered(start_gateway: Callable[..., Client]) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.generate()  # made for this test; never written anywhere
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
    client = start_gateway(GATEWAY_ALLOW_ALL_USERS="true", DISCORD_PUBLIC_KEY=public)

    def post(payload: dict[str, Any], signer: Any = key) -> tuple[int, Any]:
        body, ts = json.dumps(payload).encode(), str(int(time.time()))
        signature = signer.sign(ts.encode() + body).hex()
        headers = {"x-signature-ed25519": signature, "x-signature-timestamp": ts}
        return client.request("POST", "/webhooks/discord", body, headers)

    assert post({"type": 1}) == (200, {"type": 1})
    assert post({"type": 1}, signer=Ed25519PrivateKey.generate())[0] == 401
    command = {
        "type": 2, "id": "1200000000000000001", "application_id": "1100000000000000001", "token": "tok-abc_123",
        "guild_id": "1000000000000000001", "channel_id": "1000000000000000002",
        "member": {"user": {"id": "1000000000000000003", "username": "al"}},
        "data": {"name": "ask", "options": [{"name": "prompt", "type": 3, "value": "hello discord"}]},
    }  # fmt: skip
    assert post(command) == (200, {"type": 5})
    rows = client.wait_outbox(1, platform="discord", chat_id="1000000000000000002")
    assert [r["text"] for r in rows] == ["Echo: hello discord"]
