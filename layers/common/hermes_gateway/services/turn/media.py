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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hermes_gateway.domain.media import INFO_SUFFIX, Attachment
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.turn_state import Turn
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.providers.base import ImagePart
from hermes_gateway.services.turn.jobs import reply_job

if TYPE_CHECKING:
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


@dataclass(frozen=True)
class Understood:
    """What the turn made of one attachment (stored as `<key>.json`)."""

    mime: str = ""
    stored: bool = False  # the bytes are in the bucket under the attachment's key
    text: str = ""  # a voice note's transcript, a document's text
    cut: int = 0  # characters of the text left out (media.max_text_chars)
    error: str = ""  # why it could not be fetched or understood (the chat was told)
    skipped: str = ""  # why it was not fetched at all (a kind not fetched, no fetcher)

    def to_json(self) -> bytes:
        return json.dumps({k: v for k, v in self.__dict__.items() if v}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> Understood:
        data = json.loads(raw)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


# (attachment, platform, profile, limit) -> the bytes; raises platforms.media errors
Fetch = Callable[[Attachment, str, "str | None", int], Any]


def understand_rows(turn: Turn, rows: list[TranscriptRow], deps: TurnDeps) -> dict[str, Understood]:
    """Each attachment of `rows` by key, fetched and understood now if it never was."""
    found: dict[str, Understood] = {}
    for row in rows:
        for media in row.attachments:
            if media.key and media.key not in found:
                found[media.key] = _understood(turn, media, deps)
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
        return f"[File {label}]\n{info.text}{cut}"
    if kind == "image" and info.stored:
        if not deps.settings.provider.vision:
            return f"[The user sent an image ({label}); this model is not given images]"
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


def _image(media: Attachment, info: Understood, deps: TurnDeps) -> ImagePart | None:
    if not (info.stored and deps.settings.provider.vision and deps.media is not None):
        return None
    mime = info.mime if info.mime in IMAGE_MIMES else media.mime
    if mime not in IMAGE_MIMES:
        return None
    found = deps.media.get(media.key)
    return ImagePart(mime, found[0]) if found is not None else None


# --- fetching and understanding, once ----------------------------------------------------------


def _understood(turn: Turn, media: Attachment, deps: TurnDeps) -> Understood:
    store = deps.media
    if store is None:
        return Understood(skipped="no media bucket")
    found = store.get(media.key + INFO_SUFFIX)
    if found is not None:
        return Understood.from_json(found[0])
    info = _process(turn, media, deps)
    store.put(media.key + INFO_SUFFIX, info.to_json(), "application/json")
    metrics.add_metric(name="MediaUnderstood", unit=MetricUnit.Count, value=1)
    _tell(turn, media, info, deps)
    return info


def _process(turn: Turn, media: Attachment, deps: TurnDeps) -> Understood:
    from hermes_gateway.platforms.media import MediaTooLarge, MediaUnavailable

    limits = deps.settings.media
    if media.kind not in limits.kinds:
        return Understood(mime=media.mime, skipped=f"{media.kind} files are not opened")
    if deps.fetch_media is None or turn.source is None:
        return Understood(mime=media.mime, skipped="this platform does not hand over files")
    try:
        fetched = deps.fetch_media(media, turn.source.platform, turn.source.profile, limits.max_bytes)
    except (MediaTooLarge, MediaUnavailable) as exc:
        logger.info("attachment not fetched", extra={"kind": media.kind, "error": type(exc).__name__})
        return Understood(mime=media.mime, error=str(exc)[:200])
    assert deps.media is not None
    mime = fetched.mime or media.mime
    deps.media.put(media.key, fetched.data, mime)
    kind = refined(media.kind, mime)
    if kind in ("voice", "audio"):
        return _transcribed(fetched.data, mime, media, deps)
    if kind == "document":
        return _read(fetched.data, mime, media, deps)
    return Understood(mime=mime, stored=True)


def _transcribed(data: bytes, mime: str, media: Attachment, deps: TurnDeps) -> Understood:
    transcriber = deps.transcriber() if deps.transcriber is not None else None
    if transcriber is None:
        return Understood(mime=mime, stored=True, error="speech to text is not set up for this agent")
    try:
        text = transcriber.transcribe(data, mime, media.name)
    except PermanentError as exc:
        return Understood(mime=mime, stored=True, error=f"it could not be transcribed ({str(exc)[:120]})")
    if not text:
        return Understood(mime=mime, stored=True, error="no speech was heard in it")
    return Understood(mime=mime, stored=True, text=text)


def _read(data: bytes, mime: str, media: Attachment, deps: TurnDeps) -> Understood:
    """A document's text: text-like files decoded, PDFs' text extracted; others only named."""
    try:
        text = document_text(data, mime, media.name)
    except PermanentError as exc:
        return Understood(mime=mime, stored=True, error=str(exc)[:200])
    if text is None:
        return Understood(mime=mime, stored=True, skipped="only text files and PDFs are read")
    limit = deps.settings.media.max_text_chars
    return Understood(mime=mime, stored=True, text=text[:limit], cut=max(0, len(text) - limit))


def document_text(data: bytes, mime: str, name: str) -> str | None:
    """The text of a text-like file or a PDF; None for other files."""
    base = mime.split(";", 1)[0].strip().lower()
    extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if base == "application/pdf" or extension == "pdf":
        return _pdf_text(data)
    if base.startswith("text/") or base in TEXT_MIMES or extension in TEXT_EXTENSIONS:
        if b"\x00" in data[:4096]:
            return None  # binary after all
        return data.decode("utf-8-sig", "replace")
    return None


def _pdf_text(data: bytes) -> str:
    import io

    try:
        from pypdf import PdfReader
        from pypdf.errors import PyPdfError
    except ImportError:  # pragma: no cover - the layer carries pypdf
        raise PermanentError("PDFs cannot be read here") from None
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise PermanentError("the PDF is encrypted")
        pages = [page.extract_text() or "" for page in reader.pages]
    except PyPdfError as exc:
        raise PermanentError(f"the PDF could not be read ({type(exc).__name__})") from None
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise PermanentError(f"the PDF could not be read ({type(exc).__name__})") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise PermanentError("the PDF has no text (a scan?)")
    return text


def _tell(turn: Turn, media: Attachment, info: Understood, deps: TurnDeps) -> None:
    """The chat hears once what went wrong with a file, and what a voice note was heard to say."""
    if turn.reply_to is None:
        return
    if info.error:
        text = f"I could not open {media.label}: {info.error}."
    elif kind_of(media, info) in ("voice", "audio") and info.text and deps.settings.stt.echo_transcripts:
        shown = info.text if len(info.text) <= ECHO_CHARS else info.text[:ECHO_CHARS] + "\u2026"
        text = f'\U0001f3a4 "{shown}"'
    else:
        return
    job = reply_job(turn, f"{turn.turn_id}-media-{media.key.rsplit('/', 1)[-1]}", text)
    try:
        (deps.replies or deps.deliveries).send(job)
    except Exception as exc:  # noqa: BLE001 - a notice never fails the turn; the model still hears of it
        logger.warning("media notice not sent", extra={"error": type(exc).__name__})
