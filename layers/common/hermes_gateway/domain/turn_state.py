"""What a turn is, typed: its identity (`Turn`), its tool loop (`ToolLoop`), its answer (`Reply`)
and where the workflow goes next (`Step`), all carried in one `TurnState`.

The turn state machine (infra/statemachines/turn.asl.json) passes the state from task to task as
JSON; `TurnState.to_json` and `TurnState.from_json` are the only places it is a dict. The Choice
states branch on `$.next`, whose values are `Step` (tests/unit/test_turn_state.py checks the two
against each other). An execution's state may not exceed 256 KiB: `to_json` keeps it under
`STATE_LIMIT_BYTES` by compressing a large tool loop and, past that, shortening the oldest tool
results (a turn at its maximum iterations and tool output still fits).
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from hermes_gateway.domain.sessions import ModelOverride
from hermes_gateway.domain.source import SessionSource, compact_source
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.providers.base import ChatMessage, ToolCall, Usage

# Step Functions refuses a state over 256 KiB (States.DataLimitExceeded, which no Catch sees);
# the rest is left for what the workflow adds (the delivery outcome, an error).
STATE_LIMIT_BYTES = 200 * 1024
_LOOP_PLAIN_LIMIT = 64 * 1024  # a loop larger than this travels compressed
_TRUNCATED = "[shortened: the turn's state grew too large to carry this result]"


class Step(StrEnum):
    """Where the workflow goes after a task: the values of `$.next`."""

    MEDIA = "media"  # fetch and understand the message's files first (the PrepareMedia task), then ask
    MODEL = "model"  # ask the model (the Respond task)
    TOOLS = "tools"  # run the tool calls the model asked for
    DELIVER = "deliver"  # send the answer (the delivery function), then finish
    FINISH = "finish"  # nothing to send (silent, a memory flush, stopped): finish
    DONE = "done"  # the Respond task sent the answer and finished the turn itself: nothing left
    PAUSED = "paused"  # waiting for an approval: the execution ends, the answer resumes it
    CONTINUE = "continue"  # too long for one execution: continue in a new one


class TurnKind(StrEnum):
    CHAT = "chat"  # answers a chat's message; holds the session's lease
    CRON = "cron"  # a scheduled job's run: no session, delivered to the job's targets
    FLUSH = "flush"  # a memory-only turn over a session that is ending


@dataclass(frozen=True)
class CronRun:
    """The job a cron turn runs (`domain.cron.Job.turn_job`)."""

    job_id: str
    run_id: str
    prompt: str
    name: str = ""
    deliver: tuple[str, ...] = ("origin",)
    origin: Mapping[str, Any] | None = None
    profile: str | None = None
    creator: SessionSource | None = None  # who made the job: the run reaches what they may

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.job_id,
            "run_id": self.run_id,
            "prompt": self.prompt,
            "name": self.name,
            "deliver": list(self.deliver),
            "origin": dict(self.origin) if self.origin else None,
            "profile": self.profile,
            "creator": compact_source(self.creator) if self.creator else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CronRun:
        return cls(
            job_id=str(data["id"]),
            run_id=str(data["run_id"]),
            prompt=str(data.get("prompt") or ""),
            name=str(data.get("name") or ""),
            deliver=tuple(str(d) for d in data.get("deliver") or ("origin",)),
            origin=dict(data["origin"]) if data.get("origin") else None,
            profile=str(data["profile"]) if data.get("profile") else None,
            creator=_source(data.get("creator")),
        )


def _source(raw: Any) -> SessionSource | None:
    if not isinstance(raw, Mapping) or not raw.get("platform"):
        return None
    try:
        return SessionSource.from_dict(dict(raw))
    except ValueError:
        return None  # an unreadable creator reaches nothing (never another's data)


@dataclass(frozen=True)
class TurnNotes:
    """What the router read from the route when the turn started (BEHAVIOUR §3, §5)."""

    resumed: str | None = None  # the reason the last turn was cut short: answer what it left
    continuity_from: str | None = None  # Slack/Discord: the session a reset with activity replaced
    after_flush: str | None = None  # the replaced session whose memory flush goes first

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if v}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnNotes:
        return cls(**{k: str(data[k]) for k in ("resumed", "continuity_from", "after_flush") if data.get(k)})


@dataclass(frozen=True)
class Turn:
    """A turn's identity, fixed when it starts and never read again from mutable session state."""

    turn_id: str
    kind: TurnKind
    started_at: float
    session_id: str | None = None
    session_key: str | None = None
    lease_token: str | None = None  # a chat turn holds its session's lease by this token
    event_id: str | None = None  # the inbound event it answers (the logs' correlation id)
    source: SessionSource | None = None
    reply_to: ReplyTarget | None = None
    user_seqs: tuple[int, ...] = ()  # the transcript rows (user messages) it answers
    reply_seq: int | None = None  # where its answer goes in the transcript
    user_text: str = ""  # what the user said (the memory providers' turn sync)
    hidden: tuple[tuple[int, int], ...] = ()  # transcript seqs undone when the turn started
    model_override: ModelOverride | None = None
    notes: TurnNotes = field(default_factory=TurnNotes)
    cron: CronRun | None = None
    flush_reason: str | None = None
    # reported over estimated prompt tokens, as the session's last turn found it (None: not known)
    prompt_ratio: float | None = None
    # The chat's /voice mode when the turn began (domain/voice.py; "": never chosen), handed on to
    # the turns of messages queued behind it; and whether its answer is to be spoken too.
    voice: str = ""
    speak: bool = False

    @property
    def leased(self) -> bool:
        return self.kind is TurnKind.CHAT

    @property
    def upto_seq(self) -> int | None:
        """The last row the model may see: a chat turn's newest user message."""
        return max(self.user_seqs) if self.user_seqs else None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"turn_id": self.turn_id, "kind": self.kind.value, "started_at": self.started_at}
        optional: dict[str, Any] = {
            "session_id": self.session_id,
            "session_key": self.session_key,
            "lease_token": self.lease_token,
            "event_id": self.event_id,
            "source": self.source.to_dict() if self.source else None,
            "reply_to": self.reply_to.to_dict() if self.reply_to else None,
            "user_seqs": list(self.user_seqs) or None,
            "reply_seq": self.reply_seq,
            "user_text": self.user_text or None,
            "hidden": [list(r) for r in self.hidden] or None,
            "model_override": self.model_override.to_dict() if self.model_override else None,
            "notes": self.notes.to_json() or None,
            "job": self.cron.to_json() if self.cron else None,
            "flush_reason": self.flush_reason,
            "prompt_ratio": self.prompt_ratio,
            "voice": self.voice or None,
            "speak": self.speak or None,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Turn:
        override = data.get("model_override")
        return cls(
            turn_id=str(data["turn_id"]),
            kind=TurnKind(str(data.get("kind") or "chat")),
            started_at=float(data.get("started_at") or 0),
            session_id=_text(data.get("session_id")),
            session_key=_text(data.get("session_key")),
            lease_token=_text(data.get("lease_token")),
            event_id=_text(data.get("event_id")),
            source=SessionSource.from_dict(dict(data["source"])) if data.get("source") else None,
            reply_to=ReplyTarget.from_dict(data["reply_to"]) if data.get("reply_to") else None,
            user_seqs=tuple(int(s) for s in data.get("user_seqs") or ()),
            reply_seq=int(data["reply_seq"]) if data.get("reply_seq") is not None else None,
            user_text=str(data.get("user_text") or ""),
            hidden=tuple((int(lo), int(hi)) for lo, hi in data.get("hidden") or ()),
            model_override=ModelOverride(**override) if override else None,
            notes=TurnNotes.from_json(data.get("notes") or {}),
            cron=CronRun.from_json(data["job"]) if data.get("job") else None,
            flush_reason=_text(data.get("flush_reason")),
            prompt_ratio=float(data["prompt_ratio"]) if data.get("prompt_ratio") else None,
            voice=str(data.get("voice") or ""),
            speak=data.get("speak") is True,
        )


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False


@dataclass(frozen=True)
class ToolLoop:
    """The model and tool exchange of one turn, across its executions."""

    messages: tuple[ChatMessage, ...] = ()  # this turn's assistant calls and tool results
    iterations: int = 0  # model calls made
    usage: Usage = field(default_factory=Usage)
    continuations: int = 0  # executions after the first (`<turn>-c<n>`)
    approvals: int = 0  # questions asked (`<turn>-a<n>`)
    exec_started: float = 0.0  # when the current execution started
    pending: tuple[ToolCall, ...] = ()  # calls asked for and not yet answered in `messages`
    results: Mapping[str, ToolResult] = field(default_factory=dict)  # call id -> its result so far
    decisions: Mapping[str, str] = field(default_factory=dict)  # call id -> approved | denied | timeout
    ratio: float = 1.0  # reported over estimated tokens of the last request (domain/context.calibrated)

    @property
    def fresh(self) -> bool:
        """No model call yet: the turn's first execution has not begun its work."""
        return self.iterations == 0 and not self.messages

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": [_message_json(m) for m in self.messages],
            "iterations": self.iterations,
            "usage": self.usage.to_dict(),
            "continuations": self.continuations,
            "approvals": self.approvals,
            "exec_started": self.exec_started,
            "pending": [c.to_dict() for c in self.pending],
            "results": {k: {"content": r.content, "is_error": r.is_error} for k, r in self.results.items()},
            "decisions": dict(self.decisions),
            "ratio": self.ratio,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ToolLoop:
        return cls(
            messages=tuple(_message_from_json(m) for m in data.get("messages") or ()),
            iterations=int(data.get("iterations") or 0),
            usage=Usage(**{k: int(v) for k, v in (data.get("usage") or {}).items()}),
            continuations=int(data.get("continuations") or 0),
            approvals=int(data.get("approvals") or 0),
            exec_started=float(data.get("exec_started") or 0),
            pending=tuple(ToolCall.from_dict(c) for c in data.get("pending") or ()),
            results={
                str(k): ToolResult(str(v.get("content", "")), bool(v.get("is_error")))
                for k, v in (data.get("results") or {}).items()
            },
            decisions={str(k): str(v) for k, v in (data.get("decisions") or {}).items()},
            ratio=float(data.get("ratio") or 1.0),
        )


@dataclass(frozen=True)
class Reply:
    """The model's answer, and what the whole turn's model calls cost."""

    text: str
    model: str | None = None
    usage: Usage = field(default_factory=Usage)
    prompt_tokens: int | None = None  # the size of the last prompt sent
    stop_reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "model": self.model,
            "usage": self.usage.to_dict(),
            "prompt_tokens": self.prompt_tokens,
            "stop_reason": self.stop_reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Reply:
        return cls(
            text=str(data.get("text") or ""),
            model=_text(data.get("model")),
            usage=Usage(**{k: int(v) for k, v in (data.get("usage") or {}).items()}),
            prompt_tokens=int(data["prompt_tokens"]) if data.get("prompt_tokens") is not None else None,
            stop_reason=_text(data.get("stop_reason")),
        )


@dataclass(frozen=True)
class TurnState:
    """Everything a task of the turn workflow reads and returns."""

    turn: Turn
    next: Step = Step.MODEL
    loop: ToolLoop = field(default_factory=ToolLoop)
    system: str | None = None  # the session context (built once, by the first task)
    reply: Reply | None = None
    stopped: bool = False  # /stop (or an interrupting message): nothing is sent or kept
    # What the Deliver state sends: delivery jobs as the delivery function takes them.
    deliveries: tuple[Mapping[str, Any], ...] = ()
    delivered: Any = None  # the delivery function's outcome (Deliver's result)
    delivery_error: Mapping[str, Any] | None = None  # Deliver failed after its retries
    error: Mapping[str, Any] | None = None  # a task failed after its retries: the Fail task's input
    approval: str | None = None  # a resumed turn: the answer to its question
    # How many times the workflow tried this task before (its `$$.State.RetryCount`): given with
    # each task's input, never carried on to the next task's.
    attempt: int = 0

    def go(self, step: Step, **changes: Any) -> TurnState:
        return replace(self, next=step, **changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"turn": self.turn.to_json(), "next": self.next.value}
        if not self.loop.fresh or self.loop.exec_started:
            out.update(_loop_json(self.loop, self.turn.to_json()))
        extra: dict[str, Any] = {
            "system": self.system,
            "reply": self.reply.to_json() if self.reply else None,
            "stopped": self.stopped or None,
            "deliveries": [dict(d) for d in self.deliveries] or None,
            "delivered": self.delivered,
            "delivery_error": dict(self.delivery_error) if self.delivery_error else None,
            "error": dict(self.error) if self.error else None,
            "approval": self.approval,
        }
        out.update({k: v for k, v in extra.items() if v is not None})
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnState:
        loop = data.get("loop")
        if data.get("loop_z"):
            loop = json.loads(zlib.decompress(base64.b64decode(str(data["loop_z"]))))
        return cls(
            turn=Turn.from_json(data["turn"]),
            next=Step(str(data.get("next") or Step.MODEL.value)),
            loop=ToolLoop.from_json(loop or {}),
            system=_text(data.get("system")),
            reply=Reply.from_json(data["reply"]) if data.get("reply") else None,
            stopped=bool(data.get("stopped")),
            deliveries=tuple(dict(d) for d in data.get("deliveries") or ()),
            delivered=data.get("delivered"),
            delivery_error=dict(data["delivery_error"]) if data.get("delivery_error") else None,
            error=dict(data["error"]) if data.get("error") else None,
            approval=_text(data.get("approval")),
        )


def _loop_json(loop: ToolLoop, turn_json: dict[str, Any]) -> dict[str, Any]:
    """The loop as it travels: plain while small, compressed when large, shortened (oldest tool
    results first) when even that would not leave the state under STATE_LIMIT_BYTES."""
    plain = loop.to_json()
    encoded = json.dumps(plain, separators=(",", ":"))
    if len(encoded) <= _LOOP_PLAIN_LIMIT:
        return {"loop": plain}
    budget = STATE_LIMIT_BYTES - len(json.dumps(turn_json)) - 16 * 1024  # system prompt, reply, error
    current = loop
    while True:
        packed = base64.b64encode(zlib.compress(json.dumps(current.to_json()).encode(), 6)).decode()
        if len(packed) <= budget:
            return {"loop_z": packed}
        # Shorten as many of the oldest results as the overshoot suggests (at least one), so a
        # loop at its bounds takes a few compressions, not one per result.
        long_results = sum(1 for m in current.messages if m.role == "tool" and m.content != _TRUNCATED)
        share = 1 - budget / len(packed)
        shorter = _shorten_oldest(current, max(1, math.ceil(long_results * share)))
        if shorter is None:
            raise ValueError("a turn's state cannot be made small enough to carry")
        current = shorter


def _shorten_oldest(loop: ToolLoop, count: int = 1) -> ToolLoop | None:
    """The loop with its `count` oldest long tool results replaced by a short note; None when
    none is left to shorten."""
    messages, cut = list(loop.messages), 0
    for index, message in enumerate(messages):
        if cut >= count:
            break
        if message.role == "tool" and message.content != _TRUNCATED:
            messages[index] = replace(message, content=_TRUNCATED)
            cut += 1
    if cut:
        return replace(loop, messages=tuple(messages))
    for call_id, result in loop.results.items():
        if result.content != _TRUNCATED:
            return replace(loop, results={**loop.results, call_id: ToolResult(_TRUNCATED, result.is_error)})
    return None


def _message_json(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [call.to_dict() for call in message.tool_calls]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    if message.is_error:
        out["is_error"] = True
    return out


def _message_from_json(data: Mapping[str, Any]) -> ChatMessage:
    return ChatMessage(
        str(data["role"]),
        str(data.get("content", "")),
        tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
        tool_call_id=_text(data.get("tool_call_id")),
        name=_text(data.get("name")),
        is_error=bool(data.get("is_error")),
    )


def _text(value: Any) -> str | None:
    return str(value) if value is not None and value != "" else None
