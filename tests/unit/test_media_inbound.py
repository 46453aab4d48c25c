"""Inbound attachments on every platform but Telegram (test_telegram.py): each parser turns a
real-shaped payload's files into references (domain.media.Attachment), a message that is only
media is still a message, and each platform's `fetch_media` fetches the bytes from a loopback
fake with the platform's credentials (never anything but 127.0.0.1).

Payload shapes follow each platform's documentation: Slack `file_share` events, WhatsApp Cloud
API media messages, Discord attachment options, LINE image/video/audio/file messages, Twilio
MMS parameters, Teams file and inline image attachments, Google Chat `attachment[]`, Matrix
m.image/m.audio/m.video/m.file, Feishu image/file/audio/media and Mattermost `file_ids`.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hermes_gateway.domain.media import Attachment, attachment, attachments_of
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import TransientError
from hermes_gateway.platforms import (
    catalog,
    discord,
    feishu,
    google_chat,
    line,
    matrix,
    mattermost,
    slack,
    teams,
    twilio,
    whatsapp,
)
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.platforms.media import Fetched, MediaTooLarge, MediaUnavailable, on_host
from hermes_gateway.services.ingress import Accepted, HttpRequest
from tests.fakes import platforms
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.google_server import FakeGoogle
from tests.fakes.loopback import ScriptedAnswer
from tests.fakes.media_server import FakeMediaHost, file
from tests.fakes.services import make_settings
from tests.fakes.teams_server import DEFAULT_APP_ID, DEFAULT_APP_PASSWORD, FakeBotFramework

NOW = 1_764_400_000.0
LIMIT = 1_000_000
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
PLATFORMS_WITH_MEDIA = (
    "slack",
    "whatsapp",
    "discord",
    "line",
    "sms",
    "teams",
    "google_chat",
    "matrix",
    "feishu",
    "mattermost",
    "bluebubbles",
)


@pytest.fixture
def host() -> Iterator[FakeMediaHost]:
    with FakeMediaHost() as fake:
        yield fake


@pytest.fixture
def storage() -> Iterator[FakeMediaHost]:
    """A second file host, without credentials (where a redirect or a pre-authenticated URL goes)."""
    with FakeMediaHost() as fake:
        yield fake


def context(platform: str, env: dict[str, str], secrets: dict[str, str]) -> AdapterContext:
    return platforms.context(platform, make_settings(env), secrets)


def only(parsed: Any) -> InboundMessage:
    if isinstance(parsed, Accepted):
        assert len(parsed.items) == 1
        parsed = parsed.items[0]
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


def dicts(*found: Attachment) -> tuple[dict[str, Any], ...]:
    return tuple(a.to_dict() for a in found)


def test_every_platform_but_the_relays_and_webchat_names_a_fetcher() -> None:
    for name in PLATFORMS_WITH_MEDIA:
        spec = catalog.BY_NAME[name]
        assert spec.media is not None, name
        fetcher = catalog.load(spec.media)
        assert callable(fetcher) and fetcher.__name__ == "fetch_media", name


@pytest.mark.parametrize(
    ("url", "base", "allowed"),
    [
        ("https://files.slack.com/files-pri/T1-F1/a.png", "https://slack.com/api", True),
        ("https://slack.com/files/a.png", "https://slack.com/api", True),
        ("https://files.slack.com.evil.example/a.png", "https://slack.com/api", False),
        ("https://evilslack.com/a.png", "https://slack.com/api", False),
        ("http://files.slack.com/a.png", "https://slack.com/api", False),
        ("https://user:pw@files.slack.com/a.png", "https://slack.com/api", False),
        ("https://api.twilio.com/2010-04-01/Accounts/AC1/Messages/MM1/Media/ME1", "https://api.twilio.com", True),
        ("http://127.0.0.1:9/x", "http://127.0.0.1:8/api", True),
        ("https://a.example:bad/x", "https://a.example", False),
    ],
)
def test_credentials_go_only_to_the_api_host_and_its_subdomains(url: str, base: str, allowed: bool) -> None:
    assert on_host(url, base) is allowed


# --- Slack -----------------------------------------------------------------------------------------

SLACK_TOKEN = "slack-bot-token-for-tests"


def slack_file(**fields: Any) -> dict[str, Any]:
    return {
        "id": "F0123ABCD",
        "created": 1764400000,
        "name": "chart.png",
        "title": "chart.png",
        "mimetype": "image/png",
        "filetype": "png",
        "pretty_type": "PNG",
        "user": "UALICE01",
        "mode": "hosted",
        "is_external": False,
        "size": 48213,
        "url_private": "https://files.slack.com/files-pri/T1-F0123ABCD/chart.png",
        "url_private_download": "https://files.slack.com/files-pri/T1-F0123ABCD/download/chart.png",
        **fields,
    }


def slack_share(files: list[dict[str, Any]], text: str = "") -> dict[str, Any]:
    return {
        "token": "x",
        "team_id": "T1",
        "api_app_id": "A1",
        "type": "event_callback",
        "event_id": "Ev1",
        "event_time": int(NOW),
        "authorizations": [{"team_id": "T1", "user_id": "UBOT0001", "is_bot": True}],
        "event": {
            "type": "message",
            "subtype": "file_share",
            "text": text,
            "files": files,
            "upload": False,
            "user": "UALICE01",
            "display_as_bot": False,
            "ts": "1764400000.000100",
            "channel": "C0123CHAN",
            "channel_type": "channel",
        },
    }


def test_slack_files_become_attachments_and_a_file_share_without_text_is_a_message() -> None:
    files = [
        slack_file(),
        slack_file(
            id="F2",
            name="audio_message.mp4",
            title="Audio clip",
            mimetype="audio/mp4",
            filetype="mp4",
            subtype="slack_audio",
            size=9000,
            url_private="https://files.slack.com/files-pri/T1-F2/audio_message.mp4",
            url_private_download="https://files.slack.com/files-pri/T1-F2/download/audio_message.mp4",
        ),
        slack_file(id="F3", name="song.mp3", mimetype="audio/mpeg", filetype="mp3", size=3, url_private_download=None),
        slack_file(id="F4", name="demo.mp4", mimetype="video/mp4", filetype="mp4", size=4),
        slack_file(id="F5", name="report.pdf", mimetype="application/pdf", filetype="pdf", size=5),
        {
            "id": "F6",
            "name": "Plan",
            "title": "Plan",
            "mimetype": "application/vnd.google-apps.document",
            "filetype": "gdoc",
            "is_external": True,
            "external_type": "gdrive",
            "url_private": "https://docs.google.com/document/d/1abc/edit",
        },
        {"id": "F7", "mode": "tombstone"},
    ]
    message = only(slack.parse_event(slack_share(files), received_at=NOW))

    assert message.text == ""
    download = "https://files.slack.com/files-pri/T1-{}/download/{}"
    assert message.attachments == dicts(
        attachment(
            "image", mime="image/png", size=48213, name="chart.png", url=download.format("F0123ABCD", "chart.png")
        ),
        attachment(
            "voice",
            mime="audio/mp4",
            size=9000,
            name="audio_message.mp4",
            url=download.format("F2", "audio_message.mp4"),
        ),
        # without url_private_download, url_private is the file
        attachment(
            "audio",
            mime="audio/mpeg",
            size=3,
            name="song.mp3",
            url="https://files.slack.com/files-pri/T1-F0123ABCD/chart.png",
        ),
        attachment("video", mime="video/mp4", size=4, name="demo.mp4", url=download.format("F0123ABCD", "chart.png")),
        attachment(
            "document", mime="application/pdf", size=5, name="report.pdf", url=download.format("F0123ABCD", "chart.png")
        ),
        attachment("document", mime="application/vnd.google-apps.document", name="Plan"),  # external: named only
        attachment("document"),  # a tombstone: neither named nor fetchable
    )


def test_a_slack_connect_file_without_urls_is_looked_up_with_files_info(host: FakeMediaHost) -> None:
    shared = {"id": "F0CONNECT1", "file_access": "check_file_info", "created": 1764400000, "user": "UEXTERNAL"}
    message = only(slack.parse_event(slack_share([shared]), received_at=NOW))
    media = attachments_of(message.attachments)[0]
    assert media == attachment("document", file_id="F0CONNECT1")

    host.authorization = f"Bearer {SLACK_TOKEN}"
    download = "/files-pri/T1-F0CONNECT1/download/notes.txt"
    info = {
        "ok": True,
        "file": {"id": "F0CONNECT1", "name": "notes.txt", "size": 5, "url_private_download": host.url(download)},
    }
    host.files["/api/files.info?file=F0CONNECT1"] = ScriptedAnswer(200, info)
    host.files[download] = file(b"notes", "text/plain")

    assert slack.fetch_media(slack_context(host), media, LIMIT) == Fetched(b"notes", "text/plain")
    assert host.paths() == ["/api/files.info?file=F0CONNECT1", download]


def test_a_slack_connect_file_over_the_limit_is_not_downloaded(host: FakeMediaHost) -> None:
    info = {"ok": True, "file": {"id": "F1", "size": LIMIT + 1, "url_private_download": host.url("/files-pri/x")}}
    host.files["/api/files.info?file=F1"] = ScriptedAnswer(200, info)
    with pytest.raises(MediaTooLarge):
        slack.fetch_media(slack_context(host), attachment("document", file_id="F1"), LIMIT)
    assert host.paths() == ["/api/files.info?file=F1"]


def test_a_slack_caption_is_the_message_text() -> None:
    message = only(slack.parse_event(slack_share([slack_file()], text="<@UBOT0001> what is this?"), received_at=NOW))
    assert message.text == "what is this?"
    assert message.facts == ("mentions_bot",)
    assert len(message.attachments) == 1


def slack_context(host: FakeMediaHost, token: str | None = SLACK_TOKEN) -> AdapterContext:
    return context("slack", {"SLACK_API_BASE_URL": host.url("/api")}, {"SLACK_BOT_TOKEN": token} if token else {})


def test_slack_fetches_the_private_url_with_the_bot_token(host: FakeMediaHost) -> None:
    host.authorization = f"Bearer {SLACK_TOKEN}"
    host.files["/files-pri/T1-F1/download/chart.png"] = file(PNG, "image/png")
    media = attachment("image", mime="image/png", size=len(PNG), url=host.url("/files-pri/T1-F1/download/chart.png"))

    assert slack.fetch_media(slack_context(host), media, LIMIT) == Fetched(PNG, "image/png")
    assert host.requests[0].headers["authorization"] == f"Bearer {SLACK_TOKEN}"


def test_slack_sends_its_token_to_no_other_host(host: FakeMediaHost) -> None:
    with pytest.raises(MediaUnavailable, match="not on one of the platform's hosts"):
        slack.fetch_media(slack_context(host), attachment("image", url="https://files.example/x.png"), LIMIT)


def test_slack_sign_in_page_for_a_token_without_files_read_is_no_file(host: FakeMediaHost) -> None:
    host.files["/files-pri/T1-F1/chart.png"] = file(b"<html>sign in</html>", "text/html")
    with pytest.raises(MediaUnavailable, match="files:read"):
        slack.fetch_media(slack_context(host), attachment("image", url=host.url("/files-pri/T1-F1/chart.png")), LIMIT)


# --- WhatsApp --------------------------------------------------------------------------------------

WA_TOKEN = "EAAG-test-access-token"
WA_MEDIA_ID = "1037543291543636"


def whatsapp_message(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    message = {
        "from": "16315551181",
        "id": "wamid.HBgLMTYzMTU1NTExODEVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA=",
        "timestamp": str(int(NOW)),
        "type": kind,
        kind: body,
    }
    return {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": "102290129340398",
                "changes": [
                    {
                        "field": "messages",
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {"display_phone_number": "15550783881", "phone_number_id": "106540352242922"},
                            "contacts": [{"profile": {"name": "Sheena Nelson"}, "wa_id": "16315551181"}],
                            "messages": [message],
                        },
                    }
                ],
            }
        ],
    }


@pytest.mark.parametrize(
    ("kind", "body", "expected", "text"),
    [
        (
            "image",
            {"caption": "look at this", "mime_type": "image/jpeg", "sha256": "a1b2", "id": WA_MEDIA_ID},
            attachment("image", mime="image/jpeg", media_id=WA_MEDIA_ID),
            "look at this",
        ),
        (
            "audio",
            {"mime_type": "audio/ogg; codecs=opus", "sha256": "a1b2", "id": WA_MEDIA_ID, "voice": True},
            attachment("voice", mime="audio/ogg; codecs=opus", media_id=WA_MEDIA_ID),
            "",
        ),
        (
            "audio",
            {"mime_type": "audio/mpeg", "sha256": "a1b2", "id": WA_MEDIA_ID, "voice": False},
            attachment("audio", mime="audio/mpeg", media_id=WA_MEDIA_ID),
            "",
        ),
        (
            "video",
            {"mime_type": "video/mp4", "sha256": "a1b2", "id": WA_MEDIA_ID},
            attachment("video", mime="video/mp4", media_id=WA_MEDIA_ID),
            "",
        ),
        (
            "document",
            {
                "caption": "the invoice",
                "filename": "invoice.pdf",
                "mime_type": "application/pdf",
                "sha256": "a1b2",
                "id": WA_MEDIA_ID,
            },
            attachment("document", mime="application/pdf", name="invoice.pdf", media_id=WA_MEDIA_ID),
            "the invoice",
        ),
        (
            "sticker",
            {"mime_type": "image/webp", "sha256": "a1b2", "id": WA_MEDIA_ID, "animated": False},
            attachment("sticker", mime="image/webp", media_id=WA_MEDIA_ID),
            "",
        ),
    ],
)
def test_whatsapp_media_messages_become_attachments(
    kind: str, body: dict[str, Any], expected: Attachment, text: str
) -> None:
    message = only(only_item(whatsapp.parse_notification(whatsapp_message(kind, body), received_at=NOW)))
    assert (message.text, message.attachments) == (text, dicts(expected))


def only_item(parsed: Any) -> Any:
    assert isinstance(parsed, Accepted) and len(parsed.items) == 1
    return parsed.items[0]


def whatsapp_context(host: FakeMediaHost, token: str | None = WA_TOKEN) -> AdapterContext:
    env = {"WHATSAPP_API_BASE_URL": host.url("/v21.0")}
    return context("whatsapp", env, {"WHATSAPP_ACCESS_TOKEN": token} if token else {})


def whatsapp_lookup(host: FakeMediaHost, size: int = len(PNG)) -> None:
    download = host.url(f"/whatsapp_business/attachments/?mid={WA_MEDIA_ID}&ext=1764400000&hash=ATtest")
    host.files[f"/v21.0/{WA_MEDIA_ID}"] = ScriptedAnswer(
        200,
        {
            "messaging_product": "whatsapp",
            "url": download,
            "mime_type": "image/jpeg",
            "sha256": "a1b2",
            "file_size": size,
            "id": WA_MEDIA_ID,
        },
    )
    host.files[urllib.parse.urlsplit(download)._replace(scheme="", netloc="").geturl()] = file(PNG)


def test_whatsapp_looks_the_media_up_and_downloads_it_with_the_token(host: FakeMediaHost) -> None:
    host.authorization = f"Bearer {WA_TOKEN}"
    whatsapp_lookup(host)

    fetched = whatsapp.fetch_media(whatsapp_context(host), attachment("image", media_id=WA_MEDIA_ID), LIMIT)

    # the body is application/octet-stream: the mime type the lookup named is kept
    assert fetched == Fetched(PNG, "image/jpeg")
    assert host.paths()[0] == f"/v21.0/{WA_MEDIA_ID}"
    assert [r.headers["authorization"] for r in host.requests] == [f"Bearer {WA_TOKEN}"] * 2


def test_whatsapp_a_size_over_the_limit_in_the_lookup_is_not_downloaded(host: FakeMediaHost) -> None:
    whatsapp_lookup(host, size=LIMIT + 1)
    with pytest.raises(MediaTooLarge):
        whatsapp.fetch_media(whatsapp_context(host), attachment("image", media_id=WA_MEDIA_ID), LIMIT)
    assert host.paths() == [f"/v21.0/{WA_MEDIA_ID}"]


def test_whatsapp_an_expired_media_id_is_unavailable(host: FakeMediaHost) -> None:
    host.answer_next(404, {"error": {"message": "Unsupported get request.", "code": 100}})
    with pytest.raises(MediaUnavailable, match="30 days"):
        whatsapp.fetch_media(whatsapp_context(host), attachment("image", media_id=WA_MEDIA_ID), LIMIT)


# --- Discord ---------------------------------------------------------------------------------------

DISCORD_FILE_ID = "1176000000000000001"
CDN_URL = "https://cdn.discordapp.com/attachments/1100000000000000002/1176000000000000001/diagram.png?ex=6570&is=655b&hm=ab12&"


def discord_command(options: list[dict[str, Any]], resolved: dict[str, Any]) -> HttpRequest:
    interaction = {
        "id": "1176000000000000009",
        "application_id": "1100000000000000000",
        "type": 2,
        "token": "aW50ZXJhY3Rpb24tdG9rZW4",
        "version": 1,
        "guild_id": "1100000000000000001",
        "channel_id": "1100000000000000002",
        "channel": {"id": "1100000000000000002", "type": 0, "name": "general"},
        "member": {"user": {"id": "1100000000000000003", "username": "alice", "global_name": "Alice"}},
        "data": {"id": "1100000000000000004", "name": "ask", "type": 1, "options": options, "resolved": resolved},
    }
    return HttpRequest(
        "POST", "/webhooks/discord", {"content-type": "application/json"}, json.dumps(interaction).encode()
    )


def discord_adapter() -> discord.DiscordInbound:
    return discord.DiscordInbound(context("discord", {"DISCORD_APPLICATION_ID": "1100000000000000000"}, {}))


def discord_file(**fields: Any) -> dict[str, Any]:
    return {
        "id": DISCORD_FILE_ID,
        "filename": "diagram.png",
        "size": 20480,
        "url": CDN_URL,
        "proxy_url": CDN_URL.replace("cdn.discordapp.com", "media.discordapp.net"),
        "content_type": "image/png",
        "width": 640,
        "height": 480,
        "ephemeral": True,
        **fields,
    }


def test_discord_attachment_options_become_attachments() -> None:
    options = [
        {"name": "prompt", "type": 3, "value": "what does this show?"},
        {"name": "file", "type": 11, "value": DISCORD_FILE_ID},
    ]
    parsed = discord_adapter().parse(discord_command(options, {"attachments": {DISCORD_FILE_ID: discord_file()}}), NOW)

    message = only(parsed)
    assert message.text == "what does this show?"
    assert message.attachments == dicts(
        attachment("image", mime="image/png", size=20480, name="diagram.png", url=CDN_URL)
    )


def test_discord_a_command_with_only_a_file_is_a_message() -> None:
    voice = discord_file(filename="voice-message.ogg", content_type="audio/ogg", duration_secs=3.2, waveform="AAAA")
    options = [{"name": "file", "type": 11, "value": DISCORD_FILE_ID}]
    message = only(discord_adapter().parse(discord_command(options, {"attachments": {DISCORD_FILE_ID: voice}}), NOW))
    assert message.text == ""
    assert attachments_of(message.attachments)[0].kind == "voice"


def test_discord_downloads_the_cdn_url_without_a_token(host: FakeMediaHost) -> None:
    host.files["/attachments/1/2/diagram.png?ex=6570&is=655b&hm=ab12&"] = file(PNG, "image/png")
    env = {"DISCORD_API_BASE_URL": host.url("/api/v10")}  # the fake serves the CDN too
    ctx = context("discord", env, {"DISCORD_BOT_TOKEN": "bot-token-never-sent"})
    media = attachment("image", size=len(PNG), url=host.url("/attachments/1/2/diagram.png?ex=6570&is=655b&hm=ab12&"))

    assert discord.fetch_media(ctx, media, LIMIT) == Fetched(PNG, "image/png")
    assert "authorization" not in host.requests[0].headers


@pytest.mark.parametrize(
    ("fetch", "ref", "platform"),
    [
        (discord.fetch_media, {"url": "https://evil.example/attachments/1/2/a.png"}, "discord"),
        (discord.fetch_media, {"url": "https://cdn.discordapp.com.evil.example/a.png"}, "discord"),
        (teams.fetch_media, {"download_url": "https://contoso.evil.example/download.aspx?UniqueId=1"}, "teams"),
    ],
)
def test_a_payloads_file_url_is_fetched_only_from_its_platforms_hosts(
    fetch: Callable[..., Fetched], ref: dict[str, str], platform: str, host: FakeMediaHost
) -> None:
    with pytest.raises(MediaUnavailable, match="not on one of the platform's hosts"):
        fetch(context(platform, {}, {}), Attachment("image", ref=ref), LIMIT)
    assert host.requests == []


def test_whatsapps_media_url_must_be_on_metas_media_host(host: FakeMediaHost) -> None:
    host.authorization = f"Bearer {WA_TOKEN}"
    lookup = {"url": "https://lookaside.fbsbx.com.evil.example/x", "mime_type": "image/png", "file_size": 3}
    host.files[f"/v21.0/{WA_MEDIA_ID}"] = ScriptedAnswer(200, lookup)
    with pytest.raises(MediaUnavailable, match="not on one of the platform's hosts"):
        whatsapp.fetch_media(whatsapp_context(host), attachment("image", media_id=WA_MEDIA_ID), LIMIT)
    assert host.paths() == [f"/v21.0/{WA_MEDIA_ID}"]  # the lookup only: the token went nowhere else


# --- LINE ------------------------------------------------------------------------------------------

LINE_TOKEN = "line-channel-access-token-test"


def line_event(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message",
        "message": message,
        "webhookEventId": "01FZ74A0TDDPYRVKNK77XKC3ZR",
        "deliveryContext": {"isRedelivery": False},
        "timestamp": int(NOW * 1000),
        "source": {"type": "user", "userId": "U4af4980629a1b2c3d4e5f60718293a4b"},
        "replyToken": "b60d432864f44d079f6d8efe86cf404b",
        "mode": "active",
    }


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {
                "type": "image",
                "id": "354718705033693859",
                "quoteToken": "q3Plxr4AgKd",
                "contentProvider": {"type": "line"},
                "imageSet": {"id": "E005D41A", "index": 1, "total": 2},
            },
            attachment("image", mime="image/jpeg", message_id="354718705033693859"),
        ),
        (
            {"type": "video", "id": "325708", "duration": 60000, "contentProvider": {"type": "line"}},
            attachment("video", mime="video/mp4", message_id="325708"),
        ),
        (
            {"type": "audio", "id": "325709", "duration": 60000, "contentProvider": {"type": "line"}},
            attachment("voice", mime="audio/x-m4a", message_id="325709"),
        ),
        (
            {"type": "file", "id": "325710", "fileName": "file.txt", "fileSize": 2138},
            attachment("document", size=2138, name="file.txt", message_id="325710"),
        ),
        (
            {
                "type": "video",
                "id": "325711",
                "duration": 60000,
                "contentProvider": {
                    "type": "external",
                    "originalContentUrl": "https://example.com/original.mp4",
                    "previewImageUrl": "https://example.com/preview.jpg",
                },
            },
            attachment("video", mime="video/mp4"),  # another service's content: named only
        ),
    ],
)
def test_line_media_messages_become_attachments(message: dict[str, Any], expected: Attachment) -> None:
    parsed = only(line.parse_event(line_event(message), bot="Ubot", received_at=NOW))
    assert (parsed.text, parsed.attachments) == ("", dicts(expected))
    assert parsed.reply_context["reply_token"] == "b60d432864f44d079f6d8efe86cf404b"


def test_line_content_comes_from_the_data_host() -> None:
    assert line.content_base_url("https://api.line.me") == "https://api-data.line.me"
    assert line.content_base_url("http://127.0.0.1:8080/line") == "http://127.0.0.1:8080/line"


def line_context(host: FakeMediaHost, token: str | None = LINE_TOKEN) -> AdapterContext:
    return context("line", {"LINE_API_BASE_URL": host.base_url}, {"LINE_CHANNEL_ACCESS_TOKEN": token} if token else {})


def test_line_fetches_the_content_with_the_channel_token(host: FakeMediaHost) -> None:
    host.authorization = f"Bearer {LINE_TOKEN}"
    host.files["/v2/bot/message/354718705033693859/content"] = file(PNG, "image/jpeg")
    media = attachment("image", mime="image/jpeg", message_id="354718705033693859")

    assert line.fetch_media(line_context(host), media, LIMIT) == Fetched(PNG, "image/jpeg")
    assert host.requests[0].headers["authorization"] == f"Bearer {LINE_TOKEN}"


def test_line_content_still_being_prepared_is_tried_again(host: FakeMediaHost) -> None:
    host.answer_next(202, b"")
    with pytest.raises(TransientError, match="still being prepared"):
        line.fetch_media(line_context(host), attachment("video", message_id="325708"), LIMIT)


# --- Twilio ----------------------------------------------------------------------------------------

ACCOUNT_SID = "AC00000000000000000000000000000001"
TWILIO_TOKEN = "twilio-auth-token-test-0000"
MEDIA_PATH = f"/2010-04-01/Accounts/{ACCOUNT_SID}/Messages/MM800f449d0399ed014aae2bcc0cc2f2ec/Media/ME0001"


def test_twilio_media_parameters_become_attachments() -> None:
    media = f"https://api.twilio.com{MEDIA_PATH}"
    params = {
        "ToCountry": "US",
        "MediaContentType0": "image/jpeg",
        "MediaContentType1": "audio/ogg",
        "MediaContentType2": "application/pdf",
        "SmsMessageSid": "MM800f449d0399ed014aae2bcc0cc2f2ec",
        "NumMedia": "3",
        "SmsSid": "MM800f449d0399ed014aae2bcc0cc2f2ec",
        "SmsStatus": "received",
        "Body": "",
        "To": "+15005550006",
        "NumSegments": "1",
        "MessageSid": "MM800f449d0399ed014aae2bcc0cc2f2ec",
        "AccountSid": ACCOUNT_SID,
        "From": "+14155552671",
        "MediaUrl0": media,
        "MediaUrl1": media[:-1] + "2",
        "MediaUrl2": media[:-1] + "3",
        "ApiVersion": "2010-04-01",
    }
    message = only(twilio.parse_message(list(params.items()), received_at=NOW))
    assert message.text == ""
    assert message.attachments == dicts(
        attachment("image", mime="image/jpeg", url=media),
        attachment("audio", mime="audio/ogg", url=media[:-1] + "2"),
        attachment("document", mime="application/pdf", url=media[:-1] + "3"),
    )


def twilio_context(host: FakeMediaHost, token: str | None = TWILIO_TOKEN) -> AdapterContext:
    env = {"SMS_API_BASE_URL": host.base_url, "TWILIO_ACCOUNT_SID": ACCOUNT_SID}
    return context("sms", env, {"TWILIO_AUTH_TOKEN": token} if token else {})


def test_twilio_fetches_with_basic_auth_and_follows_the_redirect_without_it(
    host: FakeMediaHost, storage: FakeMediaHost
) -> None:
    basic = "Basic " + base64.b64encode(f"{ACCOUNT_SID}:{TWILIO_TOKEN}".encode()).decode()
    host.authorization = basic
    host.files[MEDIA_PATH] = ScriptedAnswer(307, "", {"Location": storage.url("/media/ME0001?Expires=1&Signature=x")})
    storage.files["/media/ME0001?Expires=1&Signature=x"] = file(PNG, "image/jpeg")

    fetched = twilio.fetch_media(
        twilio_context(host), attachment("image", mime="image/jpeg", url=host.url(MEDIA_PATH)), LIMIT
    )

    assert fetched == Fetched(PNG, "image/jpeg")
    assert host.requests[0].headers["authorization"] == basic
    assert "authorization" not in storage.requests[0].headers


def test_twilio_sends_its_credentials_to_no_other_host(host: FakeMediaHost) -> None:
    with pytest.raises(MediaUnavailable, match="not on one of the platform's hosts"):
        twilio.fetch_media(twilio_context(host), attachment("image", url="https://media.example/x.jpg"), LIMIT)


def test_twilio_errors_never_carry_the_credentials(host: FakeMediaHost) -> None:
    host.answer_next(403, {"code": 20003, "message": f"Authenticate {TWILIO_TOKEN}"})
    with pytest.raises(MediaUnavailable) as caught:
        twilio.fetch_media(twilio_context(host), attachment("image", url=host.url(MEDIA_PATH)), LIMIT)
    assert TWILIO_TOKEN not in str(caught.value)


# --- Teams -----------------------------------------------------------------------------------------

IMAGE_PATH = "/emea/v3/attachments/0-eus-d1-0a1b2c3d/views/original"


def teams_activity(attachments: list[dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    activity = {
        "type": "message",
        "id": "1764400000000",
        "timestamp": "2025-11-29T07:06:40.000Z",
        "serviceUrl": "https://smba.trafficmanager.net/emea/",
        "channelId": "msteams",
        "from": {"id": "29:1alice", "name": "Alice", "aadObjectId": "6a4d1f3e-0000-4000-8000-000000000001"},
        "conversation": {"conversationType": "personal", "tenantId": "tenant-1", "id": "a:1conversation"},
        "recipient": {"id": "28:bot", "name": "Hermes"},
        "attachments": attachments,
        "entities": [{"type": "clientInfo", "locale": "en-US"}],
        "channelData": {"tenant": {"id": "tenant-1"}},
    }
    if text is not None:
        activity["text"] = text
    return activity


FILE_INFO: dict[str, Any] = {
    "contentType": "application/vnd.microsoft.teams.file.download.info",
    "contentUrl": "https://contoso.sharepoint.com/personal/alice/Documents/report.pdf",
    "name": "report.pdf",
    "content": {
        "downloadUrl": "https://contoso.sharepoint.com/personal/alice/_layouts/15/download.aspx?UniqueId=1150d938&tempauth=x",
        "uniqueId": "1150D938-8870-4044-9F2C-5BBDEBA70C9D",
        "fileType": "pdf",
    },
}


def test_teams_files_and_pasted_images_become_attachments_and_html_is_skipped() -> None:
    image = {"contentType": "image/*", "contentUrl": f"https://smba.trafficmanager.net{IMAGE_PATH}"}
    html = {"contentType": "text/html", "content": '<div><img src="https://smba.trafficmanager.net/x"></div>'}
    message = only(teams.parse_activity(teams_activity([FILE_INFO, image, html]), received_at=NOW))

    assert message.text == ""
    assert message.attachments == dicts(
        attachment(
            "document", mime="application/pdf", name="report.pdf", download_url=FILE_INFO["content"]["downloadUrl"]
        ),
        attachment("image", url=f"https://smba.trafficmanager.net{IMAGE_PATH}"),
    )


def test_teams_a_card_that_repeats_the_text_is_no_attachment() -> None:
    card = {"contentType": "application/vnd.microsoft.card.adaptive", "content": {"type": "AdaptiveCard"}}
    message = only(teams.parse_activity(teams_activity([card], text="hello"), received_at=NOW))
    assert (message.text, message.attachments) == ("hello", ())


@pytest.fixture
def bot_framework() -> Iterator[FakeBotFramework]:
    with FakeBotFramework() as fake:
        yield fake


def teams_context(bot_framework: FakeBotFramework, hosts: str = "127.0.0.1") -> AdapterContext:
    env = {
        "TEAMS_APP_ID": DEFAULT_APP_ID,
        "TEAMS_TOKEN_URL": bot_framework.token_url,
        "TEAMS_SERVICE_URL_HOSTS": hosts,
        "TEAMS_FILE_HOSTS": "127.0.0.1",
    }
    return context("teams", env, {"TEAMS_APP_PASSWORD": DEFAULT_APP_PASSWORD})


def test_teams_fetches_an_image_with_the_bots_token(host: FakeMediaHost, bot_framework: FakeBotFramework) -> None:
    host.authorization = "Bearer bf-token-1"
    host.files[IMAGE_PATH] = file(PNG, "image/png")

    ctx = teams_context(bot_framework)

    fetched = teams.fetch_media(ctx, attachment("image", url=host.url(IMAGE_PATH)), LIMIT)
    again = teams.fetch_media(ctx, attachment("image", url=host.url(IMAGE_PATH)), LIMIT)

    assert fetched == again == Fetched(PNG, "image/png")
    assert len(bot_framework.token_requests()) == 1  # one token for a context's downloads
    assert [r.headers["authorization"] for r in host.requests] == ["Bearer bf-token-1"] * 2


def test_teams_sends_no_token_for_a_file_and_none_off_the_bot_framework(
    host: FakeMediaHost, bot_framework: FakeBotFramework
) -> None:
    host.files["/personal/alice/_layouts/15/download.aspx?UniqueId=1150d938"] = file(b"%PDF-1.7", "application/pdf")
    report = attachment(
        "document", download_url=host.url("/personal/alice/_layouts/15/download.aspx?UniqueId=1150d938")
    )
    assert teams.fetch_media(teams_context(bot_framework), report, LIMIT) == Fetched(b"%PDF-1.7", "application/pdf")
    assert "authorization" not in host.requests[0].headers

    elsewhere = teams_context(bot_framework, hosts="smba.trafficmanager.net")
    with pytest.raises(MediaUnavailable, match="not on a Bot Framework host"):
        teams.fetch_media(elsewhere, attachment("image", url=host.url(IMAGE_PATH)), LIMIT)
    assert bot_framework.token_requests() == []


# --- Google Chat -----------------------------------------------------------------------------------

RESOURCE = "ClxzcGFjZXMvQUFBQUFBQUFBQUEvbWVzc2FnZXMvQkJCQkJCQkJCQkIuQkJCQkJCQkJCQkIvYXR0YWNobWVudHMvQUFBQUFBQUFBQUE="


def chat_event(attachments: list[dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    user = {"name": "users/1234567890", "displayName": "Alice", "type": "HUMAN"}
    space = {"name": "spaces/AAAAAAAAAAA", "type": "DM", "spaceType": "DIRECT_MESSAGE", "singleUserBotDm": True}
    message: dict[str, Any] = {
        "name": "spaces/AAAAAAAAAAA/messages/BBBBBBBBBBB.BBBBBBBBBBB",
        "sender": user,
        "createTime": "2025-11-29T07:06:40.000000Z",
        "attachment": attachments,
        "space": space,
        "thread": {"name": "spaces/AAAAAAAAAAA/threads/BBBBBBBBBBB"},
    }
    if text is not None:
        message.update(text=text, argumentText=text)
    return {
        "type": "MESSAGE",
        "eventTime": "2025-11-29T07:06:40.000000Z",
        "message": message,
        "user": user,
        "space": space,
    }


UPLOADED = {
    "name": "spaces/AAAAAAAAAAA/messages/BBBBBBBBBBB.BBBBBBBBBBB/attachments/AAAAAAAAAAA",
    "contentName": "photo.png",
    "contentType": "image/png",
    "attachmentDataRef": {"resourceName": RESOURCE},
    "thumbnailUri": "https://chat.google.com/api/get_attachment_url?url_type=THUMBNAIL_URL&content_type=image/png",
    "downloadUri": "https://chat.google.com/api/get_attachment_url?url_type=DOWNLOAD_URL&content_type=image/png",
    "source": "UPLOADED_CONTENT",
}


def test_google_chat_attachments_become_references_and_drive_files_are_named_only() -> None:
    drive = {
        "name": "spaces/AAAAAAAAAAA/messages/BBBBBBBBBBB.BBBBBBBBBBB/attachments/CCCCCCCCCCC",
        "contentName": "Plan",
        "contentType": "application/vnd.google-apps.document",
        "driveDataRef": {"driveFileId": "1AbCdEfGhIjKlMnOpQrStUvWxYz"},
        "source": "DRIVE_FILE",
    }
    message = only(google_chat.parse_event(chat_event([UPLOADED, drive]), received_at=NOW))

    assert message.text == ""
    assert message.attachments == dicts(
        attachment("image", mime="image/png", name="photo.png", resource=RESOURCE),
        attachment("document", mime="application/vnd.google-apps.document", name="Plan"),
    )


def test_google_chat_the_text_stays_the_caption() -> None:
    message = only(google_chat.parse_event(chat_event([UPLOADED], text="what is this?"), received_at=NOW))
    assert (message.text, len(message.attachments)) == ("what is this?", 1)


@pytest.fixture
def google() -> Iterator[FakeGoogle]:
    with FakeGoogle() as fake:
        yield fake


def test_google_chat_downloads_through_the_media_api_with_the_apps_token(
    host: FakeMediaHost, google: FakeGoogle
) -> None:
    host.authorization = "Bearer ya29.fake-1"
    host.files[f"/v1/media/{RESOURCE}?alt=media"] = file(PNG, "image/png")
    ctx = context(
        "google_chat",
        {"GOOGLE_CHAT_API_BASE_URL": host.url("/v1")},
        {"GOOGLE_CHAT_SERVICE_ACCOUNT_JSON": google.service_account_json()},
    )

    assert google_chat.fetch_media(ctx, attachment("image", resource=RESOURCE), LIMIT) == Fetched(PNG, "image/png")
    assert google.issued == ["ya29.fake-1"]
    assert host.requests[0].headers["authorization"] == "Bearer ya29.fake-1"


# --- Matrix ----------------------------------------------------------------------------------------

AS_TOKEN = "as-token-for-tests-30c05ae90a248a41"


def matrix_event(content: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "m.room.message",
        "event_id": "$143273582443PhrSn:example.org",
        "room_id": "!jEsUZKDJdhlrceRyVU:example.org",
        "sender": "@alice:example.org",
        "origin_server_ts": int(NOW * 1000),
        "unsigned": {"age": 1234},
        "content": content,
    }


@pytest.mark.parametrize(
    ("content", "expected", "text"),
    [
        (
            {
                "msgtype": "m.image",
                "body": "cat.png",
                "url": "mxc://example.org/SEsfnsuifSDFSSEF",
                "info": {"mimetype": "image/png", "size": 31037, "w": 394, "h": 398},
            },
            attachment("image", mime="image/png", size=31037, name="cat.png", mxc="mxc://example.org/SEsfnsuifSDFSSEF"),
            "",
        ),
        (
            {
                "msgtype": "m.audio",
                "body": "Voice message",
                "url": "mxc://example.org/ffed755USFFxlgbQYZGtryd",
                "info": {"mimetype": "audio/ogg", "size": 13000, "duration": 2140},
                "org.matrix.msc1767.audio": {"duration": 2140, "waveform": [0, 512, 1024]},
                "org.matrix.msc3245.voice": {},
            },
            attachment(
                "voice",
                mime="audio/ogg",
                size=13000,
                name="Voice message",
                mxc="mxc://example.org/ffed755USFFxlgbQYZGtryd",
            ),
            "",
        ),
        (
            {
                "msgtype": "m.video",
                "body": "clip.mp4",
                "url": "mxc://example.org/a1b2c3",
                "info": {"mimetype": "video/mp4", "size": 1000, "duration": 3000},
            },
            attachment("video", mime="video/mp4", size=1000, name="clip.mp4", mxc="mxc://example.org/a1b2c3"),
            "",
        ),
        (
            {
                "msgtype": "m.file",
                "body": "the contract, signed",
                "filename": "contract.pdf",
                "url": "mxc://example.org/c0ntract",
                "info": {"mimetype": "application/pdf", "size": 2048},
            },
            attachment(
                "document", mime="application/pdf", size=2048, name="contract.pdf", mxc="mxc://example.org/c0ntract"
            ),
            "the contract, signed",
        ),
        (
            {
                "msgtype": "m.video",
                "body": "secret.mp4",
                "info": {"mimetype": "video/mp4", "size": 1000},
                "file": {
                    "url": "mxc://example.org/FHyPlCeYUSFFxlgbQYZmoEoe",
                    "v": "v2",
                    "iv": "w+sE15fzSc0AAAAAAAAAAA",
                    "hashes": {"sha256": "fdSLu/YkRx3Wyh3KQabP3rd6+SFiKg5lsJZQHtkSAYA"},
                    "key": {"kty": "oct", "alg": "A256CTR", "ext": True, "k": "aWF6-32KGYaC3A", "key_ops": ["decrypt"]},
                },
            },
            attachment("video", mime="video/mp4", size=1000, name="secret.mp4"),  # encrypted: named only
            "",
        ),
    ],
)
def test_matrix_media_messages_become_attachments(content: dict[str, Any], expected: Attachment, text: str) -> None:
    message = only(matrix.parse_event(matrix_event(content), bot_user_id="@hermes:example.org", received_at=NOW))
    assert (message.text, message.attachments) == (text, dicts(expected))


def test_matrix_an_mxc_url_that_could_leave_the_download_path_is_no_reference() -> None:
    content = {"msgtype": "m.image", "body": "x.png", "url": "mxc://../SEsfnsuifSDFSSEF"}
    message = only(matrix.parse_event(matrix_event(content), bot_user_id="", received_at=NOW))
    assert attachments_of(message.attachments)[0].ref == {}


def test_matrix_downloads_authenticated_media_with_the_as_token(host: FakeMediaHost) -> None:
    host.authorization = f"Bearer {AS_TOKEN}"
    host.files["/_matrix/client/v1/media/download/example.org/SEsfnsuifSDFSSEF"] = file(PNG, "image/png")
    ctx = context("matrix", {"MATRIX_API_BASE_URL": host.base_url}, {"MATRIX_AS_TOKEN": AS_TOKEN})

    fetched = matrix.fetch_media(ctx, attachment("image", mxc="mxc://example.org/SEsfnsuifSDFSSEF"), LIMIT)

    assert fetched == Fetched(PNG, "image/png")
    assert host.requests[0].headers["authorization"] == f"Bearer {AS_TOKEN}"


# --- Feishu ----------------------------------------------------------------------------------------

FEISHU_APP_ID = "cli_a1b2c3d4e5f60718"
FEISHU_MESSAGE = "om_5ce6d572455d361153b7cb51da133945"
IMAGE_KEY = "img_v2_041b28e3-5680-48c2-9af2-497ace79333g"
FILE_KEY = "file_v2_f7f5f2c5-6b6b-4c6f-9b26-0a1b2c3d4e5f"


def feishu_event(message_type: str, content: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {
            "event_id": "5e3702a84e847582be8db7fb73283c02",
            "event_type": "im.message.receive_v1",
            "create_time": "1764400000000",
            "token": "rvaYgkND1GOiu5MM0E1rncYC6PLtF7JV",
            "app_id": FEISHU_APP_ID,
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
                "tenant_key": "736588c9260f175e",
            },
            "message": {
                "message_id": FEISHU_MESSAGE,
                "root_id": "",
                "parent_id": "",
                "create_time": "1764400000000",
                "chat_id": "oc_5ce6d572455d361153b7xx51da133945",
                "chat_type": "p2p",
                "message_type": message_type,
                "content": json.dumps(content),
                "mentions": [],
            },
        },
    }


def feishu_ref(key: str, kind: str) -> dict[str, str]:
    return {"message_id": FEISHU_MESSAGE, "key": key, "type": kind}


@pytest.mark.parametrize(
    ("message_type", "content", "expected"),
    [
        ("image", {"image_key": IMAGE_KEY}, attachment("image", **feishu_ref(IMAGE_KEY, "image"))),
        (
            "file",
            {"file_key": FILE_KEY, "file_name": "report.pdf"},
            attachment("document", mime="application/pdf", name="report.pdf", **feishu_ref(FILE_KEY, "file")),
        ),
        ("audio", {"file_key": FILE_KEY, "duration": 2000}, attachment("voice", **feishu_ref(FILE_KEY, "file"))),
        (
            "media",
            {"file_key": FILE_KEY, "image_key": IMAGE_KEY, "file_name": "clip.mp4", "duration": 3000},
            attachment("video", mime="video/mp4", name="clip.mp4", **feishu_ref(FILE_KEY, "file")),
        ),
    ],
)
def test_feishu_media_messages_become_attachments(
    message_type: str, content: dict[str, Any], expected: Attachment
) -> None:
    message = only(feishu.parse_event(feishu_event(message_type, content), app_id=FEISHU_APP_ID, received_at=NOW))
    assert (message.text, message.attachments) == ("", dicts(expected))


@pytest.fixture
def fake_feishu() -> Iterator[FakeFeishu]:
    with FakeFeishu(app_id=FEISHU_APP_ID) as fake:
        yield fake


def feishu_context(fake: FakeFeishu) -> AdapterContext:
    env = {"FEISHU_API_BASE_URL": fake.base_url, "FEISHU_APP_ID": FEISHU_APP_ID}
    return context("feishu", env, {"FEISHU_APP_SECRET": fake.app_secret})


def test_feishu_fetches_the_message_resource_with_the_tenant_token(fake_feishu: FakeFeishu) -> None:
    fake_feishu.resources[f"{FEISHU_MESSAGE}/{IMAGE_KEY}"] = file(PNG, "image/png")

    fetched = feishu.fetch_media(
        feishu_context(fake_feishu), attachment("image", **feishu_ref(IMAGE_KEY, "image")), LIMIT
    )

    assert fetched == Fetched(PNG, "image/png")
    download = fake_feishu.calls(f"/im/v1/messages/{FEISHU_MESSAGE}/resources/{IMAGE_KEY}")[0]
    assert download.query == {"type": "image"}
    assert download.headers["authorization"] == "Bearer t-fake-tenant-token-0001"


def test_feishu_a_resource_not_in_the_message_is_unavailable_and_names_no_token(fake_feishu: FakeFeishu) -> None:
    with pytest.raises(MediaUnavailable) as caught:
        feishu.fetch_media(feishu_context(fake_feishu), attachment("document", **feishu_ref(FILE_KEY, "file")), LIMIT)
    assert "t-fake-tenant-token" not in str(caught.value) and fake_feishu.app_secret not in str(caught.value)


# --- Mattermost ------------------------------------------------------------------------------------

MM_TOKEN = "mattermost-bot-token-0000000000"
FILE_A, FILE_B = "f1a2b3c4d5e6f7g8h9i0j1k2l3", "f9z8y7x6w5v4u3t2s1r0q9p8o7"


def mattermost_fields(**changes: Any) -> dict[str, Any]:
    fields = {
        "token": "hookt0ken5ecret0000000000a",
        "team_id": "t1a2b3c4d5e6f7g8h9i0j1k2l3",
        "team_domain": "acme",
        "channel_id": "c1a2b3c4d5e6f7g8h9i0j1k2l3",
        "channel_name": "town-square",
        "timestamp": str(int(NOW)),
        "user_id": "u1a2b3c4d5e6f7g8h9i0j1k2l3",
        "user_name": "alice",
        "post_id": "p1a2b3c4d5e6f7g8h9i0j1k2l3",
        "text": "hermes",
        "trigger_word": "hermes",
        "file_ids": f"{FILE_A},{FILE_B}",
    }
    fields.update(changes)
    return fields


def test_mattermost_file_ids_become_document_attachments_and_a_trigger_word_alone_is_a_message() -> None:
    message = only(mattermost.parse_post(mattermost_fields(), received_at=NOW))
    assert message.text == ""
    assert message.attachments == dicts(attachment("document", file_id=FILE_A), attachment("document", file_id=FILE_B))


def test_mattermost_a_malformed_file_id_is_left_out() -> None:
    message = only(mattermost.parse_post(mattermost_fields(text="look", file_ids="../etc,"), received_at=NOW))
    assert (message.text, message.attachments) == ("look", ())


def test_mattermost_downloads_the_file_with_the_bot_token(host: FakeMediaHost) -> None:
    host.authorization = f"Bearer {MM_TOKEN}"
    host.files[f"/api/v4/files/{FILE_A}"] = file(PNG, "image/png")
    ctx = context("mattermost", {"MATTERMOST_API_BASE_URL": host.base_url}, {"MATTERMOST_BOT_TOKEN": MM_TOKEN})

    # the kind stays "document"; the mime type of the bytes says what it is
    assert mattermost.fetch_media(ctx, attachment("document", file_id=FILE_A), LIMIT) == Fetched(PNG, "image/png")
    assert host.requests[0].headers["authorization"] == f"Bearer {MM_TOKEN}"


# --- every platform: the limit, a missing reference, missing credentials ---------------------------


@dataclass(frozen=True)
class Case:
    """A platform's fetcher, a fetchable attachment's ref, and its context on the fake host."""

    fetch: Callable[[AdapterContext, Attachment, int], Fetched]
    kind: str
    ref: dict[str, str]
    context: Callable[[FakeMediaHost], AdapterContext]  # with credentials
    bare: Callable[[FakeMediaHost], AdapterContext]  # without them


def unused_service_account(host: FakeMediaHost) -> str:
    """A key file that is never used: these tests stop before a token is asked for."""
    label = "PRIVATE " + "KEY"  # assembled, so no key-shaped literal sits on disk
    key = f"-----BEGIN {label}-----\nunused\n-----END {label}-----\n"
    return json.dumps(
        {"client_email": "bot@example.iam.gserviceaccount.com", "private_key": key, "token_uri": host.url("/token")}
    )


def matrix_context(host: FakeMediaHost, token: str | None = AS_TOKEN) -> AdapterContext:
    return context("matrix", {"MATRIX_API_BASE_URL": host.base_url}, {"MATRIX_AS_TOKEN": token} if token else {})


def mattermost_context(host: FakeMediaHost, token: str | None = MM_TOKEN) -> AdapterContext:
    env = {"MATTERMOST_API_BASE_URL": host.base_url}
    return context("mattermost", env, {"MATTERMOST_BOT_TOKEN": token} if token else {})


def google_context(host: FakeMediaHost, key_file: str | None) -> AdapterContext:
    env = {"GOOGLE_CHAT_API_BASE_URL": host.url("/v1")}
    return context("google_chat", env, {"GOOGLE_CHAT_SERVICE_ACCOUNT_JSON": key_file} if key_file else {})


def feishu_host_context(host: FakeMediaHost, secret: str | None) -> AdapterContext:
    env = {"FEISHU_API_BASE_URL": host.base_url, "FEISHU_APP_ID": FEISHU_APP_ID}
    return context("feishu", env, {"FEISHU_APP_SECRET": secret} if secret else {})


def teams_host_context(host: FakeMediaHost, password: str | None) -> AdapterContext:
    env = {
        "TEAMS_APP_ID": DEFAULT_APP_ID,
        "TEAMS_TOKEN_URL": host.url("/token"),
        "TEAMS_SERVICE_URL_HOSTS": "127.0.0.1",
    }
    return context("teams", env, {"TEAMS_APP_PASSWORD": password} if password else {})


def _case(platform: str, host: FakeMediaHost) -> Case:
    cases = {
        "slack": Case(
            slack.fetch_media, "image", {"url": host.url("/f.png")}, slack_context, lambda h: slack_context(h, None)
        ),
        "whatsapp": Case(
            whatsapp.fetch_media,
            "image",
            {"media_id": WA_MEDIA_ID},
            whatsapp_context,
            lambda h: whatsapp_context(h, None),
        ),
        "line": Case(line.fetch_media, "image", {"message_id": "1"}, line_context, lambda h: line_context(h, None)),
        "sms": Case(
            twilio.fetch_media,
            "image",
            {"url": host.url(MEDIA_PATH)},
            twilio_context,
            lambda h: twilio_context(h, None),
        ),
        "matrix": Case(
            matrix.fetch_media,
            "image",
            {"mxc": "mxc://example.org/abc"},
            matrix_context,
            lambda h: matrix_context(h, None),
        ),
        "mattermost": Case(
            mattermost.fetch_media,
            "document",
            {"file_id": FILE_A},
            mattermost_context,
            lambda h: mattermost_context(h, None),
        ),
        "google_chat": Case(
            google_chat.fetch_media,
            "image",
            {"resource": RESOURCE},
            lambda h: google_context(h, unused_service_account(h)),
            lambda h: google_context(h, None),
        ),
        "feishu": Case(
            feishu.fetch_media,
            "image",
            feishu_ref(IMAGE_KEY, "image"),
            lambda h: feishu_host_context(h, "secret"),
            lambda h: feishu_host_context(h, None),
        ),
        "teams": Case(
            teams.fetch_media,
            "image",
            {"url": host.url(IMAGE_PATH)},
            lambda h: teams_host_context(h, DEFAULT_APP_PASSWORD),
            lambda h: teams_host_context(h, None),
        ),
    }
    return cases[platform]


WITH_CREDENTIALS = ("slack", "whatsapp", "line", "sms", "matrix", "mattermost", "google_chat", "feishu", "teams")


@pytest.mark.parametrize("platform", WITH_CREDENTIALS)
def test_an_announced_size_over_the_limit_is_not_downloaded(platform: str, host: FakeMediaHost) -> None:
    case = _case(platform, host)
    media = Attachment(case.kind, size=LIMIT + 1, ref=case.ref)
    with pytest.raises(MediaTooLarge):
        case.fetch(case.context(host), media, LIMIT)
    assert host.requests == []


@pytest.mark.parametrize("platform", WITH_CREDENTIALS)
def test_an_attachment_without_a_reference_is_unavailable(platform: str, host: FakeMediaHost) -> None:
    case = _case(platform, host)
    with pytest.raises(MediaUnavailable):
        case.fetch(case.context(host), Attachment(case.kind, name="named only"), LIMIT)
    assert host.requests == []


@pytest.mark.parametrize("platform", WITH_CREDENTIALS)
def test_without_credentials_nothing_is_fetched(platform: str, host: FakeMediaHost) -> None:
    case = _case(platform, host)
    with pytest.raises(MediaUnavailable):
        case.fetch(case.bare(host), Attachment(case.kind, ref=case.ref), LIMIT)
    assert host.requests == []


def test_a_download_over_the_limit_is_cut_off(host: FakeMediaHost) -> None:
    host.files[f"/api/v4/files/{FILE_A}"] = file(b"x" * 2048)
    ctx = context("mattermost", {"MATTERMOST_API_BASE_URL": host.base_url}, {"MATTERMOST_BOT_TOKEN": MM_TOKEN})
    with pytest.raises(MediaTooLarge):
        mattermost.fetch_media(ctx, attachment("document", file_id=FILE_A), 1024)


def test_discord_an_announced_size_over_the_limit_and_a_missing_url(host: FakeMediaHost) -> None:
    ctx = context("discord", {}, {})
    with pytest.raises(MediaTooLarge):
        discord.fetch_media(ctx, attachment("image", size=LIMIT + 1, url=host.url("/a.png")), LIMIT)
    with pytest.raises(MediaUnavailable):
        discord.fetch_media(ctx, attachment("image", name="a.png"), LIMIT)
    assert host.requests == []


def test_teams_a_file_over_the_limit_is_not_downloaded(host: FakeMediaHost) -> None:
    ctx = context("teams", {"TEAMS_APP_ID": DEFAULT_APP_ID}, {})
    with pytest.raises(MediaTooLarge):
        teams.fetch_media(ctx, attachment("document", size=LIMIT + 1, download_url=host.url("/r.pdf")), LIMIT)
    assert host.requests == []


@pytest.mark.parametrize(
    "where", ["https://169.254.169.254/latest/meta-data/", "http://10.0.0.1/f", "https://[64:ff9b::a9fe:a9fe]/f"]
)
def test_every_redirect_hop_passes_the_address_check(host: FakeMediaHost, where: str) -> None:
    # Given the platform's own server (configured, so trusted) redirecting a download elsewhere
    host.files[f"/api/v4/files/{FILE_A}"] = ScriptedAnswer(302, b"", {"Location": where})
    ctx = context("mattermost", {"MATTERMOST_API_BASE_URL": host.base_url}, {"MATTERMOST_BOT_TOKEN": MM_TOKEN})
    # Then a hop to a private, link-local or IPv4-embedding address is refused before it is followed
    with pytest.raises(MediaUnavailable, match="refused"):
        mattermost.fetch_media(ctx, attachment("document", file_id=FILE_A), LIMIT)
    assert host.paths() == [f"/api/v4/files/{FILE_A}"]
