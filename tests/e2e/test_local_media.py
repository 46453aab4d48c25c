"""Media through local mode, as a Telegram user sends it: photos, voice notes, files.

The whole gateway runs in-process with a fake Telegram that hands over files (getFile, then the
download), a fake OpenAI-compatible model and a fake speech-to-text server, all on loopback.
Each attachment is fetched once into the media bucket (the embedded AWS's S3), given to the
model as what it can use, and what cannot be opened gets a clear answer in the chat.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hermes_gateway.services.turn_commands import BUSY_NOTICES
from tests.e2e.conftest import Client, telegram_update
from tests.fakes.media_server import FakeSpeech, MediaTelegram, minimal_pdf, ogg_opus, slow_pdf
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e
pytest_plugins = ("tests.fakes.openai_server",)

PHOTO = b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8 + b"\xff\xd9"  # a JPEG's markers around some bytes
VOICE = ogg_opus(3.0)  # a 3 s voice note, as its container says


@pytest.fixture
def telegram() -> Iterator[MediaTelegram]:
    with MediaTelegram() as fake:
        yield fake


@pytest.fixture
def speech() -> Iterator[FakeSpeech]:
    with FakeSpeech() as fake:
        yield fake


@pytest.fixture
def client(
    start_gateway: Callable[..., Client], telegram: MediaTelegram, speech: FakeSpeech, fake_openai: FakeOpenAI
) -> Client:
    return start_gateway(
        GATEWAY_PROVIDER="openai", GATEWAY_MODEL="gpt-test", OPENAI_BASE_URL=fake_openai.base_url,
        STT_BASE_URL=speech.base_url, TELEGRAM_BOT_TOKEN=telegram.token, TELEGRAM_API_BASE_URL=telegram.base_url,
        TELEGRAM_ALLOWED_USERS="42",
        # the answers' shapes, not streaming's (tests/integration/test_streaming.py): on a slow run the
        # model answers after streaming_first_after, and its first words would be posted and edited
        TELEGRAM_STREAMING="false",
    )  # fmt: skip


def media_update(update_id: int, text: str | None = None, **media: Any) -> dict[str, Any]:
    update = telegram_update(update_id, text or "")
    message = update["message"]
    del message["text"]
    if text is not None:
        message["caption"] = text
    message.update(media)
    return update


def wait_sent(telegram: MediaTelegram, *texts: str, timeout: float = 20.0) -> list[str]:
    """What the chat got, once every one of `texts` is among it (a busy notice may come too, when
    a message meets the previous turn still finishing)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        sent = [str(m["text"]) for m in telegram.sent]
        if all(text in sent for text in texts):
            break
        time.sleep(0.05)
    return [str(m["text"]) for m in telegram.sent if m["text"] not in BUSY_NOTICES.values()]


def user_content(fake_openai: FakeOpenAI, index: int = -1) -> Any:
    return fake_openai.sent_messages(index)[-1]["content"]


def test_a_photo_reaches_the_model_as_an_image_part_of_the_exact_bytes_fetched_once(
    client: Client, telegram: MediaTelegram, fake_openai: FakeOpenAI
) -> None:
    telegram.add_file("photo-big", PHOTO)
    sizes = [
        {"file_id": "photo-small", "file_unique_id": "s", "width": 90, "height": 67, "file_size": 1200},
        {"file_id": "photo-big", "file_unique_id": "b", "width": 1280, "height": 960, "file_size": len(PHOTO)},
    ]
    fake_openai.reply_next("A test pattern.")
    assert client.telegram(media_update(1, "what is in this picture?", photo=sizes))[0] == 200
    assert wait_sent(telegram, "A test pattern.") == ["A test pattern."]

    content = user_content(fake_openai)
    assert content[0] == {"type": "text", "text": "what is in this picture?"}
    assert content[1]["type"] == "image_url"
    assert content[1]["image_url"]["url"] == "data:image/jpeg;base64," + base64.b64encode(PHOTO).decode()
    # the largest size, once
    assert [c["file_id"] for c in telegram.calls("getFile")] == ["photo-big"]

    # The next message's request names the earlier image, and fetches nothing again
    fake_openai.reply_next("You're welcome.")
    client.telegram(telegram_update(2, "thanks"))
    assert wait_sent(telegram, "You're welcome.")[-1] == "You're welcome."
    history = fake_openai.sent_messages()
    assert "[The user sent an image (image) earlier in the conversation]" in history[1]["content"]
    assert telegram.downloads == {"photo-big": 1} and len(telegram.calls("getFile")) == 1


def test_a_voice_note_is_transcribed_echoed_and_answered(
    client: Client, telegram: MediaTelegram, speech: FakeSpeech, fake_openai: FakeOpenAI
) -> None:
    telegram.add_file("voice-1", VOICE)
    voice = {"file_id": "voice-1", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg"}
    fake_openai.reply_next("I will remind you.")
    assert client.telegram(media_update(1, voice=voice))[0] == 200  # no text at all: still a message
    heard = '\U0001f3a4 "remind me to water the plants"'
    assert sorted(wait_sent(telegram, heard, "I will remind you.")) == sorted([heard, "I will remind you."])

    (upload,) = speech.uploads
    assert upload.fields["file"] == ("voice.ogg", "audio/ogg", VOICE)
    assert upload.fields["model"][2] == b"whisper-1"
    assert user_content(fake_openai) == '[Voice note, transcribed: "remind me to water the plants"]'


def test_documents_are_read_into_the_message_and_other_files_are_named(
    client: Client, telegram: MediaTelegram, fake_openai: FakeOpenAI
) -> None:
    telegram.add_file("pdf-1", minimal_pdf("Quarterly revenue grew 12 percent"))
    pdf = {"file_id": "pdf-1", "file_unique_id": "p", "file_name": "q3.pdf", "mime_type": "application/pdf"}
    fake_openai.reply_next("answer 1")
    client.telegram(media_update(1, "summarize", document=pdf))
    wait_sent(telegram, "answer 1")
    assert user_content(fake_openai) == "summarize\n\n[File q3.pdf]\nQuarterly revenue grew 12 percent"

    telegram.add_file("csv-1", b"name,score\nada,3\n")
    csv = {"file_id": "csv-1", "file_unique_id": "c", "file_name": "scores.csv", "mime_type": "text/csv"}
    fake_openai.reply_next("answer 2")
    client.telegram(media_update(2, document=csv))
    wait_sent(telegram, "answer 2")
    assert user_content(fake_openai) == "[File scores.csv]\nname,score\nada,3\n"

    video = {"file_id": "vid", "file_unique_id": "x", "duration": 4, "width": 1, "height": 1, "file_size": 3_000_000}
    fake_openai.reply_next("answer 3")
    client.telegram(media_update(3, "look", video=video))
    wait_sent(telegram, "answer 3")
    assert user_content(fake_openai) == (
        "look\n\n[The user sent a video (video, 3.0 MB); it is not opened here: video files are not opened]"
    )
    assert "vid" not in telegram.downloads


def test_a_file_over_the_limit_gets_one_answer_from_the_model_and_the_next_message_is_answered(
    client: Client, telegram: MediaTelegram, fake_openai: FakeOpenAI
) -> None:
    big = {"file_id": "big", "file_unique_id": "b", "file_name": "scan.pdf", "mime_type": "application/pdf",
           "file_size": 30_000_000}  # fmt: skip
    fake_openai.reply_next("I could not read it, sorry.")
    client.telegram(media_update(1, "read this", document=big))
    # One answer: the model's (the gateway sends no notice of its own)
    assert wait_sent(telegram, "I could not read it, sorry.") == ["I could not read it, sorry."]
    assert telegram.calls("getFile") == [] and not telegram.downloads  # never asked for
    assert "could not be opened: the file is 30.0 MB" in user_content(fake_openai)

    fake_openai.reply_next("Hello!")
    client.telegram(telegram_update(2, "hi"))
    assert wait_sent(telegram, "Hello!")[-1] == "Hello!"


def test_the_web_chat_uploads_a_photo_that_its_message_then_carries(start_gateway: Callable[..., Client]) -> None:
    client = start_gateway()  # the echo model: it says what images it was given
    status, upload = client.request(
        "POST", "/local/upload", PHOTO, {"content-type": "image/jpeg", "x-file-name": "cat%20photo.jpg"}
    )
    assert status == 200 and upload["kind"] == "image" and upload["size"] == len(PHOTO)
    assert upload["name"] == "cat photo.jpg"
    message = {"chat_id": "c1", "user_id": "c1", "message_id": "m1", "text": "", "attachments": [upload]}
    token = {"x-hermes-local-token": client.gateway.local_secrets["WEBCHAT_TOKEN"], "content-type": "application/json"}
    assert client.request("POST", "/webhooks/webchat", json.dumps(message).encode(), token)[0] == 200
    (reply,) = client.wait_outbox(1, chat_id="c1")
    assert reply["text"] == f"Echo: \n[images: image/jpeg {len(PHOTO)} bytes]"
    # without the page's token nothing is kept; an upload is bounded by media.max_bytes
    assert client.request("POST", "/local/upload", b"x", {"x-hermes-local-token": "wrong"})[0] == 401
    forged = {**message, "message_id": "m2", "attachments": [{"upload_id": "../../etc/passwd"}]}
    assert client.request("POST", "/webhooks/webchat", json.dumps(forged).encode(), token)[0] == 400


def test_a_file_the_gateway_cannot_fetch_gets_one_answer_without_its_internal_error(
    client: Client, telegram: MediaTelegram, fake_openai: FakeOpenAI
) -> None:
    # Given a photo Telegram will not hand over (getFile answers an error)
    sizes = [{"file_id": "gone", "file_unique_id": "g", "width": 9, "height": 9, "file_size": 100}]
    fake_openai.reply_next("I could not open your photo.")
    client.telegram(media_update(1, "see", photo=sizes))
    time.sleep(0.5)
    # Then the chat gets the model's one answer, and the model no getFile error
    assert wait_sent(telegram, "I could not open your photo.") == ["I could not open your photo."]
    assert (
        user_content(fake_openai)
        == "see\n\n[The user sent an image (image) that could not be opened: it could not be downloaded]"
    )


def test_a_voice_note_whose_transcription_failed_is_not_downloaded_or_transcribed_again(
    client: Client, telegram: MediaTelegram, speech: FakeSpeech, fake_openai: FakeOpenAI
) -> None:
    # Given a speech server that answers 503 to every try of the turn
    telegram.add_file("voice-bad", VOICE)
    voice = {"file_id": "voice-bad", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg"}
    speech.answer_next(503, {"error": {"message": "overloaded"}}, times=5)
    fake_openai.reply_next("Sorry, I could not hear that.")
    client.telegram(media_update(1, voice=voice))
    assert wait_sent(telegram, "Sorry, I could not hear that.") == ["Sorry, I could not hear that."]
    assert user_content(fake_openai) == (
        "[The user sent a voice note (voice note) that could not be opened: it could not be transcribed]"
    )
    tried = len(speech.requests)
    assert tried == 2 and telegram.downloads == {"voice-bad": 2}  # the turn's two tries of its task

    # When the next message comes, with the voice note still in the window
    fake_openai.reply_next("Hello again!")
    client.telegram(telegram_update(2, "hello?"))
    assert wait_sent(telegram, "Hello again!")[-1] == "Hello again!"

    # Then the voice note is neither downloaded nor transcribed again, and the model still hears of it
    assert len(speech.requests) == tried and telegram.downloads == {"voice-bad": 2}
    assert any("could not be transcribed" in str(m["content"]) for m in fake_openai.sent_messages())


def test_a_slow_pdf_is_answered_within_a_minute_and_the_next_message_too(
    client: Client, telegram: MediaTelegram, fake_openai: FakeOpenAI
) -> None:
    # Given a few KB of PDF that pypdf would spend minutes on
    telegram.add_file("slow-1", slow_pdf(pages=60))
    pdf = {"file_id": "slow-1", "file_unique_id": "s", "file_name": "slow.pdf", "mime_type": "application/pdf"}
    started = time.monotonic()
    fake_openai.reply_next("Here is what I could read.")
    client.telegram(media_update(1, "summarize", document=pdf))

    # Then it is answered within a minute, with what was read and what was cut said to the model
    assert wait_sent(telegram, "Here is what I could read.", timeout=60) == ["Here is what I could read."]
    assert time.monotonic() - started < 60
    content = user_content(fake_openai)
    assert "[File slow.pdf]" in content and "CPU time" in content, content

    # and the next message too, fetching and reading nothing again
    fake_openai.reply_next("Anything else?")
    client.telegram(telegram_update(2, "thanks"))
    assert wait_sent(telegram, "Anything else?", timeout=30)[-1] == "Anything else?"
    assert time.monotonic() - started < 60 and telegram.downloads == {"slow-1": 1}
