"""Scheduled work, run every minute. For now: turn leases that outlived their turn."""

from __future__ import annotations

from hermes_gateway.domain.sessions import TurnLease
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics


def release_expired_leases(lease: TurnLease, now: float, batch: int = 100) -> int:
    """Clear each expired lease (by its token, so a lease renewed meanwhile is kept) and mark the
    session resume_pending, so the next message knows the last turn was cut short."""
    released = 0
    for expired in lease.expired(now, limit=batch):
        if lease.expire(expired, now):
            released += 1
            logger.warning(
                "turn lease expired; session marked resume_pending",
                extra={"session": hash_id(expired.session_key), "turn_id": expired.lease_turn_id},
            )
    metrics.add_metric(name="LeasesExpired", unit=MetricUnit.Count, value=released)
    return released
