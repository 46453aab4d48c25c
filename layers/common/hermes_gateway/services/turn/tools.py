"""The RunTools task: run the calls the model asked for (errors become results the model reads),
pause for an approval where a tool needs one, take steering input, and hand a turn that would
outrun its execution to the next one.

Each run reads the route once (`TurnControl.state`): whether the lease is still this turn's,
whether /stop asked it to stop, what is approved, and whether steering input waits.
"""

from __future__ import annotations

import json
from dataclasses import replace

from hermes_gateway.domain.turn_state import Step, ToolLoop, ToolResult, TurnKind, TurnState
from hermes_gateway.domain.turns import ControlState, PendingApproval
from hermes_gateway.errors import LeaseLost
from hermes_gateway.observability import logger
from hermes_gateway.providers.base import ChatMessage, ToolCall
from hermes_gateway.services.lifecycle import user_row
from hermes_gateway.services.turn.context import emit, tool_context
from hermes_gateway.services.turn.deps import TurnDeps
from hermes_gateway.services.turn.respond import reply_job
from hermes_gateway.tools.base import MAX_RESULT_CHARS, Tool, ToolContext, execute
from hermes_gateway.tools.base import ToolResult as Outcome

DENIED_RESULT = "error: the user did not approve this call; do not retry it, say what you would have done"
UNATTENDED_DENIED = "error: this tool needs a person's approval and nobody is here to give it (unattended run)"
APPROVAL_BUTTONS = [
    {"label": "Approve", "reply": "/approve"},
    {"label": "Approve for session", "reply": "/approve session"},
    {"label": "Deny", "reply": "/deny"},
]


def run_tools(state: TurnState, deps: TurnDeps) -> TurnState:
    turn = state.turn
    control = _control(state, deps)
    if control is not None and control.stop_turn_id == turn.turn_id:
        return state.go(Step.FINISH, stopped=True)
    if state.approval is not None and control is not None and control.approval is not None:
        deps.control.clear_approval(turn.session_key or "", turn.turn_id)  # the continuation took the answer
    loop = state.loop if state.loop.exec_started else replace(state.loop, exec_started=deps.now())  # a resumed turn
    results = dict(loop.results)
    tools = list(deps.tools(turn.kind))
    by_name = {tool.name: tool for tool in tools}
    ctx = tool_context(state, deps)
    for call in loop.pending:
        if call.id in results:
            continue  # done by an earlier try of this task, or before a pause
        tool = by_name.get(call.name)
        beyond = _beyond_reach(tool, call, ctx) if tool is not None else None
        gate = _approval_needed(state, control, tool, call.id, beyond) if tool is not None else None
        if gate == "ask":
            return _ask(replace(state, loop=replace(loop, results=results)), deps, call, beyond)
        outcome = Outcome(gate, True) if gate else execute(call, tools, ctx)
        results[call.id] = ToolResult(outcome.content[:MAX_RESULT_CHARS], outcome.is_error)
        emit(deps, "agent:step", turn, step="tool", tool=call.name[:64], is_error=outcome.is_error)
    answered = [
        ChatMessage("tool", results[c.id].content, tool_call_id=c.id, name=c.name, is_error=results[c.id].is_error)
        for c in loop.pending
    ]
    loop = replace(loop, messages=(*loop.messages, *answered), pending=(), results={})
    state = _steer(replace(state, loop=loop), control, deps)
    if state.next is Step.FINISH:
        return state
    elapsed = deps.now() - loop.exec_started
    return state.go(Step.CONTINUE if elapsed >= deps.settings.turns.continue_after_seconds else Step.MODEL)


def _control(state: TurnState, deps: TurnDeps) -> ControlState | None:
    """The route as this task finds it (None for turns without a lease)."""
    turn = state.turn
    if not turn.leased or turn.session_key is None:
        return None
    found = deps.control.state(turn.session_key)
    if found.lease_token != turn.lease_token:
        raise LeaseLost("the session's lease is no longer held by this turn")
    return found


def _beyond_reach(tool: Tool, call: ToolCall, ctx: ToolContext) -> str | None:
    try:
        return tool.beyond_reach(call.arguments, ctx)
    except Exception as exc:  # noqa: BLE001 - a gate that cannot decide asks (never lets the call through)
        logger.warning("reach check failed", extra={"tool": call.name[:64], "error": type(exc).__name__})
        return f"run {call.name[:64]}"


def _approval_needed(
    state: TurnState, control: ControlState | None, tool: Tool, call_id: str, beyond: str | None = None
) -> str | None:
    """None: run the call; else the result to give the model instead, or "ask". A call `beyond`
    the turn's reach asks an admin or approver every time: /yolo, /approve session and always
    (the user's own choices) do not cover it."""
    if not tool.needs_approval and beyond is None:
        return None
    decided = state.loop.decisions.get(call_id)
    if decided == "approved":
        return None
    if decided in ("denied", "timeout"):
        return DENIED_RESULT
    if state.turn.kind is not TurnKind.CHAT or control is None:
        return UNATTENDED_DENIED
    if beyond is None and control.approved(tool.name, state.turn.session_id or ""):
        return None
    return "ask"


def _ask(state: TurnState, deps: TurnDeps, call: ToolCall, beyond: str | None = None) -> TurnState:
    """Pause: save the state, ask in the chat, end this execution (the lease stays held)."""
    turn = state.turn
    loop = replace(state.loop, approvals=state.loop.approvals + 1)
    state = replace(state, loop=loop)
    timeout = deps.settings.turns.approval_timeout_seconds
    approval = PendingApproval(
        turn_id=turn.turn_id,
        tool=call.name,
        call_id=call.id,
        # beyond the turn's reach, the user asking is not who approves: admins and approvers are
        asked_of=turn.source.user_id if turn.source and beyond is None else None,
        expires_at=deps.now() + timeout,
        session_id=turn.session_id or "",
    )
    saved = replace(state, error=None, approval=None).to_json()
    if not deps.control.pause(turn.session_key or "", turn.lease_token or "", approval, saved):
        raise LeaseLost("the session's lease is no longer held by this turn")
    args = json.dumps(call.arguments, ensure_ascii=False)[:300]
    minutes = timeout // 60 or 1
    if beyond is not None:
        text = (
            f"The agent wants to {beyond}: `{call.name}` with {args}.\n"
            f"An admin or approver must reply /approve to allow it once, or /deny. No answer in {minutes} min means no."
        )
        buttons = [APPROVAL_BUTTONS[0], APPROVAL_BUTTONS[-1]]
    else:
        text = (
            f"The agent wants to run `{call.name}` with {args}.\n"
            f"Reply /approve (or yes) to allow it once, /approve session or /approve always to stop asking, "
            f"/deny (or no) to refuse. No answer in {minutes} min means no."
        )
        buttons = APPROVAL_BUTTONS
    ask = reply_job(turn, f"{turn.turn_id}-ask{loop.approvals}", text, buttons=buttons, threaded=False)
    deps.deliveries.send(ask)
    logger.info("tool approval asked", extra={"turn_id": turn.turn_id, "tool": call.name})
    emit(deps, "agent:step", turn, step="approval_asked", tool=call.name)
    return state.go(Step.PAUSED)


def _steer(state: TurnState, control: ControlState | None, deps: TurnDeps) -> TurnState:
    """Steering input that came while the tools ran joins the transcript and the loop."""
    turn = state.turn
    if control is None or not any(item.mode == "steer" for item in control.queue):
        return state
    taken = deps.control.take_steering(turn.session_key or "", turn.lease_token or "", turn.turn_id, deps.now())
    if taken.stopped:
        return state.go(Step.FINISH, stopped=True)
    if not taken.items:
        return state
    assert turn.session_id is not None
    for item, seq in zip(taken.items, taken.seqs, strict=False):
        deps.transcript.put(turn.session_id, user_row(item, seq, turn.session_id))
    steered = tuple(ChatMessage("user", item.text) for item in taken.items)
    # The history the model reads stays the one the turn began with (its newest user row); the
    # steering rows reach the model through the loop, and the answer's seq moves after them.
    moved = replace(turn, reply_seq=taken.reply_seq)
    loop: ToolLoop = replace(state.loop, messages=(*state.loop.messages, *steered))
    return replace(state, turn=moved, loop=loop)
