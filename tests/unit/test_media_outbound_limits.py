"""Outbound media within the delivery function's means (BEHAVIOUR §6a): a reply's files are
streamed into the media bucket one at a time and read back only when each is sent, so ten 20 MB
files fit a 256 MB function; and one deadline, the Deliver task's remaining time, bounds the
fetches of all of them."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from functions.delivery.handler import DELIVER_TASK_SECONDS
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver_waiting
from hermes_gateway.services.outbound_media import Fetching
from tests.fakes.loopback import ScriptedAnswer
from tests.fakes.media_server import FakeMediaHost
from tests.fakes.services import FakeOutbox
from tests.fakes.workflow import definition

NOW = 1_764_400_000.0
MB = 1_000_000


class DiskMedia:
    """The media bucket as files on disk: what the function holds in memory is measured, not the
    bucket's copy (S3's is not in the function either)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.mimes: dict[str, str] = {}

    def _path(self, key: str) -> Path:
        return self.root / key.replace("/", "_")

    def put(self, key: str, data: bytes, mime: str) -> None:
        self._path(key).write_bytes(data)
        self.mimes[key] = mime

    def put_file(self, key: str, file: BinaryIO, mime: str) -> None:
        with self._path(key).open("wb") as out:
            while chunk := file.read(64 * 1024):
                out.write(chunk)
        self.mimes[key] = mime

    def get(self, key: str) -> tuple[bytes, str] | None:
        path = self._path(key)
        return (path.read_bytes(), self.mimes[key]) if path.exists() else None

    def head(self, key: str) -> tuple[int, str] | None:
        path = self._path(key)
        return (path.stat().st_size, self.mimes[key]) if path.exists() else None

    def url(self, key: str, expires_seconds: int) -> str:
        return f"https://media.example.com/{key}"


class Uploader:
    """A platform that takes files natively; it reads each file's bytes as a real upload does."""

    caption_limit = 1024
    status = "sent"

    def __init__(self) -> None:
        self.uploaded: list[tuple[str, int]] = []

    def send(self, target: Target, text: str) -> str:
        return f"text-{len(self.uploaded)}"

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        self.uploaded.append((media.name, len(media.data)))
        return f"file-{len(self.uploaded)}"


@pytest.fixture
def host() -> Iterator[FakeMediaHost]:
    with FakeMediaHost() as fake:
        yield fake


def job(urls: list[str]) -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": "turn-1",
            "turn_id": "turn-1",
            "session": "s1",
            "target": {"platform": "telegram", "chat_id": "99"},
            "text": "here they are",
            "media": [{"reference": u} for u in urls],
        }
    )


def deps(store: DiskMedia, sender: Uploader) -> DeliveryDeps:
    return DeliveryDeps(
        outbox=FakeOutbox(),
        sender_for=lambda platform, via: sender,  # type: ignore[arg-type,return-value]
        now=lambda: NOW,
        profile="default",
        media=Fetching(store, 20 * MB, local=True),  # type: ignore[arg-type]
    )


def test_ten_20_mb_files_are_staged_and_sent_holding_about_one_in_memory(host: FakeMediaHost, tmp_path: Path) -> None:
    # Given ten files of 20 MB on a file host (one object served ten times: the fake's own memory
    # is allocated before the measure starts)
    body = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * (20 * MB // 256 - 1)
    for n in range(10):
        host.files[f"/big-{n}.png"] = ScriptedAnswer(200, body, {"Content-Type": "image/png"})
    sender = Uploader()

    # When one reply attaches all ten, measured from the first fetch to the last upload
    tracemalloc.start()
    try:
        result = deliver_waiting(
            job([host.url(f"/big-{n}.png") for n in range(10)]), deps(DiskMedia(tmp_path), sender), 5.0
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # Then every file went, and at most about two files' bytes were held at once (the upload's
    # copy of one, and a chunk of the next): far from the 200 MB of holding them all
    assert result.status == "sent" and sender.uploaded == [(f"big-{n}.png", len(body)) for n in range(10)]
    assert peak < 50 * MB, f"peak {peak / MB:.0f} MB"


def test_one_deadline_bounds_the_fetches_of_all_of_a_replys_files(host: FakeMediaHost, tmp_path: Path) -> None:
    # Given three files, each answered only after a second
    for n in range(3):
        host.files[f"/slow-{n}.png"] = ScriptedAnswer(200, b"\x89PNG" + b"x" * 100, {"Content-Type": "image/png"}, 1.0)
    sender = Uploader()

    # When the reply has 1.5 s for its files
    started = time.monotonic()
    result = deliver_waiting(
        job([host.url(f"/slow-{n}.png") for n in range(3)]),
        deps(DiskMedia(tmp_path), sender),
        5.0,
        media_deadline=started + 1.5,
    )

    # Then the first came, the others go without (named in the text), and it took about 1.5 s, not 3
    assert result.status == "sent" and [name for name, _ in sender.uploaded] == ["slow-0.png"]
    assert time.monotonic() - started < 2.5
    notes = [e.text for e in result.entries if "could not attach" in e.text]
    assert notes and "slow-1.png: it could not be fetched in the time the reply had" in notes[0]


def test_the_deliver_tasks_limit_is_the_one_the_workflow_gives_it() -> None:
    assert definition()["States"]["Deliver"]["TimeoutSeconds"] == DELIVER_TASK_SECONDS
