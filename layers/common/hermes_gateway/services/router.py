"""The router: authorize the sender, route to a session, append the message, start the turn.

Every step is idempotent on the platform event id, because the queue may hand the same message to
the router more than once: the transcript append is de-duplicated by the event id, the turn id
and lease token are derived from it, and the workflow execution is named after the turn.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hermes_gateway.domain.access import AccessFacts, authorize, unauthorized_dm_action
from hermes_gateway.domain.events import LifecycleEvents, pre_route
from hermes_gateway.domain.pairing import TRY_LATER_REPLY, PairingStore, pairing_reply
from hermes_gateway.domain.receipts import ReceiptStore
from hermes_gateway.domain.reset_policy import reset_notice, wants_reset_notice
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import SessionEntry, SessionStore, TurnLease
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.domain.targets import Channel
from hermes_gateway.domain.turns import TurnControl
from hermes_gateway.errors import SessionBusy
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.services.commands import (
    CommandContext,
    CommandResult,
    HomeStore,
    answer_command,
    parse_command,
)
from hermes_gateway.services.turn import release_or_hand_off
from hermes_gateway.services.turn_commands import (
    TurnCommandContext,
    TurnEnded,
    answer_turn_command,
    busy_mode,
    expire_approval,
    is_turn_command,
    queue_busy_message,
    reply_target,
)
from hermes_gateway.settings import Settings, busy_retry_delay


class DeliveryQueue(Protocol):
    def send(self, body: dict[str, Any], *, group_id: str | None = None, dedup_id: str | None = None) -> str: ...


class TurnStarter(Protocol):
    def start(self, name: str, turn: dict[str, Any]) -> bool:
        """Start the named execution; False when one of that name already exists."""
        ...

    def is_running(self, name: str) -> bool: ...


@dataclass(frozen=True)
class RouteOutcome:
    status: str  # started | queued | denied | pairing | command | already_started | already_answered
    reason: str
    turn_id: str | None = None
    session_id: str | None = None


def turn_id_for(session_id: str, event_id: str) -> str:
    """Deterministic and a valid execution name (<= 80 characters of [A-Za-z0-9_-])."""
    return "turn-" + hashlib.sha256(f"{session_id}|{event_id}".encode()).hexdigest()[:40]


def lease_token_for(turn_id: str) -> str:
    return hashlib.sha256(f"lease|{turn_id}".encode()).hexdigest()[:32]


def _busy_retry_after(entry: SessionEntry, settings: Settings, now: float) -> int:
    ttl = settings.sessions.lease_ttl_seconds
    lease_age = now - (entry.lease_expires_at - ttl) if entry.lease_expires_at is not None else 0.0
    return busy_retry_delay(settings.sessions.busy_retry_seconds, lease_age)


@dataclass(frozen=True)
class Access:
    """What the router needs besides sessions: the pairing store, a way to reply, lifecycle events,
    the directory (home channels for /sethome, chats by name for `#name` targets), and the turn
    control (queued input and approvals; None: a busy session's message is retried later)."""

    pairing: PairingStore
    replies: DeliveryQueue
    events: LifecycleEvents
    directory: RouterDirectory | None = None
    control: TurnControl | None = None
    # Receipts make a session command run once per message (None: a redelivery runs it again).
    receipts: ReceiptStore | None = None


class RouterDirectory(HomeStore, Protocol):
    def remember(self, channel: Channel, now: float) -> None: ...


def offer_pairing(message: InboundMessage, access: Access, now: float) -> RouteOutcome:
    """Issue a pairing code and tell the user how to get it approved, or say "try later" once."""
    source = message.source
    if source.user_id is None:  # unauthorized_dm_action pairs only senders with an id
        return RouteOutcome("denied", "no_user_id")
    result = access.pairing.request_code(source.platform, source.user_id, source.user_name, source.chat_id, now)
    logger.info("pairing requested", extra={"platform": source.platform, "status": result.status})
    if result.status == "issued" and result.code:
        text, redact = pairing_reply(source.platform, result.code, source.profile), [result.code]
        access.events.emit("pairing:requested", {"platform": source.platform, "user": hash_id(source.user_id)})
    elif result.tell_try_later:
        text, redact = TRY_LATER_REPLY, []
    else:
        return RouteOutcome("denied", f"pairing_{result.status}")
    access.replies.send(_reply_job(message, "pairing", text, redact))
    return RouteOutcome("pairing", result.status)


def _reply_job(message: InboundMessage, kind: str, text: str, redact: list[str] | None = None) -> dict[str, Any]:
    """A direct reply from the router, sent by the delivery function like any other."""
    return {
        # Derived from the event: a redelivered message replies once (the outbox de-duplicates).
        "delivery_id": f"{kind}-" + hashlib.sha256(message.event_id.encode()).hexdigest()[:32],
        "target": reply_target(message),
        "text": text,
        "redact": redact or [],
        "correlation_id": message.event_id,  # follows the message into the delivery function's logs
    }


def _turn_command(message: InboundMessage, ctx: TurnCommandContext, access: Access) -> str | None:
    """Commands about the running turn (/stop, /approve, /deny, yes/no, /yolo, a bare /queue),
    answered before the busy check. An approval nobody answered in time is denied first."""
    expire_approval(ctx)
    answered = answer_turn_command(message, ctx)
    command = parse_command(message.text)
    if answered is None and command is not None and command.name == "queue" and not command.args:
        answered = "Usage: /queue <message for after the running turn>"
    if answered is not None:
        access.replies.send(_reply_job(message, "command", answered))
        logger.info("turn command answered")
    return answered


def _lease_or_retry_later(entry: SessionEntry, lease: TurnLease, turn_id: str, settings: Settings, now: float) -> None:
    """Without turn control a busy session's message goes back to the inbound queue for later."""
    ttl = settings.sessions.lease_ttl_seconds
    if not lease.acquire(entry.session_key, turn_id, lease_token_for(turn_id), now, ttl):
        metrics.add_metric(name="SessionBusy", unit=MetricUnit.Count, value=1)
        raise SessionBusy("another turn holds the session", _busy_retry_after(entry, settings, now))


def _turn_command_or_busy(
    message: InboundMessage, entry: SessionEntry, ctx: TurnCommandContext, turn_id: str, access: Access
) -> tuple[RouteOutcome | None, InboundMessage]:
    """A turn command's answer, or the message queued behind the running turn; (None, message)
    once this message's turn holds the lease (`/queue text` becomes plain `text`)."""
    if _turn_command(message, ctx, access) is not None:
        return RouteOutcome("command", "ok", None, entry.session_id), message
    command = parse_command(message.text)
    forced = command is not None and command.name == "queue"
    if forced and command is not None:
        message = replace(message, text=command.args)
    return _take_lease_or_queue(message, entry, ctx, turn_id, access, forced_queue=forced), message


def _take_lease_or_queue(
    message: InboundMessage,
    entry: SessionEntry,
    ctx: TurnCommandContext,
    turn_id: str,
    access: Access,
    *,
    forced_queue: bool,
) -> RouteOutcome | None:
    """None once this message's turn holds the lease; else the message waits on the running turn
    (queued, steering it, or interrupting it), and the chat hears so once per turn."""
    mode = "queue" if forced_queue else busy_mode(message.source, ctx.settings)
    token = lease_token_for(turn_id)
    for _ in range(3):
        if ctx.lease.acquire(ctx.session_key, turn_id, token, ctx.now, ctx.settings.sessions.lease_ttl_seconds):
            if entry.resume_pending or entry.auto_continue is not None:
                return _behind_stranded_queue(message, entry, ctx, token)
            return None
        try:
            notice = queue_busy_message(message, ctx, mode)
        except TurnEnded:
            continue  # the turn finished between the two writes: take the lease now
        if notice is not None:
            access.replies.send(_reply_job(message, "busy", notice))
        return RouteOutcome("queued", mode, None, entry.session_id)
    raise SessionBusy("the session's lease changed hands repeatedly", _busy_retry_after(entry, ctx.settings, ctx.now))


def _session_started(entry: SessionEntry, source: SessionSource, access: Access, now: float) -> None:
    logger.info("session started", extra={"reset_reason": entry.reset_reason})
    metrics.add_metric(name="SessionStarted", unit=MetricUnit.Count, value=1)
    if access.directory is not None and source.chat_type != "dm" and source.chat_name and source.chat_id:
        # Named chats become `#name` targets; written once per session, not per message.
        channel = Channel(source.platform, source.chat_id, source.thread_id, source.chat_name, source.chat_type)
        access.directory.remember(channel, now)


def _session_notes(entry: SessionEntry, platform: str) -> dict[str, Any]:
    """What the turn reads from the route at its start: a cut-short turn to continue, the model
    override, the replaced session whose memory flush goes first, and (Slack, Discord) the
    session a reset with activity replaced."""
    notes: dict[str, Any] = {}
    if entry.auto_continue is not None:
        notes["resumed"] = entry.auto_continue.reason  # the engine answers the cut-short message too
    if entry.model_override is not None:
        notes["model_override"] = entry.model_override.to_dict()
    if entry.created and entry.reset_had_activity and entry.prev_session_id and platform in ("slack", "discord"):
        notes["continuity_from"] = entry.prev_session_id
    if entry.is_fresh_reset and entry.reset_had_activity and entry.prev_session_id:
        # the replaced session's memory flush runs first (BEHAVIOUR §3): the turn waits for it
        notes["after_flush"] = entry.prev_session_id
    return notes


def _flush_replaced(starter: TurnStarter, entry: SessionEntry, source: SessionSource) -> None:
    from hermes_gateway.services.session_sweep import flush_replaced_session  # it imports this module

    flush_replaced_session(starter, entry, source.to_dict(), entry.updated_at)


def _gateway_command(
    message: InboundMessage,
    session_key: str,
    settings: Settings,
    store: SessionStore,
    access: Access,
    now: float,
    starter: TurnStarter | None = None,
) -> CommandResult | None:
    """Answer a gateway command (§9) in the chat; None when the text is not one."""
    if is_turn_command(message.text):
        return None
    context = CommandContext(
        message.source,
        settings,
        now,
        session_key,
        store,
        access.directory,
        access.events,
        receipts=access.receipts,
        event_id=message.event_id,
        starter=starter,
    )
    command = answer_command(message.text, context)
    if command is not None:
        access.replies.send(_reply_job(message, "command", command.reply))
        logger.info("gateway command answered")
    return command


def _behind_stranded_queue(
    message: InboundMessage, entry: SessionEntry, ctx: TurnCommandContext, token: str
) -> RouteOutcome | None:
    """A lease that expired (the turn crashed) may leave messages queued behind it: this message
    goes behind them, and the lease just taken passes straight to the oldest, so order holds."""
    if not ctx.control.state(ctx.session_key).queue:
        return None
    queue_busy_message(message, ctx, "queue")
    release_or_hand_off(
        ctx.control, ctx.store, ctx.starter, ctx.settings, ctx.now,
        session_key=ctx.session_key, session_id=entry.session_id, token=token,
        model_override=entry.model_override.to_dict() if entry.model_override else None,
    )  # fmt: skip
    logger.info("queued input recovered after an expired lease")
    return RouteOutcome("queued", "recovered", None, entry.session_id)


def route_message(
    message: InboundMessage,
    *,
    settings: Settings,
    store: SessionStore,
    lease: TurnLease,
    starter: TurnStarter,
    access: Access,
    now: float,
) -> RouteOutcome:
    source = message.source
    facts = AccessFacts(**{name: True for name in message.facts})
    decision = authorize(source, settings, is_paired=access.pairing.is_approved, facts=facts)
    if not decision.allowed:
        # Nothing of an unauthorized message is stored; a DM may get a pairing code (§4).
        logger.info("message denied", extra={"platform": source.platform, "reason": decision.reason})
        metrics.add_metric(name="MessageDenied", unit=MetricUnit.Count, value=1)
        if unauthorized_dm_action(source, settings) == "pair":
            return offer_pairing(message, access, now)
        return RouteOutcome("denied", decision.reason)

    session_key = build_session_key(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
        profile=settings.profile,
    )
    command = _gateway_command(message, session_key, settings, store, access, now, starter)
    if command is not None:
        if command.resubmit_text is None:
            return RouteOutcome("command", "ok")
        message = replace(message, text=command.resubmit_text)  # /retry: the undone text, as a new turn
    # Hooks see the message before it is routed; a trusted in-process hook may switch its session.
    session_key = pre_route(
        access.events,
        session_key,
        {
            "platform": source.platform,
            "chat_type": source.chat_type,
            "session": hash_id(session_key),
            "profile": settings.profile,
        },
        {"source": source.to_dict(), "text": message.text},
    )
    logger.append_keys(correlation_id=message.event_id, session=hash_id(session_key))
    entry = store.get_or_create(source, session_key, now)
    if entry.created:
        _session_started(entry, source, access, now)
        _flush_replaced(starter, entry, source)
    if wants_reset_notice(entry, settings):  # one short notice after an automatic reset (§3)
        access.replies.send(_reply_job(message, "reset", reset_notice(entry.reset_reason)))

    turn_id = turn_id_for(entry.session_id, message.event_id)
    if store.turn_started(entry.session_id, message.event_id):
        # A redelivery of a message whose turn already started: its lease is that turn's to release.
        logger.info("message already routed", extra={"turn_id": turn_id})
        return RouteOutcome("already_answered", "ok", turn_id, entry.session_id)

    if access.control is None:
        _lease_or_retry_later(entry, lease, turn_id, settings, now)
    else:
        ctx = TurnCommandContext(settings, store, lease, access.control, starter, session_key, now)
        waiting, message = _turn_command_or_busy(message, entry, ctx, turn_id, access)
        if waiting is not None:
            return waiting
    token = lease_token_for(turn_id)

    # Appended only once the lease is held, so the transcript reads in turn order: a message that
    # waited for a running turn comes after that turn's reply.
    user_seq = store.append_message(
        entry.session_id,
        "user",
        message.text,
        message.received_at,
        dedupe_key=message.event_id,
        sender_name=source.user_name,
        platform_message_id=source.message_id,
    )

    turn: dict[str, Any] = {
        "turn_id": turn_id,
        "lease_token": token,
        "session_key": session_key,
        "session_id": entry.session_id,
        "user_seq": user_seq,
        "event_id": message.event_id,
        "source": source.to_dict(),
        # The reply target is fixed here and never read later from mutable session state.
        "reply_to": reply_target(message),
        "started_at": now,
    }
    turn.update(_session_notes(entry, source.platform))
    started = starter.start(turn_id, turn)
    store.mark_turn_started(entry.session_id, message.event_id, turn_id)
    if not started and not starter.is_running(turn_id):
        # The execution ran to its end before this retry re-took the lease: free it again (or
        # hand it to a message queued meanwhile).
        if access.control is not None:
            release_or_hand_off(
                access.control, store, starter, settings, now, session_key=session_key,
                session_id=entry.session_id, token=token, model_override=turn.get("model_override"),
            )  # fmt: skip
        else:
            lease.release(session_key, token)
    metrics.add_metric(name="TurnStarted", unit=MetricUnit.Count, value=1 if started else 0)
    logger.info("turn started" if started else "turn already started", extra={"turn_id": turn_id})
    return RouteOutcome("started" if started else "already_started", "ok", turn_id, entry.session_id)
