"""What a sender is given to attach a file to a reply (BEHAVIOUR §6a, outbound).

Delivery fetches each `MEDIA:` reference once into the media bucket (`services.outbound_media`)
and hands a platform's sender a `MediaFile`: the stored bytes, their type, and a pre-signed URL
of the object for a platform that fetches the file itself (LINE, Twilio). A sender that can send
media natively is a `MediaSender`; the others get a link to the file in the message's text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hermes_gateway.platforms.base import Target

# How long a pre-signed URL of a stored file works: a platform fetches it within minutes (LINE,
# Twilio); a link in a chat's text is for reading soon after. The function's own credentials sign
# it, so it cannot outlive them anyway.
LINK_SECONDS = 3 * 3600


@dataclass(frozen=True)
class MediaFile:
    key: str  # the media bucket's key
    kind: str  # image | audio | voice | video | document
    mime: str
    name: str
    size: int  # bytes
    # The stored bytes, read from the bucket when the file is sent: a reply's files are never all
    # in memory at once (ten 20 MB files in a 256 MB function)
    read: Callable[[], bytes]
    link: Callable[[], str]  # a pre-signed GET URL of the stored object (LINK_SECONDS)

    @property
    def data(self) -> bytes:
        """The file's bytes (read anew on every use: a sender takes them once)."""
        return self.read()


@runtime_checkable
class MediaSender(Protocol):
    """A sender that attaches files natively. The reply's text rides along as the caption when it
    is at most `caption_limit` characters (0: never; it goes as its own message before the file),
    except on a file whose kind is in the sender's `uncaptioned_kinds`, when it has that attribute
    (WhatsApp's audio: its messages carry no caption).

    A spoken answer (services/speech.py) is a file of kind `voice`, Ogg/Opus (`audio/ogg`): a
    sender shows it as a voice note where its platform has them (Telegram's sendVoice, WhatsApp's
    voice message), as an audio file elsewhere. A platform joins `catalog.VOICE_PLATFORMS` when
    its sender does so."""

    caption_limit: int

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """Send one file (with the caption, when given); the platform's message id. Raises as
        `Sender.send` does."""
        ...


def media_sender_of(sender: object) -> MediaSender | None:
    return sender if isinstance(sender, MediaSender) else None


def captions(sender: object, kind: str) -> bool:
    """The sender's platform shows a caption on a file of this kind."""
    return kind not in getattr(sender, "uncaptioned_kinds", ())


def link_line(media: MediaFile) -> str:
    """How a platform without an upload shows a file: its name and a link to it."""
    return f"\U0001f4ce {media.name}: {media.link()}"
