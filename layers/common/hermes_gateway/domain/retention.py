"""How long transcripts and files are kept (`sessions.retention_days`, BEHAVIOUR §11), as rules.

With a retention of N days (0, the default: kept until deleted):
- a transcript row carries `expires_at` = its time + N days, and DynamoDB's TTL deletes it then,
  for free, whether or not its session is still in use: in a session someone keeps talking in,
  messages older than N days drop out of what the model reads. Reads skip a row past its expiry
  before TTL (which may lag by a day or two) has deleted it;
- a file in the media bucket goes N days after it was stored (the bucket's lifecycle rule takes
  the shorter of `media.retention_days` and N): a file never outlives its message;
- a routing entry idle N days goes by its TTL (the shorter of `route_max_idle_days` and N), an
  outbox row (a reply's preview) after the shorter of its 30 days and N;
- a session record goes when the session has been idle N days: ended that long ago, or with no
  route activity and no row newer than that (the tick looks, in passes at most a day apart,
  and deletes its record, its title and any row left without an expiry: rows written before
  the setting was on).
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_SECONDS = 86_400
PASS_INTERVAL_SECONDS = DAY_SECONDS  # a session idle past the horizon is found within a day
SESSIONS_PER_TICK = 100  # candidates one tick looks at, all profiles together (the rest wait)


def row_expiry(created_at: float, retention_seconds: int) -> int | None:
    """A row's TTL (epoch seconds), None when rows are kept (a retention of 0)."""
    return int(created_at + retention_seconds) if retention_seconds > 0 else None


def is_expired(expires_at: float | None, now: float) -> bool:
    """Past its expiry: no reader sees it, though TTL may not have deleted it yet."""
    return expires_at is not None and expires_at <= now


def capped_days(days: int, retention_days: int) -> int:
    """A lifetime in days (0: forever) no longer than the retention (0: no retention)."""
    if retention_days <= 0:
        return days
    return retention_days if days <= 0 else min(days, retention_days)


@dataclass(frozen=True)
class SessionActivity:
    """What tells when a session was last used (see `ports.AgedSession`)."""

    started_at: float
    ended_at: float | None = None
    route_activity_at: float | None = None
    newest_row_at: float | None = None

    @property
    def last_used_at(self) -> float:
        times = (self.started_at, self.ended_at, self.route_activity_at, self.newest_row_at)
        return max(t for t in times if t is not None)


def idle_past(activity: SessionActivity, now: float, retention_days: int) -> bool:
    """The session has been idle longer than the retention: its record goes."""
    return retention_days > 0 and activity.last_used_at <= now - retention_days * DAY_SECONDS
