"""What a running turn shares with the router: its queued input, approvals, and the hand-off.

One turn runs per session at a time (the lease on the routing entry). A message that arrives
meanwhile is stored on the same entry (`QueuedInput`); the turn that finishes releases the lease
and checks that queue in ONE conditional write (`TurnControl.finish`), so a message is never left
waiting with no turn to answer it. A tool that needs approval pauses the turn: its state is saved,
the question is stored on the entry (`PendingApproval`), and the answer starts a continuation.

The DynamoDB adapter (`hermes_gateway.adapters.dynamo_turns`) and the in-memory fake
(`tests/fakes/turns.py`) keep the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

BUSY_MODES = ("queue", "interrupt", "steer")
FOLLOWUP_MODES = ("each", "one")
APPROVAL_SCOPES = ("once", "session", "always")


@dataclass(frozen=True)
class QueuedInput:
    """A message that arrived while a turn ran: enough to start the turn that answers it."""

    event_id: str
    text: str
    received_at: float
    source: dict[str, Any]  # SessionSource.to_dict()
    reply_to: dict[str, Any]  # fixed when the message arrived
    mode: str = "queue"  # queue | interrupt | steer (BUSY_MODES)

    def to_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "text": self.text,
            "received_at": self.received_at,
            "source": self.source,
            "reply_to": self.reply_to,
            "mode": self.mode,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> QueuedInput:
        return cls(
            str(data["event_id"]),
            str(data.get("text", "")),
            float(data.get("received_at", 0)),
            dict(data.get("source") or {}),
            dict(data.get("reply_to") or {}),
            str(data.get("mode", "queue")),
        )


@dataclass(frozen=True)
class PendingApproval:
    """A question asked in the chat: may this turn run this tool?"""

    turn_id: str
    tool: str
    call_id: str
    asked_of: str | None  # the user id who may answer (besides admins); None: anyone in the chat
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
    queue: tuple[QueuedInput, ...] = ()
    stop_turn_id: str | None = None
    approval: PendingApproval | None = None
    yolo: bool = False
    approved_always: frozenset[str] = frozenset()
    approved_session: tuple[str | None, frozenset[str]] = (None, frozenset())
    handoff_from: str | None = None  # the token whose turn handed the lease on
    handoff_turn: dict[str, Any] | None = None

    def approved(self, tool: str, session_id: str) -> bool:
        """Approved without asking: /yolo, `/approve always`, or `/approve session` in this session."""
        sid, tools = self.approved_session
        return self.yolo or tool in self.approved_always or (sid == session_id and tool in tools)


@dataclass(frozen=True)
class NextTurn:
    """What `finish` hands the lease to: the queued items it consumes and the next turn's input."""

    taken: int  # how many items from the head of the queue the next turn answers
    turn_id: str
    token: str
    turn: dict[str, Any]  # the next execution's input


@dataclass(frozen=True)
class Finished:
    status: Literal["released", "handed_off", "lost"]
    next_turn: dict[str, Any] | None = None


@dataclass(frozen=True)
class Enqueued:
    status: Literal["queued", "duplicate", "not_busy", "full"]
    holder_turn_id: str | None = None


class TurnControl(Protocol):
    def state(self, session_key: str) -> ControlState:
        """The entry's lease, queue, stop flag and approvals (a consistent read)."""
        ...

    def enqueue(self, session_key: str, item: QueuedInput, *, max_items: int) -> Enqueued:
        """Append to the queue while a lease is held (`not_busy` when none is: take the lease
        instead); a repeated event id is a `duplicate`; `full` at `max_items`."""
        ...

    def mark_busy_acknowledged(self, session_key: str, turn_id: str) -> bool:
        """True the first time for this running turn: the busy notice goes out once per turn."""
        ...

    def extend(self, session_key: str, token: str, until: float) -> ControlState | None:
        """Heartbeat: push the lease's expiry to `until` while `token` holds it, and return the
        entry as written (its stop flag, queue, approvals); None when `token` no longer holds it."""
        ...

    def take_steering(self, session_key: str, token: str) -> list[QueuedInput]:
        """Remove and return the queued `steer` items while `token` holds the lease."""
        ...

    def finish(
        self, session_key: str, token: str, plan: Callable[[list[QueuedInput]], NextTurn], ttl_seconds: int, now: float
    ) -> Finished:
        """Release the lease when nothing is queued, else hand it to the turn `plan` makes from the
        queue: one conditional write either way. A repeat by the same token returns the same
        hand-off (`handed_off` with the same next turn); `lost` when the token no longer holds it."""
        ...

    def pause(self, session_key: str, token: str, approval: PendingApproval, state: dict[str, Any]) -> bool:
        """Save the paused turn's state and the question; the lease stays held until the answer
        (its expiry becomes the approval's). False when the token no longer holds the lease."""
        ...

    def answer(self, session_key: str, turn_id: str, decision: str, scope: str = "once") -> PendingApproval | None:
        """Record the answer once (approved | denied | timeout). Returns the approval with its
        decision (also when it was already answered: a retry restarts the same continuation);
        None when no question of this turn is pending."""
        ...

    def paused_state(self, session_id: str, turn_id: str) -> dict[str, Any] | None: ...

    def clear_approval(self, session_key: str, turn_id: str) -> None:
        """The continuation took the answer: forget the question (only this turn's)."""
        ...

    def set_yolo(self, session_key: str, on: bool) -> None: ...

    def approve_tool(self, session_key: str, tool: str, scope: str, session_id: str) -> None:
        """Remember an approval beyond one call: `session` (this session id) or `always`."""
        ...
