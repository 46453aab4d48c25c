"""The tasks of one agent turn, run by the turn state machine (infra/statemachines/turn.asl.json).

Prepare → CallModel ⇄ RunTools (bounded) → Deliver → Commit; Fail on any error. Each task takes
the turn state and returns it, extended; `state["next"]` tells the workflow's Choice states where
to go. Every task is idempotent on the turn id, because an Express execution may run a task more
than once: the reply is queued under a delivery id derived from the turn, transcript rows are
de-duplicated by key, usage is counted once per turn, and the lease is released (or handed to the
next queued message) by its token only, in one conditional write.

A turn that must wait ends its execution: for an approval, its state is saved and the answer
starts `<turn>-a<n>`; a turn that would outrun one execution starts `<turn>-c<n>` from its state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.session_key import is_shared_session
from hermes_gateway.domain.sessions import SessionStore, TokenUsage, TurnLease
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.targets import ResolvedTarget
from hermes_gateway.domain.turns import NextTurn, PendingApproval, QueuedInput, TurnControl
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.providers.base import ChatMessage, ModelReply, Provider, ToolCall, ToolSpec, Usage
from hermes_gateway.services.cron import finish_run
from hermes_gateway.settings import Settings
from hermes_gateway.tools.base import Tool, ToolContext, ToolResult, execute, user_hash

if TYPE_CHECKING:
    from hermes_gateway.domain.cron import Job
    from hermes_gateway.memory.manager import MemoryManager

SILENT_REPLIES = ("[SILENT]", "NO_REPLY")
APOLOGY = "Sorry, something went wrong while I was answering. Please try again in a moment."
DENIED_RESULT = "error: the user did not approve this call; do not retry it, say what you would have done"
UNATTENDED_DENIED = "error: this tool needs a person's approval and nobody is here to give it (unattended run)"
FLUSH_PROMPT = (
    "This conversation is about to end. Save anything worth remembering about the user with the "
    "memory tool (facts, preferences, ongoing work); skip what is already saved. Then reply NO_REPLY."
)
FLUSH_WAIT_SECONDS = 12.0  # Prepare may run 20 s (infra/statemachines/turn.asl.json)
FLUSH_POLL_SECONDS = 0.5
_MAX_TOOL_RESULT_CHARS = 8000  # the loop state rides in the execution input (256 KB)
# Platforms whose ids are personal data: the model gets stable hashed handles (BEHAVIOUR §10).
_HASHED_ID_PLATFORMS = ("telegram", "whatsapp", "signal", "bluebubbles")


class LeaseLost(PermanentError):
    """The turn no longer holds its session's lease (it expired and was taken back)."""


class DeliveryQueue(Protocol):
    def send(self, body: dict[str, Any], *, group_id: str | None = None, dedup_id: str | None = None) -> str: ...


class TurnStarter(Protocol):
    def start(self, name: str, turn: dict[str, Any]) -> bool: ...


class JobRecorder(Protocol):
    """What a cron turn needs of the job store (domain/cron.py `JobStore`)."""

    def get(self, job_id: str) -> Job | None: ...

    def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool: ...


def _no_tools(kind: str) -> Sequence[Tool]:
    return ()


@dataclass
class TurnDeps:
    settings: Settings
    store: SessionStore
    lease: TurnLease
    provider: Callable[[], Provider]  # built on first use: the model client is only needed by one step
    delivery: DeliveryQueue
    now: Callable[[], float]
    control: TurnControl | None = None  # queue, approvals, hand-off (None: release only)
    starter: TurnStarter | None = None  # continuations and queued turns
    events: LifecycleEvents | None = None
    tools: Callable[[str], Sequence[Tool]] = _no_tools  # the tools of a turn kind
    # per-session model override (model, provider, base URL) -> a provider for it
    provider_for: Callable[[dict[str, str]], Provider] | None = None
    tool_ports: dict[str, Any] = field(default_factory=dict)  # ToolContext ports: directory, jobs, memory
    jobs: JobRecorder | None = None
    home_channels: Callable[[], dict[str, str]] = dict  # platform -> home channel (system prompt)
    memory: Callable[[], MemoryManager] | None = None  # the memory providers, built per turn task
    sleep: Callable[[float], None] = time.sleep
    # The first turn after a reset waits this long at most for the replaced session's memory flush.
    flush_wait_seconds: float = FLUSH_WAIT_SECONDS


# -- the session context (BEHAVIOUR §10) ---------------------------------------------------------


def _shown_id(platform: str, value: str | None) -> str:
    if value is None:
        return "-"
    return f"{platform}:{hash_id(value)}" if platform in _HASHED_ID_PLATFORMS else value


def system_prompt(
    source: SessionSource,
    session_id: str,
    settings: Settings,
    *,
    session_key: str | None = None,
    home_channels: dict[str, str] | None = None,
    notes: Sequence[str] = (),
) -> str:
    """The session context every turn carries: where the message came from, whether the session
    is shared, the connected platforms and their home channels, the session id and key."""
    shared = is_shared_session(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
    )
    where = source.description
    if source.platform in _HASHED_ID_PLATFORMS:
        # Ids on these platforms are personal data; the model gets stable hashed handles.
        where = f"{source.chat_type} on {source.platform} (chat {_shown_id(source.platform, source.chat_id)})"
    homes = home_channels or {}
    platforms = [
        f"{name} (home: {_shown_id(name, homes[name]) if homes.get(name) else 'not set'})"
        for name, p in sorted(settings.platforms.items())
        if p.enabled
    ]
    key = session_key or "-"
    if source.platform in _HASHED_ID_PLATFORMS and session_key:
        key = f"{source.platform} session {hash_id(session_key)}"
    lines = [
        "You are Hermes, an AI assistant that people reach through their chat apps.",
        "",
        "Session context:",
        f"- Source: {where}",
        f"- Shared session: {'yes, several people talk here; user turns start with [Name]' if shared else 'no'}",
        f"- Connected platforms: {', '.join(platforms) or 'none'}",
        f"- Session id: {session_id}",
        f"- Session key: {key}",
    ]
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines)


def _source(turn: dict[str, Any]) -> SessionSource:
    return SessionSource.from_dict(turn["source"])


def _kind(turn: dict[str, Any]) -> str:
    kind = str(turn.get("kind") or "chat")
    if kind not in ("chat", "cron", "flush"):
        raise PermanentError(f"unknown turn kind {kind!r}")
    return kind


def _leased(turn: dict[str, Any]) -> bool:
    return _kind(turn) == "chat"


def _emit(deps: TurnDeps, name: str, turn: dict[str, Any], **extra: Any) -> None:
    """Lifecycle events carry no text and no raw ids (BEHAVIOUR §8)."""
    if deps.events is None:
        return
    detail: dict[str, Any] = {
        "turn_id": turn["turn_id"],
        "kind": _kind(turn),
        "session": hash_id(turn.get("session_key")),
        "platform": (turn.get("source") or {}).get("platform"),
        "profile": deps.settings.profile,  # which bot's agent (several may share a deployment)
        **extra,
    }
    try:
        deps.events.emit(name, detail)
    except Exception as exc:  # noqa: BLE001 - a failing hook never blocks a turn
        logger.warning("lifecycle event failed", extra={"event": name, "error": type(exc).__name__})


def _hold_lease(turn: dict[str, Any], deps: TurnDeps) -> bool:
    """Check the lease is still this turn's and push its expiry on (the heartbeat). Returns
    whether /stop (or an interrupting message) asked this turn to stop."""
    if not _leased(turn):
        return False
    until = deps.now() + deps.settings.sessions.lease_ttl_seconds
    if deps.control is not None:
        state = deps.control.extend(turn["session_key"], turn["lease_token"], until)
        if state is None:
            raise LeaseLost("the session's lease is no longer held by this turn")
        return bool(state.stop_turn_id == turn["turn_id"])
    route = deps.store.get_route(turn["session_key"])
    if route is None or route.lease_token != turn["lease_token"]:
        raise LeaseLost("the session's lease is no longer held by this turn")
    return False


# -- Prepare -------------------------------------------------------------------------------------


def append_queued(store: SessionStore, session_id: str, item: QueuedInput) -> int:
    """A message that waited on a running turn joins the transcript as the user's row
    (de-duplicated by its event id, like every inbound message)."""
    source = SessionSource.from_dict(item.source)
    return store.append_message(
        session_id,
        "user",
        item.text,
        item.received_at,
        dedupe_key=item.event_id,
        sender_name=source.user_name,
        platform_message_id=source.message_id,
    )


def _append_user(turn: dict[str, Any], deps: TurnDeps, item: QueuedInput) -> int:
    seq = append_queued(deps.store, turn["session_id"], item)
    deps.store.mark_turn_started(turn["session_id"], item.event_id, turn["turn_id"])
    return seq


def _notes(turn: dict[str, Any]) -> list[str]:
    notes = []
    if turn.get("resumed"):
        notes.append(
            "Your previous turn here was cut short before you answered; answer the user's unanswered "
            "message(s) below along with anything new."
        )
    if turn.get("continuity_from"):
        notes.append(
            f"This session follows an earlier one ({turn['continuity_from']}); search it with "
            "session_search if the user refers to it."
        )
    if _kind(turn) == "cron":
        notes.append("This is a scheduled job run: nobody is chatting; your final answer is delivered as is.")
    return notes


def _await_flush(replaced_session_id: str, deps: TurnDeps) -> bool:
    """BEHAVIOUR §3: a reset flushes the replaced session's memories first. The new session's
    first turn waits (in Prepare, within its time limit) until that flush turn is over, so what it
    saved is remembered in this answer; a flush that takes longer is not waited for."""
    for _ in range(int(deps.flush_wait_seconds / FLUSH_POLL_SECONDS) + 1):
        if deps.store.memory_flushed(replaced_session_id):
            return True
        deps.sleep(FLUSH_POLL_SECONDS)
    logger.warning("the replaced session's memory flush is still running; answering without it")
    return False


def prepare(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    kind = _kind(turn)
    if kind == "chat" and turn.get("after_flush") and not turn.get("loop"):
        _await_flush(str(turn["after_flush"]), deps)
    now = deps.now()
    stop = _hold_lease(turn, deps)
    if kind == "flush" and not turn.get("loop") and deps.store.memory_flushed(turn["session_id"]):
        # Started again (the sweep ended the session and a later message replaced it, or an
        # Express start was repeated): the memories were saved once; no second model call.
        logger.info("memory flush already done", extra={"turn_id": turn["turn_id"]})
        stop = True
    state = dict(turn)
    state.pop("after_flush", None)  # a continuation or a resumed approval does not wait again
    if kind == "chat":
        # A queued turn's messages were appended when the lease was handed on; appending again
        # (de-duplicated by event id) gives this turn the seq it answers.
        for raw in turn.get("queued") or []:
            state["user_seq"] = _append_user(turn, deps, QueuedInput.from_dict(raw))
        if turn.get("approval") and deps.control is not None:
            deps.control.clear_approval(turn["session_key"], turn["turn_id"])
    if kind == "chat" or kind == "flush":
        source = _source(turn)
        state["system"] = system_prompt(
            source,
            turn["session_id"],
            deps.settings,
            session_key=turn.get("session_key"),
            home_channels=deps.home_channels(),
            notes=_notes(turn),
        )
    else:
        state["system"] = "You are Hermes, an AI assistant running a scheduled job.\n" + "\n".join(
            f"- {n}" for n in _notes(turn)
        )
    loop = dict(turn.get("loop") or {})
    first = not loop
    loop.setdefault("messages", [])
    loop.setdefault("iterations", 0)
    loop.setdefault("usage", Usage().to_dict())
    loop.setdefault("continuations", 0)
    loop.setdefault("approvals", 0)
    loop["exec_started"] = now
    state["loop"] = loop
    state.pop("reply", None)
    if first:
        logger.info("agent:start", extra={"turn_id": turn["turn_id"], "kind": kind})
        _emit(deps, "agent:start", turn)
    if stop:
        state["next"] = "stopped"
    elif loop.get("pending"):
        state["next"] = "tools"
    else:
        state["next"] = "model"
    return state


# -- CallModel -----------------------------------------------------------------------------------


def _merge(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Consecutive plain user messages become one (a queued burst, an unanswered message)."""
    merged: list[ChatMessage] = []
    for message in messages:
        prev = merged[-1] if merged else None
        if prev is not None and prev.role == message.role == "user" and not prev.tool_calls:
            merged[-1] = ChatMessage("user", prev.content + "\n\n" + message.content)
        else:
            merged.append(message)
    return merged


def _transcript(turn: dict[str, Any], deps: TurnDeps) -> list[ChatMessage]:
    """The session's user and assistant rows as the model sees them (a chat turn's up to the
    message it answers), starting at a user message."""
    limit = deps.settings.provider.max_history_messages
    upto = int(turn["user_seq"]) if _kind(turn) == "chat" else None
    rows = deps.store.transcript(turn["session_id"], upto_seq=upto, limit=limit)
    source = _source(turn)
    shared = is_shared_session(
        source,
        group_sessions_per_user=deps.settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=deps.settings.sessions.thread_sessions_per_user,
    )
    messages = [
        ChatMessage(
            row.role,
            f"[{row.sender_name}] {row.content}" if shared and row.role == "user" and row.sender_name else row.content,
        )
        for row in rows
        if row.role in ("user", "assistant")
    ]
    while messages and messages[0].role != "user":
        messages.pop(0)  # a window that starts mid-conversation starts at a user message
    return messages


def _history(turn: dict[str, Any], deps: TurnDeps) -> list[ChatMessage]:
    kind = _kind(turn)
    if kind == "cron":
        return [ChatMessage("user", str(turn["job"]["prompt"]))]
    messages = _transcript(turn, deps)
    if kind == "flush":
        return _merge([*messages, ChatMessage("user", FLUSH_PROMPT)])
    if not messages or messages[-1].role != "user":
        raise PermanentError("the transcript does not end with the user's message")
    return _merge(messages)


def _message_to_dict(message: ChatMessage) -> dict[str, Any]:
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


def _message_from_dict(data: dict[str, Any]) -> ChatMessage:
    return ChatMessage(
        str(data["role"]),
        str(data.get("content", "")),
        tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
        tool_call_id=data.get("tool_call_id"),
        name=data.get("name"),
        is_error=bool(data.get("is_error")),
    )


def _provider(turn: dict[str, Any], deps: TurnDeps) -> Provider:
    override = turn.get("model_override")
    if override and deps.provider_for is not None:
        return deps.provider_for(dict(override))
    return deps.provider()


def _tool_specs(turn: dict[str, Any], deps: TurnDeps) -> list[ToolSpec] | None:
    """The tools the model may call now; None once the loop's bounds are reached (it must answer)."""
    loop = turn["loop"]
    limits = deps.settings.turns
    elapsed = deps.now() - float(turn.get("started_at") or deps.now())
    if loop["iterations"] >= limits.max_tool_iterations or elapsed >= limits.max_turn_seconds:
        return None
    specs = [tool.spec for tool in deps.tools(_kind(turn))]
    return specs or None


def _memory(turn: dict[str, Any], deps: TurnDeps) -> MemoryManager | None:
    """The turn's memory manager, initialized with the session (providers never fail the turn)."""
    if deps.memory is None:
        return None
    manager = deps.memory()
    manager.initialize(str(turn.get("session_id") or turn["turn_id"]), _tool_context(turn, deps, memory=False))
    return manager


def _remembered(turn: dict[str, Any], deps: TurnDeps, query: str) -> str:
    manager = _memory(turn, deps) if _kind(turn) == "chat" else None
    context = manager.prefetch(query) if manager is not None else ""
    return f"\n\nWhat you remember about this user (from memory):\n{context}" if context.strip() else ""


def call_model(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    _hold_lease(turn, deps)
    loop = dict(turn["loop"])
    history = _history(turn, deps)
    messages = history + [_message_from_dict(m) for m in loop["messages"]]
    tools = _tool_specs({**turn, "loop": loop}, deps)
    system = turn["system"] + _remembered(turn, deps, history[-1].content if history else "")
    provider = _provider(turn, deps)
    # A turn without tools asks as a plain chat (providers that know no tools work unchanged).
    reply: ModelReply = provider.complete(system, messages, tools) if tools else provider.complete(system, messages)
    metrics.add_metric(name="ModelTokensIn", unit=MetricUnit.Count, value=reply.input_tokens)
    metrics.add_metric(name="ModelTokensOut", unit=MetricUnit.Count, value=reply.output_tokens)
    usage = Usage(**loop["usage"]) + reply.usage
    loop["usage"] = usage.to_dict()
    loop["iterations"] = int(loop["iterations"]) + 1
    state = {**turn, "loop": loop}
    _emit(deps, "agent:step", turn, step="model", iteration=loop["iterations"], tool_calls=len(reply.tool_calls))
    if reply.tool_calls and tools:
        loop["messages"] = [*loop["messages"], _message_to_dict(reply.as_message())]
        loop["pending"] = [call.to_dict() for call in reply.tool_calls]
        loop["results"] = {}
        state["next"] = "tools"
        return state
    state["reply"] = {
        "text": reply.text,
        "model": reply.model,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "prompt_tokens": reply.input_tokens,
        "stop_reason": reply.stop_reason,
    }
    state["next"] = "reply"
    return state


# -- RunTools ------------------------------------------------------------------------------------


def _tool_context(turn: dict[str, Any], deps: TurnDeps, *, memory: bool = True) -> ToolContext:
    kind = _kind(turn)
    source = turn.get("source") or {}
    user_id = source.get("user_id_alt") or source.get("user_id")
    reply_to = turn.get("reply_to") or {}
    origin = None
    if reply_to.get("platform") and reply_to.get("chat_id"):
        origin = ResolvedTarget(
            str(reply_to["platform"]), str(reply_to["chat_id"]), reply_to.get("thread_id"), "origin"
        )
    ports = deps.tool_ports
    return ToolContext(
        kind=kind,  # type: ignore[arg-type]
        turn_id=turn["turn_id"],
        profile=deps.settings.profile,
        now=deps.now(),
        sends_as=deps.settings.served_profile,
        session_id=turn.get("session_id"),
        session_key=turn.get("session_key"),
        # per platform: user 42 on Telegram is not user 42 on Discord
        user_hash=user_hash(str(source.get("platform", "")), user_id),
        source=source or None,
        origin=origin,
        home_channels=deps.home_channels(),
        time_zone=deps.settings.time_zone,
        correlation_id=turn.get("event_id"),
        sessions=deps.store,
        delivery=deps.delivery if kind != "flush" else None,
        directory=ports.get("directory"),
        jobs=ports.get("jobs") if kind == "chat" else None,
        memory=(_memory(turn, deps) if memory else None) or ports.get("memory"),
    )


def _approval_needed(turn: dict[str, Any], deps: TurnDeps, tool: Tool, call_id: str) -> str | None:
    """None: run the call; else the result to give the model instead, or "ask"."""
    if not tool.needs_approval:
        return None
    decided = (turn["loop"].get("decisions") or {}).get(call_id)
    if decided == "approved":
        return None
    if decided in ("denied", "timeout"):
        return DENIED_RESULT
    if _kind(turn) != "chat" or deps.control is None:
        return UNATTENDED_DENIED
    if deps.control.state(turn["session_key"]).approved(tool.name, turn["session_id"]):
        return None
    return "ask"


def _ask(turn: dict[str, Any], deps: TurnDeps, call: ToolCall) -> dict[str, Any]:
    """Pause: save the state, ask in the chat, end this execution (the lease stays held)."""
    assert deps.control is not None
    loop = dict(turn["loop"])
    loop["approvals"] = int(loop.get("approvals", 0)) + 1
    state = {**turn, "loop": loop}
    timeout = deps.settings.turns.approval_timeout_seconds
    source = turn.get("source") or {}
    approval = PendingApproval(
        turn_id=turn["turn_id"],
        tool=call.name,
        call_id=call.id,
        asked_of=source.get("user_id"),
        expires_at=deps.now() + timeout,
        session_id=turn["session_id"],
    )
    saved = {k: v for k, v in state.items() if k not in ("next", "error")}
    if not deps.control.pause(turn["session_key"], turn["lease_token"], approval, saved):
        raise LeaseLost("the session's lease is no longer held by this turn")
    args = json.dumps(call.arguments, ensure_ascii=False)[:300]
    text = (
        f"The agent wants to run `{call.name}` with {args}.\n"
        f"Reply /approve (or yes) to allow it once, /approve session or /approve always to stop asking, "
        f"/deny (or no) to refuse. No answer in {timeout // 60 or 1} min means no."
    )
    _queue_delivery(deps, turn, f"{turn['turn_id']}-ask{loop['approvals']}", text, buttons=_APPROVAL_BUTTONS)
    logger.info("tool approval asked", extra={"turn_id": turn["turn_id"], "tool": call.name})
    _emit(deps, "agent:step", turn, step="approval_asked", tool=call.name)
    return {**state, "next": "paused"}


_APPROVAL_BUTTONS = [
    {"label": "Approve", "reply": "/approve"},
    {"label": "Approve for session", "reply": "/approve session"},
    {"label": "Deny", "reply": "/deny"},
]


def run_tools(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    if _hold_lease(turn, deps):
        return {**turn, "next": "stopped"}
    loop = dict(turn["loop"])
    results: dict[str, Any] = dict(loop.get("results") or {})
    pending = [ToolCall.from_dict(c) for c in loop.get("pending") or ()]
    tools = list(deps.tools(_kind(turn)))
    by_name = {tool.name: tool for tool in tools}
    ctx = _tool_context(turn, deps)
    for call in pending:
        if call.id in results:
            continue  # done by an earlier try of this task, or before a pause
        tool = by_name.get(call.name)
        gate = _approval_needed({**turn, "loop": loop}, deps, tool, call.id) if tool is not None else None
        if gate == "ask":
            loop["results"] = results
            return _ask({**turn, "loop": loop}, deps, call)
        result = ToolResult(gate, True) if gate else execute(call, tools, ctx)
        results[call.id] = {"content": result.content[:_MAX_TOOL_RESULT_CHARS], "is_error": result.is_error}
        _emit(deps, "agent:step", turn, step="tool", tool=call.name[:64], is_error=result.is_error)
    messages = list(loop["messages"])
    for call in pending:
        messages.append(
            _message_to_dict(
                ChatMessage(
                    "tool",
                    results[call.id]["content"],
                    tool_call_id=call.id,
                    name=call.name,
                    is_error=bool(results[call.id]["is_error"]),
                )
            )
        )
    steering = (
        deps.control.take_steering(turn["session_key"], turn["lease_token"]) if _leased(turn) and deps.control else []
    )
    for item in steering:
        _append_user(turn, deps, item)
        messages.append({"role": "user", "content": item.text})
    loop.update(messages=messages, pending=[], results={})
    state = {**turn, "loop": loop}
    elapsed = deps.now() - float(loop["exec_started"])
    if elapsed >= deps.settings.turns.continue_after_seconds:
        state["next"] = "continue"
    else:
        state["next"] = "model"
    return state


def continue_turn(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    """Start the next execution of a long turn from its state (idempotent: named after the count)."""
    if deps.starter is None:
        raise PermanentError("no turn starter: a long turn cannot continue")
    loop = dict(turn["loop"])
    loop["continuations"] = int(loop.get("continuations", 0)) + 1
    name = f"{turn['turn_id']}-c{loop['continuations']}"
    state = {k: v for k, v in turn.items() if k not in ("next", "error")}
    state["loop"] = loop
    _hold_lease(turn, deps)
    deps.starter.start(name, state)
    logger.info("turn continues in a new execution", extra={"turn_id": turn["turn_id"], "execution": name})
    return {"turn_id": turn["turn_id"], "continued_in": name}


# -- Deliver, Commit, Fail -----------------------------------------------------------------------


def _queue_delivery(
    deps: TurnDeps,
    turn: dict[str, Any],
    delivery_id: str,
    text: str,
    *,
    target: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    buttons: list[dict[str, str]] | None = None,
) -> None:
    # The reply target names a named profile's bot already (turn_commands.reply_target).
    reply_to = dict(target or turn["reply_to"])
    if buttons:
        # Senders that know native buttons show these under the message; every platform gets the text.
        extra = {**(extra or {}), "buttons": buttons}
    deps.delivery.send(
        {
            "delivery_id": delivery_id,
            "turn_id": turn["turn_id"],
            "target": reply_to,
            "text": text,
            # follows the message into the delivery function's logs (hermes-gateway logs trace)
            "correlation_id": turn.get("event_id"),
            "session": hash_id(turn.get("session_key")),
            **(extra or {}),
        }
    )


def _cron_targets(turn: dict[str, Any], deps: TurnDeps) -> list[ResolvedTarget]:
    from hermes_gateway.domain.targets import UnresolvableTarget, resolve_target

    job = turn["job"]
    origin_raw = job.get("origin") or None
    origin = None
    if origin_raw and origin_raw.get("platform") and origin_raw.get("chat_id"):
        origin = ResolvedTarget(str(origin_raw["platform"]), str(origin_raw["chat_id"]), origin_raw.get("thread_id"))
    directory = deps.tool_ports.get("directory")
    targets = []
    for spec in job.get("deliver") or ["origin"]:
        try:
            if directory is None:
                raise UnresolvableTarget("no directory")
            targets.append(
                resolve_target(str(spec), origin=origin, home_channels=deps.home_channels(), directory=directory)
            )
        except UnresolvableTarget as exc:
            logger.warning("cron target unresolvable", extra={"turn_id": turn["turn_id"], "reason": str(exc)[:120]})
    return targets


def deliver(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    kind = _kind(turn)
    if kind == "flush":
        return {**turn, "delivery": "none"}
    text = turn["reply"]["text"]
    if text.strip() in SILENT_REPLIES or not text.strip():
        logger.info("silent reply: stored, not sent")
        return {**turn, "delivery": "silent"}
    if kind == "cron":
        job = turn["job"]
        for i, target in enumerate(_cron_targets(turn, deps)):
            delivery_id = f"{turn['turn_id']}-t{i}"
            _queue_delivery(
                deps,
                turn,
                delivery_id,
                text,
                target=target.to_dict(deps.settings.served_profile),  # sent by the job's profile's bot
                extra={"kind": "push", "mirror": True, "cron": {"job_id": job["id"], "run_id": job["run_id"]}},
            )
        return {**turn, "delivery": "queued"}
    if _hold_lease(turn, deps):
        # /stop (or an interrupting message) came while the model was answering: drop the answer.
        return {**turn, "delivery": "stopped", "next": "stopped"}
    _queue_delivery(deps, turn, turn["turn_id"], text)
    return {**turn, "delivery": "queued"}


def _next_turn_planner(
    session_key: str, session_id: str, settings: Settings, now: float, model_override: dict[str, str] | None
) -> Callable[[list[QueuedInput]], NextTurn]:
    from hermes_gateway.services.router import lease_token_for, turn_id_for

    def plan(queue: list[QueuedInput]) -> NextTurn:
        taken = queue if settings.turns.busy_followup == "one" else queue[:1]
        last = taken[-1]
        turn_id = turn_id_for(session_id, last.event_id)
        token = lease_token_for(turn_id)
        nxt: dict[str, Any] = {
            "turn_id": turn_id,
            "lease_token": token,
            "session_key": session_key,
            "session_id": session_id,
            "event_id": last.event_id,
            "source": last.source,
            "reply_to": last.reply_to,
            "started_at": now,
            "queued": [item.to_dict() for item in taken],
        }
        if model_override:
            nxt["model_override"] = model_override
        return NextTurn(len(taken), turn_id, token, nxt)

    return plan


def release_or_hand_off(
    control: TurnControl,
    store: SessionStore,
    starter: TurnStarter | None,
    settings: Settings,
    now: float,
    *,
    session_key: str,
    session_id: str,
    token: str,
    model_override: dict[str, str] | None = None,
) -> str:
    """Release the lease, or hand it to the next queued message and start that turn: the check
    and the release are one conditional write, so nothing queued is left without a turn."""
    ttl = settings.sessions.lease_ttl_seconds
    plan = _next_turn_planner(session_key, session_id, settings, now, model_override)
    finished = control.finish(session_key, token, plan, ttl, now)
    if finished.status == "handed_off" and finished.next_turn is not None:
        nxt = finished.next_turn
        # The queued messages join the transcript now (durable even if the start below fails).
        for raw in nxt.get("queued") or []:
            append_queued(store, nxt["session_id"], QueuedInput.from_dict(raw))
        if starter is None:
            raise PermanentError("no turn starter: a queued message cannot be answered")
        starter.start(nxt["turn_id"], nxt)
        logger.info("lease handed to the next queued turn", extra={"next": nxt["turn_id"]})
    return finished.status


def _release(turn: dict[str, Any], deps: TurnDeps) -> str:
    if deps.control is None:
        return "released" if deps.lease.release(turn["session_key"], turn["lease_token"]) else "lost"
    return release_or_hand_off(
        deps.control,
        deps.store,
        deps.starter,
        deps.settings,
        deps.now(),
        session_key=turn["session_key"],
        session_id=turn["session_id"],
        token=turn["lease_token"],
        model_override=turn.get("model_override"),
    )


def _record_usage(turn: dict[str, Any], deps: TurnDeps, reply: dict[str, Any]) -> None:
    usage = TokenUsage(
        input_tokens=int(reply.get("input_tokens") or 0),
        output_tokens=int(reply.get("output_tokens") or 0),
        cache_read_tokens=int(reply.get("cache_read_tokens") or 0),
        cache_write_tokens=int(reply.get("cache_write_tokens") or 0),
        prompt_tokens=reply.get("prompt_tokens"),
    )
    override = turn.get("model_override") or {}
    deps.store.record_usage(
        turn["session_id"],
        turn["turn_id"],
        usage,
        deps.now(),
        model=reply.get("model"),
        provider=override.get("provider") or deps.settings.provider.name,
    )


def _last_user_text(turn: dict[str, Any], deps: TurnDeps) -> str:
    rows = deps.store.transcript(turn["session_id"], upto_seq=int(turn["user_seq"]), limit=1)
    return rows[-1].content if rows and rows[-1].role == "user" else ""


def _commit_chat(turn: dict[str, Any], deps: TurnDeps, reply: dict[str, Any] | None, stopped: bool) -> str:
    if reply is not None:
        manager = _memory(turn, deps)
        if manager is not None:
            manager.sync_turn(_last_user_text(turn, deps), reply["text"])
        _append_reply(turn, deps, reply["text"])
    # A stopped turn's tokens were spent all the same.
    _record_usage(turn, deps, reply or (turn.get("loop") or {}).get("usage") or {})
    if not stopped:
        deps.store.turn_succeeded(turn["session_key"], turn["session_id"], deps.now())
    return _release(turn, deps)


def _append_reply(turn: dict[str, Any], deps: TurnDeps, text: str) -> None:
    """The turn's answer in the transcript, once however often Commit or Fail runs."""
    turn_id = turn["turn_id"]
    deps.store.append_message(
        turn["session_id"], "assistant", text, deps.now(), dedupe_key=f"{turn_id}:reply", turn_id=turn_id
    )


def commit(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    kind = _kind(turn)
    stopped = turn.get("next") == "stopped"
    reply = None if stopped else turn.get("reply")  # an answer the user stopped is neither sent nor kept
    released = "none"
    if kind == "chat":
        released = _commit_chat(turn, deps, reply, stopped)
    elif kind == "cron" and deps.jobs is not None:
        job = turn["job"]
        deps.jobs.record_run(job["id"], job["run_id"], "ok", None, deps.now())
    elif kind == "flush" and not stopped:
        manager = _memory(turn, deps)
        if manager is not None:
            manager.on_session_end(_transcript(turn, deps))  # external providers see the transcript too
        deps.store.mark_memory_flushed(turn["session_id"], deps.now())  # the new session's turn goes on
    latency = max(0.0, deps.now() - float(turn.get("started_at", deps.now())))
    metrics.add_metric(name="TurnCompleted", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="TurnLatency", unit=MetricUnit.Seconds, value=latency)
    status = "stopped" if stopped else "ok"
    logger.info("agent:end", extra={"turn_id": turn["turn_id"], "status": status, "lease": released})
    _emit(deps, "agent:end", turn, status=status, iterations=(turn.get("loop") or {}).get("iterations", 0))
    return {"turn_id": turn["turn_id"], "delivery": turn.get("delivery"), "released": released, "status": status}


def fail(turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    kind = _kind(turn)
    error = turn.get("error") or {}
    error_name = str(error.get("Error", "unknown"))
    logger.error("turn failed", extra={"turn_id": turn["turn_id"], "error": error_name, "kind": kind})
    metrics.add_metric(name="TurnFailed", unit=MetricUnit.Count, value=1)
    if kind == "cron":
        job = turn["job"]
        if deps.jobs is not None:
            # recorded, and told to the job's origin chat once per failure streak
            finish_run(deps.jobs, deps.delivery, job, "error", error_name[:200], deps.now())
        _emit(deps, "agent:end", turn, status="failed", error=error_name[:64])
        return {"turn_id": turn["turn_id"], "failed": error_name}
    if kind == "flush":
        _emit(deps, "agent:end", turn, status="failed", error=error_name[:64])
        try:
            deps.store.mark_memory_flushed(turn["session_id"], deps.now())  # given up: nobody waits on it
        except Exception:  # noqa: BLE001 - the waiting turn stops waiting after its limit anyway
            logger.warning("could not mark a failed memory flush as over", extra={"turn_id": turn["turn_id"]})
        return {"turn_id": turn["turn_id"], "failed": error_name}
    lease_lost = error_name == LeaseLost.__name__
    reply = turn.get("reply")
    outcome = "none"
    if not lease_lost and reply is not None and turn.get("delivery") != "silent":
        text = str(reply.get("text") or "")
        if text.strip() and text.strip() not in SILENT_REPLIES:
            # The model answered: finish delivering that answer under its own delivery id (the
            # outbox drops it if Deliver queued it before failing), never an apology on top.
            if turn.get("delivery") != "queued":
                _queue_delivery(deps, turn, turn["turn_id"], text)
            _append_reply(turn, deps, text)
            outcome = "reply"
    elif not lease_lost:
        # One apology per turn (its own deterministic id); the user's message stays for /retry.
        _queue_delivery(deps, turn, f"{turn['turn_id']}-failed", APOLOGY)
        outcome = "apology"
    released = "lost"
    if not lease_lost:
        if turn.get("resumed") and outcome != "reply":
            # A recovery that failed again counts toward suspension (BEHAVIOUR §5).
            deps.store.turn_failed(turn["session_key"], turn["session_id"], "recovery_failed", deps.now())
        released = _release(turn, deps)
    _emit(deps, "agent:end", turn, status="failed", error=error_name[:64])
    return {"turn_id": turn["turn_id"], "failed": error_name, "released": released, "told": outcome}


STEPS: dict[str, Callable[[dict[str, Any], TurnDeps], dict[str, Any]]] = {
    "prepare": prepare,
    "call_model": call_model,
    "run_tools": run_tools,
    "continue": continue_turn,
    "deliver": deliver,
    "commit": commit,
    "fail": fail,
}


def turn_profile(turn: dict[str, Any]) -> str | None:
    """The profile a turn runs as: its message's (or, for a cron run, its job's); None for the
    deployment's own. Resolve it with `Settings.for_profile` (a job names even the deployment's own)."""
    source = turn.get("source") or {}
    job = turn.get("job") or {}
    found = source.get("profile") or job.get("profile")
    return str(found) if found else None


def run_step(step: str, turn: dict[str, Any], deps: TurnDeps) -> dict[str, Any]:
    try:
        task = STEPS[step]
    except KeyError:
        raise PermanentError(f"unknown turn step {step!r}") from None
    logger.append_keys(correlation_id=turn.get("event_id"), session=hash_id(turn.get("session_key")))
    return task(turn, deps)
