"""Sessions, routes and transcripts: the values the session storage ports exchange
(`hermes_gateway.domain.ports`), and the pure rules about them.

Every store keeps the same rules: single flight per key, compare-and-swap on `revision`, a lease
released only by its token, and fenced mutations (BEHAVIOUR §3): a stale `revision` or
`execution_generation` raises `Conflict` and changes nothing. Stores are built with a
`SessionRules` (`hermes_gateway.domain.reset_policy`): the reset policy, the time zone and the
auto-continue window `Routes.open` applies.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_gateway.domain.limits import Ledger
from hermes_gateway.domain.media import Attachment
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


def event_mark(event_id: str) -> str:
    """A short, stable mark of an event id: a route remembers the last few events that began or
    joined a turn by these, so a redelivered message is recognized without another read."""
    return hashlib.sha256(event_id.encode()).hexdigest()[:10]


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
class SessionTally:
    """What a session has used: rows and the turns' tokens and estimated cost. A live session's
    tally is kept on its route (added to by each turn's one finishing write); the session record
    keeps it from when the route leaves the session."""

    message_count: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    last_prompt_tokens: int | None = None  # None: unchanged by this tally
    cost_usd: float = 0.0
    estimated_turns: int = 0
    unknown_turns: int = 0
    included_turns: int = 0
    # reported over estimated prompt tokens of the last request (domain/context.py; None: unchanged)
    prompt_ratio: float | None = None

    def __add__(self, other: SessionTally) -> SessionTally:
        return SessionTally(
            self.message_count + other.message_count,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            other.last_prompt_tokens if other.last_prompt_tokens is not None else self.last_prompt_tokens,
            self.cost_usd + other.cost_usd,
            self.estimated_turns + other.estimated_turns,
            self.unknown_turns + other.unknown_turns,
            self.included_turns + other.included_turns,
            other.prompt_ratio if other.prompt_ratio is not None else self.prompt_ratio,
        )

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
    auto_continue: AutoContinue | None = None  # set by Routes.open (see AutoContinue)
    # -- the live session's transcript and totals, kept on the route (one read per message) --
    next_seq: int | None = None  # the last transcript seq allocated (None: not yet known)
    reply_seq: int | None = None  # the running turn's answer seq (with the lease)
    tally: SessionTally = field(default_factory=SessionTally)
    hidden: tuple[tuple[int, int], ...] = ()  # seq ranges undone (undo, rewind)
    recent_events: tuple[str, ...] = ()  # hashes of the events that last began or queued a turn
    queued: int = 0  # messages waiting behind the running turn
    approval_pending: bool = False  # the running turn waits for an approval
    # each user's counters on this route, by spender key (domain/limits.py): kept across resets
    ledgers: Mapping[str, Ledger] = field(default_factory=dict)
    voice: str | None = None  # the chat's /voice mode (domain/voice.py; None: never chosen)
    # when the person last wrote, on a platform with a service window (domain/service_window.py)
    heard_at: float | None = None

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
    hidden: tuple[tuple[int, int], ...] = ()  # transcript seqs undone (undo, rewind)

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
    attachments: tuple[Attachment, ...] = ()  # a user message's media, as references (domain.media)
    sender: str | None = None  # a user row's sender (`domain.source.sender_of`): whose words they are
    # The message a user row answers (domain/quotes.py): its text as the platform quoted it, or,
    # when only an id came, that platform message id (the turn looks it up among its rows).
    quote: str | None = None
    quote_id: str | None = None


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
    # that message's files (retry re-sends them: their media-bucket keys stay this session's)
    user_attachments: tuple[Attachment, ...] = ()


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
