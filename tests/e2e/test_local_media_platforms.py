"""Media on every platform that has it, through local mode, with each platform's fake and a fake
model and speech-to-text server on loopback.

For each platform a real-shaped, correctly signed webhook carries an image, a voice note (where the
platform has them) and a document, one message each. Each file is fetched from the platform's fake
exactly once (with the platform's credentials), kept in the embedded media bucket beside its `.json`
record, and reaches the model as what it can use: the image as an image part of the exact bytes,
the voice note as its transcript, the document as its text. The model then answers the image with
`here it is` and a `MEDIA:` line, and the platform's fake receives the file natively (an upload, or
a message naming a pre-signed URL of the stored file) or, where the platform only takes text, a
message with a link; no text with `MEDIA:` in it ever reaches a platform.

Not here: the standard webhook and the relays (their adapters carry no attachments, the catalog
names no fetcher for them) and the web chat page (test_local_media.py covers its uploads).

One local gateway with every platform on serves the whole module; each platform's files are its own
bytes, so what one platform stored is told apart from another's.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hermes_local.runtime import LocalGateway
from tests.e2e.conftest import BASE_ENV, Client
from tests.fakes.bluebubbles_server import FIXTURES as BLUEBUBBLES_FIXTURES
from tests.fakes.bluebubbles_server import FakeBlueBubbles
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.google_server import FakeGoogle
from tests.fakes.loopback import ScriptedAnswer
from tests.fakes.media_server import FakeMediaHost, FakeSpeech, MediaTelegram, file, minimal_pdf, ogg_opus
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.teams_server import DEFAULT_APP_ID, DEFAULT_APP_PASSWORD, FakeBotFramework
from tests.fakes.upload_server import FakeApi, fields_of
from tests.fakes.webhook_signers import (
    SECRETS,
    Keys,
    Request,
    Sign,
    bluebubbles_sign,
    discord_sign,
    environment,
    feishu_sign,
    google_chat_sign,
    line_sign,
    matrix_sign,
    mattermost_sign,
    slack_sign,
    sms_sign,
    telegram_sign,
    whatsapp_sign,
)

pytestmark = pytest.mark.e2e

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # what the model's MEDIA line names
HEARD = "remind me to water the plants"
ACCOUNT_SID = "AC" + "0" * 31 + "7"
DISCORD_APP = "1100000000000000001"
DISCORD_CHANNEL = "1000000000000000002"
MATRIX_ROOM = "!room:example.org"
TEAMS_CONVERSATION = "a:1personal-conversation"
CHAT_SPACE = "spaces/DmMedia"


def credential(*parts: str) -> str:
    return "-".join(parts)  # assembled at run time: no secret-shaped literal on disk


def image_of(platform: str) -> bytes:
    return b"\xff\xd8\xff\xe0" + platform.encode() + bytes(range(256)) * 4 + b"\xff\xd9"  # a JPEG's markers


def voice_of(platform: str) -> bytes:
    return ogg_opus(3.0, vendor=platform.encode())


def document_text(platform: str) -> str:
    return f"Quarterly revenue grew 12 percent at {platform}"


# --- the fakes and the one gateway ------------------------------------------------------------


@dataclass
class World:
    client: Client
    keys: Keys
    openai: FakeOpenAI
    speech: FakeSpeech
    host: FakeMediaHost  # where the model's MEDIA line points
    telegram: MediaTelegram
    slack: FakeApi
    whatsapp: FakeApi
    discord: FakeApi
    line: FakeApi
    twilio: FakeApi
    matrix: FakeApi
    mattermost: FakeApi
    teams: FakeBotFramework
    google: FakeGoogle
    feishu: FakeFeishu
    bluebubbles: FakeBlueBubbles
    numbers: Iterator[int]

    def signed(self, signer: Callable[[Sign, int, bytes], Request], n: int, body: bytes) -> Request:
        host = self.client.gateway.url.removeprefix("http://")
        return signer(Sign(self.keys, host, time.time(), False), n, body)

    def send(self, request: Request) -> tuple[int, Any]:
        return self.client.request(request.method, request.path, request.body, request.headers)


def api(fallback: Any = None, **routes: ScriptedAnswer) -> FakeApi:
    fake = FakeApi(fallback=ScriptedAnswer(200, fallback if fallback is not None else {}))
    fake.routes.update({path.replace("__", "/"): answer for path, answer in routes.items()})
    return fake.start()


STREAMING_PLATFORMS = ("TELEGRAM", "DISCORD", "SLACK", "MATTERMOST", "MATRIX", "FEISHU", "TEAMS")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    keys = Keys.generate()
    fakes: list[Any] = [
        FakeOpenAI(),
        FakeSpeech(),
        FakeMediaHost(),
        MediaTelegram(),
        FakeBotFramework(keys=[keys.teams.jwk(endorsements=["msteams"])]),
        FakeGoogle(keys=[keys.google.jwk(alg="RS256")]),
        FakeFeishu(chats={"oc_p2p"}),
        FakeBlueBubbles(),
    ]
    for fake in fakes:
        fake.start()
    openai, speech, host, telegram, teams, google, feishu, bluebubbles = fakes
    host.files["/cat.png"] = file(PNG, "image/png")
    slack = api({"ok": True, "ts": "1700000001.000100", "channel": "D1"})
    whatsapp = api({"messaging_product": "whatsapp", "messages": [{"id": "wamid.out"}]})
    discord = api({"id": "1300000000000000001", "channel_id": DISCORD_CHANNEL})
    line = api({"sentMessages": [{"id": "1", "quoteToken": "q"}]})
    twilio = api({"sid": "SM" + "1" * 32, "status": "queued"})
    matrix = api({"event_id": "$out"})
    mattermost = api({"id": "post-out"})
    for fake in (slack, whatsapp, discord, line, twilio, matrix, mattermost):
        fakes.append(fake)
    environ = {
        **BASE_ENV,
        **environment(keys, openid_url=teams.openid_url, certs_url=google.certs_url),
        "HERMES_LOCAL_STATE": str(tmp_path_factory.mktemp("media-platforms") / "local.json"),
        "GATEWAY_ALLOW_ALL_USERS": "true",
        "GATEWAY_MEDIA_OUTBOUND_HOSTS": "127.0.0.1",  # the model's MEDIA line names the fake host
        "GATEWAY_PROVIDER": "openai",
        "GATEWAY_MODEL": "gpt-test",
        "OPENAI_BASE_URL": openai.base_url,
        "STT_BASE_URL": speech.base_url,
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE_URL": telegram.base_url,
        "SLACK_BOT_TOKEN": credential("xoxb", "media", "e2e"),
        "SLACK_API_BASE_URL": slack.base_url + "/api",
        "WHATSAPP_ACCESS_TOKEN": credential("wa", "media", "e2e"),
        "WHATSAPP_API_BASE_URL": whatsapp.base_url + "/v21.0",
        "WHATSAPP_PHONE_NUMBER_ID": "555",
        "DISCORD_BOT_TOKEN": credential("discord", "media", "e2e"),
        "DISCORD_API_BASE_URL": discord.base_url,
        "DISCORD_APPLICATION_ID": DISCORD_APP,
        "LINE_CHANNEL_ACCESS_TOKEN": credential("line", "media", "e2e"),
        "LINE_API_BASE_URL": line.base_url,
        "SMS_API_BASE_URL": twilio.base_url,
        "TWILIO_ACCOUNT_SID": ACCOUNT_SID,
        "TWILIO_FROM_NUMBER": "+15559990000",
        "TEAMS_APP_PASSWORD": DEFAULT_APP_PASSWORD,
        "TEAMS_TOKEN_URL": teams.token_url,
        "TEAMS_SERVICE_URL_HOSTS": "127.0.0.1",
        "TEAMS_FILE_HOSTS": "127.0.0.1",
        "GOOGLE_CHAT_API_BASE_URL": google.api_base_url,
        "GOOGLE_CHAT_SERVICE_ACCOUNT_JSON": google.service_account_json(),
        "MATRIX_AS_TOKEN": credential("as", "media", "e2e"),
        "MATRIX_API_BASE_URL": matrix.base_url,
        "MATRIX_BOT_USER_ID": "@hermes:example.org",
        "FEISHU_API_BASE_URL": feishu.base_url,
        "FEISHU_APP_ID": feishu.app_id,
        "FEISHU_APP_SECRET": feishu.app_secret,
        "MATTERMOST_BOT_TOKEN": credential("mm", "media", "e2e"),
        "MATTERMOST_API_BASE_URL": mattermost.base_url,
        "BLUEBUBBLES_PASSWORD": bluebubbles.password,
        "BLUEBUBBLES_SERVER_URL": bluebubbles.base_url,
        # These tests hold each platform's message shapes without streaming (tested on its own in
        # tests/integration/test_streaming.py): a model answering after first_after on a slow run
        # would stream the text, and the file would then carry no caption.
        **{f"{name}_STREAMING": "false" for name in STREAMING_PLATFORMS},
    }
    local = LocalGateway(port=0, environ=environ, tick_seconds=3600, poll_wait_seconds=1).start()
    try:
        yield World(
            Client(local), keys, openai, speech, host, telegram, slack, whatsapp, discord, line, twilio, matrix,
            mattermost, teams, google, feishu, bluebubbles, iter(range(1, 1_000_000)),
        )  # fmt: skip
    finally:
        local.wait_idle()
        local.stop()
        for fake in fakes:
            fake.stop()


# --- each platform: a message carrying one file, and how many times the fake served it -------


@dataclass(frozen=True)
class Inbound:
    request: Request
    fetches: Callable[[], int]  # how many times the platform's fake has served this file


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


def _serve(fake: FakeApi, path: str, data: bytes, mime: str) -> Callable[[], int]:
    fake.routes[path.split("?", 1)[0]] = file(data, mime)
    return lambda: len(fake.to(path.split("?", 1)[0]))


def telegram_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    file_id = f"tg-{kind}-{n}"
    w.telegram.add_file(file_id, data)
    media: dict[str, Any] = {
        "image": {"photo": [{"file_id": file_id, "file_unique_id": f"u{n}", "width": 1280, "height": 960,
                             "file_size": len(data)}]},
        "voice": {"voice": {"file_id": file_id, "file_unique_id": f"u{n}", "duration": 3, "mime_type": "audio/ogg"}},
        "document": {"document": {"file_id": file_id, "file_unique_id": f"u{n}", "file_name": "q3.pdf",
                                  "mime_type": "application/pdf"}},
    }[kind]  # fmt: skip
    message = {"message_id": n, "date": int(time.time()), "chat": {"id": 4242, "type": "private", "first_name": "Al"},
               "from": {"id": 42, "is_bot": False, "first_name": "Al"}, **media}  # fmt: skip
    return Inbound(w.signed(telegram_sign, n, _json({"update_id": n, "message": message})),
                   lambda: w.telegram.downloads[file_id])  # fmt: skip


def slack_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    name, mime, extra = {
        "image": ("photo.jpg", "image/jpeg", {}),
        "voice": ("audio_message.mp4", "audio/mp4", {"subtype": "slack_audio"}),
        "document": ("report.pdf", "application/pdf", {}),
    }[kind]
    path = f"/files-pri/T1-F{n}/download/{name}"
    fetches = _serve(w.slack, path, data, mime)
    shared = {"id": f"F{n}", "created": int(time.time()), "name": name, "title": name, "mimetype": mime,
              "filetype": name.rsplit(".", 1)[1], "user": "U7", "mode": "hosted", "is_external": False,
              "size": len(data), "url_private": w.slack.base_url + f"/files-pri/T1-F{n}/{name}",
              "url_private_download": w.slack.base_url + path, **extra}  # fmt: skip
    body = _json({
        "token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback", "event_id": f"EvMedia{n}",
        "event_time": int(time.time()), "authorizations": [{"team_id": "T1", "user_id": "UBOT0001", "is_bot": True}],
        "event": {"type": "message", "subtype": "file_share", "text": "", "files": [shared], "upload": False,
                  "user": "U7", "display_as_bot": False, "ts": f"1700000000.{n:06d}", "channel": "D1",
                  "channel_type": "im"},
    })  # fmt: skip
    return Inbound(w.signed(slack_sign, n, body), fetches)


def whatsapp_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    media_id = f"10375432915{n:05d}"
    wire, body, mime = {
        "image": ("image", {"caption": "look", "mime_type": "image/jpeg"}, "image/jpeg"),
        "voice": ("audio", {"mime_type": "audio/ogg; codecs=opus", "voice": True}, "audio/ogg; codecs=opus"),
        "document": ("document", {"filename": "invoice.pdf", "mime_type": "application/pdf"}, "application/pdf"),
    }[kind]
    download = f"/dl/{media_id}?ext=1&hash=ab12"
    w.whatsapp.routes[f"/v21.0/{media_id}"] = ScriptedAnswer(200, {
        "messaging_product": "whatsapp", "url": w.whatsapp.base_url + download, "mime_type": mime,
        "sha256": "a1b2", "file_size": len(data), "id": media_id})  # fmt: skip
    fetches = _serve(w.whatsapp, download, data, "application/octet-stream")
    message = {"from": "15551234567", "id": f"wamid.media{n}", "timestamp": str(int(time.time())), "type": wire,
               wire: {**body, "sha256": "a1b2", "id": media_id}}  # fmt: skip
    payload = {"object": "whatsapp_business_account", "entry": [{"id": "W", "changes": [{"field": "messages", "value": {
        "messaging_product": "whatsapp", "metadata": {"display_phone_number": "15559990000", "phone_number_id": "555"},
        "contacts": [{"wa_id": "15551234567", "profile": {"name": "Wa"}}], "messages": [message]}}]}]}  # fmt: skip
    return Inbound(w.signed(whatsapp_sign, n, _json(payload)), fetches)


def discord_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    file_id = str(1176000000000000000 + n)
    name, mime, extra = {
        "image": ("diagram.jpg", "image/jpeg", {"width": 640, "height": 480}),
        "voice": ("voice-message.ogg", "audio/ogg", {"duration_secs": 3.2, "waveform": "AAAA"}),
        "document": ("report.pdf", "application/pdf", {}),
    }[kind]
    path = f"/attachments/{DISCORD_CHANNEL}/{file_id}/{name}?ex=6570&is=655b&hm=ab12&"
    fetches = _serve(w.discord, path, data, mime)
    attached = {"id": file_id, "filename": name, "size": len(data), "url": w.discord.base_url + path,
                "proxy_url": w.discord.base_url + path, "content_type": mime, "ephemeral": True, **extra}  # fmt: skip
    body = _json({
        "type": 2, "id": str(1200000000000000000 + n), "application_id": DISCORD_APP, "token": f"tok-media-{n}",
        "version": 1, "guild_id": "1000000000000000001", "channel_id": DISCORD_CHANNEL,
        "channel": {"id": DISCORD_CHANNEL, "type": 0, "name": "general"},
        "member": {"user": {"id": "1000000000000000003", "username": "al", "global_name": "Al"}},
        "data": {"id": "1100000000000000004", "name": "ask", "type": 1,
                 "options": [{"name": "file", "type": 11, "value": file_id}],
                 "resolved": {"attachments": {file_id: attached}}},
    })  # fmt: skip
    return Inbound(w.signed(discord_sign, n, body), fetches)


def line_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    message_id = str(354718705033690000 + n)
    message, mime = {
        "image": ({"type": "image", "contentProvider": {"type": "line"}, "quoteToken": "q"}, "image/jpeg"),
        "voice": ({"type": "audio", "duration": 3000, "contentProvider": {"type": "line"}}, "audio/x-m4a"),
        "document": ({"type": "file", "fileName": "report.pdf", "fileSize": len(data)}, "application/pdf"),
    }[kind]
    fetches = _serve(w.line, f"/v2/bot/message/{message_id}/content", data, mime)
    body = _json({"destination": "Ubot", "events": [{"type": "message", "webhookEventId": f"01MEDIA{n}",
        "deliveryContext": {"isRedelivery": False}, "timestamp": int(time.time() * 1000), "replyToken": f"rt{n}",
        "source": {"type": "user", "userId": "Uline"}, "mode": "active",
        "message": {**message, "id": message_id}}]})  # fmt: skip
    return Inbound(w.signed(line_sign, n, body), fetches)


def sms_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    sid = f"MM{n:032d}"
    mime = {"image": "image/jpeg", "voice": "audio/ogg", "document": "application/pdf"}[kind]
    path = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/{sid}/Media/ME{n:032d}"
    fetches = _serve(w.twilio, path, data, mime)
    params = {"ToCountry": "US", "MediaContentType0": mime, "SmsMessageSid": sid, "NumMedia": "1", "SmsSid": sid,
              "SmsStatus": "received", "Body": "", "To": "+15559990000", "NumSegments": "1", "MessageSid": sid,
              "AccountSid": ACCOUNT_SID, "From": "+15550001111", "MediaUrl0": w.twilio.base_url + path,
              "ApiVersion": "2010-04-01"}  # fmt: skip
    return Inbound(w.signed(sms_sign, n, urllib.parse.urlencode(params).encode()), fetches)


def teams_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    service_url = w.teams.base_url + "/"
    if kind == "image":
        path = f"/emea/v3/attachments/0-eus-d{n}/views/original"
        attached: dict[str, Any] = {"contentType": "image/*", "contentUrl": w.teams.base_url + path}
    else:
        path = f"/personal/al/_layouts/15/download.aspx?UniqueId=1150d9{n}&tempauth=x"
        content = {"downloadUrl": w.teams.base_url + path, "uniqueId": f"1150D9{n}", "fileType": "pdf"}
        attached = {"contentType": "application/vnd.microsoft.teams.file.download.info",
                    "contentUrl": w.teams.base_url + "/personal/al/Documents/report.pdf", "name": "report.pdf",
                    "content": content}  # fmt: skip
        w.teams.open_files |= {path}
    w.teams.files[path] = file(data, "image/jpeg" if kind == "image" else "application/pdf")
    body = _json({
        "type": "message", "id": f"17644{n:08d}", "timestamp": "2025-11-29T06:26:39.123Z", "serviceUrl": service_url,
        "channelId": "msteams", "from": {"id": "29:1alice-teams-id", "name": "Alice", "aadObjectId": "aad-0-alice"},
        "conversation": {"conversationType": "personal", "tenantId": "tenant-0", "id": TEAMS_CONVERSATION},
        "recipient": {"id": "28:" + DEFAULT_APP_ID, "name": "Hermes"}, "attachments": [attached],
        "entities": [{"type": "clientInfo", "locale": "en-US"}], "channelData": {"tenant": {"id": "tenant-0"}},
    })  # fmt: skip
    now = int(time.time())
    claims = {"iss": "https://api.botframework.com", "aud": DEFAULT_APP_ID, "serviceurl": service_url,
              "iat": now - 10, "nbf": now - 10, "exp": now + 300}  # fmt: skip
    headers = {"content-type": "application/json", "authorization": "Bearer " + w.keys.teams.sign(claims)}
    request = Request("POST", "/webhooks/teams", body, headers)
    return Inbound(request, lambda: sum(1 for r in w.teams.requests if r.path == path))


def google_chat_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    name, mime = {"image": ("photo.jpg", "image/jpeg"), "document": ("report.pdf", "application/pdf")}[kind]
    resource = base64.b64encode(f"{CHAT_SPACE}/messages/M{n}/attachments/A{n}".encode()).decode()
    w.google.media[resource] = file(data, mime)
    user = {"name": "users/111222333", "displayName": "Alice", "type": "HUMAN"}
    space = {"name": CHAT_SPACE, "type": "DM", "spaceType": "DIRECT_MESSAGE", "singleUserBotDm": True}
    attached = {"name": f"{CHAT_SPACE}/messages/M{n}.M{n}/attachments/A{n}", "contentName": name, "contentType": mime,
                "attachmentDataRef": {"resourceName": resource}, "source": "UPLOADED_CONTENT",
                "downloadUri": "https://chat.google.com/api/get_attachment_url?url_type=DOWNLOAD_URL"}  # fmt: skip
    message = {"name": f"{CHAT_SPACE}/messages/M{n}.M{n}", "sender": user, "createTime": "2025-11-29T07:06:40Z",
               "attachment": [attached], "space": space, "thread": {"name": f"{CHAT_SPACE}/threads/T{n}"}}  # fmt: skip
    body = _json({"type": "MESSAGE", "eventTime": "2025-11-29T07:06:40Z", "message": message, "user": user,
                  "space": space})  # fmt: skip
    return Inbound(
        w.signed(google_chat_sign, n, body),
        lambda: sum(1 for r in w.google.requests if r.path.startswith("/v1/media/") and resource in
                    urllib.parse.unquote(r.path)),
    )  # fmt: skip


def matrix_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    media_id = f"Media{kind}{n}"
    content, mime = {
        "image": ({"msgtype": "m.image", "body": "cat.jpg", "info": {"mimetype": "image/jpeg", "w": 4, "h": 4}},
                  "image/jpeg"),
        "voice": ({"msgtype": "m.audio", "body": "Voice message", "info": {"mimetype": "audio/ogg", "duration": 2140},
                   "org.matrix.msc1767.audio": {"duration": 2140, "waveform": [0, 512]},
                   "org.matrix.msc3245.voice": {}}, "audio/ogg"),
        "document": ({"msgtype": "m.file", "body": "contract.pdf", "filename": "contract.pdf",
                      "info": {"mimetype": "application/pdf"}}, "application/pdf"),
    }[kind]  # fmt: skip
    content["info"]["size"] = len(data)
    fetches = _serve(w.matrix, f"/_matrix/client/v1/media/download/example.org/{media_id}", data, mime)
    body = _json({"events": [{"type": "m.room.message", "room_id": MATRIX_ROOM, "sender": "@al:example.org",
        "event_id": f"$media{n}", "origin_server_ts": int(time.time() * 1000), "unsigned": {"age": 12},
        "content": {**content, "url": f"mxc://example.org/{media_id}"}}]})  # fmt: skip
    return Inbound(w.signed(matrix_sign, n, body), fetches)


def feishu_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    message_id = f"om_media_{n}"
    key = f"img_v2_{n:08d}" if kind == "image" else f"file_v2_{n:08d}"
    message_type, content = {
        "image": ("image", {"image_key": key}),
        "voice": ("audio", {"file_key": key, "duration": 2000}),
        "document": ("file", {"file_key": key, "file_name": "report.pdf"}),
    }[kind]
    mime = {"image": "image/jpeg", "voice": "audio/ogg", "document": "application/pdf"}[kind]
    w.feishu.resources[f"{message_id}/{key}"] = file(data, mime)
    path = f"/im/v1/messages/{message_id}/resources/{key}"
    header = {"event_id": f"fe-media-{n}", "event_type": "im.message.receive_v1", "tenant_key": "tk",
              "token": SECRETS["FEISHU_VERIFICATION_TOKEN"], "app_id": w.feishu.app_id, "create_time": "1"}  # fmt: skip
    message = {"message_id": message_id, "root_id": "", "parent_id": "", "chat_id": "oc_p2p", "chat_type": "p2p",
               "message_type": message_type, "content": json.dumps(content), "mentions": []}  # fmt: skip
    sender = {"sender_id": {"open_id": "ou_1", "union_id": "on_1", "user_id": "u1"}, "sender_type": "user"}
    body = _json({"schema": "2.0", "header": header, "event": {"sender": sender, "message": message}})
    return Inbound(w.signed(feishu_sign, n, body), lambda: len(w.feishu.calls(path)))


def mattermost_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    file_id = f"f{kind[0]}{n:024d}"
    mime = {"image": "image/jpeg", "document": "application/pdf"}[kind]
    fetches = _serve(w.mattermost, f"/api/v4/files/{file_id}", data, mime)
    params = {"token": SECRETS["MATTERMOST_OUTGOING_TOKEN"], "team_id": "tm", "team_domain": "acme",
              "channel_id": "ch1", "channel_name": "town-square", "post_id": f"postmedia{n}", "user_id": "u1",
              "user_name": "al", "text": "", "timestamp": str(int(time.time())), "file_ids": file_id}  # fmt: skip
    return Inbound(w.signed(mattermost_sign, n, urllib.parse.urlencode(params).encode()), fetches)


def bluebubbles_inbound(w: World, kind: str, n: int, data: bytes) -> Inbound:
    # The server hands a voice note (CAF) over converted (MP3 there; the fake serves it as it is)
    uti, mime, name = {
        "image": ("public.jpeg", "image/jpeg", "IMG_0421.jpeg"),
        "voice": ("com.apple.coreaudio-format", "audio/x-caf", "Audio Message.caf"),
        "document": ("com.adobe.pdf", "application/pdf", "report.pdf"),
    }[kind]
    guid = f"at_0_MEDIA-{n:08d}"
    w.bluebubbles.attachments[guid] = (data, "audio/ogg" if kind == "voice" else mime)
    event = json.loads((BLUEBUBBLES_FIXTURES / "new_message_attachment_image.json").read_text())
    event["data"].update(guid=f"MEDIA000-0000-4000-8000-{n:012d}", dateCreated=int(time.time() * 1000))
    event["data"]["attachments"] = [{**event["data"]["attachments"][0], "guid": guid, "uti": uti, "mimeType": mime,
                                     "transferName": name, "totalBytes": len(data)}]  # fmt: skip
    return Inbound(w.signed(bluebubbles_sign, n, _json(event)), lambda: w.bluebubbles.downloads[guid])


# --- each platform: what its fake received for the MEDIA answer --------------------------------


def wait_for(found: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = found()
        if value:
            return value
        time.sleep(0.05)
    return found()


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as answer:  # the embedded S3's pre-signed URL
        return bytes(answer.read())


def raw_bodies(requests: list[Any]) -> list[str]:
    """Each request's body as text: the raw body where the fake keeps it, else its parsed JSON."""
    return [
        r.raw.decode("utf-8", "replace") if getattr(r, "raw", b"") else json.dumps(getattr(r, "json", None))
        for r in requests
    ]


def telegram_outbound(w: World) -> list[Any]:
    [(method, fields)] = wait_for(w.telegram.uploads)
    assert method == "sendPhoto" and fields["photo"].value == PNG and fields["caption"].text == "here it is"
    return list(w.telegram.requests)


def slack_outbound(w: World) -> list[Any]:
    [done] = wait_for(lambda: w.slack.to("/api/files.completeUploadExternal"))
    [ticket] = w.slack.to("/api/files.getUploadURLExternal")
    assert ticket.body["filename"] == "cat.png" and ticket.body["length"] == str(len(PNG))
    [upload] = w.slack.to("/upload/F1")
    assert upload.raw == PNG
    assert done.body["channel_id"] == "D1" and done.body["initial_comment"] == "here it is"
    return list(w.slack.requests)


def whatsapp_outbound(w: World) -> list[Any]:
    sent = wait_for(lambda: [r for r in w.whatsapp.to("/v21.0/555/messages") if r.body.get("type") == "image"])
    [upload] = w.whatsapp.to("/v21.0/555/media")
    fields = fields_of(upload)
    assert fields["file"].value == PNG and fields["type"].text == "image/png"
    assert [m.body["image"] for m in sent] == [{"id": "MEDIA1", "caption": "here it is"}]
    return list(w.whatsapp.requests)


def discord_outbound(w: World) -> list[Any]:
    """The file replaces the slash command's deferred "thinking…" message (its interaction webhook)."""

    def edits() -> list[Any]:
        return [r for r in w.discord.requests if r.http_method == "PATCH" and r.content_type == "multipart/form-data"]

    [edited] = wait_for(edits)
    assert edited.path.endswith("/messages/@original") and edited.path.startswith(f"/webhooks/{DISCORD_APP}/")
    fields = fields_of(edited)
    assert fields["files[0]"].value == PNG and fields["files[0]"].filename == "cat.png"
    assert json.loads(fields["payload_json"].text)["content"] == "here it is"
    assert w.discord.to(f"/channels/{DISCORD_CHANNEL}/messages") == []
    return list(w.discord.requests)


def line_outbound(w: World) -> list[Any]:
    def images() -> list[dict[str, Any]]:
        messages = [m for r in w.line.requests if r.http_method == "POST" for m in (r.body or {}).get("messages", [])]
        return [m for m in messages if m.get("type") == "image"]

    [image] = wait_for(images)
    assert fetch(image["originalContentUrl"]) == PNG
    return list(w.line.requests)


def sms_outbound(w: World) -> list[Any]:
    path = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages.json"
    [sent] = wait_for(lambda: [r for r in w.twilio.to(path) if "MediaUrl" in r.body])
    assert sent.body["Body"] == "here it is" and sent.body["To"] == "+15550001111"
    assert fetch(sent.body["MediaUrl"]) == PNG
    return list(w.twilio.requests)


def matrix_outbound(w: World) -> list[Any]:
    def images() -> list[Any]:
        return [r for r in w.matrix.requests if "/send/m.room.message/" in r.path and r.body["msgtype"] == "m.image"]

    [image] = wait_for(images)
    [upload] = w.matrix.to("/_matrix/media/v3/upload")
    assert upload.raw == PNG and upload.headers["content-type"] == "image/png"
    assert image.body["url"] == "mxc://example.org/out-cat" and image.body["body"] == "cat.png"
    return list(w.matrix.requests)


def mattermost_outbound(w: World) -> list[Any]:
    [post] = wait_for(lambda: [r for r in w.mattermost.to("/api/v4/posts") if r.body.get("file_ids")])
    [upload] = w.mattermost.to("/api/v4/files")
    fields = fields_of(upload)
    assert fields["files"].value == PNG and fields["channel_id"].text == "ch1"
    assert post.body["file_ids"] == ["file-out"] and post.body["message"] == "here it is"
    return list(w.mattermost.requests)


def bluebubbles_outbound(w: World) -> list[Any]:
    """The text first, as its own message (iMessage gives a file no caption), then the file."""
    [sent] = wait_for(lambda: [m for m in w.bluebubbles.posted() if m.get("attachment") == PNG])
    assert sent["name"] == "cat.png" and sent["chatGuid"] == "iMessage;-;+15555550123"
    posted = w.bluebubbles.posted()
    [text] = [n for n, m in enumerate(posted) if m.get("text") == "here it is"]
    assert text == posted.index(sent) - 1
    return list(w.bluebubbles.requests)


def linked(text: str) -> bool:
    """A text naming the stored file by a link whose bytes are the file's."""
    if not text.startswith("here it is") or "\U0001f4ce cat.png: " not in text:
        return False
    assert fetch(text.split("\U0001f4ce cat.png: ", 1)[1].split()[0]) == PNG
    return True


def teams_outbound(w: World) -> list[Any]:
    assert wait_for(lambda: [b for _, b in w.teams.activities if linked(b["text"])])
    return list(w.teams.requests)


def google_chat_outbound(w: World) -> list[Any]:
    assert wait_for(lambda: [b for _, _, b in w.google.messages if linked(b["text"])])
    return list(w.google.requests)


def feishu_outbound(w: World) -> list[Any]:
    assert wait_for(lambda: [m for m in w.feishu.sent if linked(json.loads(m["content"])["text"])])
    return list(w.feishu.requests)


@dataclass(frozen=True)
class Case:
    inbound: Callable[[World, str, int, bytes], Inbound]
    kinds: tuple[str, ...]  # what the platform's users can send: image first, voice where it has them
    outbound: Callable[[World], list[Any]]  # waits for the MEDIA answer; every request the fake received
    native: bool = True  # False: the platform takes text only, and gets a link


ALL = ("image", "voice", "document")
CASES = {
    "telegram": Case(telegram_inbound, ALL, telegram_outbound),
    "slack": Case(slack_inbound, ALL, slack_outbound),
    "whatsapp": Case(whatsapp_inbound, ALL, whatsapp_outbound),
    "discord": Case(discord_inbound, ALL, discord_outbound),
    "line": Case(line_inbound, ALL, line_outbound),
    "sms": Case(sms_inbound, ALL, sms_outbound),
    "teams": Case(teams_inbound, ("image", "document"), teams_outbound, native=False),  # bots get no voice notes
    "google_chat": Case(google_chat_inbound, ("image", "document"), google_chat_outbound, native=False),
    "matrix": Case(matrix_inbound, ALL, matrix_outbound),
    "feishu": Case(feishu_inbound, ALL, feishu_outbound, native=False),
    "mattermost": Case(mattermost_inbound, ("image", "document"), mattermost_outbound),  # files only
    "bluebubbles": Case(bluebubbles_inbound, ALL, bluebubbles_outbound),
}


def prepare_uploads(w: World, platform: str) -> None:
    """The upload endpoints' answers (the rest of each fake answers its fallback)."""
    if platform == "slack":
        w.slack.routes["/api/files.getUploadURLExternal"] = ScriptedAnswer(
            200, {"ok": True, "upload_url": w.slack.base_url + "/upload/F1", "file_id": "F1"}
        )
        w.slack.routes["/upload/F1"] = ScriptedAnswer(200, "OK - 123")
        w.slack.routes["/api/files.completeUploadExternal"] = ScriptedAnswer(200, {"ok": True, "files": [{"id": "F1"}]})
    elif platform == "whatsapp":
        w.whatsapp.routes["/v21.0/555/media"] = ScriptedAnswer(200, {"id": "MEDIA1"})
    elif platform == "discord":  # a deferred interaction response is "thinking…" until it is answered
        deferred = {"id": "1300000000000000002", "flags": 128}
        w.discord.routes[f"/webhooks/{DISCORD_APP}/*"] = ScriptedAnswer(200, deferred)
    elif platform == "matrix":
        w.matrix.routes["/_matrix/media/v3/upload"] = ScriptedAnswer(200, {"content_uri": "mxc://example.org/out-cat"})
    elif platform == "mattermost":
        w.mattermost.routes["/api/v4/files"] = ScriptedAnswer(201, {"file_infos": [{"id": "file-out"}]})
        w.mattermost.routes["/api/v4/posts"] = ScriptedAnswer(201, {"id": "post-out"})


# --- what the gateway kept and what the model got -------------------------------------------------


def stored(data: bytes) -> list[str]:
    """The media bucket's keys holding exactly `data`, each with its `.json` record beside it."""
    import boto3

    from hermes_gateway import wiring
    from hermes_gateway.resources import MEDIA

    bucket = wiring.bindings().buckets[MEDIA.name]
    s3 = boto3.client("s3", region_name=wiring.region())
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])]  # fmt: skip
    found = [k for k in keys if not k.endswith(".json") and s3.get_object(Bucket=bucket, Key=k)["Body"].read() == data]
    return [k for k in found if k + ".json" in keys]


def model_input(w: World, since: int, expect: Callable[[Any], bool]) -> Any:
    """The content of the first user message, among the completions asked for after `since`, that
    `expect` accepts (a turn may ask the model more than once)."""

    def contents() -> list[Any]:
        asked = [r.json for r in w.openai.requests[since:] if r.path == "/v1/chat/completions"]
        users = [[m for m in body["messages"] if m["role"] == "user"] for body in asked]
        return [found[-1]["content"] for found in users if found]

    matching = wait_for(lambda: [c for c in contents() if expect(c)])
    return matching[0] if matching else (contents() or [None])[-1]


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


@pytest.mark.parametrize("platform", list(CASES))
def test_each_kind_of_file_is_fetched_once_kept_given_to_the_model_and_a_media_answer_is_sent(
    platform: str, world: World
) -> None:
    case = CASES[platform]
    prepare_uploads(world, platform)
    made = {"image": image_of(platform), "voice": voice_of(platform), "document": minimal_pdf(document_text(platform))}
    fetched: dict[str, Callable[[], int]] = {}
    for kind in case.kinds:
        n = next(world.numbers)
        since, heard = len(world.openai.requests), len(world.speech.uploads)
        served = world.host.paths().count("/cat.png")
        if kind == "image":
            world.openai.reply_next(f"here it is\nMEDIA:{world.host.url('/cat.png')}")
        inbound = case.inbound(world, kind, n, made[kind])
        fetched[kind] = inbound.fetches
        status, answer = world.send(inbound.request)
        assert status == 200, (platform, kind, status, answer)

        if kind == "image":
            encoded = base64.b64encode(made["image"]).decode()

            def has_image(content: Any, encoded: str = encoded) -> bool:
                return isinstance(content, list) and any(
                    p.get("type") == "image_url" and p["image_url"]["url"].endswith(";base64," + encoded)
                    for p in content
                )

            content = model_input(world, since, has_image)
            assert has_image(content), (platform, content)
            [part] = [p for p in content if p.get("type") == "image_url"]
            assert part["image_url"]["url"].startswith("data:image/")
        elif kind == "voice":
            content = model_input(world, since, lambda c: HEARD in text_of(c))
            assert f'transcribed: "{HEARD}"]' in text_of(content), (platform, content)
            assert [u.fields["file"][2] for u in world.speech.uploads[heard:]] == [made["voice"]]
        else:
            content = model_input(world, since, lambda c: document_text(platform) in text_of(c))
            assert "[File " in text_of(content) and document_text(platform) in text_of(content), (platform, content)
        if kind == "image":
            case.outbound(world)
        assert world.client.gateway.wait_idle(timeout=60.0), platform
        if kind == "image":  # the MEDIA line's file was fetched once, for this platform's answer
            assert world.host.paths().count("/cat.png") == served + 1
        assert fetched[kind]() == 1, (platform, kind, fetched[kind]())
        assert len(stored(made[kind])) == 1, (platform, kind)

    # Nothing was fetched again by a later turn, and no text with a MEDIA line went to the platform
    assert {kind: count() for kind, count in fetched.items()} == dict.fromkeys(case.kinds, 1)
    sent = raw_bodies(case.outbound(world))
    assert not [body for body in sent if "MEDIA:" in body], platform
    assert any("here it is" in body for body in sent) or case.native
