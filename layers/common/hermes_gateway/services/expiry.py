"""Scheduled work, run every minute: turn leases that outlived their turn with something waiting
on them (a timed-out approval, queued messages), cron jobs, and the session sweep.

Each part is idempotent and independent: one that fails does not keep the others from running,
and the tick fails afterwards (so the failure is retried and alarmed on) with the first error.
A lease that outlived a turn with nothing waiting on it is not the tick's: the session's next
message takes it over (and the session resumes the cut-short turn), so no index write is paid
for every turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hermes_gateway.domain.ports import Leases, Routes, Transcript, TurnControl, TurnStarter
from hermes_gateway.domain.sessions import SessionTally
from hermes_gateway.domain.turns import WaitingLease
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.services import lifecycle
from hermes_gateway.services.turn_commands import TurnCommandContext, expire_approval
from hermes_gateway.settings import Settings


@dataclass(frozen=True)
class LeaseRecovery:
    """What a lease that outlived its turn may have left waiting: the leases, the turn control
    (queue, approvals), the transcript (queued messages join it) and a way to start a turn."""

    settings: Settings
    routes: Routes
    leases: Leases
    control: TurnControl
    transcript: Transcript
    starter: TurnStarter


def recover_expired_leases(deps: LeaseRecovery, now: float, batch: int = 100) -> dict[str, int]:
    """Each expired lease that something waits on (BEHAVIOUR §5: nothing is stranded):

    - a turn paused for an approval nobody answered in time: the approval is denied (`timeout`)
      and the turn resumed, so the model hears it and the chat gets its answer;
    - otherwise the lease is cleared and the session marked resume_pending; the messages queued
      behind the lost turn get a recovery lease handed straight to the oldest, so they are
      answered now, in order, not when the chat next writes.
    """
    counts = {"leases_released": 0, "approvals_timed_out": 0, "queues_recovered": 0}
    for expired in deps.leases.waiting(now, limit=batch):
        key = expired.session_key
        own = deps.settings.for_session_key(key)  # a named profile's session: its profile's settings
        ctx = TurnCommandContext(own, deps.leases, deps.control, deps.transcript, deps.starter, key, now)
        if expire_approval(ctx):
            counts["approvals_timed_out"] += 1
            logger.info("approval timed out: denied, turn resumed", extra={"session": hash_id(key)})
            continue
        if not deps.leases.expire(expired, now):
            continue  # renewed or released meanwhile
        counts["leases_released"] += 1
        logger.warning(
            "turn lease expired; session marked resume_pending",
            extra={"session": hash_id(key), "turn_id": expired.lease_turn_id},
        )
        if deps.control.state(key).queue and _hand_queue_on(deps, expired, now):
            counts["queues_recovered"] += 1
    if counts["leases_released"]:
        metrics.add_metric(name="LeasesExpired", unit=MetricUnit.Count, value=counts["leases_released"])
    return counts


def _hand_queue_on(deps: LeaseRecovery, expired: WaitingLease, now: float) -> bool:
    """Take the freed lease under a token derived from the lost one (a retried tick takes it
    again, not a second one) and hand it to the queue's head in the same write that checks it."""
    digest = hashlib.sha256(f"recover|{expired.lease_token}".encode()).hexdigest()
    turn_id, token = f"recover-{digest[:32]}", digest[32:64]
    if not deps.leases.recover(expired.session_key, token, turn_id, now):
        return False  # a new message took the session first: its router hands the queue on
    entry = deps.routes.get(expired.session_key)
    if entry is None:
        return False
    own = deps.settings.for_session_key(expired.session_key)
    successor = lifecycle.Successor(
        expired.session_key,
        entry.session_id,
        now,
        own.turns.busy_followup == "one",
        entry.model_override,
        entry.hidden,
        voice=entry.voice,
    )
    status = lifecycle.end_turn(
        deps.leases, deps.transcript, deps.starter, successor, token, tally=SessionTally(), succeeded=False
    )
    logger.info("queued input recovered after an expired lease", extra={"session": hash_id(expired.session_key)})
    return status == "handed_off"


def run_tick(parts: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, Any]:
    """Run every part of the tick in order; raise the first failure once all have run."""
    summary: dict[str, Any] = {}
    first_error: Exception | None = None
    for name, part in parts.items():
        try:
            summary.update(part())
        except Exception as exc:  # noqa: BLE001 - the other parts still run; re-raised below
            logger.exception("tick part failed", extra={"part": name})
            summary[f"{name}_failed"] = type(exc).__name__
            first_error = first_error or exc
    if first_error is not None:
        raise first_error
    return summary
