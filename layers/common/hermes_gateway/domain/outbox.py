"""One reply chunk in the outbox, as the delivery service sees it (the outbox adapter stores it)."""

from __future__ import annotations

from dataclasses import dataclass

QUEUED = "queued"  # a row waiting in a forwarder's mailbox for the platform's word (platforms/mailbox.py)

# A delivery job's `streamed`: its first chunk was posted while the model wrote it
# (services/turn/stream.py), and the message shows that chunk exactly, or something else.
STREAM_SHOWN = "shown"
STREAM_PARTIAL = "partial"


@dataclass(frozen=True)
class OutboxEntry:
    delivery_id: str
    platform: str
    chat_id: str | None
    thread_id: str | None
    text: str
    turn_id: str | None
    chunk: int
    chunks: int
    status: str
    attempts: int
    platform_message_id: str | None
    error: str | None
    created_at: float
    updated_at: float
    # quick replies shown under the chunk ([{"label", "reply"}], the message's last chunk only)
    buttons: list[dict[str, str]] | None = None
    # the file a media part sends ([{"key", "name", "kind", "mime"}]: its media bucket key, never bytes)
    media: list[dict[str, str]] | None = None

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class QueuedLetter:
    """A chunk waiting in a forwarder's mailbox (platforms/mailbox.py): its row, the letter the
    forwarder sends, and when it was posted (letters are collected in that order)."""

    delivery_id: str
    letter: dict[str, object]
    queued_at: float
