"""In-memory session store, sweep store and turn lease with the DynamoDB adapter's rules: one
session per key however many callers race, the reset decision of `domain.reset_policy`, every
route write bumps `revision`, fenced mutations refuse a stale fence with `Conflict`, a lease is
taken only when free (or again by its own token) and released only by its token."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from hermes_gateway.domain.cost import estimate_cost, session_cost_status
from hermes_gateway.domain.reset_policy import RouteState, SessionRules, next_deadline, route_decision
from hermes_gateway.domain.sessions import (
    MAX_FAILED_RECOVERIES,
    AutoContinue,
    ExpiredLease,
    Fence,
    InvalidSessionRequest,
    ModelOverride,
    SearchHit,
    SessionEntry,
    SessionInfo,
    SessionNotFound,
    TokenUsage,
    TranscriptRow,
    UndoResult,
    hide_after,
    is_hidden,
    new_session_id,
    normalize_title,
    profile_of_key,
    search_hit,
    undo_point,
)
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import Conflict

_CHAIN_LIMIT = 20  # compression continuations followed on read


class FakeSessionStore:
    def __init__(self, rules: SessionRules | None = None) -> None:
        self.rules = rules or SessionRules()
        self._lock = threading.RLock()
        self.routes: dict[str, SessionEntry] = {}  # lease fields live in `leases`
        self.sessions: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[TranscriptRow]] = {}
        self.dedupe: dict[tuple[str, str], int] = {}
        self.leases: dict[str, dict[str, Any]] = {}
        self.started: dict[tuple[str, str], str] = {}
        self.titles: dict[tuple[str, str], str] = {}  # (profile, title key) -> session id
        self.usage: dict[tuple[str, str], TokenUsage] = {}

    # -- helpers ----------------------------------------------------------------------------

    def _with_lease(self, entry: SessionEntry) -> SessionEntry:
        lease = self.leases.get(entry.session_key)
        return replace(
            entry,
            lease_token=lease["token"] if lease else None,
            lease_turn_id=lease["turn_id"] if lease else None,
            lease_expires_at=lease["expires_at"] if lease else None,
            lease_started_at=lease.get("started_at") if lease else None,
        )

    def _deadline(self, session_key: str, platform: str, chat_type: str, last_activity: float) -> float | None:
        rules = self.rules.for_key(session_key)  # a named profile's key: that profile's policies
        return next_deadline(rules.policy_for(platform, chat_type), last_activity, rules.time_zone)

    def _write(self, key: str, now: float, **changes: Any) -> SessionEntry:
        """Every route write bumps the revision (and is the only way routes change)."""
        route = self.routes[key]
        fresh = replace(
            route,
            revision=route.revision + 1,
            updated_at=now,
            created=False,
            reset_reason=None,
            auto_continue=None,
            **changes,
        )
        self.routes[key] = fresh
        return fresh

    def _new_session(
        self, session_key: str, now: float, platform: str, label: str | None, parent: str | None = None
    ) -> str:
        session_id = new_session_id(now)
        self.sessions[session_id] = {
            "session_key": session_key,
            "profile": profile_of_key(session_key),
            "platform": platform,
            "source_label": label,
            "started_at": now,
            "ended_at": None,
            "end_reason": None,
            "title": None,
            "parent_session_id": parent,
            "continued_in": None,
            "message_count": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "last_prompt_tokens": 0,
            "cost_usd": 0.0,
            "turns": {"estimated": 0, "unknown": 0, "included": 0},
            "hidden": [],
        }
        self.messages[session_id] = []
        return session_id

    def _info(self, session_id: str) -> SessionInfo:
        s = self.sessions[session_id]
        return SessionInfo(
            session_id=session_id,
            session_key=s["session_key"],
            profile=s["profile"],
            platform=s["platform"],
            started_at=s["started_at"],
            ended_at=s["ended_at"],
            end_reason=s["end_reason"],
            title=s["title"],
            source_label=s["source_label"],
            parent_session_id=s["parent_session_id"],
            continued_in=s["continued_in"],
            message_count=s["message_count"],
            input_tokens=s["input_tokens"],
            output_tokens=s["output_tokens"],
            cache_read_tokens=s["cache_read_tokens"],
            cache_write_tokens=s["cache_write_tokens"],
            last_prompt_tokens=s["last_prompt_tokens"],
            estimated_cost_usd=round(s["cost_usd"], 8),
            cost_status=session_cost_status(s["turns"]["estimated"], s["turns"]["unknown"], s["turns"]["included"]),
        )

    def _session(self, session_id: str) -> dict[str, Any]:
        found = self.sessions.get(session_id)
        if found is None:
            raise SessionNotFound("no such session")
        return found

    def _fenced_route(self, session_key: str, fence: Fence, *, generation: bool) -> SessionEntry:
        route = self.routes.get(session_key)
        if route is None:
            raise SessionNotFound("the session has no routing entry")
        if generation and fence.execution_generation is None:
            raise InvalidSessionRequest("this change needs the execution_generation that was read")
        if route.revision != fence.revision or (
            generation and route.execution_generation != fence.execution_generation
        ):
            raise Conflict("the session changed since it was read")
        return route

    def _active_rows(self, session_id: str) -> list[TranscriptRow]:
        hidden = self._session(session_id)["hidden"]
        return [r for r in self.messages.get(session_id, []) if r.active and not is_hidden(r.seq, hidden)]

    def _newest_continuation(self, session_id: str) -> str | None:
        current = session_id
        for _ in range(_CHAIN_LIMIT):
            nxt = self.sessions.get(current, {}).get("continued_in")
            if not nxt or nxt not in self.sessions:
                break
            current = nxt
        return current if current != session_id and self.sessions[current]["ended_at"] is None else None

    # -- sessions ---------------------------------------------------------------------------

    def get_route(self, session_key: str) -> SessionEntry | None:
        with self._lock:
            entry = self.routes.get(session_key)
            return self._with_lease(entry) if entry else None

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
            if current is None:
                return self._create(source, session_key, now)
            session = self.sessions.get(current.session_id)
            if session is not None and session["ended_at"] is not None and session["continued_in"]:
                newest = self._newest_continuation(current.session_id)
                if newest is not None:  # a compressed parent: heal to the newest child
                    current = self._write(
                        session_key, now, session_id=newest, execution_generation=current.execution_generation + 1
                    )
                    session = self.sessions[newest]
            lease = self.leases.get(session_key)
            last = current.last_activity_at if current.last_activity_at is not None else current.updated_at
            state = RouteState(
                platform=current.platform,
                chat_type=current.chat_type,
                last_activity_at=last,
                suspended=current.suspended,
                resume_pending=current.resume_pending,
                resume_marked_at=current.resume_marked_at,
                lease_held=lease is not None and lease["expires_at"] > now,
                session_ended=session is None or session["ended_at"] is not None,
            )
            decision = route_decision(state, self.rules.for_key(session_key), now)
            reason = "forced" if force_new else decision.reason
            if reason is None:
                if touch_activity:
                    current = self._write(
                        session_key,
                        now,
                        last_activity_at=now,
                        policy_deadline=self._deadline(session_key, current.platform, current.chat_type, now),
                    )
                auto = None
                if decision.auto_continue and current.resume_pending:
                    auto = AutoContinue(
                        current.resume_reason or "interrupted",
                        current.resume_marked_at or last,
                        current.failed_recoveries,
                    )
                return self._with_lease(replace(current, created=False, reset_reason=None, auto_continue=auto))
            return self._replace(source, current, now, reason, auto_reset=decision.auto_reset and not force_new)

    def _create(self, source: SessionSource, session_key: str, now: float) -> SessionEntry:
        session_id = self._new_session(session_key, now, source.platform, source.description)
        entry = SessionEntry(
            session_key=session_key,
            session_id=session_id,
            revision=1,
            execution_generation=0,
            created_at=now,
            updated_at=now,
            platform=source.platform,
            chat_type=source.chat_type,
            display_name=source.description,
            origin=source.to_dict(),
            last_activity_at=now,
            policy_deadline=self._deadline(session_key, source.platform, source.chat_type, now),
        )
        self.routes[session_key] = entry
        return self._with_lease(replace(entry, created=True))

    def _replace(
        self, source: SessionSource | None, old: SessionEntry, now: float, reason: str, *, auto_reset: bool
    ) -> SessionEntry:
        previous = self.sessions.get(old.session_id)
        if previous is not None and previous["ended_at"] is None:
            previous.update(ended_at=now, end_reason=reason)
        platform = source.platform if source else old.platform
        chat_type = source.chat_type if source else old.chat_type
        label = source.description if source else old.display_name
        session_id = self._new_session(old.session_key, now, platform, label)
        fresh = self._write(
            old.session_key,
            now,
            session_id=session_id,
            execution_generation=old.execution_generation + 1,
            platform=platform,
            chat_type=chat_type,
            display_name=label,
            origin=source.to_dict() if source else old.origin,
            last_activity_at=now,
            suspended=False,
            resume_pending=False,
            resume_reason=None,
            resume_marked_at=None,
            failed_recoveries=0,
            expiry_finalized=False,
            is_fresh_reset=True,
            was_auto_reset=auto_reset,
            auto_reset_reason=reason if auto_reset else None,
            reset_had_activity=bool(previous and previous["message_count"] > 0),
            prev_session_id=old.session_id,
            stop_turn_id=None,
            policy_deadline=self._deadline(old.session_key, platform, chat_type, now),
        )
        return self._with_lease(replace(fresh, created=True, reset_reason=reason))

    def get_session(self, session_id: str) -> SessionInfo | None:
        with self._lock:
            return self._info(session_id) if session_id in self.sessions else None

    def list_sessions(self, profile: str, *, limit: int = 20, before: float | None = None) -> list[SessionInfo]:
        with self._lock:
            found = [
                self._info(sid)
                for sid, s in self.sessions.items()
                if s["profile"] == profile and (before is None or s["started_at"] < before)
            ]
            found.sort(key=lambda info: (info.started_at, info.session_id), reverse=True)
            return found[:limit]

    def find_session_by_title(self, profile: str, title: str) -> SessionInfo | None:
        _, key = normalize_title(title)
        with self._lock:
            sid = self.titles.get((profile, key))
            return self._info(sid) if sid in self.sessions else None

    def search(self, profile: str, query: str, *, limit: int = 20, sessions: int = 50) -> list[SearchHit]:
        needle = query.strip().casefold()
        if not needle:
            raise InvalidSessionRequest("search for at least one character")
        hits: list[SearchHit] = []
        with self._lock:
            for info in self.list_sessions(profile, limit=sessions):
                for row in reversed(self._active_rows(info.session_id)):
                    hit = search_hit(info, row, needle)
                    if hit is not None:
                        hits.append(hit)
                        if len(hits) >= limit:
                            return hits
        return hits

    # -- transcript -------------------------------------------------------------------------

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
            session = self._session(session_id)
            rows = self.messages[session_id]
            seq = (rows[-1].seq if rows else 0) + 1
            rows.append(TranscriptRow(seq, role, content, now, sender_name, turn_id, platform_message_id))
            if dedupe_key:
                self.dedupe[(session_id, dedupe_key)] = seq
            session["message_count"] += 1
            session["input_tokens"] += input_tokens or 0
            session["output_tokens"] += output_tokens or 0
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
            rows = [r for r in self._active_rows(session_id) if upto_seq is None or r.seq <= upto_seq]
            return rows[-limit:] if limit else rows

    # -- usage and recovery -----------------------------------------------------------------

    def record_usage(
        self,
        session_id: str,
        turn_id: str,
        usage: TokenUsage,
        now: float,
        *,
        model: str | None = None,
        provider: str | None = None,
    ) -> bool:
        with self._lock:
            session = self._session(session_id)
            if (session_id, turn_id) in self.usage:
                return False
            cost = estimate_cost(usage, model, provider)
            self.usage[(session_id, turn_id)] = usage
            for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
                session[name] += getattr(usage, name)
            if usage.prompt_tokens is not None:
                session["last_prompt_tokens"] = usage.prompt_tokens
            session["cost_usd"] += cost.usd
            session["turns"][cost.status] += 1
            return True

    def turn_usage(self, session_id: str, turn_id: str) -> TokenUsage | None:
        with self._lock:
            return self.usage.get((session_id, turn_id))

    def turn_succeeded(self, session_key: str, session_id: str, now: float) -> None:
        with self._lock:
            route = self.routes.get(session_key)
            if route is None or route.session_id != session_id:
                return
            if route.resume_pending or route.failed_recoveries or route.is_fresh_reset:
                self._write(
                    session_key,
                    now,
                    resume_pending=False,
                    resume_reason=None,
                    resume_marked_at=None,
                    failed_recoveries=0,
                    is_fresh_reset=False,
                )

    def turn_failed(self, session_key: str, session_id: str, reason: str, now: float) -> bool:
        with self._lock:
            route = self.routes.get(session_key)
            if route is None or route.session_id != session_id:
                return False
            return self._mark_failed(route, reason, now).suspended

    def _mark_failed(self, route: SessionEntry, reason: str, now: float, **extra: Any) -> SessionEntry:
        failures = route.failed_recoveries + 1 if route.resume_pending else 0
        return self._write(
            route.session_key,
            now,
            resume_pending=True,
            resume_reason=reason,
            resume_marked_at=now,
            failed_recoveries=failures,
            suspended=route.suspended or failures >= MAX_FAILED_RECOVERIES,
            **extra,
        )

    def request_stop(self, session_key: str, now: float) -> str | None:
        with self._lock:
            lease = self.leases.get(session_key)
            if lease is None or session_key not in self.routes:
                return None
            self._write(session_key, now, stop_turn_id=lease["turn_id"])
            return str(lease["turn_id"])

    def stop_requested(self, session_key: str, turn_id: str) -> bool:
        with self._lock:
            route = self.routes.get(session_key)
            return route is not None and route.stop_turn_id == turn_id

    # -- fenced mutations -------------------------------------------------------------------

    def rename(self, session_id: str, title: str, *, fence: Fence, now: float) -> SessionInfo:
        text, key = normalize_title(title)
        with self._lock:
            session = self._session(session_id)
            self._fenced_route(session["session_key"], fence, generation=False)
            owner = self.titles.get((session["profile"], key))
            if owner is not None and owner != session_id:
                raise Conflict("another session has that title")
            if session["title"]:
                self.titles.pop((session["profile"], session["title"].casefold()), None)
            self.titles[(session["profile"], key)] = session_id
            session["title"] = text
            self._write(session["session_key"], now)
            return self._info(session_id)

    def delete_session(self, session_id: str, *, fence: Fence, now: float) -> None:
        with self._lock:
            session = self._session(session_id)
            key = session["session_key"]
            route = self._fenced_route(key, fence, generation=True)
            if route.session_id == session_id:
                del self.routes[key]
                self.leases.pop(key, None)
            else:
                self._write(key, now)
            if session["title"]:
                self.titles.pop((session["profile"], session["title"].casefold()), None)
            del self.sessions[session_id]
            self.messages.pop(session_id, None)
            for pair in [p for p in self.dedupe if p[0] == session_id]:
                del self.dedupe[pair]

    def rewind(self, session_id: str, to_seq: int, *, fence: Fence, now: float) -> UndoResult:
        if to_seq < 0:
            raise InvalidSessionRequest("rewind to a seq of 0 or more")
        with self._lock:
            return self._rewind(session_id, to_seq, None, fence, now, generation=True)

    def _rewind(
        self, session_id: str, to_seq: int, first: TranscriptRow | None, fence: Fence, now: float, *, generation: bool
    ) -> UndoResult:
        session = self._session(session_id)
        self._fenced_route(session["session_key"], fence, generation=generation)
        rows = self.messages[session_id]
        last = rows[-1].seq if rows else 0
        removed = [r for r in self._active_rows(session_id) if r.seq > to_seq]
        session["hidden"] = hide_after(session["hidden"], to_seq, last)
        self.messages[session_id] = [replace(r, active=False) if r.seq > to_seq else r for r in rows]
        entry = self._write(session["session_key"], now)
        return UndoResult(len(removed), to_seq, first.content if first else None, self._with_lease(entry))

    def undo(self, session_id: str, turns: int, *, fence: Fence, now: float) -> UndoResult:
        with self._lock:
            to_seq, first = undo_point(self._active_rows(session_id), turns)
            if first is None:
                route = self._fenced_route(self._session(session_id)["session_key"], fence, generation=False)
                return UndoResult(0, to_seq, None, self._with_lease(route))
            return self._rewind(session_id, to_seq, first, fence, now, generation=False)

    def retry(self, session_id: str, *, fence: Fence, now: float) -> UndoResult:
        return self.undo(session_id, 1, fence=fence, now=now)

    def reset(self, session_key: str, *, fence: Fence, now: float, reason: str = "forced") -> SessionEntry:
        with self._lock:
            route = self._fenced_route(session_key, fence, generation=True)
            return self._replace(None, route, now, reason, auto_reset=False)

    def branch(self, session_id: str, *, fence: Fence, now: float, title: str | None = None) -> SessionEntry:
        with self._lock:
            parent = self._session(session_id)
            key = parent["session_key"]
            route = self._fenced_route(key, fence, generation=True)
            normalized = normalize_title(title) if title else None
            if normalized and (parent["profile"], normalized[1]) in self.titles:
                raise Conflict("another session has that title")
            child = self._new_session(key, now, parent["platform"], parent["source_label"], parent=session_id)
            for i, row in enumerate(self._active_rows(session_id), start=1):
                self.messages[child].append(replace(row, seq=i))
            self.sessions[child]["message_count"] = len(self.messages[child])
            if normalized:
                self.sessions[child]["title"] = normalized[0]
                self.titles[(parent["profile"], normalized[1])] = child
            return self._point(route, child, now)

    def _point(self, route: SessionEntry, session_id: str, now: float) -> SessionEntry:
        entry = self._write(
            route.session_key,
            now,
            session_id=session_id,
            execution_generation=route.execution_generation + 1,
            prev_session_id=route.session_id,
            resume_pending=False,
            resume_reason=None,
            resume_marked_at=None,
            failed_recoveries=0,
            expiry_finalized=False,
            suspended=False,
            last_activity_at=now,
            policy_deadline=self._deadline(route.session_key, route.platform, route.chat_type, now),
        )
        return self._with_lease(replace(entry, created=True))

    def compress(self, session_id: str, summary: str, *, fence: Fence, now: float, keep_last: int = 0) -> SessionEntry:
        if not summary.strip():
            raise InvalidSessionRequest("a compression summary may not be empty")
        with self._lock:
            parent = self._session(session_id)
            if parent["ended_at"] is not None:
                raise Conflict("the session has already ended")
            key = parent["session_key"]
            route = self._fenced_route(key, fence, generation=True)
            child = self._new_session(key, now, parent["platform"], parent["source_label"], parent=session_id)
            kept = self._active_rows(session_id)[-keep_last:] if keep_last > 0 else []
            rows = [TranscriptRow(1, "system", summary, now)] + [replace(r, seq=i) for i, r in enumerate(kept, 2)]
            self.messages[child] = rows
            self.sessions[child]["message_count"] = len(rows)
            parent.update(ended_at=now, end_reason="compressed", continued_in=child)
            if route.session_id == session_id:
                return self._point(route, child, now)
            return self._with_lease(self._write(key, now))

    def set_model_override(
        self, session_key: str, override: ModelOverride | None, *, fence: Fence, now: float
    ) -> SessionEntry:
        with self._lock:
            self._fenced_route(session_key, fence, generation=True)
            return self._with_lease(self._write(session_key, now, model_override=override))

    def switch_session(self, session_key: str, session_id: str, *, fence: Fence, now: float) -> SessionEntry:
        with self._lock:
            target = self._session(session_id)
            if target["profile"] != profile_of_key(session_key):
                raise SessionNotFound("no such session")  # another profile's sessions do not exist here
            route = self._fenced_route(session_key, fence, generation=True)
            if target["ended_at"] is not None and target["continued_in"]:
                raise Conflict("the session was continued in another one")
            target.update(session_key=session_key, ended_at=None, end_reason=None)
            current = self.sessions.get(route.session_id)
            if current is not None and route.session_id != session_id and current["ended_at"] is None:
                current.update(ended_at=now, end_reason="switched")
            return self._point(route, session_id, now)

    def end_session(self, session_id: str, reason: str, now: float) -> bool:
        with self._lock:
            session = self.sessions.get(session_id)
            if session is None or session["ended_at"] is not None:
                return False
            session.update(ended_at=now, end_reason=reason)
            return True

    def mark_memory_flushed(self, session_id: str, now: float) -> None:
        with self._lock:
            if session_id in self.sessions:
                self.sessions[session_id]["memory_flushed_at"] = now

    def memory_flushed(self, session_id: str) -> bool:
        with self._lock:
            return self.sessions.get(session_id, {}).get("memory_flushed_at") is not None

    # -- the sweep --------------------------------------------------------------------------

    def due_for_expiry(self, now: float, limit: int = 100) -> list[SessionEntry]:
        with self._lock:
            due = [
                self._with_lease(r)
                for r in self.routes.values()
                if r.policy_deadline is not None and r.policy_deadline < now and not r.expiry_finalized
            ]
            due.sort(key=lambda r: r.policy_deadline or 0)
            return due[:limit]

    def claim_expiry(self, entry: SessionEntry, now: float) -> SessionEntry | None:
        with self._lock:
            route = self.routes.get(entry.session_key)
            if route is None or route.revision != entry.revision or route.expiry_finalized:
                return None
            return self._with_lease(self._write(entry.session_key, now, expiry_finalized=True, policy_deadline=None))

    def release_expiry_claim(self, entry: SessionEntry, now: float) -> bool:
        """Undo a claim whose flush could not start, so the next sweep tries again."""
        with self._lock:
            route = self.routes.get(entry.session_key)
            if route is None or route.revision != entry.revision or not route.expiry_finalized:
                return False
            last = route.last_activity_at if route.last_activity_at is not None else route.updated_at
            self._write(
                entry.session_key,
                now,
                expiry_finalized=False,
                policy_deadline=self._deadline(route.session_key, route.platform, route.chat_type, last),
            )
            return True

    def idle_routes(self, idle_before: float, limit: int = 100) -> list[SessionEntry]:
        with self._lock:
            idle = [
                self._with_lease(r)
                for r in self.routes.values()
                if (r.last_activity_at if r.last_activity_at is not None else r.updated_at) < idle_before
            ]
            return sorted(idle, key=lambda r: r.last_activity_at or r.updated_at)[:limit]

    def prune_route(self, entry: SessionEntry) -> bool:
        with self._lock:
            route = self.routes.get(entry.session_key)
            if route is None or route.revision != entry.revision or entry.session_key in self.leases:
                return False
            del self.routes[entry.session_key]
            return True

    # -- the turn lease ---------------------------------------------------------------------

    def acquire(self, session_key: str, turn_id: str, token: str, now: float, ttl_seconds: int) -> bool:
        with self._lock:
            held = self.leases.get(session_key)
            if session_key not in self.routes or (held is not None and held["token"] != token):
                return False
            self.leases[session_key] = {
                "token": token,
                "turn_id": turn_id,
                "expires_at": now + ttl_seconds,
                "started_at": now,
            }
            route = self.routes[session_key]
            self._write(session_key, now, execution_generation=route.execution_generation + 1)
            return True

    def release(self, session_key: str, token: str) -> bool:
        with self._lock:
            held = self.leases.get(session_key)
            if held is None or held["token"] != token:
                return False
            del self.leases[session_key]
            if session_key in self.routes:
                self._write(session_key, self.routes[session_key].updated_at, stop_turn_id=None)
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
            route = self.routes.get(lease.session_key)
            if route is not None:
                self._mark_failed(route, "lease_expired", now, stop_turn_id=None)
            return True
