"""The session sweep, run every minute by the expiry function (BEHAVIOUR §7).

Sessions whose reset policy has expired are found through the routes' sparse
`by_policy_deadline` index, claimed one by one with a compare-and-swap that sets
`expiry_finalized` (so two sweeps never both act on one), flushed (a memory-only turn over the
transcript) and ended with the policy's reason. Idle routes are pruned by their TTL
(`sessions.route_max_idle_days`), with no sweep: DynamoDB deletes them, for free.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.ports import Catalogue, Sweep, TurnStarter
from hermes_gateway.domain.reset_policy import reset_reason
from hermes_gateway.domain.sessions import SessionEntry
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.services import lifecycle
from hermes_gateway.settings import Settings, rules_from_settings


@dataclass(frozen=True)
class SweepResult:
    expired: int = 0  # sessions flushed and ended
    skipped: int = 0  # busy (a lease held), claimed by another sweep, or no longer due


def flush_source(entry: SessionEntry) -> SessionSource:
    """The source the flush turn speaks as: the session's origin (its user's memory scope)."""
    if entry.origin:
        return SessionSource.from_dict(dict(entry.origin))
    return SessionSource(entry.platform, chat_type=entry.chat_type)


def sweep_expired_sessions(
    sweep: Sweep,
    catalogue: Catalogue,
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
    for entry in sweep.due_for_expiry(now, limit):
        last = entry.last_activity_at if entry.last_activity_at is not None else entry.updated_at
        own = rules.for_key(entry.session_key)  # a named profile's session: its profile's policy
        reason = reset_reason(own.policy_for(entry.platform, entry.chat_type), last, now, own.time_zone)
        if entry.lease_held(now):
            skipped += 1  # active work is never expired; the next sweep looks again
            continue
        claimed = sweep.claim_expiry(entry, now)
        if claimed is None:
            skipped += 1  # another sweep, a message or a turn changed the entry first
            continue
        if reason is None:
            # The policy changed since the deadline was written: re-file the route under today's rules.
            sweep.release_expiry_claim(claimed, now)
            skipped += 1
            continue
        turn = lifecycle.flush_turn(entry.session_id, entry.session_key, flush_source(entry), reason, now)
        try:
            lifecycle.start(starter, turn)
        except Exception:
            sweep.release_expiry_claim(claimed, now)  # the next sweep tries again
            raise
        catalogue.end_session(entry.session_id, reason, now)
        expired += 1
        logger.info("session expired", extra={"session": hash_id(entry.session_key), "reason": reason})
        if events is not None:
            events.emit("session:end", {"session": hash_id(entry.session_key), "reason": reason})
    if expired:
        metrics.add_metric(name="SessionsExpired", unit=MetricUnit.Count, value=expired)
    return SweepResult(expired, skipped)
