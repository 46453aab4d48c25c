"""The ports the services use, each declared once and named for what its consumer needs.

Session storage is split by who uses it (ARCHITECTURE §3):

- `Routes`: the route of a session key, read once per message, opened (created, reused or
  replaced by the reset policy) in the same conditional writes (router, commands, session API);
- `Leases`: the turn lease on the route and what waits on it: a turn begins (lease, activity and
  transcript seqs in one write), queues behind a running turn, finishes (release or hand-off,
  with the turn's usage, in one write), or is stopped (router, turn, expiry tick);
- `TurnControl`: what a running turn reads and asks of its route (stop flag, steering input,
  approvals);
- `Transcript`: the rows of a session, written at seqs the route allocated, read in bounded
  windows (turn, router, commands, session API, delivery's mirror);
- `Catalogue`: sessions as records (title, lineage, end, totals), listed and searched;
- `SessionEdits`: the fenced changes from outside a turn (BEHAVIOUR §3): rename, undo, branch ...;
- `Sweep`: what the expiry tick needs: sessions whose reset policy expired them;
- `PersonalData`: one person's sessions and rows, found, exported, erased or redacted (forget,
  export: BEHAVIOUR §11); `Retention`: sessions idle past `sessions.retention_days` (the tick).

The DynamoDB adapters (`hermes_gateway.adapters.dynamo_*`) and the in-memory fake
(`tests/fakes/sessions.py`) implement each with the same rules; the contract suites in
`tests/contracts/` hold both to them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

from hermes_gateway.domain.limits import Counted
from hermes_gateway.domain.reach import SearchScope
from hermes_gateway.domain.sessions import (
    Fence,
    ModelOverride,
    SearchHit,
    SessionEntry,
    SessionInfo,
    SessionTally,
    TranscriptRow,
    UndoResult,
)
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.turns import (
    Begun,
    ControlState,
    Enqueued,
    Finished,
    NextTurn,
    PendingApproval,
    QueuedInput,
    Steering,
    StopRequest,
    WaitingLease,
)

# -- moving work along ------------------------------------------------------------------------


class TurnStarter(Protocol):
    def start(self, name: str, state: Mapping[str, Any]) -> bool:
        """Start the turn workflow's execution `name` with `state` (a `TurnState` as JSON).
        False when an execution of that name already exists."""
        ...

    def ended_before(self, name: str, at: float) -> bool:
        """Whether the execution `name` is known to have succeeded and stopped before `at` (epoch
        seconds): a turn's first execution that ended before the lease it is found under was
        taken. False when it runs, failed, stopped later (the turn goes on in a continuation or
        after an approval, under other names), or is unknown."""
        ...


class Deliveries(Protocol):
    def send(self, body: dict[str, Any]) -> str:
        """Hand a delivery job (services.delivery.DeliveryJob as JSON) to the delivery function."""
        ...


class DeadLetters(Protocol):
    def send(self, body: dict[str, Any]) -> str:
        """Put what could not be handled on the shared dead-letter queue (an alarm watches it)."""
        ...


class MediaStore(Protocol):
    """The media bucket (BEHAVIOUR §6a): attachments fetched once, kept `media.retention_days`."""

    def put(self, key: str, data: bytes, mime: str) -> None: ...

    def put_file(self, key: str, file: BinaryIO, mime: str) -> None:
        """Store what `file` holds from its position on, streamed (a large file is never read whole)."""
        ...

    def get(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and content type; None when there is no such key (expired)."""
        ...

    def head(self, key: str) -> tuple[int, str] | None:
        """The object's size and content type, without its bytes; None when there is no such key."""
        ...

    def url(self, key: str, expires_seconds: int) -> str:
        """A pre-signed GET URL, for a platform that fetches media itself (LINE, Twilio)."""
        ...


class MessageTooLarge(Exception):
    """A stored message larger than the reader's bound: it is not read."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"the stored message is {size} bytes; at most {limit} are read")
        self.size, self.limit = size, limit


class MailStore(Protocol):
    """The e-mail SES received, as its receipt rule stored it (resources.MAIL: the media bucket's
    prefix), one object per message. Throttling and 5xx raise TransientError."""

    def read(self, key: str, limit: int) -> bytes | None:
        """The whole message; None when there is none (expired); MessageTooLarge, unread, when it
        is larger than `limit` bytes."""
        ...

    def read_range(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes `start` to `end` (exclusive) of a message (an attachment's); None when there is none."""
        ...

    def delete(self, key: str) -> None:
        """Remove a message the gateway refused (spam, a virus): it is kept no longer than needed."""
        ...


class ErasableMedia(MediaStore, Protocol):
    """The media bucket as forget and export use it: listed by prefix, deleted by key."""

    def keys(self, prefix: str) -> list[str]:
        """Every stored key under `prefix` (a session's files: `<profile>/<session>/`)."""
        ...

    def delete(self, keys: list[str]) -> int:
        """Delete the keys (a missing one is no error); how many were asked for."""
        ...


# -- session storage ----------------------------------------------------------------------------


class Routes(Protocol):
    def get(self, session_key: str) -> SessionEntry | None:
        """The route as stored (a consistent read): the one read of a message's path."""
        ...

    def open(
        self,
        source: SessionSource,
        session_key: str,
        now: float,
        *,
        read: SessionEntry | None = None,
        force_new: bool = False,
        touch_activity: bool = True,
    ) -> SessionEntry:
        """The live session for a key, created once however many callers race for it (single
        flight), reused, or replaced when (in this order, BEHAVIOUR §3) `force_new`; it is
        suspended; it is resume_pending past the freshness window (mode none resumes); the
        reset policy says idle or daily; unless a lease is held (active work is never reset).
        A route whose session ended is recreated (`stale_route`). A reused resume_pending entry
        within the window carries `auto_continue`. `read` is the route as the caller just read
        it (saves the read); with `touch_activity` the activity clock moves, unless the caller
        is about to begin a turn (`Leases.begin` moves it in its own write)."""
        ...


class Leases(Protocol):
    def begin(
        self,
        entry: SessionEntry,
        turn_id: str,
        token: str,
        event_id: str,
        now: float,
        *,
        counted: Counted | None = None,
    ) -> Begun | None:
        """Take the lease for one turn in ONE conditional write that also moves the activity
        clock, allocates the transcript seqs of the message (`user_seq`) and of its answer
        (`reply_seq`), counts the message (and, with `counted`, its user's counts: domain/limits.py)
        and remembers the event as routed. Conditioned on the entry's revision: None when the
        route changed since it was read (read it again). An expired lease is taken over (the
        cut-short turn marks the session resume_pending)."""
        ...

    def enqueue(
        self, entry: SessionEntry, item: QueuedInput, *, max_items: int, now: float, counted: Counted | None = None
    ) -> Enqueued:
        """Queue a message behind the running turn (the lease `entry` shows must still be held),
        in one write that also says whether the chat was told it is busy during this turn (and,
        with `counted`, sets its user's counts)."""
        ...

    def finish(
        self,
        session_key: str,
        session_id: str,
        token: str,
        plan: Callable[[list[QueuedInput], int], NextTurn],
        now: float,
        *,
        tally: SessionTally,
        succeeded: bool,
        recovery_failed: bool = False,
        spender: str | None = None,
    ) -> Finished:
        """End the turn holding `token`: add its `tally` to the session's totals (and its tokens
        and cost to the counters of `spender`, the user it served: domain/limits.py) and release
        the lease, or hand it to the turn `plan(queue, first_seq)` makes from the queued
        messages: ONE conditional write either way. `succeeded` clears the session's recovery
        state; `recovery_failed` counts a failed recovery (BEHAVIOUR §5). A repeat by the same
        token returns the same hand-off; `lost` when the token no longer holds the lease."""
        ...

    def extend(self, session_key: str, token: str, until: float) -> bool:
        """A long turn's next execution: the lease lasts until `until`. False when lost."""
        ...

    def request_stop(self, session_key: str, now: float) -> StopRequest | None:
        """/stop: flag the running turn to stop at its next safe point. None: nothing runs."""
        ...

    def allocate(self, session_key: str, session_id: str, count: int, now: float) -> int | None:
        """Allocate `count` transcript seqs of the route's session (a mirrored push); the first.
        None when the route no longer points at `session_id`."""
        ...

    def waiting(self, now: float, limit: int = 100) -> list[WaitingLease]:
        """Expired leases that something waits on (queued messages, an approval), from the
        sparse index the tick reads (never a scan)."""
        ...

    def expire(self, lease: WaitingLease, now: float) -> bool:
        """Clear an expired lease by its token and mark the session resume_pending."""
        ...

    def recover(self, session_key: str, token: str, turn_id: str, now: float) -> bool:
        """Take a free (or expired) lease for the tick's recovery of queued input."""
        ...


class TurnControl(Protocol):
    def state(self, session_key: str, *, consistent: bool = True) -> ControlState:
        """The route's lease, queue, stop flag and approvals (a consistent read unless asked
        otherwise: a streamed answer's look for /stop, every few seconds, need not be)."""
        ...

    def take_steering(self, session_key: str, token: str, turn_id: str, now: float) -> Steering:
        """Remove the queued `steer` messages while `token` holds the lease, allocating their
        transcript seqs and moving the answer's seq after them. `stopped` when /stop came."""
        ...

    def pause(self, session_key: str, token: str, approval: PendingApproval, state: Mapping[str, Any]) -> bool:
        """Save the paused turn's state (JSON) and the question; the lease stays held until the
        answer (its expiry becomes the approval's). False when the token no longer holds it."""
        ...

    def answer(self, session_key: str, turn_id: str, decision: str, scope: str = "once") -> PendingApproval | None:
        """Record the answer once; the approval with its decision (also when already answered),
        None when no question of this turn is pending."""
        ...

    def paused_state(self, session_id: str, turn_id: str) -> dict[str, Any] | None: ...

    def clear_approval(self, session_key: str, turn_id: str) -> None: ...

    def set_yolo(self, session_key: str, on: bool) -> None: ...

    def set_voice(self, session_key: str, mode: str) -> None:
        """The chat's /voice mode (domain/voice.py), kept on its route through resets."""
        ...

    def approve_tool(self, session_key: str, tool: str, scope: str, session_id: str) -> None: ...


class Transcript(Protocol):
    def put(self, session_id: str, row: TranscriptRow) -> bool:
        """Write a row at its seq (allocated by the route); False when the seq holds a row
        already (a repeated write of the same message is harmless)."""
        ...

    def withdraw(self, session_id: str, seq: int) -> None:
        """Take back the user row at `seq` (written for a turn that then did not run: its message
        was answered before); nothing when that seq holds no user row."""
        ...

    def put_reply(self, session_id: str, row: TranscriptRow) -> str:
        """Write a turn's answer at its seq: "written", "repeated" (this turn wrote it already)
        or "stopped" (/stop left its marker there first: the answer is neither sent nor kept)."""
        ...

    def mark_stopped(self, session_id: str, seq: int, turn_id: str) -> bool:
        """/stop's marker at the running turn's answer seq; False when the answer is there."""
        ...

    def window(
        self, session_id: str, *, upto_seq: int | None, limit: int, hidden: tuple[tuple[int, int], ...] = ()
    ) -> list[TranscriptRow]:
        """The newest `limit` active rows up to `upto_seq`, oldest first: a bounded read."""
        ...

    def rows(self, session_id: str, hidden: tuple[tuple[int, int], ...] = ()) -> list[TranscriptRow]:
        """Every active row, oldest first (undo, branch, the session API)."""
        ...


class Catalogue(Protocol):
    def get_session(self, session_id: str) -> SessionInfo | None:
        """One session's record with its totals (a live session's come from its route)."""
        ...

    def list_sessions(self, profile: str, *, limit: int = 20, before: float | None = None) -> list[SessionInfo]:
        """The profile's sessions (the key namespace), newest first, through an index."""
        ...

    def find_session_by_title(self, profile: str, title: str) -> SessionInfo | None: ...

    def search(
        self, profile: str, query: str, *, limit: int = 20, sessions: int = 50, scope: SearchScope | None = None
    ) -> list[SearchHit]:
        """Case-insensitive substring search over the active rows of the newest `sessions`
        sessions `scope` bounds (None: the whole profile; a bounded read, not a full-text index),
        newest hits first."""
        ...

    def end_session(self, session_id: str, reason: str, now: float) -> bool:
        """End a session (detach, expiry); False when it had ended already."""
        ...

    def mark_memory_flushed(self, session_id: str, now: float) -> None: ...

    def memory_flushed(self, session_id: str) -> bool: ...


class SessionEdits(Protocol):
    """Changes from outside a turn. Each checks `fence` against the route in the same
    conditional write (errors.Conflict when stale, nothing applied), raises SessionNotFound for
    a missing session or route, and bumps `revision` (identity changes also the generation)."""

    def rename(self, session_id: str, title: str, *, fence: Fence, now: float) -> SessionInfo: ...

    def delete_session(self, session_id: str, *, fence: Fence, now: float) -> None: ...

    def rewind(self, session_id: str, to_seq: int, *, fence: Fence, now: float) -> UndoResult: ...

    def undo(self, session_id: str, turns: int, *, fence: Fence, now: float) -> UndoResult: ...

    def retry(self, session_id: str, *, fence: Fence, now: float) -> UndoResult: ...

    def reset(self, session_key: str, *, fence: Fence, now: float, reason: str = "forced") -> SessionEntry: ...

    def branch(self, session_id: str, *, fence: Fence, now: float, title: str | None = None) -> SessionEntry: ...

    def compress(
        self,
        session_id: str,
        summary: str,
        *,
        fence: Fence | None,
        now: float,
        keep_last: int = 0,
        lease_token: str | None = None,
    ) -> SessionEntry:
        """The route goes on in a child session that starts from `summary` and the last
        `keep_last` rows; the parent ends (`compressed`) with its whole transcript. A turn that
        holds the lease compresses with `lease_token` (and fence None): the lease stays, and the
        turn's answer takes the seq after the child's rows."""
        ...

    def set_model_override(
        self, session_key: str, override: ModelOverride | None, *, fence: Fence, now: float
    ) -> SessionEntry: ...

    def switch_session(self, session_key: str, session_id: str, *, fence: Fence, now: float) -> SessionEntry: ...


class Sweep(Protocol):
    def due_for_expiry(self, now: float, limit: int = 100) -> list[SessionEntry]:
        """Routes whose policy deadline has passed, from the sparse deadline index."""
        ...

    def claim_expiry(self, entry: SessionEntry, now: float) -> SessionEntry | None:
        """Compare-and-swap on the revision that sets `expiry_finalized`; None when another
        sweep, a message or a turn got there first."""
        ...

    def release_expiry_claim(self, entry: SessionEntry, now: float) -> bool:
        """Undo a claim whose flush could not start, so the next sweep tries again."""
        ...


@dataclass(frozen=True)
class SenderRow:
    """A transcript row of one sender, with the session it is in."""

    session_id: str
    row: TranscriptRow


@dataclass(frozen=True)
class SenderPage:
    """One page of the messages table's Scan for a sender's rows; `cursor` None: the end."""

    rows: list[SenderRow]
    cursor: str | None


@dataclass(frozen=True)
class ErasedSession:
    """What erasing a session removed: its rows, the media keys they named, and the chat its
    route served when the route was there (a DM's chat: the jobs made in it are the user's)."""

    rows: int
    media_keys: tuple[str, ...] = ()
    chat_id: str | None = None


class PersonalData(Protocol):
    """One person's sessions and rows (BEHAVIOUR §11): found through the `by_reach` and `by_key`
    indexes and a bounded Scan of the messages table, exported whole, erased, or redacted."""

    def sessions_reached(self, reach: str) -> list[SessionInfo]:
        """Every session whose `reach` is `reach` (a DM's user), newest first."""
        ...

    def unreached_sessions_keyed(self, session_key: str) -> list[SessionInfo]:
        """The sessions of a key written before sessions carried a `reach` (none of another reach)."""
        ...

    def transcript(self, session_id: str) -> list[TranscriptRow]:
        """Every row of a session, undone and inactive ones too (an export holds what is stored)."""
        ...

    def chat_of(self, session_key: str) -> str | None:
        """The chat a key's route serves (from the route's origin); None when it has no route."""
        ...

    def erase_session(self, session_id: str, now: float, *, timed_rows: bool = True) -> ErasedSession:
        """Delete the session: its route when the route points at it (SessionBusy while a turn holds
        the route's lease: nothing is deleted), its title claim, its record, then its rows
        (`timed_rows` False: only rows without an expiry; the others go by TTL, for free)."""
        ...

    def sender_rows(self, sender: str, cursor: str | None) -> SenderPage:
        """One page (at most 1 MB read) of the messages table's Scan for rows marked `sender`."""
        ...

    def redact(self, session_id: str, seq: int, sender: str, text: str) -> bool:
        """Replace the row's text with `text` and take its attachments, sender name and mark off,
        if it is still `sender`'s; False when it is not (changed, gone, redacted already)."""
        ...


@dataclass(frozen=True)
class AgedSession:
    """A session started before the retention's horizon, with what says when it was last used:
    its end, its route's activity while the route points at it, its newest row's time."""

    session_id: str
    started_at: float
    ended_at: float | None
    route_activity_at: float | None
    newest_row_at: float | None


class Retention(Protocol):
    """Sessions idle past `sessions.retention_days`, found a pass at a time (the expiry tick)."""

    def aged_sessions(
        self, namespace: str, started_before: float, after: str | None, limit: int
    ) -> tuple[list[AgedSession], str | None]:
        """The namespace's sessions started before `started_before`, oldest first, from just past
        `after` (None: the oldest), at most `limit` (the `by_profile` index); and the position
        after the last one, None when no candidate is left."""
        ...

    def pass_state(self, namespace: str) -> dict[str, Any]:
        """Where the namespace's current pass is (`after`) and when the next begins (`next_pass_at`)."""
        ...

    def save_pass_state(self, namespace: str, state: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class SessionStores:
    """Every session storage port of one deployment, as wiring builds them: a service takes the
    ones it uses (the router its routes, leases, turn control and transcript; the session API
    the catalogue and the edits; the expiry tick the sweep)."""

    routes: Routes
    leases: Leases
    control: TurnControl
    transcript: Transcript
    catalogue: Catalogue
    edits: SessionEdits
    sweep: Sweep
    personal: PersonalData
    retention: Retention
