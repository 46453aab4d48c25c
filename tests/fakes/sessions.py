"""In-memory session store and turn lease with the DynamoDB adapter's rules: one session per key
however many callers race, a replaced route is fenced by its revision, a lease is taken only when
free (or again by its own token) and released only by its token."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from hermes_gateway.domain.sessions import ExpiredLease, SessionEntry, TranscriptRow, new_session_id
from hermes_gateway.domain.source import SessionSource


class FakeSessionStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.routes: dict[str, SessionEntry] = {}
        self.sessions: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[TranscriptRow]] = {}
        self.dedupe: dict[tuple[str, str], int] = {}
        self.leases: dict[str, dict[str, Any]] = {}
        self.started: dict[tuple[str, str], str] = {}

    def get_route(self, session_key: str) -> SessionEntry | None:
        with self._lock:
            entry = self.routes.get(session_key)
            return self._with_lease(entry) if entry else None

    def _with_lease(self, entry: SessionEntry) -> SessionEntry:
        lease = self.leases.get(entry.session_key)
        return replace(
            entry,
            lease_token=lease["token"] if lease else None,
            lease_turn_id=lease["turn_id"] if lease else None,
            lease_expires_at=lease["expires_at"] if lease else None,
        )

    def get_or_create(
        self,
        source: SessionSource,
        session_key: str,
        now: float,
        *,
        force_new: bool = False,
        touch_activity: bool = True,
    ) -> SessionEntry:
        with self._lock:
            current = self.routes.get(session_key)
            if current is not None:
                session = self.sessions.get(current.session_id)
                stale = session is None or session["ended_at"] is not None
                reason = (
                    "forced" if force_new else "suspended" if current.suspended else "stale_route" if stale else None
                )
                if reason is None:
                    if touch_activity:
                        self.routes[session_key] = replace(current, updated_at=now, created=False)
                    return self._with_lease(replace(self.routes[session_key], created=False))
                if session is not None and reason != "stale_route":
                    session.update(ended_at=now, end_reason=reason)
            session_id = new_session_id(now)
            self.sessions[session_id] = {
                "session_key": session_key,
                "started_at": now,
                "ended_at": None,
                "end_reason": None,
                "input_tokens": 0,
                "output_tokens": 0,
            }
            self.messages[session_id] = []
            entry = SessionEntry(
                session_key=session_key,
                session_id=session_id,
                revision=(current.revision + 1) if current else 1,
                execution_generation=(current.execution_generation + 1) if current else 0,
                created_at=now,
                updated_at=now,
                platform=source.platform,
                chat_type=source.chat_type,
            )
            self.routes[session_key] = entry
            return self._with_lease(
                replace(
                    entry,
                    created=True,
                    reset_reason=reason if current else None,
                    prev_session_id=current.session_id if current else None,
                )
            )

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
        with self._lock:
            if dedupe_key and (session_id, dedupe_key) in self.dedupe:
                return self.dedupe[(session_id, dedupe_key)]
            rows = self.messages[session_id]
            seq = len(rows) + 1
            rows.append(TranscriptRow(seq, role, content, now, sender_name, turn_id, platform_message_id))
            if dedupe_key:
                self.dedupe[(session_id, dedupe_key)] = seq
            self.sessions[session_id]["input_tokens"] += input_tokens or 0
            self.sessions[session_id]["output_tokens"] += output_tokens or 0
            return seq

    def turn_started(self, session_id: str, dedupe_key: str) -> bool:
        with self._lock:
            return (session_id, dedupe_key) in self.started

    def mark_turn_started(self, session_id: str, dedupe_key: str, turn_id: str) -> None:
        with self._lock:
            if (session_id, dedupe_key) not in self.dedupe:
                raise KeyError("no row was appended under that key")  # DynamoDB: the condition fails
            self.started[(session_id, dedupe_key)] = turn_id

    def transcript(
        self, session_id: str, *, upto_seq: int | None = None, limit: int | None = None
    ) -> list[TranscriptRow]:
        with self._lock:
            rows = [r for r in self.messages[session_id] if upto_seq is None or r.seq <= upto_seq]
            return rows[-limit:] if limit else rows

    def acquire(self, session_key: str, turn_id: str, token: str, now: float, ttl_seconds: int) -> bool:
        with self._lock:
            held = self.leases.get(session_key)
            if session_key not in self.routes or (held is not None and held["token"] != token):
                return False
            self.leases[session_key] = {"token": token, "turn_id": turn_id, "expires_at": now + ttl_seconds}
            return True

    def release(self, session_key: str, token: str) -> bool:
        with self._lock:
            held = self.leases.get(session_key)
            if held is None or held["token"] != token:
                return False
            del self.leases[session_key]
            return True

    def expired(self, now: float, limit: int = 100) -> list[ExpiredLease]:
        with self._lock:
            return [
                ExpiredLease(key, lease["token"], lease["turn_id"], lease["expires_at"])
                for key, lease in self.leases.items()
                if lease["expires_at"] < now
            ][:limit]

    def expire(self, lease: ExpiredLease, now: float) -> bool:
        with self._lock:
            held = self.leases.get(lease.session_key)
            if held is None or held["token"] != lease.lease_token or held["expires_at"] >= now:
                return False
            del self.leases[lease.session_key]
            self.routes[lease.session_key] = replace(self.routes[lease.session_key], resume_pending=True)
            return True
