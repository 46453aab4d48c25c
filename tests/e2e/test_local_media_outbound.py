"""Outbound media through local mode: the model's `MEDIA:` line and send_message's `media`
become a file the fake Telegram receives as one sendPhoto (the bytes, the text as its caption),
and the web chat's outbox row names the stored file by a URL the page can load."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from tests.e2e.conftest import Client, telegram_update
from tests.fakes.media_server import FakeMediaHost, file
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.e2e
pytest_plugins = ("tests.fakes.openai_server",)

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake


@pytest.fixture
def host() -> Iterator[FakeMediaHost]:
    with FakeMediaHost() as fake:
        fake.files["/cat.png"] = file(PNG, "image/png")
        yield fake


@pytest.fixture
def client(start_gateway: Callable[..., Client], telegram: FakeTelegram, fake_openai: FakeOpenAI) -> Client:
    return start_gateway(
        GATEWAY_PROVIDER="openai", GATEWAY_MODEL="gpt-test", OPENAI_BASE_URL=fake_openai.base_url,
        TELEGRAM_BOT_TOKEN=telegram.token, TELEGRAM_API_BASE_URL=telegram.base_url, TELEGRAM_ALLOWED_USERS="42",
        # the caption's shape, not streaming's: a slow run would stream the text before the file
        TELEGRAM_STREAMING="false",
    )  # fmt: skip


def wait_uploads(telegram: FakeTelegram, count: int, timeout: float = 20.0) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    deadline = time.time() + timeout
    while len(telegram.uploads()) < count and time.time() < deadline:
        time.sleep(0.05)
    return telegram.uploads()


def test_a_media_line_in_the_answer_is_sent_as_a_photo_with_the_text_as_its_caption(
    client: Client, telegram: FakeTelegram, fake_openai: FakeOpenAI, host: FakeMediaHost
) -> None:
    fake_openai.reply_next(f"here it is\nMEDIA:{host.url('/cat.png')}")
    assert client.telegram(telegram_update(1, f"send me the cat at {host.url('/cat.png')}"))[0] == 200

    [(method, fields)] = wait_uploads(telegram, 1)
    assert method == "sendPhoto"
    assert fields["photo"].value == PNG and fields["caption"].text == "here it is"
    time.sleep(0.3)  # nothing else follows
    assert len(telegram.uploads()) == 1
    assert not any("MEDIA:" in str(m.get("text")) for m in telegram.sent)
    assert host.paths() == ["/cat.png"]


def test_a_media_url_nobody_gave_the_turn_is_never_requested(
    client: Client, telegram: FakeTelegram, fake_openai: FakeOpenAI, host: FakeMediaHost
) -> None:
    # Given a model that hides the user's words in a MEDIA line's query string
    fake_openai.reply_next(f"done\nMEDIA:{host.url('/p.png')}?d=my-passport-is-X123")
    assert client.telegram(telegram_update(1, "my passport is X123"))[0] == 200
    # Then the chat gets the answer and a note, and the URL's server never hears of it
    deadline = time.time() + 20
    while not telegram.sent and time.time() < deadline:
        time.sleep(0.05)
    assert [m["text"] for m in telegram.sent] == [
        "done\n\n(I could not attach p.png: its address did not come from this conversation.)"
    ]
    assert host.paths() == [] and telegram.uploads() == []


def test_send_message_with_media_attaches_the_file(
    client: Client, telegram: FakeTelegram, fake_openai: FakeOpenAI, host: FakeMediaHost
) -> None:
    fake_openai.call_tools_next(
        ("send_message", {"target": "origin", "text": "a cat", "media": [host.url("/cat.png")]})
    )
    fake_openai.reply_next("Sent.")
    assert client.telegram(telegram_update(1, f"send {host.url('/cat.png')} here"))[0] == 200

    [(method, fields)] = wait_uploads(telegram, 1)
    assert (method, fields["caption"].text, fields["photo"].value) == ("sendPhoto", "a cat", PNG)


def test_the_web_chat_row_of_a_file_names_a_url_of_the_stored_file(
    client: Client, fake_openai: FakeOpenAI, host: FakeMediaHost
) -> None:
    import json

    fake_openai.reply_next(f"look\nMEDIA:{host.url('/cat.png')}")
    text = f"cat? {host.url('/cat.png')}"
    message = {"chat_id": "web-1", "user_id": "web-1", "user_name": "You", "message_id": "m1", "text": text}
    headers = {
        "content-type": "application/json",
        "x-hermes-local-token": client.gateway.local_secrets["WEBCHAT_TOKEN"],
    }
    assert client.request("POST", "/webhooks/webchat", json.dumps(message).encode(), headers)[0] == 200

    [row] = client.wait_outbox(1, platform="webchat", chat_id="web-1")
    assert row["text"] == "look" and "MEDIA:" not in row["text"]
    [media] = row["media"]
    assert (media["name"], media["kind"], media["mime"]) == ("cat.png", "image", "image/png")
    with urllib.request.urlopen(media["reference"], timeout=10) as answer:  # the embedded S3's pre-signed URL
        assert answer.read() == PNG
