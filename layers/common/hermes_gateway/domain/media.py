"""Media (BEHAVIOUR §6a): what a message carries besides its text, as references, never bytes.

An inbound attachment is described by its platform's adapter at ingress (kind, mime type, size,
name, and `ref`: how that platform's fetcher finds it: a file id, a URL, a media id; never a
credential). The turn fetches it once into the media bucket under `key` and gives the model what
it can use: an image part, a voice note's transcript, a document's text. Transcript rows and the
workflow's state carry these references only.

An outbound attachment is named by a `MEDIA:<reference>` line in the model's answer (a URL or a
stored media key) or the `send_message` tool's `media` argument, and sent natively by the platform.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

MEDIA_KINDS = ("image", "audio", "voice", "video", "document", "sticker")
# Kinds whose bytes are worth fetching by default: what the model can see, hear (transcribed) or read.
FETCHED_KINDS = ("image", "audio", "voice", "document")
# What the turn made of a stored file (its transcript, its text) lies beside it as `<key>.json`:
# the model's input, never a file to send anywhere (BEHAVIOUR §11).
INFO_SUFFIX = ".json"
_REF_VALUE_CHARS = 2048  # a platform URL with its query string; longer is not a reference
_NAME_CHARS = 200


@dataclass(frozen=True)
class Attachment:
    kind: str  # one of MEDIA_KINDS
    mime: str = ""  # as the platform said (may be empty: the bytes' own type is found when fetched)
    size: int | None = None  # bytes, when the platform says
    name: str = ""  # the file name, when there is one
    # How the platform's fetcher finds the bytes (platform-specific keys: file_id, url, media_id, ...)
    ref: Mapping[str, str] = field(default_factory=dict)
    key: str = ""  # the media bucket's key, once the turn stored it

    def __post_init__(self) -> None:
        if self.kind not in MEDIA_KINDS:
            raise ValueError(f"unknown media kind {self.kind!r}")

    @property
    def label(self) -> str:
        """How the model and the chat are told of it: its name, else its kind."""
        return self.name or {"voice": "voice note", "video": "video", "sticker": "sticker"}.get(self.kind, self.kind)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.mime:
            data["mime"] = self.mime
        if self.size is not None:
            data["size"] = self.size
        if self.name:
            data["name"] = self.name
        if self.ref:
            data["ref"] = dict(self.ref)
        if self.key:
            data["key"] = self.key
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attachment:
        ref = data.get("ref") or {}
        size = data.get("size")
        return cls(
            kind=str(data.get("kind")),
            mime=str(data.get("mime") or ""),
            size=int(size) if isinstance(size, int | float) and not isinstance(size, bool) else None,
            name=str(data.get("name") or "")[:_NAME_CHARS],
            ref={str(k): str(v) for k, v in ref.items()} if isinstance(ref, Mapping) else {},
            key=str(data.get("key") or ""),
        )


def attachment(kind: str, *, mime: Any = "", size: Any = None, name: Any = "", **ref: Any) -> Attachment:
    """An attachment from a platform payload's loosely typed values: non-strings are dropped, a
    size that is not a non-negative integer is unknown, over-long references are left out."""
    return Attachment(
        kind=kind,
        mime=mime if isinstance(mime, str) else "",
        size=size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
        name=name[:_NAME_CHARS] if isinstance(name, str) else "",
        ref={k: v for k, v in ref.items() if isinstance(v, str) and v and len(v) <= _REF_VALUE_CHARS},
    )


def keyed(
    attachments: tuple[Attachment, ...], profile: str | None, session_id: str, seq: int
) -> tuple[Attachment, ...]:
    """The attachments of the user row `seq`, each with its media-bucket key: by profile, session
    and message, so the turn finds (and fetches) each once, and a copied row (a compressed
    session's child) still names its parent's objects."""
    return tuple(
        a if a.key else replace(a, key=f"{profile or 'default'}/{session_id}/{seq}-{n}")
        for n, a in enumerate(attachments)
    )


def kind_of_mime(mime: str, default: str = "document") -> str:
    """The media kind a mime type suggests (image/png -> image, audio/ogg -> audio, ...)."""
    top = mime.split("/", 1)[0].lower()
    return {"image": "image", "audio": "audio", "video": "video"}.get(top, default)


def attachments_of(raw: Any) -> tuple[Attachment, ...]:
    """Attachments from their JSON form (an inbound envelope, a transcript row); bad entries skipped."""
    found = []
    for item in raw or ():
        if isinstance(item, Mapping) and item.get("kind") in MEDIA_KINDS:
            found.append(Attachment.from_dict(item))
    return tuple(found)


# --- outbound ----------------------------------------------------------------------------------

_MEDIA_LINE = re.compile(r"^[ \t]*MEDIA:[ \t]*(\S+)[ \t]*$", re.MULTILINE)


@dataclass(frozen=True)
class OutboundMedia:
    """A file to attach to a reply: a URL, or a key in the media bucket."""

    reference: str  # https://… (http://127.0.0.1… in local mode) or a media bucket key
    kind: str = ""  # image | audio | voice | video | document; "" until known (from the name or bytes)
    name: str = ""

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in {"reference": self.reference, "kind": self.kind, "name": self.name}.items() if v}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutboundMedia:
        return cls(str(data.get("reference") or ""), str(data.get("kind") or ""), str(data.get("name") or ""))


def split_media_lines(text: str) -> tuple[str, tuple[OutboundMedia, ...]]:
    """The answer without its `MEDIA:<reference>` lines, and the media they name, in order."""
    found = tuple(OutboundMedia(m.group(1)) for m in _MEDIA_LINE.finditer(text))
    if not found:
        return text, ()
    rest = _MEDIA_LINE.sub("", text)
    return re.sub(r"\n{3,}", "\n\n", rest).strip(), found
