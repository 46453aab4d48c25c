"""The normalized source of an inbound event, and the message it carries (BEHAVIOUR §1)."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from hermes_gateway.domain.quotes import quote_of

CHAT_TYPES = ("dm", "group", "channel", "thread")
# trusted: a signed generic webhook or an authenticated relay delivered it; mentions_bot: it
# mentions this bot; role_granted: the platform grants access by role (Discord roles).
FACTS = ("trusted", "mentions_bot", "role_granted")


@dataclass(frozen=True)
class SessionSource:
    """Where a message came from, with every id the platform carries.

    Trust flags (for example "delivered by an authenticated relay") are deliberately not fields:
    they are decided by the verified ingress path and never read from the wire or from storage.
    """

    platform: str
    chat_id: str | None = None
    chat_type: str = "dm"
    user_id: str | None = None
    user_name: str | None = None
    thread_id: str | None = None
    chat_name: str | None = None
    chat_topic: str | None = None
    user_id_alt: str | None = None
    chat_id_alt: str | None = None
    is_bot: bool = False
    scope_id: str | None = None
    parent_chat_id: str | None = None
    message_id: str | None = None
    profile: str | None = None
    prospective_thread_id: str | None = None

    def __post_init__(self) -> None:
        if not self.platform:
            raise ValueError("a source needs a platform")
        if self.chat_type not in CHAT_TYPES:
            raise ValueError(f"chat_type must be one of {', '.join(CHAT_TYPES)}, got {self.chat_type!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SessionSource:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        for key, value in values.items():
            if key != "is_bot" and value is not None and not isinstance(value, str):
                values[key] = str(value)
        values["is_bot"] = bool(values.get("is_bot", False))
        return cls(**values)

    @property
    def description(self) -> str:
        """A human line: "DM with Alice", "group: Ops, thread: 17585"."""
        if self.chat_type == "dm":
            who = self.user_name or self.user_id or self.chat_id or "unknown user"
            text = f"DM with {who}"
        else:
            text = f"{self.chat_type}: {self.chat_name or self.chat_id or 'unknown chat'}"
        if self.thread_id:
            text += f", thread: {self.thread_id}"
        return text


def compact_source(source: SessionSource) -> dict[str, Any]:
    """The source without its empty fields: what is stored on a route (a route write costs a
    write unit per KB, so a DM's route stays well under one), a job and a turn's state."""
    return {k: v for k, v in source.to_dict().items() if v not in (None, False, "")}


def user_handle(platform: str, user_id: str | None) -> str | None:
    """A person's stable, non-reversible handle (12 hex characters), distinct per platform (user 42
    on Telegram is not user 42 on Discord): their memory's scope, and the mark on their transcript
    rows that forget and export look for."""
    if not user_id:
        return None
    # surrogatepass: a hostile id still gets its handle
    return hashlib.sha256(f"{platform}:{user_id}".encode("utf-8", "surrogatepass")).hexdigest()[:12]


def sender_of(source: SessionSource) -> str | None:
    """The handle of the person who sent a message from `source`."""
    return user_handle(source.platform, source.user_id_alt or source.user_id)


@dataclass(frozen=True)
class InboundMessage:
    """One inbound message, normalized, as it travels from ingress through the queue to the router."""

    source: SessionSource
    text: str
    event_id: str  # the platform's id for de-duplication, e.g. "telegram:<bot>:<update_id>"
    received_at: float  # epoch seconds at ingress
    attachments: tuple[dict[str, Any], ...] = ()
    reply_to_message_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # What the verified ingress path established about the message, never read from a payload:
    # a subset of FACTS. Only the ingress function may put a message in the inbox.
    facts: tuple[str, ...] = ()
    # Platform details a reply needs beyond the chat id (Teams' service URL, a LINE reply token,
    # a Discord interaction token, `via: relay`); copied into the turn's reply target.
    reply_context: dict[str, str] = field(default_factory=dict)
    # The text of the message it answers, where the platform quotes it (domain/quotes.py: one
    # line, cut); only `reply_to_message_id` where the platform gives just the id.
    reply_to_text: str | None = None

    def __post_init__(self) -> None:
        unknown = set(self.facts) - set(FACTS)
        if unknown:
            raise ValueError(f"unknown access facts {sorted(unknown)}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "v": 1,
            "source": self.source.to_dict(),
            "text": self.text,
            "event_id": self.event_id,
            "received_at": self.received_at,
            "attachments": list(self.attachments),
            "reply_to_message_id": self.reply_to_message_id,
            "extra": self.extra,
            "facts": list(self.facts),
            "reply_context": self.reply_context,
            **({"reply_to_text": self.reply_to_text} if self.reply_to_text else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> InboundMessage:
        if data.get("v") != 1:
            raise ValueError(f"unknown inbound envelope version {data.get('v')!r}")
        return cls(
            source=SessionSource.from_dict(data["source"]),
            text=str(data.get("text") or ""),
            event_id=str(data["event_id"]),
            received_at=float(data["received_at"]),
            attachments=tuple(data.get("attachments") or ()),
            reply_to_message_id=data.get("reply_to_message_id"),
            extra=dict(data.get("extra") or {}),
            facts=tuple(str(f) for f in data.get("facts") or ()),
            reply_context={str(k): str(v) for k, v in (data.get("reply_context") or {}).items()},
            reply_to_text=quote_of(data.get("reply_to_text")),
        )
