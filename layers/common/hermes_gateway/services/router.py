"""The router: authorize the sender, route to a session, append the message, start the turn.

Every step is idempotent on the platform event id, because the queue may hand the same message to
the router more than once: the transcript append is de-duplicated by the event id, the turn id
and lease token are derived from it, and the workflow execution is named after the turn.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.domain.access import authorize
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import SessionEntry, SessionStore, TurnLease
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import SessionBusy
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.settings import LEASE_MARGIN_SECONDS, Settings, busy_retry_delay


class TurnStarter(Protocol):
    def start(self, name: str, turn: dict[str, Any]) -> bool:
        """Start the named execution; False when one of that name already exists."""
        ...

    def is_running(self, name: str) -> bool: ...


@dataclass(frozen=True)
class RouteOutcome:
    status: str  # started | denied | already_started | already_answered
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


def route_message(
    message: InboundMessage,
    *,
    settings: Settings,
    store: SessionStore,
    lease: TurnLease,
    starter: TurnStarter,
    now: float,
) -> RouteOutcome:
    source = message.source
    decision = authorize(source, settings)
    if not decision.allowed:
        # Unauthorized messages are dropped silently: nothing is sent and nothing is stored.
        logger.info("message denied", extra={"platform": source.platform, "reason": decision.reason})
        metrics.add_metric(name="MessageDenied", unit=MetricUnit.Count, value=1)
        return RouteOutcome("denied", decision.reason)

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
        "reply_to": {"platform": source.platform, "chat_id": source.chat_id, "thread_id": source.thread_id},
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
