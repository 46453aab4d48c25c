"""The router: authorize the sender, route to a session, append the message, start the turn.

One message's path reads its route once and writes it once: `Routes.get`, then (the session
reused) `Leases.begin`, which takes the lease, moves the activity clock, allocates the seqs of the
message and of its answer, and remembers the event, in one conditional write. Then the message's
row and the turn's start. A message that meets a running turn is queued on the same route in one
write, and the chat hears so once per turn. Before either, the user's limits (BEHAVIOUR §11,
`services/limits.py`): the user's counts ride on that same write, and the route read names the
user's other sessions of the day (read only when there are some).

Every step is idempotent on the platform event id, because the inbox stream may hand the same
message to the router more than once: the route remembers the events that began or joined a turn
(a redelivery is recognized without another read), the turn id and lease token are derived from
the event, and the message's row is written at the seq its turn allocated.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Protocol

from hermes_gateway.domain.access import AccessFacts, authorize, unauthorized_dm_action
from hermes_gateway.domain.events import LifecycleEvents, pre_route
from hermes_gateway.domain.limits import Counted, UsageBook
from hermes_gateway.domain.media import attachments_of, keyed
from hermes_gateway.domain.pairing import TRY_LATER_REPLY, PairingStore, pairing_reply
from hermes_gateway.domain.ports import Deliveries, SessionStores, TurnStarter
from hermes_gateway.domain.privacy import ErasureRequests
from hermes_gateway.domain.receipts import ReceiptStore
from hermes_gateway.domain.reset_policy import reset_notice, wants_reset_notice
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import SessionEntry, SessionTally, TranscriptRow, event_mark
from hermes_gateway.domain.source import InboundMessage, SessionSource, sender_of
from hermes_gateway.domain.targets import Channel, ReplyTarget
from hermes_gateway.domain.turn_state import TurnNotes
from hermes_gateway.domain.voice import wants_voice
from hermes_gateway.errors import SessionBusy
from hermes_gateway.observability import MetricUnit, correlate, hash_id, logger, metrics
from hermes_gateway.services import lifecycle
from hermes_gateway.services.commands import CommandContext, CommandResult, HomeStore, answer_command, parse_command
from hermes_gateway.services.limits import Gate, Refused
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
from hermes_gateway.settings import Settings

_BEGIN_ATTEMPTS = 4


@dataclass(frozen=True)
class RouteOutcome:
    status: str  # started | queued | denied | pairing | command | limited | already_started | already_answered
    reason: str
    turn_id: str | None = None
    session_id: str | None = None


class RouterDirectory(HomeStore, Protocol):
    def remember(self, channel: Channel, now: float) -> None: ...


@dataclass(frozen=True)
class Access:
    """What the router needs besides sessions: the pairing store, a way to reply, lifecycle
    events, the directory (home channels for /sethome, chats by name for `#name` targets), and
    receipts (a session command runs once per message), and the usage book (per user: the
    sessions to sum their usage over, the limit window they were told about; None: limits are
    not checked, as in tests that route past them; the deployment always has one).

    `replies_ahead` sends a reply that must reach the chat before the turn its message starts (the
    notice of /retry or /compress, the notice of an automatic reset) and waits for it: sent the
    asynchronous way, a fast turn's answer could overtake it. None: `replies`."""

    pairing: PairingStore
    replies: Deliveries
    events: LifecycleEvents
    directory: RouterDirectory | None = None
    receipts: ReceiptStore | None = None
    replies_ahead: Deliveries | None = None
    # How the operator runs the CLI that approves a pairing: the pairing reply names the command
    # (local mode: the path of the one beside it, and `--local`).
    operator_cli: str = "hermes-gateway"
    local: bool = False
    usage: UsageBook | None = None
    erasures: ErasureRequests | None = None  # /forget's requests (BEHAVIOUR §11)

    def send_ahead(self, job: dict[str, Any]) -> None:
        (self.replies_ahead or self.replies).send(job)


def _reply_job(message: InboundMessage, kind: str, text: str, redact: list[str] | None = None) -> dict[str, Any]:
    """A direct reply from the router, sent by the delivery function like any other."""
    return {
        # Derived from the event: a redelivered message replies once (the outbox de-duplicates).
        "delivery_id": f"{kind}-" + hashlib.sha256(message.event_id.encode()).hexdigest()[:32],
        "target": reply_target(message).to_dict(),
        "text": text,
        "redact": redact or [],
        "correlation_id": message.event_id,  # follows the message into the delivery function's logs
    }


def offer_pairing(message: InboundMessage, access: Access, now: float) -> RouteOutcome:
    """Issue a pairing code and tell the user how to get it approved, or say "try later" once."""
    source = message.source
    if source.user_id is None:  # unauthorized_dm_action pairs only senders with an id
        return RouteOutcome("denied", "no_user_id")
    result = access.pairing.request_code(source.platform, source.user_id, source.user_name, source.chat_id, now)
    logger.info("pairing requested", extra={"platform": source.platform, "status": result.status})
    if result.status == "issued" and result.code:
        reply = pairing_reply(source.platform, result.code, source.profile, cli=access.operator_cli, local=access.local)
        text, redact = reply, [result.code]
        access.events.emit("pairing:requested", {"platform": source.platform, "user": hash_id(source.user_id)})
    elif result.tell_try_later:
        text, redact = TRY_LATER_REPLY, []
    else:
        return RouteOutcome("denied", f"pairing_{result.status}")
    access.replies.send(_reply_job(message, "pairing", text, redact))
    return RouteOutcome("pairing", result.status)


@dataclass(frozen=True)
class Routing:
    """One message on its way: what the router has read and decided so far."""

    message: InboundMessage
    session_key: str
    settings: Settings
    stores: SessionStores
    starter: TurnStarter
    access: Access
    now: float
    gate: Gate

    def turn_context(self, entry: SessionEntry) -> TurnCommandContext:
        stores = self.stores
        return TurnCommandContext(
            self.settings, stores.leases, stores.control, stores.transcript, self.starter, self.session_key, self.now,
            entry,
        )  # fmt: skip


def route_message(
    message: InboundMessage,
    *,
    settings: Settings,
    stores: SessionStores,
    starter: TurnStarter,
    access: Access,
    now: float,
) -> RouteOutcome:
    source = message.source
    facts = AccessFacts(**{name: True for name in message.facts})
    decision = authorize(source, settings, is_paired=access.pairing.is_approved, facts=facts)
    if not decision.allowed:
        # Nothing of an unauthorized message is stored; a DM may get a pairing code (BEHAVIOUR §4).
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
    command = _gateway_command(message, session_key, settings, stores, access, now, starter)
    if command is not None:
        if command.resubmit_text is None:
            return RouteOutcome("command", "ok")
        # /retry: the undone message (its text and its files), as a new turn
        message = replace(message, text=command.resubmit_text, attachments=command.resubmit_attachments)
    # Hooks see the message before it is routed; a trusted in-process hook may switch its session.
    session_key = pre_route(
        access.events,
        session_key,
        {"platform": source.platform, "chat_type": source.chat_type, "session": hash_id(session_key),
         "profile": settings.profile},
        {"source": source.to_dict(), "text": message.text},
    )  # fmt: skip
    correlate(message.event_id, hash_id(session_key))
    gate = Gate(message.source, session_key, settings, access.usage, now)
    routing = Routing(message, session_key, settings, stores, starter, access, now, gate)
    read = stores.routes.get(session_key)
    if read is not None and event_mark(message.event_id) in read.recent_events:
        return _redelivered(routing, read)
    entry = stores.routes.open(source, session_key, now, read=read, touch_activity=False)
    if entry.created:
        _session_started(entry, source, access, now)
        lifecycle.flush_replaced(starter, entry, source, entry.updated_at)
    if wants_reset_notice(entry, settings):  # one short notice after an automatic reset (§3)
        access.send_ahead(_reply_job(message, "reset", reset_notice(entry.reset_reason)))
    return _take_turn(routing, entry)


def _gateway_command(
    message: InboundMessage,
    session_key: str,
    settings: Settings,
    stores: SessionStores,
    access: Access,
    now: float,
    starter: TurnStarter,
) -> CommandResult | None:
    """Answer a gateway command (§9) in the chat; None when the text is not one."""
    if is_turn_command(message.text):
        return None
    context = CommandContext(
        message.source,
        settings,
        now,
        session_key,
        stores,
        access.directory,
        access.events,
        receipts=access.receipts,
        event_id=message.event_id,
        starter=starter,
        usage=access.usage,
        erasures=access.erasures,
        reply_to=reply_target(message).to_dict(),
    )
    command = answer_command(message.text, context)
    if command is not None:
        job = _reply_job(message, "command", command.reply)
        if command.resubmit_text is None:
            access.replies.send(job)
        else:
            access.send_ahead(job)  # "Retrying your last message." before the retried turn's answer
    return command


def _session_started(entry: SessionEntry, source: SessionSource, access: Access, now: float) -> None:
    metrics.add_metric(name="SessionStarted", unit=MetricUnit.Count, value=1)
    if access.directory is not None and source.chat_type != "dm" and source.chat_name and source.chat_id:
        # Named chats become `#name` targets; written once per session, not per message.
        channel = Channel(source.platform, source.chat_id, source.thread_id, source.chat_name, source.chat_type)
        access.directory.remember(channel, now)


def _take_turn(routing: Routing, entry: SessionEntry) -> RouteOutcome:
    """Turn commands first (/stop, /approve ... answered while a turn runs); then the message
    takes the lease and starts its turn, or waits on the running one."""
    message = routing.message
    for _ in range(_BEGIN_ATTEMPTS):
        ctx = routing.turn_context(entry)
        if entry.approval_pending:
            expire_approval(ctx)  # an approval nobody answered in time is denied first
        answered = answer_turn_command(message, ctx)
        command = parse_command(message.text)
        if answered is None and command is not None and command.name == "queue" and not command.args:
            answered = "Usage: /queue <message for after the running turn>"
        if answered is not None:
            routing.access.replies.send(_reply_job(message, "command", answered))
            return RouteOutcome("command", "ok", None, entry.session_id)
        counted = routing.gate.admit(entry)  # limits (BEHAVIOUR §11): after the commands, before a turn
        if isinstance(counted, Refused):
            return _refused(routing, entry, counted)
        forced = command is not None and command.name == "queue"
        text = command.args if forced and command is not None else message.text
        if entry.lease_held(routing.now):
            waiting = _wait(routing, entry, ctx, replace(message, text=text), forced, counted)
            if waiting is not None:
                return waiting
        else:
            started = _begin(routing, entry, text, counted)
            if started is not None:
                return started
        fresh = routing.stores.routes.get(routing.session_key)
        entry = fresh or routing.stores.routes.open(message.source, routing.session_key, routing.now)
    raise SessionBusy("the session's route kept changing", retry_after=1)


def _refused(routing: Routing, entry: SessionEntry, refused: Refused) -> RouteOutcome:
    """Over a limit: no turn, nothing queued or kept; the window's one answer, if it is this one's."""
    if refused.reply is not None:
        routing.access.replies.send(_reply_job(routing.message, "limit", refused.reply))
    return RouteOutcome("limited", refused.limit, None, entry.session_id)


def _wait(
    routing: Routing,
    entry: SessionEntry,
    ctx: TurnCommandContext,
    message: InboundMessage,
    forced: bool,
    counted: Counted | None,
) -> RouteOutcome | None:
    """The message waits on the running turn (queued, steering it, or interrupting it); None
    when the turn ended meanwhile (take the lease now)."""
    mode = "queue" if forced else busy_mode(message.source, routing.settings)
    try:
        notice = queue_busy_message(message, ctx, mode, counted=counted)
    except TurnEnded:
        return None
    if notice is not None:
        routing.access.replies.send(_reply_job(message, "busy", notice))
    return RouteOutcome("queued", mode, None, entry.session_id)


def _begin(routing: Routing, entry: SessionEntry, text: str, counted: Counted | None) -> RouteOutcome | None:
    message, stores = routing.message, routing.stores
    turn_id = lifecycle.turn_id_for(entry.session_id, message.event_id)
    token = lifecycle.lease_token_for(turn_id)
    begun = stores.leases.begin(entry, turn_id, token, message.event_id, routing.now, counted=counted)
    if begun is None:
        return None  # the route changed since it was read: read it again
    if begun.took_over and entry.queued:
        return _behind_stranded_queue(routing, begun.entry, token, text)
    turn = lifecycle.chat_turn(
        session_key=routing.session_key,
        session_id=entry.session_id,
        event_id=message.event_id,
        source=message.source,
        reply_to=reply_target(message),
        user_seq=begun.user_seq,
        reply_seq=begun.reply_seq,
        text=text,
        now=routing.now,
        hidden=begun.entry.hidden,
        model_override=entry.model_override,
        notes=_notes(entry, message.source.platform, resumed_by_takeover=begun.took_over),
        prompt_ratio=entry.tally.prompt_ratio,
        voice=entry.voice,
        speak=wants_voice(entry.voice, attachments_of(message.attachments)),
    )
    # The row is written once the lease is held, so the transcript reads in turn order: a message
    # that waited for a running turn comes after that turn's answer.
    row = _user_row(message, text, begun.user_seq, entry.session_id)
    if not lifecycle.start_after_rows(stores.transcript, routing.starter, turn, [row], leased_at=routing.now):
        return _ran_before(routing, entry, turn_id, token)
    metrics.add_metric(name="TurnStarted", unit=MetricUnit.Count, value=1)
    logger.info("turn started", extra={"turn_id": turn_id})
    return RouteOutcome("started", "ok", turn_id, entry.session_id)


def _ran_before(routing: Routing, entry: SessionEntry, turn_id: str, token: str) -> RouteOutcome:
    """The event's turn ran before: an answered message routed again after the route stopped
    remembering it (an operator's redrive by time). Its lease is given back, or handed to what
    queued meanwhile, so the session is not held until the lease expires."""
    successor = lifecycle.Successor(
        routing.session_key, entry.session_id, routing.now, routing.settings.turns.busy_followup == "one",
        entry.model_override, entry.hidden, voice=entry.voice,
    )  # fmt: skip
    lifecycle.end_turn(
        routing.stores.leases, routing.stores.transcript, routing.starter, successor, token,
        tally=SessionTally(), succeeded=True,
    )  # fmt: skip
    logger.info("message answered before: its turn is not run again", extra={"turn_id": turn_id})
    return RouteOutcome("already_answered", "ok", turn_id, entry.session_id)


def _user_row(message: InboundMessage, text: str, seq: int, session_id: str) -> TranscriptRow:
    source = message.source
    media = keyed(attachments_of(message.attachments), source.profile, session_id, seq)
    return TranscriptRow(
        seq, "user", text, message.received_at, sender_name=source.user_name, platform_message_id=source.message_id,
        attachments=media, sender=sender_of(source), quote=message.reply_to_text, quote_id=message.reply_to_message_id,
    )  # fmt: skip


def _notes(entry: SessionEntry, platform: str, *, resumed_by_takeover: bool = False) -> TurnNotes:
    """What the turn reads from the route at its start: a cut-short turn to continue, the
    replaced session whose memory flush goes first, and (Slack, Discord) the session a reset
    with activity replaced."""
    resumed = entry.auto_continue.reason if entry.auto_continue is not None else None
    if resumed is None and resumed_by_takeover:
        resumed = "lease_expired"
    continuity = None
    if entry.created and entry.reset_had_activity and entry.prev_session_id and platform in ("slack", "discord"):
        continuity = entry.prev_session_id
    after_flush = entry.prev_session_id if entry.is_fresh_reset and entry.reset_had_activity else None
    return TurnNotes(resumed=resumed, continuity_from=continuity, after_flush=after_flush)


def _behind_stranded_queue(routing: Routing, entry: SessionEntry, token: str, text: str) -> RouteOutcome:
    """A lease that expired (its turn crashed) left messages queued behind it: this message goes
    behind them, and the lease just taken passes straight to the oldest, so order holds."""
    ctx = routing.turn_context(entry)
    queue_busy_message(replace(routing.message, text=text), ctx, "queue")
    successor = lifecycle.Successor(
        routing.session_key,
        entry.session_id,
        routing.now,
        routing.settings.turns.busy_followup == "one",
        entry.model_override,
        entry.hidden,
        voice=entry.voice,
    )
    lifecycle.end_turn(
        routing.stores.leases, routing.stores.transcript, routing.starter, successor, token,
        tally=SessionTally(), succeeded=False,
    )  # fmt: skip
    logger.info("queued input recovered after an expired lease")
    return RouteOutcome("queued", "recovered", None, entry.session_id)


def _redelivered(routing: Routing, entry: SessionEntry) -> RouteOutcome:
    """The route remembers this event: it began a turn, or joined one's queue. Only when its turn
    still holds the lease may its start be missing (the router stopped between the two): the
    row and the start are repeated, each harmless twice. An execution the start finds that ran to
    its end before this lease was taken is an older one (`start_after_rows`): an answered message
    routed again after the route forgot it, whose first routing stopped before its start; its
    lease goes on, as `_begin`'s does."""
    message = routing.message
    turn_id = lifecycle.turn_id_for(entry.session_id, message.event_id)
    if entry.lease_token != lifecycle.lease_token_for(turn_id) or entry.reply_seq is None:
        logger.info("message already routed", extra={"turn_id": turn_id})
        return RouteOutcome("already_answered", "ok", turn_id, entry.session_id)
    user_seq = entry.reply_seq - 1
    row = _user_row(message, message.text, user_seq, entry.session_id)
    turn = lifecycle.chat_turn(
        session_key=routing.session_key, session_id=entry.session_id, event_id=message.event_id,
        source=message.source, reply_to=reply_target(message), user_seq=user_seq, reply_seq=entry.reply_seq,
        text=message.text, now=routing.now, hidden=entry.hidden, model_override=entry.model_override,
        notes=_notes(entry, message.source.platform), prompt_ratio=entry.tally.prompt_ratio,
        voice=entry.voice, speak=wants_voice(entry.voice, attachments_of(message.attachments)),
    )  # fmt: skip
    if not lifecycle.start_after_rows(
        routing.stores.transcript, routing.starter, turn, [row], leased_at=entry.lease_started_at
    ):
        return _ran_before(routing, entry, turn_id, entry.lease_token)
    logger.info("redelivered message: its turn runs")
    return RouteOutcome("already_started", "ok", turn_id, entry.session_id)


__all__ = ["Access", "ReplyTarget", "RouteOutcome", "offer_pairing", "route_message"]
