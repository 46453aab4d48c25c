"""Sessions, transcripts and the turn lease: the domain view and the store's ports.

The DynamoDB adapter (`hermes_gateway.adapters.dynamo_sessions`) and the in-memory fake
(`tests/fakes/sessions.py`) both implement these ports with the same rules: single flight per
key, compare-and-swap on `revision`, a lease released only by its token, and fenced mutations
(BEHAVIOUR §3): a stale `revision` or `execution_generation` raises `Conflict` and changes nothing.

Both stores are built with a `SessionRules` (`hermes_gateway.domain.reset_policy`): the reset
policy, the time zone and the auto-continue window `get_or_create` applies.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import GatewayError

MAX_FAILED_RECOVERIES = 3  # three failed recoveries in a row suspend the session (BEHAVIOUR §5)
ROLES = frozenset({"user", "assistant", "tool", "system"})
# Reasons a session ends or is replaced; bounded, so they can be logged and counted.
RESET_REASONS = frozenset(
    {"forced", "suspended", "resume_pending_expired", "idle", "daily", "stale_route", "expired", "deleted"}
)
COST_STATUSES = ("estimated", "unknown", "included")


def new_session_id(now: float | None = None) -> str:
    """Sortable by creation time, unique without coordination: `20261129_084501_3f9a1c2b`."""
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{stamp}_{secrets.token_hex(4)}"


def profile_of_key(session_key: str) -> str:
    """The key's namespace (`agent:main`, `agent:coder`): what list and search are scoped by."""
    head, _, rest = session_key.partition(":")
    name = rest.partition(":")[0]
    return f"{head}:{name}" if head == "agent" and name else head


class SessionNotFound(GatewayError):
    """The session (or routing entry) a mutation names does not exist: reason code `not_found`."""


class InvalidSessionRequest(GatewayError):
    """A mutation's arguments are unusable (a key-like model override, an empty title): `invalid`."""


# -- values --------------------------------------------------------------------------------------


_KEYLIKE = re.compile(
    r"(sk-[A-Za-z0-9_-]{8,}|AKIA[0-9A-Z]{12,}|xox[abpr]-|ghp_[A-Za-z0-9]{20,}|Bearer\s|[A-Za-z0-9+/_-]{40,})"
)
_MODEL_TEXT = re.compile(r"^[A-Za-z0-9._:/@+-]{1,200}$")


@dataclass(frozen=True)
class ModelOverride:
    """A per-session model choice. Only these three fields exist, so a key can never ride along."""

    model: str
    provider: str | None = None
    base_url: str | None = None

    def to_dict(self) -> dict[str, str]:
        out = {"model": self.model}
        if self.provider:
            out["provider"] = self.provider
        if self.base_url:
            out["base_url"] = self.base_url
        return out


def sanitize_model_override(raw: dict[str, Any]) -> ModelOverride:
    """Validate an override from outside (API, `/model`). Unknown fields, and values that look like
    a credential (an API key, a bearer token, a URL with a password or a key in its query) are
    refused with `InvalidSessionRequest`, never stored."""
    if not isinstance(raw, dict):
        raise InvalidSessionRequest("a model override is an object with model, provider and base_url")
    extra = set(raw) - {"model", "provider", "base_url"}
    if extra:
        raise InvalidSessionRequest(f"a model override has only model, provider and base_url (got {sorted(extra)})")
    model, provider, base_url = raw.get("model"), raw.get("provider"), raw.get("base_url")
    if not isinstance(model, str) or not _MODEL_TEXT.match(model.strip()):
        raise InvalidSessionRequest("model must be 1-200 characters of letters, digits and . _ : / @ + -")
    for name, value in (("model", model), ("provider", provider), ("base_url", base_url)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidSessionRequest(f"{name} must be text")
        if _KEYLIKE.search(value):
            raise InvalidSessionRequest(f"{name} looks like a credential; keys are never stored with a session")
    if provider is not None and not re.fullmatch(r"[a-z0-9_-]{1,40}", provider.strip()):
        raise InvalidSessionRequest("provider must be 1-40 lower-case letters, digits, '_' or '-'")
    if base_url is not None:
        from urllib.parse import urlsplit

        parts = urlsplit(base_url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidSessionRequest("base_url must be an http(s) URL")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise InvalidSessionRequest("base_url may not carry credentials, a query or a fragment")
    return ModelOverride(
        model.strip(), provider.strip() if provider else None, base_url.strip().rstrip("/") if base_url else None
    )


@dataclass(frozen=True)
class TokenUsage:
    """One model call's (or one turn's) token counts, as the provider reported them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    prompt_tokens: int | None = None  # the size of the last prompt sent (None: unknown)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True)
class AutoContinue:
    """A reused entry whose last turn was cut short within the freshness window: the next turn
    continues it (the turn engine tells the model so)."""

    reason: str  # e.g. lease_expired
    marked_at: float
    failed_recoveries: int


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
    # -- the rest of BEHAVIOUR §3's routing entry -------------------------------------------
    display_name: str | None = None
    origin: dict[str, Any] | None = None  # the source (SessionSource.to_dict()) that created it
    last_activity_at: float | None = None  # the activity clock the reset policy reads
    resume_reason: str | None = None
    resume_marked_at: float | None = None
    failed_recoveries: int = 0
    expiry_finalized: bool = False
    is_fresh_reset: bool = False  # no turn has finished since the reset
    was_auto_reset: bool = False  # the policy (not the user) replaced the previous session
    auto_reset_reason: str | None = None
    reset_had_activity: bool = False  # the previous session had at least one prompt
    model_override: ModelOverride | None = None
    lease_started_at: float | None = None
    stop_turn_id: str | None = None  # /stop asked this turn to stop at its next safe point
    policy_deadline: float | None = None  # when the reset policy next expires this session
    auto_continue: AutoContinue | None = None  # set by get_or_create (see AutoContinue)

    def lease_held(self, now: float) -> bool:
        """A turn holds the session: its lease is taken and has not expired."""
        return self.lease_token is not None and (self.lease_expires_at or 0) > now


@dataclass(frozen=True)
class SessionInfo:
    """One session (not its route): title, lineage, end, and its token and cost totals."""

    session_id: str
    session_key: str
    profile: str
    platform: str
    started_at: float
    ended_at: float | None = None
    end_reason: str | None = None
    title: str | None = None
    source_label: str | None = None
    parent_session_id: str | None = None  # branched or compressed from
    continued_in: str | None = None  # compression's child (newest continuation: follow the chain)
    message_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    last_prompt_tokens: int = 0
    estimated_cost_usd: float = 0.0
    cost_status: str = "unknown"  # estimated | unknown | included (COST_STATUSES)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens + self.cache_read_tokens + self.cache_write_tokens


@dataclass(frozen=True)
class TranscriptRow:
    seq: int
    role: str  # user | assistant | tool | system
    content: str
    created_at: float
    sender_name: str | None = None
    turn_id: str | None = None
    platform_message_id: str | None = None
    active: bool = True  # soft-deleted rows (undo, rewind) are inactive; reads skip them


@dataclass(frozen=True)
class SearchHit:
    session_id: str
    seq: int
    role: str
    snippet: str  # up to ~160 characters around the match
    created_at: float
    title: str | None = None


def search_hit(info: SessionInfo, row: TranscriptRow, needle: str) -> SearchHit | None:
    """The hit a user or assistant row gives for a case-folded `needle`: the text from 60
    characters before the match to 100 after it. None when the row does not match."""
    if row.role not in ("user", "assistant"):
        return None
    at = row.content.casefold().find(needle)
    if at < 0:
        return None
    snippet = row.content[max(0, at - 60) : at + len(needle) + 100]
    return SearchHit(info.session_id, row.seq, row.role, snippet, row.created_at, info.title)


@dataclass(frozen=True)
class UndoResult:
    """What undo/retry removed: the rows made inactive and the first removed user turn's text."""

    removed: int
    rewound_to_seq: int  # the last seq still active
    user_text: str | None  # the earliest undone user message (retry re-sends it)
    entry: SessionEntry  # the route after the change (new revision)


@dataclass(frozen=True)
class ExpiredLease:
    session_key: str
    lease_token: str
    lease_turn_id: str | None
    lease_expires_at: float


@dataclass(frozen=True)
class Fence:
    """What a mutation from outside a turn read: the route's `revision`, and for delete, rewind,
    reset, branch, model and compress also its `execution_generation` (None: not checked)."""

    revision: int
    execution_generation: int | None = None


def normalize_title(title: str) -> tuple[str, str]:
    """(the title as stored, its uniqueness key): white space collapsed, 1-100 printable
    characters, compared case-insensitively."""
    text = " ".join(str(title).split())
    if not 1 <= len(text) <= 100 or not text.isprintable():
        raise InvalidSessionRequest("a title is 1-100 printable characters")
    return text, text.casefold()


def undo_point(rows: list[TranscriptRow], turns: int) -> tuple[int, TranscriptRow | None]:
    """For undoing the last `turns` user turns of the active `rows` (oldest first): the seq to
    rewind to (rows after it go) and the earliest undone user row (None: nothing to undo)."""
    if turns < 1:
        raise InvalidSessionRequest("undo at least one turn")
    users = [row for row in rows if row.role == "user"]
    if not users:
        return (rows[-1].seq if rows else 0), None
    first = users[-min(turns, len(users))]
    return first.seq - 1, first


def hide_after(ranges: list[tuple[int, int]], to_seq: int, last_seq: int) -> list[tuple[int, int]]:
    """The session's hidden seq ranges once every row in (to_seq, last_seq] is soft-deleted."""
    if to_seq >= last_seq:
        return list(ranges)
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted([*ranges, (to_seq + 1, last_seq)]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def is_hidden(seq: int, ranges: list[tuple[int, int]]) -> bool:
    return any(lo <= seq <= hi for lo, hi in ranges)


# -- ports ---------------------------------------------------------------------------------------


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
        """The live session for a key, created once however many callers race for it.

        An existing entry is replaced when (in this order, BEHAVIOUR §3): `force_new`; it is
        suspended; it is resume_pending (the policy's reason, else `resume_pending_expired` past the
        freshness window; mode none resumes); the reset policy says `idle` or `daily`; unless a
        lease is held (active work is never reset); a route whose session ended is recreated
        (`stale_route`), and one whose session was compressed is healed to the newest child.
        A reused resume_pending entry within the window carries `auto_continue`."""
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

    # -- reading sessions ---------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionInfo | None:
        """One session's record (title, lineage, end, totals); None when it does not exist."""
        ...

    def list_sessions(self, profile: str, *, limit: int = 20, before: float | None = None) -> list[SessionInfo]:
        """The profile's sessions, newest first (started before `before`), through an index.
        `profile` is the key namespace (`profile_of_key`): another profile's sessions never appear."""
        ...

    def find_session_by_title(self, profile: str, title: str) -> SessionInfo | None:
        """The profile's session with this title (titles are unique per profile, case-insensitive)."""
        ...

    def search(self, profile: str, query: str, *, limit: int = 20, sessions: int = 50) -> list[SearchHit]:
        """Case-insensitive substring search over the active rows of the profile's newest `sessions`
        sessions (a bounded read, not a full-text index), newest hits first."""
        ...

    # -- usage and turn recovery (the turn engine) --------------------------------------------

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
        """Add one turn's tokens and estimated cost (domain/cost.py) to the session's totals, once per
        `turn_id` (a retried task counts nothing twice: False). `prompt_tokens` sets last prompt."""
        ...

    def turn_usage(self, session_id: str, turn_id: str) -> TokenUsage | None:
        """The usage recorded for one turn (None: none recorded)."""
        ...

    def turn_succeeded(self, session_key: str, session_id: str, now: float) -> None:
        """A turn finished: clear resume_pending, the failed-recovery count and `is_fresh_reset`
        (only while the route still points at `session_id`)."""
        ...

    def turn_failed(self, session_key: str, session_id: str, reason: str, now: float) -> bool:
        """A turn was cut short: mark the entry resume_pending (reason, marked-at). A failure while
        already resume_pending is a failed recovery; the MAX_FAILED_RECOVERIES-th in a row suspends
        the session. True when the entry is now suspended. `TurnLease.expire` applies the same rule."""
        ...

    def request_stop(self, session_key: str, now: float) -> str | None:
        """/stop: flag the running turn (the lease holder) to stop at its next safe point. Returns the
        flagged turn id; None when no turn is running. Cleared when its lease is released."""
        ...

    def stop_requested(self, session_key: str, turn_id: str) -> bool:
        """True when /stop flagged this turn."""
        ...

    # -- fenced mutations (session API and chat commands) --------------------------------------
    # Each checks `fence` against the route of the session's key inside the same conditional write,
    # raises errors.Conflict when stale (nothing applied), SessionNotFound when the session or
    # its route is missing, and bumps `revision` (identity changes also `execution_generation`).

    def rename(self, session_id: str, title: str, *, fence: Fence, now: float) -> SessionInfo:
        """Set the title, unique per profile (case-insensitive); a title in use by another
        session raises Conflict. Title: 1-100 printable characters (else InvalidSessionRequest)."""
        ...

    def delete_session(self, session_id: str, *, fence: Fence, now: float) -> None:
        """Delete the session and its transcript; a route pointing at it is removed (the next
        message starts a new session). Needs the execution generation."""
        ...

    def rewind(self, session_id: str, to_seq: int, *, fence: Fence, now: float) -> UndoResult:
        """Soft-delete every row after `to_seq` (rows kept, inactive). Needs the execution generation."""
        ...

    def undo(self, session_id: str, turns: int, *, fence: Fence, now: float) -> UndoResult:
        """Soft-delete the last `turns` user messages and everything after the earliest of them.
        Nothing to undo: `removed` is 0 and nothing changes."""
        ...

    def retry(self, session_id: str, *, fence: Fence, now: float) -> UndoResult:
        """`undo(1)`; `user_text` is the message to send again."""
        ...

    def reset(self, session_key: str, *, fence: Fence, now: float, reason: str = "forced") -> SessionEntry:
        """Replace the route's session with a new one (the old ends with `reason`), fenced."""
        ...

    def branch(self, session_id: str, *, fence: Fence, now: float, title: str | None = None) -> SessionEntry:
        """Copy the active transcript into a child session (parent link) and point the route at it."""
        ...

    def compress(self, session_id: str, summary: str, *, fence: Fence, now: float, keep_last: int = 0) -> SessionEntry:
        """Continue the session in a child that starts with `summary` (a system row) and the last
        `keep_last` active rows; the parent ends (`compressed`) and the route points at the child."""
        ...

    def set_model_override(
        self, session_key: str, override: ModelOverride | None, *, fence: Fence, now: float
    ) -> SessionEntry:
        """Set (None: clear) the route's model override. Build it with `sanitize_model_override`."""
        ...

    def switch_session(self, session_key: str, session_id: str, *, fence: Fence, now: float) -> SessionEntry:
        """/resume: point the route at an existing session of the same profile (it must not have
        ended, except for ending by reset, which reopens it)."""
        ...

    def end_session(self, session_id: str, reason: str, now: float) -> bool:
        """End a session with `reason` (detach, expiry). False when it had already ended."""
        ...

    def mark_memory_flushed(self, session_id: str, now: float) -> None:
        """The session's memory flush turn is over (saved, or given up): the session that replaced
        it may answer now (BEHAVIOUR §3: memories are flushed first)."""
        ...

    def memory_flushed(self, session_id: str) -> bool:
        """Whether `mark_memory_flushed` was called for the session (a consistent read)."""
        ...


class SessionSweepStore(Protocol):
    """What the expiry sweep needs (services/session_sweep.py): indexes, never scans."""

    def due_for_expiry(self, now: float, limit: int = 100) -> list[SessionEntry]:
        """Routes whose policy deadline has passed and whose expiry is not finalized, from the
        sparse `by_policy_deadline` index."""
        ...

    def claim_expiry(self, entry: SessionEntry, now: float) -> SessionEntry | None:
        """Compare-and-swap on the entry's revision that sets `expiry_finalized` and leaves the
        deadline index. None when another sweep (or a message, or a turn) got there first."""
        ...

    def release_expiry_claim(self, entry: SessionEntry, now: float) -> bool:
        """Undo a claim (`entry` as `claim_expiry` returned it), putting the route back in the
        deadline index as the current rules place it: a flush that could not start is retried."""
        ...

    def end_session(self, session_id: str, reason: str, now: float) -> bool: ...

    def idle_routes(self, idle_before: float, limit: int = 100) -> list[SessionEntry]:
        """Routes whose last activity is older than `idle_before`, from the `by_activity` index."""
        ...

    def prune_route(self, entry: SessionEntry) -> bool:
        """Delete the route (not its transcripts) if unchanged since read (revision) and no lease is
        held. False when it changed."""
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
        """Clear an expired lease (by its token) and mark the session resume_pending (a failed
        recovery when it already was: see `SessionStore.turn_failed`)."""
        ...
