"""Media, piece by piece: Telegram's attachments, the bounded download, the model's image parts,
speech to text, documents, and what the turn tells the model of each attachment."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from hermes_gateway import http_pool, pdf_text
from hermes_gateway.adapters.session_tables import row, row_item
from hermes_gateway.domain.media import Attachment, attachments_of, keyed, split_media_lines
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.platforms import telegram
from hermes_gateway.platforms.base import HttpClient
from hermes_gateway.platforms.media import MediaTooLarge, MediaUnavailable, download
from hermes_gateway.providers.base import ChatMessage, ImagePart
from hermes_gateway.providers.bedrock import BedrockProvider
from hermes_gateway.providers.openai_compat import OpenAICompatProvider
from hermes_gateway.providers.stt import OpenAITranscriber
from hermes_gateway.services.turn.media import Understood, describe, is_pdf, model_input, text_of_file
from hermes_gateway.settings import load_settings
from tests.fakes.media_server import FakeSpeech, MediaTelegram, minimal_pdf, ogg_opus
from tests.fakes.openai_server import FakeOpenAI

pytest_plugins = ("tests.fakes.openai_server",)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x01" * 64
MEMO = ogg_opus(4.0)  # an audio file whose container says how long it is


def _message(**fields: Any) -> dict[str, Any]:
    return {
        "update_id": 5,
        "message": {"message_id": 9, "date": 1, "chat": {"id": 7, "type": "private"}, "from": {"id": 7}, **fields},
    }


# --- Telegram's attachments ----------------------------------------------------------------------


def test_a_telegram_photo_is_its_largest_size_and_a_media_only_message_is_a_message() -> None:
    sizes = [
        {"file_id": "big", "width": 800, "height": 600, "file_size": 90_000},
        {"file_id": "small", "width": 90, "height": 67, "file_size": 1_000},
    ]
    parsed = telegram.parse_update(_message(photo=sizes), received_at=1.0)
    assert isinstance(parsed, telegram.InboundMessage) and parsed.text == ""
    assert attachments_of(parsed.attachments) == (
        Attachment("image", mime="image/jpeg", size=90_000, ref={"file_id": "big"}),
    )


@pytest.mark.parametrize(
    ("field", "item", "expected"),
    [
        ("voice", {"file_id": "v", "mime_type": "audio/ogg", "file_size": 9}, Attachment("voice", "audio/ogg", 9)),
        ("audio", {"file_id": "v", "mime_type": "audio/mpeg", "file_name": "a.mp3"},
         Attachment("audio", "audio/mpeg", name="a.mp3")),
        ("document", {"file_id": "v", "mime_type": "application/pdf", "file_name": "q.pdf"},
         Attachment("document", "application/pdf", name="q.pdf")),
        ("video_note", {"file_id": "v", "length": 240}, Attachment("video", "video/mp4")),
        ("sticker", {"file_id": "v", "is_animated": False, "is_video": False}, Attachment("sticker", "image/webp")),
    ],
)  # fmt: skip
def test_each_telegram_media_kind_becomes_a_reference(field: str, item: dict[str, Any], expected: Attachment) -> None:
    parsed = telegram.parse_update(_message(**{field: item}, caption="see"), received_at=1.0)
    assert isinstance(parsed, telegram.InboundMessage) and parsed.text == "see"
    assert attachments_of(parsed.attachments) == (replace(expected, ref={"file_id": "v"}),)


def test_the_telegram_fetcher_refuses_past_20_mb_without_asking_and_fetches_with_get_file() -> None:
    with MediaTelegram() as fake:
        fake.add_file("f1", PNG)
        context = _context(fake)
        fetched = telegram.fetch_media(context, Attachment("image", "image/png", ref={"file_id": "f1"}), 1_000_000)
        assert (fetched.data, fetched.mime) == (PNG, "image/png")  # the answer's type is octet-stream
        with pytest.raises(MediaTooLarge, match=r"25\.0 MB; the limit is 20 MB"):
            telegram.fetch_media(context, Attachment("document", size=25_000_000, ref={"file_id": "x"}), 50_000_000)
        with pytest.raises(MediaUnavailable, match="invalid file_id"):
            telegram.fetch_media(context, Attachment("document", ref={"file_id": "gone"}), 1_000_000)
        assert [c["file_id"] for c in fake.calls("getFile")] == ["f1", "gone"]
        # the token is in both URLs: it appears in no error
        fake.answer_next(500, {"ok": False, "error_code": 500, "description": f"boom {fake.token}"})
        with pytest.raises(TransientError) as raised:
            telegram.fetch_media(context, Attachment("image", ref={"file_id": "f1"}), 1_000_000)
        assert fake.token not in str(raised.value)


def _context(fake: MediaTelegram) -> Any:
    from hermes_gateway.platforms.base import AdapterContext
    from hermes_gateway.secrets import Secrets

    settings = load_settings(env={"TELEGRAM_API_BASE_URL": fake.base_url}, config={})
    secrets = Secrets({"TELEGRAM_BOT_TOKEN": fake.token})
    return AdapterContext(settings.platforms["telegram"], settings, secrets)


def test_a_download_stops_at_the_limit() -> None:
    with MediaTelegram() as fake:
        fake.add_file("f", b"x" * 5000)
        client = HttpClient(fake.base_url, platform="telegram", scrub=(fake.token,))
        with pytest.raises(MediaTooLarge):
            download(client, f"/file/bot{fake.token}/files/f", limit=4999)
        assert download(client, f"/file/bot{fake.token}/files/f", limit=5000).data == b"x" * 5000
        with pytest.raises(http_pool.TooLarge):
            http_pool.download(f"{fake.base_url}/file/bot{fake.token}/files/f", timeout=5, limit=10)


# --- references on the transcript ----------------------------------------------------------------


def test_a_rows_attachments_are_keyed_by_profile_session_and_message_and_survive_the_table() -> None:
    (media,) = keyed((Attachment("voice", "audio/ogg", ref={"file_id": "v"}),), "coder", "s-1", 12)
    assert media.key == "coder/s-1/12-0"
    stored = row_item("s-1", TranscriptRow(12, "user", "", 1.0, attachments=(media,)))
    assert len(stored["media"]) < 200  # references, never bytes
    assert row(stored).attachments == (media,)
    assert "media" not in row_item("s-1", TranscriptRow(13, "user", "hi", 1.0))


def test_media_lines_leave_the_answer() -> None:
    text, media = split_media_lines("Here it is:\nMEDIA:https://example.com/cat.png\n\nEnjoy")
    assert text == "Here it is:\n\nEnjoy" and [m.reference for m in media] == ["https://example.com/cat.png"]


# --- what the model is given ---------------------------------------------------------------------


def test_openai_gets_text_and_image_parts(fake_openai: FakeOpenAI) -> None:
    provider = OpenAICompatProvider(fake_openai.base_url, "k", "gpt-test", 5.0)
    provider.complete("", [ChatMessage("user", "what is this?", images=(ImagePart("image/png", PNG),))])
    (message,) = fake_openai.sent_messages()
    assert message["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(PNG).decode()}},
    ]


def test_bedrock_gets_image_blocks_of_the_bytes() -> None:
    client = boto3.client("bedrock-runtime", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    expected = {
        "modelId": "m",
        "messages": [
            {"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": PNG}}}]},
        ],
    }
    answer = {
        "output": {"message": {"role": "assistant", "content": [{"text": "a square"}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5},
        "metrics": {"latencyMs": 1},
    }
    with Stubber(client) as stub:
        stub.add_response("converse", answer, expected)
        history = [ChatMessage("user", "", images=(ImagePart("image/png", PNG),))]
        reply = BedrockProvider("m", client=client).complete("", history)
    assert reply.text == "a square"


@pytest.fixture
def speech() -> Iterator[FakeSpeech]:
    with FakeSpeech() as fake:
        yield fake


def test_speech_to_text_sends_the_file_and_model_and_keeps_the_key_out_of_errors(speech: FakeSpeech) -> None:
    transcriber = OpenAITranscriber(speech.base_url, "sk-secret", "whisper-1")
    assert transcriber.transcribe(b"OggS...", "audio/ogg", "") == "remind me to water the plants"
    (upload,) = speech.uploads
    assert upload.headers["authorization"] == "Bearer sk-secret"
    assert upload.fields["file"] == ("voice.ogg", "audio/ogg", b"OggS...")
    speech.answer_next(503, {"error": {"message": "busy"}})
    with pytest.raises(TransientError):
        transcriber.transcribe(b"x", "audio/ogg", "")
    speech.answer_next(400, {"error": {"message": "bad key sk-secret"}})
    with pytest.raises(PermanentError) as raised:
        transcriber.transcribe(b"x", "audio/ogg", "")
    assert "sk-secret" not in str(raised.value) and "<api key>" in str(raised.value)


def test_documents_text_files_and_pdfs_are_read_others_are_not() -> None:
    assert pdf_text.extract(minimal_pdf("Hello PDF"), max_pages=5, max_chars=1000, cpu_seconds=5).text == "Hello PDF"
    assert is_pdf("application/octet-stream", "x.PDF") and not is_pdf("text/plain", "x.txt")
    assert text_of_file(b"a,b\n1,2\n", "application/octet-stream", "t.csv") == "a,b\n1,2\n"
    assert text_of_file(b"\x00\x01binary", "text/plain", "x.txt") is None
    assert text_of_file(b"PK\x03\x04", "application/zip", "x.zip") is None
    with pytest.raises(pdf_text.Unreadable, match="could not be read"):
        pdf_text.extract(b"%PDF-1.4 garbage", max_pages=5, max_chars=1000, cpu_seconds=5)


class _Store:
    def __init__(self, objects: dict[str, tuple[bytes, str]]) -> None:
        self.objects = objects

    def get(self, key: str) -> tuple[bytes, str] | None:
        return self.objects.get(key)


class _Deps:
    def __init__(self, vision: bool = True) -> None:
        self.settings = load_settings(env={"GATEWAY_VISION": str(vision).lower()}, config={})
        self.media = _Store({"p/s/1-0": (PNG, "image/png")})
        self.now = lambda: 1.0


def test_the_model_sees_the_answered_messages_images_and_reads_of_the_rest() -> None:
    image = Attachment("image", "image/png", key="p/s/1-0", name="chart.png")
    message = TranscriptRow(1, "user", "what is this?", 1.0, attachments=(image,))
    stored = {"p/s/1-0": Understood(mime="image/png", stored=True)}
    deps: Any = _Deps()
    text, images = model_input(message, stored, deps, current=True)
    assert (text, images) == ("what is this?", (ImagePart("image/png", PNG),))
    text, images = model_input(message, stored, deps, current=False)
    assert images == () and text.endswith("[The user sent an image (chart.png) earlier in the conversation]")
    text, images = model_input(message, stored, _Deps(vision=False), current=True)  # type: ignore[arg-type]
    assert images == () and "this model is not given images" in text
    failed = Understood(error="the file is 30.0 MB; the limit is 20 MB")
    assert describe(image, failed, deps, current=True) == (
        "[The user sent an image (chart.png) that could not be opened: the file is 30.0 MB; the limit is 20 MB]"
    )


def test_understood_round_trips_through_its_json() -> None:
    info = Understood(mime="audio/ogg", stored=True, text="hello", cut=0)
    assert Understood.from_json(info.to_json()) == info


class _Bucket(_Store):
    def put(self, key: str, data: bytes, mime: str) -> None:
        self.objects[key] = (data, mime)


def test_a_file_the_platform_could_not_type_whose_bytes_are_an_image_is_given_as_an_image() -> None:
    """A Mattermost post names only file ids (so each attachment is a "document"); the download's
    Content-Type says what it is. An image's bytes reach the model as an image part."""
    from types import SimpleNamespace

    from hermes_gateway.platforms.media import Fetched
    from hermes_gateway.services.turn.media import understand_rows

    media = Attachment("document", key="p/s/2-0")
    message = TranscriptRow(2, "user", "", 1.0, attachments=(media,))
    deps: Any = _Deps()
    deps.media = _Bucket({})
    deps.fetch_media = lambda attachment, platform, profile, limit: Fetched(PNG, "image/png")
    deps.transcriber = None
    turn: Any = SimpleNamespace(
        turn_id="t1", source=SimpleNamespace(platform="mattermost", profile=None), reply_to=None
    )

    understood = understand_rows(turn, [message], deps)

    assert understood == {"p/s/2-0": Understood(mime="image/png", stored=True, size=len(PNG))}
    assert model_input(message, understood, deps, current=True) == ("", (ImagePart("image/png", PNG),))
    later, _ = model_input(message, understood, deps, current=False)
    assert later == "[The user sent an image (document) earlier in the conversation]"


def test_a_file_the_platform_could_not_type_whose_bytes_are_audio_is_transcribed() -> None:
    """The same for a Mattermost audio file: its Content-Type says audio, so it is heard, not read."""
    from types import SimpleNamespace

    from hermes_gateway.platforms.media import Fetched
    from hermes_gateway.services.turn.media import understand_rows

    heard: list[tuple[bytes, str]] = []

    class Ears:
        def transcribe(self, data: bytes, mime: str, name: str) -> str:
            heard.append((data, mime))
            return "water the plants"

    media = Attachment("document", name="memo.m4a", key="p/s/3-0")
    message = TranscriptRow(3, "user", "", 1.0, attachments=(media,))
    deps: Any = _Deps()
    deps.media = _Bucket({})
    deps.fetch_media = lambda attachment, platform, profile, limit: Fetched(MEMO, "audio/mp4")
    deps.transcriber = lambda: Ears()
    turn: Any = SimpleNamespace(
        turn_id="t1", source=SimpleNamespace(platform="mattermost", profile=None), reply_to=None
    )

    understood = understand_rows(turn, [message], deps)

    assert understood == {"p/s/3-0": Understood(mime="audio/mp4", stored=True, text="water the plants", size=len(MEMO))}
    assert heard == [(MEMO, "audio/mp4")]
    text, images = model_input(message, understood, deps, current=True)
    assert text == '[Audio memo.m4a, transcribed: "water the plants"]' and images == ()


def test_an_image_too_large_for_the_function_that_asks_the_model_is_named_not_sent() -> None:
    from hermes_gateway.services.turn.media import MODEL_IMAGE_MAX_BYTES

    stored = {"p/s/1-0": Understood(mime="image/png", stored=True)}
    deps: Any = _Deps()
    # declared too large by its platform: not read at all
    big = Attachment("image", "image/png", key="p/s/1-0", name="scan.png", size=MODEL_IMAGE_MAX_BYTES + 1)
    text, images = model_input(TranscriptRow(1, "user", "look", 1.0, attachments=(big,)), stored, deps, current=True)
    assert images == () and "too large to be shown to you" in text and "5.0 MB" in text
    # of no declared size, and larger once read
    deps.media = _Store({"p/s/1-0": (PNG + b"\x00" * MODEL_IMAGE_MAX_BYTES, "image/png")})
    quiet = Attachment("image", "image/png", key="p/s/1-0", name="scan.png")
    _, images = model_input(TranscriptRow(1, "user", "look", 1.0, attachments=(quiet,)), stored, deps, current=True)
    assert images == ()


def test_a_request_with_the_largest_image_fits_beside_the_interpreter_in_the_agents_memory() -> None:
    """The agent function (resources.py) holds the interpreter, about 65 MB with its clients built
    (bench/cold_start.py), and a model request: the image's bytes, their base64 in the request's
    JSON and the encoded body. At MODEL_IMAGE_MAX_BYTES that stays well inside its memory."""
    import json
    import os
    import tracemalloc

    from hermes_gateway.providers.base import ChatMessage
    from hermes_gateway.providers.openai_compat import OpenAICompatProvider
    from hermes_gateway.resources import function
    from hermes_gateway.services.turn.media import MODEL_IMAGE_MAX_BYTES

    provider = OpenAICompatProvider("http://127.0.0.1:9/v1", "sk-test", "gpt-test", 5.0)
    tracemalloc.start()
    try:
        image = ImagePart("image/jpeg", os.urandom(MODEL_IMAGE_MAX_BYTES))  # as read from the bucket
        body = provider._body("be brief", [ChatMessage("user", "what is this?", images=(image,))], None)
        payload = json.dumps(body).encode("utf-8")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(payload) > MODEL_IMAGE_MAX_BYTES * 4 // 3
    interpreter_mb = 65
    assert interpreter_mb + peak / 2**20 < 0.8 * function("agent").memory_mb
