"""The router: authorize the sender, route to a session, append the message, start the turn.

Every step is idempotent on the platform event id, because the queue may hand the same message to
the router more than once: the transcript append is de-duplicated by the event id, the turn id
and lease token are derived from it, and the workflow execution is named after the turn.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.domain.access import AccessFacts, authorize, unauthorized_dm_action
from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.pairing import TRY_LATER_REPLY, PairingStore, pairing_reply
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import SessionEntry, SessionStore, TurnLease
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.domain.targets import Channel
from hermes_gateway.errors import SessionBusy
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.services.commands import HomeStore, answer_command
from hermes_gateway.settings import LEASE_MARGIN_SECONDS, Settings, busy_retry_delay


class DeliveryQueue(Protocol):
    def send(self, body: dict[str, Any], *, group_id: str | None = None, dedup_id: str | None = None) -> str: ...


class TurnStarter(Protocol):
    def start(self, name: str, turn: dict[str, Any]) -> bool:
        """Start the named execution; False when one of that name already exists."""
        ...

    def is_running(self, name: str) -> bool: ...


@dataclass(frozen=True)
class RouteOutcome:
    status: str  # started | denied | pairing | command | already_started | already_answered
    reason: str
    turn_id: str | None = None
    session_id: str | None = None


def turn_id_for(session_id: str, event_id: str) -> str:
    """Deterministic and a valid execution name (<= 80 characters of [A-Za-z0-9_-])."""
    return "turn-" + hashlib.sha256(f"{session_id}|{event_id}".encode()).hexdigest()[:40]


def lease_token_for(turn_id: str) -> str:
    return hashlib.sha256(f"lease|{turn_id}".encode()).hexdigest()[:32]


def _busy_retry_after(entry: SessionEntry, settings: Settings, now: float) -> int:
    ttl = settings.sessions.turn_timeout_seconds + LEASE_MARGIN_SECONDS
    lease_age = now - (entry.lease_expires_at - ttl) if entry.lease_expires_at is not None else 0.0
    return busy_retry_delay(settings.sessions.busy_retry_seconds, lease_age)


@dataclass(frozen=True)
class Access:
    """What the router needs besides sessions: the pairing store, a way to reply, lifecycle events,
    and the directory (home channels for /sethome, chats by name for `#name` targets)."""

    pairing: PairingStore
    replies: DeliveryQueue
    events: LifecycleEvents
    directory: RouterDirectory | None = None


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
        text, redact = pairing_reply(source.platform, result.code), [result.code]
        access.events.emit("pairing:requested", {"platform": source.platform, "user": hash_id(source.user_id)})
    elif result.tell_try_later:
        text, redact = TRY_LATER_REPLY, []
    else:
        return RouteOutcome("denied", f"pairing_{result.status}")
    access.replies.send(_reply_job(message, "pairing", text, redact))
    return RouteOutcome("pairing", result.status)


def reply_target(message: InboundMessage) -> dict[str, Any]:
    """Where replies to this message go: its chat and thread, plus the platform's reply details."""
    source = message.source
    target: dict[str, Any] = {"platform": source.platform, "chat_id": source.chat_id, "thread_id": source.thread_id}
    if message.reply_context:
        target["context"] = dict(message.reply_context)
    return target


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

    reply = answer_command(message.text, source, settings, homes=access.directory, now=now)
    if reply is not None:
        access.replies.send(_reply_job(message, "command", reply))
        logger.info("gateway command answered")
        return RouteOutcome("command", "ok")

    session_key = build_session_key(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
        profile=settings.profile,
    )
    logger.append_keys(correlation_id=message.event_id, session=hash_id(session_key))
    entry = store.get_or_create(source, session_key, now)
    if entry.created:
        logger.info("session started", extra={"reset_reason": entry.reset_reason})
        metrics.add_metric(name="SessionStarted", unit=MetricUnit.Count, value=1)
        if access.directory is not None and source.chat_type != "dm" and source.chat_name and source.chat_id:
            # Named chats become `#name` targets; written once per session, not per message.
            channel = Channel(source.platform, source.chat_id, source.thread_id, source.chat_name, source.chat_type)
            access.directory.remember(channel, now)

    turn_id = turn_id_for(entry.session_id, message.event_id)
    if store.turn_started(entry.session_id, message.event_id):
        # A redelivery of a message whose turn already started: its lease is that turn's to release.
        logger.info("message already routed", extra={"turn_id": turn_id})
        return RouteOutcome("already_answered", "ok", turn_id, entry.session_id)
    token = lease_token_for(turn_id)
    ttl = settings.sessions.turn_timeout_seconds + LEASE_MARGIN_SECONDS
    if not lease.acquire(session_key, turn_id, token, now, ttl):
        logger.info("session busy; message retried after the running turn")
        metrics.add_metric(name="SessionBusy", unit=MetricUnit.Count, value=1)
        raise SessionBusy("another turn holds the session", _busy_retry_after(entry, settings, now))

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

    turn = {
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
    started = starter.start(turn_id, turn)
    store.mark_turn_started(entry.session_id, message.event_id, turn_id)
    if not started and not starter.is_running(turn_id):
        # The execution ran to its end before this retry re-took the lease: free it again.
        lease.release(session_key, token)
    metrics.add_metric(name="TurnStarted", unit=MetricUnit.Count, value=1 if started else 0)
    logger.info("turn started" if started else "turn already started", extra={"turn_id": turn_id})
    return RouteOutcome("started" if started else "already_started", "ok", turn_id, entry.session_id)
