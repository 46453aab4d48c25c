"""What a running turn shares with the router: its lease, queued input, approvals, the hand-off.

One turn runs per session at a time (the lease on the route). A message that arrives meanwhile is
stored on the same route (`QueuedInput`); the turn that finishes releases the lease and checks
that queue in ONE conditional write (`Leases.finish`), so a message is never left waiting with no
turn to answer it. A tool that needs approval pauses the turn: its state is saved, the question is
stored on the route (`PendingApproval`), and the answer starts a continuation. The ports are in
`hermes_gateway.domain.ports`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from hermes_gateway.domain.media import Attachment, attachments_of
from hermes_gateway.domain.quotes import quote_of
from hermes_gateway.domain.sessions import SessionEntry
from hermes_gateway.domain.source import SessionSource, compact_source
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import Turn


@dataclass(frozen=True)
class QueuedInput:
    """A message that arrived while a turn ran: enough to start the turn that answers it."""

    event_id: str
    text: str
    received_at: float
    source: SessionSource
    reply_to: ReplyTarget  # fixed when the message arrived
    mode: str = "queue"  # queue | interrupt | steer (turn_modes.BUSY_MODES)
    attachments: tuple[Attachment, ...] = ()  # the message's media, as references (domain.media)
    quote: str | None = None  # the message it answers (domain/quotes.py): its text, or its id alone
    quote_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        data = {
            "event_id": self.event_id,
            "text": self.text,
            "received_at": self.received_at,
            "source": compact_source(self.source),
            "reply_to": self.reply_to.to_dict(),
            "mode": self.mode,
        }
        if self.attachments:
            data["attachments"] = [a.to_dict() for a in self.attachments]
        data.update({k: v for k, v in (("quote", self.quote), ("quote_id", self.quote_id)) if v})
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueuedInput:
        return cls(
            str(data["event_id"]),
            str(data.get("text", "")),
            float(data.get("received_at", 0)),
            SessionSource.from_dict(dict(data.get("source") or {})),
            ReplyTarget.from_dict(dict(data.get("reply_to") or {})),
            str(data.get("mode", "queue")),
            attachments_of(data.get("attachments")),
            quote=quote_of(data.get("quote")),
            quote_id=str(data["quote_id"]) if data.get("quote_id") else None,
        )


@dataclass(frozen=True)
class PendingApproval:
    """A question asked in the chat: may this turn run this tool?"""

    turn_id: str
    tool: str
    call_id: str
    asked_of: str | None  # the user id who may answer (besides admins and approvers); None: only those
    expires_at: float
    session_id: str
    decision: str | None = None  # approved | denied | timeout, once answered
    scope: str = "once"  # once | session | always

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "turn_id": self.turn_id,
            "tool": self.tool,
            "call_id": self.call_id,
            "expires_at": self.expires_at,
            "session_id": self.session_id,
            "scope": self.scope,
        }
        if self.asked_of is not None:
            out["asked_of"] = self.asked_of
        if self.decision is not None:
            out["decision"] = self.decision
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PendingApproval:
        return cls(
            turn_id=str(data["turn_id"]),
            tool=str(data["tool"]),
            call_id=str(data["call_id"]),
            asked_of=str(data["asked_of"]) if data.get("asked_of") is not None else None,
            expires_at=float(data["expires_at"]),
            session_id=str(data["session_id"]),
            decision=str(data["decision"]) if data.get("decision") else None,
            scope=str(data.get("scope") or "once"),
        )


@dataclass(frozen=True)
class ControlState:
    """The turn-related part of a routing entry, read in one consistent read."""

    lease_token: str | None = None
    lease_turn_id: str | None = None
    session_id: str | None = None
    reply_seq: int | None = None  # the running turn's answer seq
    queue: tuple[QueuedInput, ...] = ()
    stop_turn_id: str | None = None
    approval: PendingApproval | None = None
    yolo: bool = False
    approved_always: frozenset[str] = frozenset()
    approved_session: tuple[str | None, frozenset[str]] = (None, frozenset())
    handoff_from: str | None = None  # the token whose turn handed the lease on
    handoff_turn: Turn | None = None

    def approved(self, tool: str, session_id: str) -> bool:
        """Approved without asking: /yolo, `/approve always`, or `/approve session` in this session."""
        sid, tools = self.approved_session
        return self.yolo or tool in self.approved_always or (sid == session_id and tool in tools)


@dataclass(frozen=True)
class Begun:
    """A turn holds the session's lease: the seqs of the message it answers and of its answer,
    and the route as that one write left it."""

    user_seq: int
    reply_seq: int
    entry: SessionEntry
    took_over: bool = False  # the lease had expired under a cut-short turn (now resume_pending)


@dataclass(frozen=True)
class NextTurn:
    """What `Leases.finish` hands the lease to: how many queued items the next turn answers, and
    the turn itself (its seqs allocated in the same write)."""

    taken: int
    turn: Turn

    @property
    def token(self) -> str:
        assert self.turn.lease_token is not None
        return self.turn.lease_token


@dataclass(frozen=True)
class Finished:
    status: Literal["released", "handed_off", "lost"]
    next_turn: Turn | None = None  # handed_off: the turn to start (again, on a repeat)
    queued: tuple[QueuedInput, ...] = ()  # handed_off: the messages it answers, to append


@dataclass(frozen=True)
class Enqueued:
    status: Literal["queued", "duplicate", "not_busy", "full"]
    holder_turn_id: str | None = None
    first_notice: bool = False  # queued: the chat has not been told during this turn yet


@dataclass(frozen=True)
class StopRequest:
    turn_id: str
    session_id: str
    reply_seq: int | None  # where /stop leaves its marker, so the turn's answer is not kept


@dataclass(frozen=True)
class Steering:
    """Steering input taken by the running turn, with the seqs its rows go to."""

    items: tuple[QueuedInput, ...] = ()
    seqs: tuple[int, ...] = ()
    reply_seq: int | None = None  # the answer's seq, moved after the steering rows
    stopped: bool = False


@dataclass(frozen=True)
class WaitingLease:
    """An expired lease with something waiting on it (queued messages or an approval)."""

    session_key: str
    lease_token: str
    lease_turn_id: str | None
    lease_expires_at: float
