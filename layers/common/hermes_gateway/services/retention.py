"""The retention sweep, a part of the every-minute tick (BEHAVIOUR §11, domain/retention.py).

Rows, files and routes go by TTL and the bucket's lifecycle rule, for free. What those cannot
reach is a session record (the key, the title, the chat's name, the totals), which no write
touches once its session is idle: the tick walks each profile's sessions started before the
horizon (`sessions.retention_days` ago) through the `by_profile` index, oldest first, at most
`SESSIONS_PER_TICK` a tick, and deletes each that has been idle that long with its title and any
row that has no expiry (written before the setting). A pass that reaches the horizon rests a
day, so a session still in use is looked at once a day. With a retention of 0 it reads nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_gateway.domain.ports import PersonalData, Retention
from hermes_gateway.domain.retention import (
    DAY_SECONDS,
    PASS_INTERVAL_SECONDS,
    SESSIONS_PER_TICK,
    SessionActivity,
    idle_past,
)
from hermes_gateway.errors import SessionBusy
from hermes_gateway.observability import MetricUnit, logger, metrics


@dataclass(frozen=True)
class RetentionResult:
    sessions_retired: int = 0  # idle past the retention: deleted
    sessions_kept: int = 0  # looked at and still in use (or busy)


def sweep_retention(
    retention: Retention,
    data: PersonalData,
    namespaces: tuple[str, ...],
    now: float,
    retention_days: int,
    limit: int = SESSIONS_PER_TICK,
) -> RetentionResult:
    if retention_days <= 0:
        return RetentionResult()
    horizon = now - retention_days * DAY_SECONDS
    retired = kept = 0
    for namespace in namespaces:
        if limit <= 0:
            break
        state = retention.pass_state(namespace)
        if float(state.get("next_pass_at") or 0) > now:
            continue
        aged, cursor = retention.aged_sessions(namespace, horizon, state.get("after"), limit)
        limit -= len(aged)
        for session in aged:
            activity = SessionActivity(session.started_at, session.ended_at, session.route_activity_at,
                                       session.newest_row_at)  # fmt: skip
            if not idle_past(activity, now, retention_days):
                kept += 1
                continue
            try:
                data.erase_session(session.session_id, now, timed_rows=False)  # timed rows go by TTL
            except SessionBusy:
                kept += 1
                continue
            retired += 1
        retention.save_pass_state(
            namespace, {"after": cursor} if cursor else {"next_pass_at": now + PASS_INTERVAL_SECONDS}
        )
    if retired:
        logger.info("sessions past their retention deleted", extra={"sessions": retired})
        metrics.add_metric(name="SessionsRetired", unit=MetricUnit.Count, value=retired)
    return RetentionResult(retired, kept)
