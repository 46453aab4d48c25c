"""A bad attachment costs once (BEHAVIOUR §6a): a file whose processing failed is recorded with the
reason and never fetched or processed again; a message's files are bounded in number and bytes,
a voice note in length (read from its container), a PDF in pages, characters and CPU time; and a
file that could not be opened is the model's to tell of (no internal error reaches the chat)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from hermes_gateway.domain.media import Attachment
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.platforms.media import Fetched, MediaTooLarge, MediaUnavailable
from hermes_gateway.services.turn.media import TRIES, Understood, describe, model_input, understand_rows
from hermes_gateway.settings import load_settings
from tests.fakes.media_server import minimal_pdf, ogg_opus, slow_pdf
from tests.fakes.media_store import MemoryMedia
from tests.fakes.workflow import definition

VOICE = ogg_opus(3.0)


@dataclass
class Ears:
    """Speech to text: fails with `failures` first (one per call), then hears `text`."""

    failures: list[Exception] = field(default_factory=list)
    text: str = "water the plants"
    heard: int = 0

    def transcribe(self, data: bytes, mime: str, name: str) -> str:
        self.heard += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.text


class Deps:
    def __init__(self, files: dict[str, tuple[bytes, str]], ears: Ears | None = None, **env: str) -> None:
        self.settings = load_settings(env=env, config={})
        self.media = MemoryMedia()
        self.fetched: list[str] = []
        self.notices: list[str] = []
        self.ears = ears or Ears()
        self.transcriber = lambda: self.ears
        self.now = lambda: 1000.0
        self.replies = None
        self.deliveries = SimpleNamespace(send=lambda job: self.notices.append(job["text"]))

        def fetch(media: Attachment, platform: str, profile: str | None, limit: int) -> Fetched:
            self.fetched.append(media.key)
            data, mime = files[media.key]
            if isinstance(data, Exception):
                raise data
            if len(data) > limit:
                raise MediaTooLarge(len(data), limit)
            return Fetched(data, mime)

        self.fetch_media = fetch


def turn(turn_id: str = "turn-1") -> Any:
    return SimpleNamespace(
        turn_id=turn_id,
        source=SimpleNamespace(platform="telegram", profile=None, chat_id="99"),
        reply_to=SimpleNamespace(platform="telegram", chat_id="99", thread_id=None),
    )


def voice_row(key: str = "p/s/1-0") -> TranscriptRow:
    return TranscriptRow(1, "user", "", 1.0, attachments=(Attachment("voice", "audio/ogg", key=key),))


@pytest.fixture(autouse=True)
def quiet_replies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The echo notice is built as a reply job; only its text matters here."""
    from hermes_gateway.services.turn import media

    monkeypatch.setattr(media, "reply_job", lambda turn, delivery_id, text: {"text": text})


@pytest.mark.parametrize("task", ["PrepareMedia", "Respond"])
def test_the_tries_match_the_tasks_retry_of_a_transient_error(task: str) -> None:
    # PrepareMedia fetches a turn's files; Respond one that joined the turn without it
    (retry,) = [r for r in definition()["States"][task]["Retry"] if "TransientError" in r["ErrorEquals"]]
    assert retry["MaxAttempts"] + 1 == TRIES


def test_a_voice_note_whose_transcription_keeps_failing_is_recorded_once_and_never_fetched_again() -> None:
    # Given a speech server that answers 5xx (after the provider's own tries) every time
    ears = Ears(failures=[TransientError("speech to text: server error HTTP 503")] * 3)
    deps: Any = Deps({"p/s/1-0": (VOICE, "audio/ogg")}, ears)

    # When the turn's PrepareMedia task is tried, and tried again by the workflow
    with pytest.raises(TransientError):
        understand_rows(turn(), [voice_row()], deps)
    understood = understand_rows(turn(), [voice_row()], deps)

    # Then its last try records the failure, with the reason, and the turn goes on without it
    info = understood["p/s/1-0"]
    assert info.error == "it could not be transcribed" and "503" in info.reason
    assert (ears.heard, deps.fetched) == (2, ["p/s/1-0", "p/s/1-0"])
    # and every later turn reads the record: nothing fetched, nothing transcribed
    assert understand_rows(turn("turn-2"), [voice_row()], deps)["p/s/1-0"] == info
    assert (ears.heard, len(deps.fetched)) == (2, 2)
    assert "could not be opened: it could not be transcribed" in describe(
        voice_row().attachments[0], info, deps, current=True
    )
    assert deps.notices == []  # the model tells the user; the chat gets no notice of its own


def test_a_try_killed_mid_processing_is_the_files_failure_for_the_next_turn() -> None:
    # Given a turn whose task was killed while it transcribed (its marker stays behind)
    deps: Any = Deps({"p/s/1-0": (VOICE, "audio/ogg")})
    deps.media.put("p/s/1-0.json", json.dumps({"attempt": {"turn": "turn-1", "since": 900.0}}).encode(), "")

    # When the next turn meets the voice note
    info = understand_rows(turn("turn-2"), [voice_row()], deps)["p/s/1-0"]

    # Then it is recorded as failed, and nothing is fetched or transcribed
    assert info.error == "it could not be transcribed" and info.reason == "its processing did not finish"
    assert deps.fetched == [] and deps.ears.heard == 0
    assert json.loads(deps.media.objects["p/s/1-0.json"][0])["error"] == "it could not be transcribed"


def test_a_transient_failure_that_clears_on_the_tasks_retry_is_transcribed() -> None:
    deps: Any = Deps({"p/s/1-0": (VOICE, "audio/ogg")}, Ears(failures=[TransientError("HTTP 502")]))
    with pytest.raises(TransientError):
        understand_rows(turn(), [voice_row()], deps)
    assert understand_rows(turn(), [voice_row()], deps)["p/s/1-0"].text == "water the plants"
    assert deps.notices == ['\U0001f3a4 "water the plants"']  # the transcript echo still works


def test_a_file_that_breaks_its_reader_is_recorded_once() -> None:
    deps: Any = Deps({"p/s/1-0": (VOICE, "audio/ogg")}, Ears(failures=[RuntimeError("a bug")]))
    assert understand_rows(turn(), [voice_row()], deps)["p/s/1-0"].reason == "RuntimeError: a bug"
    understand_rows(turn("turn-2"), [voice_row()], deps)
    assert deps.ears.heard == 1


def test_an_unopenable_file_tells_the_model_without_the_platforms_internal_error() -> None:
    deps: Any = Deps({"p/s/1-0": (MediaUnavailable("telegram getFile: HTTP 200"), "")})  # type: ignore[dict-item]
    row = TranscriptRow(1, "user", "look", 1.0, attachments=(Attachment("image", key="p/s/1-0"),))
    info = understand_rows(turn(), [row], deps)["p/s/1-0"]
    text, _ = model_input(row, {"p/s/1-0": info}, deps, current=True)
    assert text == "look\n\n[The user sent an image (image) that could not be opened: it could not be downloaded]"
    assert "getFile" in info.reason and deps.notices == []


def test_a_messages_files_are_bounded_in_number_and_in_bytes_together() -> None:
    files = {f"p/s/1-{n}": (b"x" * 400, "text/plain") for n in range(4)}
    deps: Any = Deps(files, GATEWAY_MEDIA_MAX_ATTACHMENTS="3", GATEWAY_MEDIA_MAX_TOTAL_BYTES="1024")
    row = TranscriptRow(
        1, "user", "", 1.0, attachments=tuple(Attachment("document", key=k, name=f"{k[-1]}.txt") for k in files)
    )
    found = understand_rows(turn(), [row], deps)
    assert [found[k].text != "" for k in files] == [True, True, False, False]
    assert found["p/s/1-2"].skipped == "the message's files are over 1 KB together, and this one was left out"
    assert "first 3 files" in found["p/s/1-3"].skipped
    assert deps.fetched == ["p/s/1-0", "p/s/1-1", "p/s/1-2"]  # the fourth is never asked for
    text, _ = model_input(row, found, deps, current=True)
    assert "only the first 3 files of a message are opened" in text


def test_audio_longer_than_stt_max_seconds_is_not_transcribed() -> None:
    deps: Any = Deps({"p/s/1-0": (ogg_opus(700.0), "audio/ogg")})
    info = understand_rows(turn(), [voice_row()], deps)["p/s/1-0"]
    assert info.error == "it is 12 minutes long; at most 10 minutes is transcribed" and deps.ears.heard == 0
    unknown: Any = Deps({"p/s/1-0": (b"OggS" + b"\x00" * 64, "audio/ogg")})
    assert "length could not be read" in understand_rows(turn(), [voice_row()], unknown)["p/s/1-0"].error
    assert unknown.ears.heard == 0


def test_a_pdf_is_read_within_its_pages_characters_and_cpu_time() -> None:
    def read(data: bytes, **env: str) -> Understood:
        deps: Any = Deps({"p/s/1-0": (data, "application/pdf")}, **env)
        row = TranscriptRow(1, "user", "", 1.0, attachments=(Attachment("document", key="p/s/1-0", name="a.pdf"),))
        return understand_rows(turn(), [row], deps)["p/s/1-0"]

    assert read(minimal_pdf("Quarterly revenue")).text == "Quarterly revenue"
    few = read(slow_pdf(pages=6, operators=10, operator=b"(a) Tj "), GATEWAY_MEDIA_MAX_PDF_PAGES="2")
    assert few.left_out == "only the first 2 of its 6 pages were read"
    cut = read(slow_pdf(pages=6, operators=100, operator=b"(a) Tj "), GATEWAY_MEDIA_MAX_TEXT_CHARS="150")
    assert len(cut.text) == 150 and cut.left_out.startswith("the text was cut at the characters limit")
    # The pathological shape: every page parses one huge shared stream; the CPU budget stops it
    assert len(slow_pdf()) < 8000  # a few KB that would take pypdf half a minute and more
    slow = read(slow_pdf(), GATEWAY_MEDIA_PDF_SECONDS="2")
    assert slow.left_out.startswith("reading stopped after 2 s of CPU time") or "within 2 s" in slow.error


def test_a_permanent_transcription_refusal_keeps_its_reason_from_the_chat() -> None:
    ears = Ears(failures=[PermanentError("speech to text refused the audio: HTTP 400: bad key sk-…")])
    deps: Any = Deps({"p/s/1-0": (VOICE, "audio/ogg")}, ears)
    info = understand_rows(turn(), [voice_row()], deps)["p/s/1-0"]
    assert info.error == "it could not be transcribed" and "HTTP 400" in info.reason and deps.notices == []
