"""`/retry` repeats the whole message it undoes: its text and its files (a photo's image part, a
text file's content), through local mode's web chat as the page sends them, answered by the echo
model (which says what it was given)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.conftest import Client

pytestmark = pytest.mark.e2e

PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4  # a PNG's signature and some bytes
NOTES = b"The password for the shed is marmalade.\n"


def webchat(client: Client, message_id: str, text: str, attachments: list[dict[str, Any]] | None = None) -> None:
    message = {"chat_id": "c1", "user_id": "c1", "message_id": message_id, "text": text}
    if attachments:
        message["attachments"] = attachments
    token = client.gateway.local_secrets["WEBCHAT_TOKEN"]
    headers = {"x-hermes-local-token": token, "content-type": "application/json"}
    assert client.request("POST", "/webhooks/webchat", json.dumps(message).encode(), headers)[0] == 200


def upload(client: Client, data: bytes, mime: str, name: str) -> dict[str, Any]:
    status, found = client.request("POST", "/local/upload", data, {"content-type": mime, "x-file-name": name})
    assert status == 200
    return dict(found)


def answers(client: Client, count: int) -> list[str]:
    """The chat's replies once `count` are there (the gateway's own notices included)."""
    deadline = time.time() + 20
    rows = client.wait_outbox(count, chat_id="c1")
    while len(rows) < count and time.time() < deadline:
        rows = client.wait_outbox(count, chat_id="c1", timeout=1)
    return [str(r["text"]) for r in rows]


def test_retry_repeats_the_messages_files_too(start_gateway: Callable[..., Client]) -> None:
    client = start_gateway()
    # Given a message with a photo and a text file, answered
    files = [upload(client, PHOTO, "image/png", "cat.png"), upload(client, NOTES, "text/plain", "notes.txt")]
    webchat(client, "m1", "what is this?", files)
    (first,) = answers(client, 1)
    assert f"[images: image/png {len(PHOTO)} bytes]" in first and "marmalade" in first
    client.gateway.wait_idle()
    # When the user asks for it again
    webchat(client, "m2", "/retry")
    # Then the retried turn is given the same files: the same answer
    replies = answers(client, 3)
    assert replies[1] == "Retrying your last message."
    assert replies[2] == first
