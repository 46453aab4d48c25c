"""Sessions, transcripts and the turn lease: the domain view and the store's port.

The DynamoDB adapter (`hermes_gateway.adapters.dynamo_sessions`) and the in-memory fake
(`tests/fakes/sessions.py`) both implement `SessionStore` and `TurnLease` with the same
rules: single flight per key, compare-and-swap on `revision`, a lease released only by its token.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Protocol

from hermes_gateway.domain.source import SessionSource


def new_session_id(now: float | None = None) -> str:
    """Sortable by creation time, unique without coordination: `20261129_084501_3f9a1c2b`."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}_{secrets.token_hex(4)}"


@dataclass(frozen=True)
class SessionEntry:
    """A routing entry as read (or just written): which session a key points at, and its fences."""

    session_key: str
    session_id: str
    revision: int
    execution_generation: int
    created_at: float
    updated_at: float
    platform: str
    chat_type: str
    created: bool = False  # this call created the session
    reset_reason: str | None = None  # why this call replaced the previous session
    prev_session_id: str | None = None
    suspended: bool = False
    resume_pending: bool = False
    lease_token: str | None = None
    lease_turn_id: str | None = None
    lease_expires_at: float | None = None


@dataclass(frozen=True)
class TranscriptRow:
    seq: int
    role: str  # user | assistant | tool | system
    content: str
    created_at: float
    sender_name: str | None = None
    turn_id: str | None = None
    platform_message_id: str | None = None


@dataclass(frozen=True)
class ExpiredLease:
    session_key: str
    lease_token: str
    lease_turn_id: str | None
    lease_expires_at: float


class SessionStore(Protocol):
    def get_or_create(
        self,
        source: SessionSource,
        session_key: str,
        now: float,
        *,
        force_new: bool = False,
        touch_activity: bool = True,
    ) -> SessionEntry:
        """The live session for a key, created once however many callers race for it."""
        ...

    def get_route(self, session_key: str) -> SessionEntry | None: ...

    def append_message(
        self,
        session_id: str,
        role: str,
        content: str,
        now: float,
        *,
        dedupe_key: str | None = None,
        turn_id: str | None = None,
        sender_name: str | None = None,
        platform_message_id: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> int:
        """Append a row (and add its tokens to the session's totals) and return its seq. A repeated
        `dedupe_key` appends and counts nothing and returns the seq of the row it first wrote."""
        ...

    def turn_started(self, session_id: str, dedupe_key: str) -> bool:
        """True once `mark_turn_started` was recorded for the row appended under `dedupe_key`."""
        ...

    def mark_turn_started(self, session_id: str, dedupe_key: str, turn_id: str) -> None:
        """Record that the turn answering the row appended under `dedupe_key` has started."""
        ...

    def transcript(
        self, session_id: str, *, upto_seq: int | None = None, limit: int | None = None
    ) -> list[TranscriptRow]:
        """Active rows, oldest first (the newest `limit` of them). A failed read raises."""
        ...


class TurnLease(Protocol):
    def acquire(self, session_key: str, turn_id: str, token: str, now: float, ttl_seconds: int) -> bool:
        """Take the session's lease for one turn. True when held by this turn (again, on a retry)."""
        ...

    def release(self, session_key: str, token: str) -> bool:
        """Clear the lease if `token` still holds it; False when it does not (already released)."""
        ...

    def expired(self, now: float, limit: int = 100) -> list[ExpiredLease]:
        """Leases past their expiry, found through an index (never a scan)."""
        ...

    def expire(self, lease: ExpiredLease, now: float) -> bool:
        """Clear an expired lease (by its token) and mark the session resume_pending."""
        ...
