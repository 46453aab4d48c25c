"""What the router does with a message for a session that has a running (or paused) turn.

`/stop`, `/approve`, `/deny`, yes/no (to a pending approval) and `/yolo` are answered here, before
the busy check, so they work while a turn runs. A plain message that meets a running turn is
queued on the session's route (`Leases.enqueue`) per `busy_input_mode`, and the chat is told once
per turn; the turn that finishes hands its lease to the queue (`lifecycle.end_turn`).

Plain text reads nothing here unless the route shows an approval waiting (a yes or no may
answer it): the router's one read of the route is enough.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hermes_gateway.domain.access import is_admin
from hermes_gateway.domain.limits import Counted
from hermes_gateway.domain.media import attachments_of
from hermes_gateway.domain.ports import Leases, Transcript, TurnControl, TurnStarter
from hermes_gateway.domain.sessions import SessionEntry
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import Step, TurnState
from hermes_gateway.domain.turns import PendingApproval, QueuedInput
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.services.commands import parse_command
from hermes_gateway.settings import Settings

TURN_COMMANDS = ("stop", "approve", "deny", "yolo", "queue")
_YES = frozenset({"yes", "y", "ok", "approve"})
_NO = frozenset({"no", "n", "deny"})
BUSY_NOTICES = {
    "queue": "I'm still working on your previous message; this one is queued for the next turn.",
    "interrupt": "Stopping what I was doing to answer this.",
    "steer": "Got it; I'll take this into account in the turn that is running.",
}
QUEUE_FULL = "Too many messages are waiting for the running turn; this one was not queued. Please send it again later."


@dataclass(frozen=True)
class TurnCommandContext:
    settings: Settings
    leases: Leases
    control: TurnControl
    transcript: Transcript
    starter: TurnStarter
    session_key: str
    now: float
    entry: SessionEntry | None = None  # the route as the router read it


def busy_mode(source: SessionSource, settings: Settings) -> str:
    platform = settings.platforms.get(source.platform)
    return (platform.busy_input_mode if platform is not None else "") or settings.turns.busy_input_mode


def may_answer(source: SessionSource, approval: PendingApproval, settings: Settings) -> bool:
    """Only the user who was asked, an admin, or a configured approver answers an approval."""
    user = source.user_id
    if user is not None and user == approval.asked_of:
        return True
    return is_admin(source, settings) or (user is not None and user in settings.turns.approvers)


def is_turn_command(text: str) -> bool:
    command = parse_command(text)
    return command is not None and command.name in TURN_COMMANDS


def reply_target(message: InboundMessage) -> ReplyTarget:
    """Where replies to this message go: its chat and thread, plus the platform's reply details;
    a named profile's bot answers, never the deployment's own."""
    source = message.source
    return ReplyTarget(source.platform, source.chat_id, source.thread_id, source.profile, dict(message.reply_context))


def _approval_reply(text: str) -> tuple[str, str] | None:
    """(decision, scope) for /approve [session|always], /deny and a bare yes or no."""
    command = parse_command(text)
    if command is not None and command.name == "approve":
        scope = command.args.lower() or "once"
        return ("approved", scope if scope in ("session", "always") else "once")
    if command is not None and command.name == "deny":
        return ("denied", "once")
    word = text.strip().lower().rstrip(".!")
    if word in _YES:
        return ("approved", "once")
    if word in _NO:
        return ("denied", "once")
    return None


def resume_after_answer(approval: PendingApproval, ctx: TurnCommandContext) -> bool:
    """Start the paused turn's continuation with the answer (idempotent: named after the count).
    False when the state is gone or another turn took the session meanwhile."""
    saved = ctx.control.paused_state(approval.session_id, approval.turn_id)
    if saved is None or approval.decision is None:
        return False
    state = TurnState.from_json(saved)
    token = state.turn.lease_token or ""
    # The lease is normally still held (its expiry was the approval's); after the tick expired it,
    # it is free again and the same token takes it back.
    if not ctx.leases.recover(ctx.session_key, token, approval.turn_id, ctx.now):
        logger.info("approval answered too late: the session moved on", extra={"turn_id": approval.turn_id})
        return False
    decisions = {**state.loop.decisions, approval.call_id: approval.decision}
    loop = replace(state.loop, decisions=decisions, exec_started=0.0)  # a new execution's clock
    resumed = replace(state, loop=loop, approval=approval.decision, next=Step.TOOLS)
    ctx.starter.start(f"{approval.turn_id}-a{loop.approvals or 1}", resumed.to_json())
    logger.info("paused turn resumed", extra={"turn_id": approval.turn_id, "decision": approval.decision})
    metrics.add_metric(name="ApprovalAnswered", unit=MetricUnit.Count, value=1)
    return True


def expire_approval(ctx: TurnCommandContext) -> bool:
    """A pending approval past its deadline is denied (`timeout`) and its turn resumed. Called by
    the next message for the session and by the expiry tick."""
    approval = ctx.control.state(ctx.session_key).approval
    if approval is None or ctx.now < approval.expires_at:
        return False
    answered = ctx.control.answer(ctx.session_key, approval.turn_id, approval.decision or "timeout")
    return answered is not None and resume_after_answer(answered, ctx)


def request_stop(ctx: TurnCommandContext) -> str | None:
    """Flag the running turn to stop, and leave /stop's marker at its answer's seq, so an answer
    that comes after it is neither kept nor sent. The stopped turn's id; None: nothing runs."""
    stopped = ctx.leases.request_stop(ctx.session_key, ctx.now)
    if stopped is None:
        return None
    if stopped.reply_seq is not None:
        ctx.transcript.mark_stopped(stopped.session_id, stopped.reply_seq, stopped.turn_id)
    return stopped.turn_id


def _stop(message: InboundMessage, ctx: TurnCommandContext) -> str:
    stopped = request_stop(ctx)
    logger.info("stop requested", extra={"turn_id": stopped})
    return "Stopping the current turn." if stopped else "Nothing is running."


def _yolo(message: InboundMessage, ctx: TurnCommandContext) -> str:
    if not (is_admin(message.source, ctx.settings) or message.source.chat_type == "dm"):
        return "/yolo is for admins in shared chats."
    on = not ctx.control.state(ctx.session_key).yolo
    ctx.control.set_yolo(ctx.session_key, on)
    if on:
        return "Tool approvals are off for this session (/yolo again to turn them back on)."
    return "Tool approvals are back on for this session."


_SWITCHES = {"stop": _stop, "yolo": _yolo}


def answer_turn_command(message: InboundMessage, ctx: TurnCommandContext) -> str | None:
    """The reply to a turn command (or to yes/no while an approval is pending); None otherwise."""
    command = parse_command(message.text)
    if command is not None and command.name in _SWITCHES:
        return _SWITCHES[command.name](message, ctx)
    answer = _approval_reply(message.text)
    if answer is None:
        return None
    if command is None and ctx.entry is not None and not ctx.entry.approval_pending:
        return None  # plain text: a yes/no only answers a pending approval
    pending = ctx.control.state(ctx.session_key).approval
    if pending is None and command is None:
        return None
    if pending is None or pending.decision is not None:
        return "Nothing is waiting for approval."
    refused = _not_theirs(message.source, pending, ctx.settings)
    if refused is not None:
        return refused
    decision, scope = _decision(answer, pending, ctx.now)
    answered = ctx.control.answer(ctx.session_key, pending.turn_id, decision, scope)
    if answered is None:
        return "Nothing is waiting for approval."
    if answered.decision == "approved" and answered.scope in ("session", "always"):
        ctx.control.approve_tool(ctx.session_key, answered.tool, answered.scope, answered.session_id)
    resume_after_answer(answered, ctx)
    if answered.decision == "timeout":
        return "That approval had already timed out, so the request was denied."
    if answered.decision == "approved":
        suffix = {"session": " for this session", "always": " from now on"}.get(answered.scope, "")
        return f"Approved{suffix}: `{answered.tool}`."
    return f"Denied: `{answered.tool}`."


def _not_theirs(source: SessionSource, pending: PendingApproval, settings: Settings) -> str | None:
    if may_answer(source, pending, settings):
        return None
    if pending.asked_of is None:  # a call beyond the turn's reach (BEHAVIOUR §11)
        return "Only an admin or an approver can answer this approval."
    return "Only the person who was asked (or an admin) can answer this approval."


def _decision(answer: tuple[str, str], pending: PendingApproval, now: float) -> tuple[str, str]:
    """(decision, scope): late is a timeout; a call beyond the turn's reach is approved once only
    (`session` and `always` are for the tools the user may allow themselves)."""
    if now >= pending.expires_at:
        return "timeout", "once"
    decision, scope = answer
    return decision, "once" if pending.asked_of is None else scope


class TurnEnded(Exception):
    """The running turn released the lease before the message could be queued: take it now."""


def queue_busy_message(
    message: InboundMessage, ctx: TurnCommandContext, mode: str | None = None, *, counted: Counted | None = None
) -> str | None:
    """Queue a message that met a running turn (with `counted`, its user's counts in the same
    write). Returns the notice to send (once per turn), or None. Raises TurnEnded when the turn
    ended meanwhile: the caller then takes the lease."""
    assert ctx.entry is not None
    mode = mode or busy_mode(message.source, ctx.settings)
    item = QueuedInput(
        event_id=message.event_id,
        text=message.text,
        received_at=message.received_at,
        source=message.source,
        reply_to=reply_target(message),
        mode=mode,
        attachments=attachments_of(message.attachments),
        quote=message.reply_to_text,
        quote_id=message.reply_to_message_id,
    )
    result = ctx.leases.enqueue(ctx.entry, item, max_items=ctx.settings.turns.max_queued, now=ctx.now, counted=counted)
    if result.status == "not_busy":
        raise TurnEnded
    metrics.add_metric(name="MessageQueued", unit=MetricUnit.Count, value=1 if result.status == "queued" else 0)
    logger.info("message for a busy session", extra={"status": result.status, "mode": mode})
    if result.status == "full":
        return QUEUE_FULL
    if result.status != "queued":
        return None
    if mode == "interrupt":
        request_stop(ctx)
    if ctx.settings.turns.busy_ack and result.first_notice:
        return BUSY_NOTICES[mode]
    return None
