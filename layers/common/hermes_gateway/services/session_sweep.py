"""The session sweep, run every minute by the expiry function (BEHAVIOUR §7).

Sessions whose reset policy has expired are found through the routes' `by_policy_deadline`
index, claimed one by one with a compare-and-swap that sets `expiry_finalized` (so two sweeps
never both act on one), flushed (a memory-only turn over the transcript) and ended with the
policy's reason. Routing entries idle past `sessions.route_max_idle_days` are pruned through the
`by_activity` index; their transcripts stay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.reset_policy import reset_reason, rules_from_settings
from hermes_gateway.domain.sessions import SessionEntry, SessionSweepStore
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.services.router import TurnStarter
from hermes_gateway.settings import Settings

DAY_SECONDS = 86_400


@dataclass(frozen=True)
class SweepResult:
    expired: int = 0  # sessions flushed and ended
    skipped: int = 0  # busy (a lease held), claimed by another sweep, or no longer due


def flush_turn(entry: SessionEntry, reason: str, now: float) -> dict[str, Any]:
    """The flush turn's input (the team's shared turn-input shape, kind "flush")."""
    source = entry.origin or {"platform": entry.platform, "chat_type": entry.chat_type}
    return flush_turn_for(entry.session_id, entry.session_key, source, reason, now)


def flush_turn_for(
    session_id: str, session_key: str, source: dict[str, Any], reason: str, now: float
) -> dict[str, Any]:
    """A memory-only turn over a session that is ending; named after the session, so however
    often it is started (a redelivered message, a retried command), it runs once."""
    return {
        "kind": "flush",
        "turn_id": f"flush-{session_id}",
        "session_id": session_id,
        "session_key": session_key,
        "source": source,
        "reason": reason,
        "started_at": now,
    }


class FlushStarter(Protocol):
    def start(self, name: str, turn: dict[str, Any]) -> bool: ...


def flush_replaced_session(starter: FlushStarter, entry: SessionEntry, source: dict[str, Any], now: float) -> bool:
    """BEHAVIOUR §3: the session a reset replaced has its memories flushed. Only when it had a
    prompt (an empty one has nothing to remember, and a flush is a model call)."""
    if not entry.created or not entry.prev_session_id or not entry.reset_had_activity:
        return False
    reason = entry.reset_reason or "reset"
    started = starter.start(
        f"flush-{entry.prev_session_id}", flush_turn_for(entry.prev_session_id, entry.session_key, source, reason, now)
    )
    logger.info("memory flush started for the replaced session", extra={"reason": reason, "started": started})
    return True


def sweep_expired_sessions(
    store: SessionSweepStore,
    starter: TurnStarter,
    settings: Settings,
    now: float,
    limit: int = 50,
    events: LifecycleEvents | None = None,
) -> SweepResult:
    """Flush and end every session the policy has expired (at most `limit` per run). Safe to run
    twice at once: the claim is a conditional write, and the flush execution is named after the
    session (an idempotent start)."""
    rules = rules_from_settings(settings)
    expired = skipped = 0
    for entry in store.due_for_expiry(now, limit):
        last = entry.last_activity_at if entry.last_activity_at is not None else entry.updated_at
        own = rules.for_key(entry.session_key)  # a named profile's session: its profile's policy
        reason = reset_reason(own.policy_for(entry.platform, entry.chat_type), last, now, own.time_zone)
        if entry.lease_held(now):
            skipped += 1  # active work is never expired; the next sweep looks again
            continue
        claimed = store.claim_expiry(entry, now)
        if claimed is None:
            skipped += 1  # another sweep, a message or a turn changed the entry first
            continue
        if reason is None:
            # The policy changed since the deadline was written: re-file the route under today's rules.
            store.release_expiry_claim(claimed, now)
            skipped += 1
            continue
        turn = flush_turn(entry, reason, now)
        try:
            starter.start(turn["turn_id"], turn)
        except Exception:
            store.release_expiry_claim(claimed, now)  # the next sweep tries again
            raise
        store.end_session(entry.session_id, reason, now)
        expired += 1
        logger.info("session expired", extra={"session": hash_id(entry.session_key), "reason": reason})
        if events is not None:
            events.emit("session:end", {"session": hash_id(entry.session_key), "reason": reason})
    metrics.add_metric(name="SessionsExpired", unit=MetricUnit.Count, value=expired)
    return SweepResult(expired, skipped)


def prune_idle_routes(store: SessionSweepStore, settings: Settings, now: float, limit: int = 100) -> int:
    """Delete routing entries idle longer than `sessions.route_max_idle_days` (0: never). The
    session ends (`pruned`) and its transcript stays; the chat's next message starts afresh."""
    days = settings.sessions.route_max_idle_days
    if days <= 0:
        return 0
    pruned = 0
    for entry in store.idle_routes(now - days * DAY_SECONDS, limit):
        if entry.lease_token is not None:
            continue
        if store.prune_route(entry):
            store.end_session(entry.session_id, "pruned", now)
            pruned += 1
    metrics.add_metric(name="RoutesPruned", unit=MetricUnit.Count, value=pruned)
    return pruned
