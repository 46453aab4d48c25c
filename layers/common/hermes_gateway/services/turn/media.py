"""A message's attachments in the turn (BEHAVIOUR §6a): fetched once, understood once, shown to the model.

The router wrote the user's row with its attachments as references, each with its media-bucket
key. The first model request that sees the row fetches each attachment from its platform into
the bucket (`<key>`) and records what the turn made of it beside it (`<key>.json`: a voice
note's transcript, a document's text, or why it could not be opened); every later request (the
tool loop, the next turns) reads that record instead of fetching again. What failed, and what a
voice note was heard to say (`stt.echo_transcripts`), is told to the chat once, when it happens.

The model then gets, per row: the user's text, an image part per image of the message it answers
(older images are named: their bytes are not sent again with every request), a voice note's
transcript, a document's text, and a short note for anything else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hermes_gateway.domain.media import INFO_SUFFIX, Attachment
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.turn_state import Turn
from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.providers.base import ImagePart
from hermes_gateway.services.turn.jobs import reply_job

if TYPE_CHECKING:
    from hermes_gateway.pdf_text import PdfText
    from hermes_gateway.services.turn.deps import TurnDeps

IMAGE_MIMES = ("image/jpeg", "image/png", "image/gif", "image/webp")  # what both providers accept
ECHO_CHARS = 1000  # of a transcript shown back to the chat
TEXT_MIMES = (
    "application/json", "application/xml", "application/x-yaml", "application/yaml", "application/csv",
    "application/javascript", "application/x-sh", "application/sql", "application/toml", "application/x-python",
)  # fmt: skip
TEXT_EXTENSIONS = frozenset((
    "txt", "md", "markdown", "csv", "tsv", "json", "jsonl", "yaml", "yml", "xml", "html", "htm", "log", "toml",
    "ini", "cfg", "conf", "sh", "py", "js", "ts", "tsx", "jsx", "java", "go", "rs", "rb", "php", "c", "h", "cc",
    "cpp", "hpp", "cs", "swift", "kt", "sql", "css", "scss", "tex", "rst", "org",
))  # fmt: skip


# What the model is told of a file whose processing failed for a reason that is the gateway's own
# (the log and the file's record keep the reason; the chat is not shown it)
_FAILED = {"voice": "it could not be transcribed", "audio": "it could not be transcribed"}
_FAILED_OTHER = "it could not be processed"
# Tries of one file within a turn: the PrepareMedia task that fetches it (and the Respond task, for
# a file that joined the turn without it) is tried again once after a TransientError
# (infra/statemachines/turn.asl.json; tests/unit/test_media_once.py reads it from there)
TRIES = 2


@dataclass(frozen=True)
class Understood:
    """What the turn made of one attachment (stored as `<key>.json`)."""

    mime: str = ""
    stored: bool = False  # the bytes are in the bucket under the attachment's key
    text: str = ""  # a voice note's transcript, a document's text
    cut: int = 0  # characters of the text left out (media.max_text_chars)
    left_out: str = ""  # what of a PDF was not read (pages, characters, time), for the model
    error: str = ""  # why it could not be fetched or understood, as the model is told it
    reason: str = ""  # the failure as the gateway saw it (the log's; never shown to the chat)
    skipped: str = ""  # why it was not fetched at all (a kind not fetched, no fetcher, a limit)
    size: int = 0  # bytes fetched (a message's files count against media.max_total_bytes)

    def to_json(self) -> bytes:
        return json.dumps({k: v for k, v in self.__dict__.items() if v}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> Understood:
        data = json.loads(raw)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Attempt:
    """A file being processed (stored as `<key>.json` before the work starts, so a try that dies
    half way, a task killed at its time limit, leaves this behind instead of nothing)."""

    turn: str  # the turn that tries it
    since: float
    tries: int = 1
    error: str = ""  # the last try's transient failure; "" while a try is (or was, when it died) at work

    def to_json(self) -> bytes:
        return json.dumps({"attempt": self.__dict__}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def of(cls, raw: bytes) -> Attempt | None:
        found = json.loads(raw).get("attempt")
        if not isinstance(found, dict):
            return None
        return cls(str(found.get("turn", "")), float(found.get("since", 0)), int(found.get("tries", 1)),
                   str(found.get("error", "")))  # fmt: skip


def understand_rows(turn: Turn, rows: list[TranscriptRow], deps: TurnDeps) -> dict[str, Understood]:
    """Each attachment of `rows` by key, fetched and understood now if it never was: at most
    `media.max_attachments` of a message, `media.max_total_bytes` of them together."""
    limits = deps.settings.media
    found: dict[str, Understood] = {}
    for row in rows:
        used = 0
        for n, media in enumerate(row.attachments):
            if not media.key or media.key in found:
                continue
            if n >= limits.max_attachments:
                found[media.key] = Understood(
                    mime=media.mime, skipped=f"only the first {limits.max_attachments} files of a message are opened"
                )
                continue
            info = _understood(turn, media, deps, limits.max_total_bytes - used)
            used += info.size
            found[media.key] = info
    return found


def model_input(
    row: TranscriptRow, understood: Mapping[str, Understood], deps: TurnDeps, *, current: bool
) -> tuple[str, tuple[ImagePart, ...]]:
    """The row's text for the model with its attachments' notes, transcripts and document text,
    and (for the message being answered) its images' bytes."""
    parts = [row.content] if row.content else []
    images: list[ImagePart] = []
    for media in row.attachments:
        info = understood.get(media.key, Understood(skipped="not stored"))
        image = _image(media, info, deps) if current and kind_of(media, info) == "image" and not info.error else None
        if image is not None:
            images.append(image)
        else:
            parts.append(describe(media, info, deps, current=current))
    return "\n\n".join(p for p in parts if p), tuple(images)


def describe(media: Attachment, info: Understood, deps: TurnDeps, *, current: bool) -> str:
    """What the model reads about an attachment it does not see as an image."""
    label = media.label
    if info.error:
        return f"[The user sent {_a(media)} ({label}) that could not be opened: {info.error}]"
    kind = kind_of(media, info)
    if kind in ("voice", "audio") and info.text:
        return f'[{"Voice note" if kind == "voice" else f"Audio {label}"}, transcribed: "{info.text}"]'
    if kind == "document" and info.text:
        cut = f"\n[… {info.cut} more characters not shown]" if info.cut else ""
        left_out = f"\n[… not all of it: {info.left_out}]" if info.left_out else ""
        return f"[File {label}]\n{info.text}{cut}{left_out}"
    if kind == "image" and info.stored:
        if not deps.settings.provider.vision:
            return f"[The user sent an image ({label}); this model is not given images]"
        if current and media.size and media.size > MODEL_IMAGE_MAX_BYTES:
            return f"[The user sent an image ({label}, {media.size / 1e6:.1f} MB); it is too large to be shown to you]"
        return f"[The user sent an image ({label}) earlier in the conversation]" if not current else f"[image {label}]"
    size = f", {media.size / 1e6:.1f} MB" if media.size else ""
    why = f": {info.skipped}" if info.skipped else ""
    return f"[The user sent {_a(media)} ({label}{size}); it is not opened here{why}]"


def kind_of(media: Attachment, info: Understood) -> str:
    """The attachment's kind; for a file the platform could not type (a Mattermost file id, a Slack
    Connect file, a file sent as a document), the kind its bytes came as: an image or audio."""
    return refined(media.kind, info.mime)


def refined(kind: str, mime: str) -> str:
    if kind != "document":
        return kind
    if mime in IMAGE_MIMES:
        return "image"
    return "audio" if mime.startswith("audio/") else kind


def _a(media: Attachment) -> str:
    return {"image": "an image", "audio": "an audio file", "voice": "a voice note", "video": "a video"}.get(
        media.kind, f"a {media.kind}"
    )


# The largest image a request carries: the agent function (128 MB, resources.py) holds it, its
# base64 and the request's copy beside the interpreter's 65 MB; models take 3.75 MB (Bedrock) to
# 20 MB (OpenAI) an image. A larger one is named to the model instead.
MODEL_IMAGE_MAX_BYTES = 5_000_000


def _image(media: Attachment, info: Understood, deps: TurnDeps) -> ImagePart | None:
    if not (info.stored and deps.settings.provider.vision and deps.media is not None):
        return None
    mime = info.mime if info.mime in IMAGE_MIMES else media.mime
    if mime not in IMAGE_MIMES or (media.size or 0) > MODEL_IMAGE_MAX_BYTES:
        return None
    found = deps.media.get(media.key)
    if found is None or len(found[0]) > MODEL_IMAGE_MAX_BYTES:  # (a platform that did not say its size)
        return None
    return ImagePart(mime, found[0])


# --- fetching and understanding, once ----------------------------------------------------------


def _understood(turn: Turn, media: Attachment, deps: TurnDeps, room: int) -> Understood:
    """The attachment's record, made now if there is none: what became of it, once. A try that
    failed for a while (a TransientError) is tried again by the same turn's next try of its task,
    up to TRIES; a try that died half way (its task killed at its time limit), one of an earlier
    turn that gave up, or the last try's failure is recorded as the file's failure: later turns
    read it and fetch nothing."""
    store = deps.media
    if store is None:
        return Understood(skipped="no media bucket")
    record = media.key + INFO_SUFFIX
    found = store.get(record)
    attempt = Attempt.of(found[0]) if found is not None else None
    if found is not None and attempt is None:
        return Understood.from_json(found[0])
    tries = 1
    if attempt is not None:
        if attempt.turn != turn.turn_id or not attempt.error:
            return _recorded(turn, media, deps, _failed(media, attempt.error or "its processing did not finish"))
        tries = attempt.tries + 1
    store.put(record, Attempt(turn.turn_id, deps.now(), tries).to_json(), "application/json")
    try:
        info = _process(turn, media, deps, room)
    except TransientError as exc:
        if tries < TRIES:
            store.put(record, Attempt(turn.turn_id, deps.now(), tries, str(exc)[:200]).to_json(), "application/json")
            raise
        info = _failed(media, str(exc))
    except Exception as exc:  # noqa: BLE001 - a file that breaks its reader is that file's failure, once
        info = _failed(media, f"{type(exc).__name__}: {str(exc)[:150]}")
    return _recorded(turn, media, deps, info)


def _failed(media: Attachment, reason: str) -> Understood:
    return Understood(mime=media.mime, error=_FAILED.get(media.kind, _FAILED_OTHER), reason=reason[:200])


def _recorded(turn: Turn, media: Attachment, deps: TurnDeps, info: Understood) -> Understood:
    assert deps.media is not None
    deps.media.put(media.key + INFO_SUFFIX, info.to_json(), "application/json")
    metrics.add_metric(name="MediaUnderstood", unit=MetricUnit.Count, value=1)
    if info.error or info.reason:
        logger.info(
            "attachment not understood", extra={"kind": media.kind, "error": info.error, "reason": info.reason[:200]}
        )
    _tell(turn, media, info, deps)
    return info


def _process(turn: Turn, media: Attachment, deps: TurnDeps, room: int) -> Understood:
    from hermes_gateway.platforms.media import MediaTooLarge, MediaUnavailable

    limits = deps.settings.media
    if media.kind not in limits.kinds:
        return Understood(mime=media.mime, skipped=f"{media.kind} files are not opened")
    if deps.fetch_media is None or turn.source is None:
        return Understood(mime=media.mime, skipped="this platform does not hand over files")
    if room <= 0:
        return Understood(mime=media.mime, skipped=_over_total(limits.max_total_bytes))
    limit = min(limits.max_bytes, room)
    try:
        fetched = deps.fetch_media(media, turn.source.platform, turn.source.profile, limit)
    except MediaTooLarge as exc:
        if limit < limits.max_bytes and (exc.size is None or exc.size <= limits.max_bytes):
            return Understood(mime=media.mime, skipped=_over_total(limits.max_total_bytes), reason=str(exc)[:200])
        return Understood(mime=media.mime, error=str(exc)[:200], reason=str(exc)[:200])
    except MediaUnavailable as exc:
        return Understood(mime=media.mime, error="it could not be downloaded", reason=str(exc)[:200])
    assert deps.media is not None
    mime = fetched.mime or media.mime
    deps.media.put(media.key, fetched.data, mime)
    kind = refined(media.kind, mime)
    if kind in ("voice", "audio"):
        info = _transcribed(fetched.data, mime, media, deps)
    elif kind == "document":
        info = _read(fetched.data, mime, media, deps)
    else:
        info = Understood(mime=mime, stored=True)
    return replace(info, size=len(fetched.data))


def _over_total(total: int) -> str:
    shown = f"{total / 1e6:.0f} MB" if total >= 1_000_000 else f"{total / 1e3:.0f} KB"
    return f"the message's files are over {shown} together, and this one was left out"


def _transcribed(data: bytes, mime: str, media: Attachment, deps: TurnDeps) -> Understood:
    transcriber = deps.transcriber() if deps.transcriber is not None else None
    if transcriber is None:
        return Understood(mime=mime, stored=True, error="speech to text is not set up for this agent")
    most = deps.settings.stt.max_seconds
    seconds = audio_seconds(data)
    if seconds is None:
        return Understood(mime=mime, stored=True, error="its length could not be read, so it was not transcribed")
    if seconds > most:
        return Understood(
            mime=mime, stored=True, error=f"it is {_duration(seconds)} long; at most {_duration(most)} is transcribed"
        )
    try:
        text = transcriber.transcribe(data, mime, media.name)
    except PermanentError as exc:
        return Understood(mime=mime, stored=True, error=_FAILED["voice"], reason=str(exc)[:200])
    if not text:
        return Understood(mime=mime, stored=True, error="no speech was heard in it")
    return Understood(mime=mime, stored=True, text=text)


def audio_seconds(data: bytes) -> float | None:
    """An audio file's length, read from its container (Ogg Opus or Vorbis, MP3, M4A, WAV, FLAC,
    ...) by mutagen, without decoding it; None when the container is not one it knows."""
    import io

    import mutagen

    try:
        found = mutagen.File(io.BytesIO(data))
    except (mutagen.MutagenError, ValueError, EOFError, OverflowError, ZeroDivisionError):
        return None
    length = getattr(getattr(found, "info", None), "length", None)
    return float(length) if isinstance(length, int | float) and length > 0 else None


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}" if seconds >= 90 else f"{round(seconds)} seconds"


def _read(data: bytes, mime: str, media: Attachment, deps: TurnDeps) -> Understood:
    """A document's text: text-like files decoded, PDFs' text extracted within their budget;
    other files only named."""
    from hermes_gateway import pdf_text

    limits = deps.settings.media
    if is_pdf(mime, media.name):
        try:
            found = pdf_text.extract(
                data, max_pages=limits.max_pdf_pages, max_chars=limits.max_text_chars, cpu_seconds=limits.pdf_seconds
            )
        except pdf_text.Unreadable as exc:
            return Understood(mime=mime, stored=True, error=str(exc)[:200])
        if not found.text:
            error = f"its text could not be read within {limits.pdf_seconds} s of CPU time"
            return Understood(mime=mime, stored=True, error=error, reason=f"stopped: {found.stopped}")
        left_out = _pdf_left_out(found, limits.pdf_seconds)
        if len(found.text) > limits.max_text_chars and not left_out:
            left_out = f"the text was cut at {limits.max_text_chars:,} characters"
        return Understood(mime=mime, stored=True, text=found.text[: limits.max_text_chars], left_out=left_out)
    text = text_of_file(data, mime, media.name)
    if text is None:
        return Understood(mime=mime, stored=True, skipped="only text files and PDFs are read")
    limit = limits.max_text_chars
    return Understood(mime=mime, stored=True, text=text[:limit], cut=max(0, len(text) - limit))


def _pdf_left_out(found: PdfText, seconds: int) -> str:
    """What of a PDF the model is not given, in words."""
    shown = f"{found.pages_read} of its {found.pages} pages" if found.pages else f"{found.pages_read} pages"
    return {
        "pages": f"only the first {shown} were read",
        "characters": f"the text was cut at the characters limit, after {shown}",
        "time": f"reading stopped after {seconds} s of CPU time, after {shown}",
    }.get(found.stopped, "")


def is_pdf(mime: str, name: str) -> bool:
    return mime.split(";", 1)[0].strip().lower() == "application/pdf" or name.lower().endswith(".pdf")


def text_of_file(data: bytes, mime: str, name: str) -> str | None:
    """The text of a text-like file; None for other files."""
    base = mime.split(";", 1)[0].strip().lower()
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if base.startswith("text/") or base in TEXT_MIMES or extension in TEXT_EXTENSIONS:
        if b"\x00" in data[:4096]:
            return None  # binary after all
        return data.decode("utf-8-sig", "replace")
    return None


def _tell(turn: Turn, media: Attachment, info: Understood, deps: TurnDeps) -> None:
    """The chat is shown once what a voice note was heard to say (`stt.echo_transcripts`). A file
    that could not be opened is the model's to tell of, in its one answer: the chat gets no
    notice of its own, and the reason stays in the log."""
    if turn.reply_to is None or not deps.settings.stt.echo_transcripts:
        return
    if kind_of(media, info) not in ("voice", "audio") or not info.text:
        return
    shown = info.text if len(info.text) <= ECHO_CHARS else info.text[:ECHO_CHARS] + "\u2026"
    job = reply_job(turn, f"{turn.turn_id}-media-{media.key.rsplit('/', 1)[-1]}", f'\U0001f3a4 "{shown}"')
    try:
        (deps.replies or deps.deliveries).send(job)
    except Exception as exc:  # noqa: BLE001 - a notice never fails the turn; the model still hears of it
        logger.warning("media notice not sent", extra={"error": type(exc).__name__})
