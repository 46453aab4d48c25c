"""Cron job schedules (BEHAVIOUR §7): parse what a user wrote, and find the next run after a time.

Calendar schedules are evaluated in the configured time zone, day by day in local wall time, so a
daily 09:00 job stays at 09:00 across a DST change. A wall time that does not exist that day
(spring forward) runs at the same wall time read with the offset before the change (02:30 becomes
03:30); a wall time that happens twice (fall back) runs once, at its first occurrence.

One-shot schedules are stored in their resolved form (an ISO time with its offset), so parsing a
stored job's schedule again later gives the same instant.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import cached_property
from zoneinfo import ZoneInfo

from hermes_gateway.errors import BadRequest

ACCEPTED_FORMS = (
    "every 30m | every 2h | every 1d (an interval of minutes, hours or days)",
    "every monday 9am | every day at 18:00 (a day of the week, or every day, at a time)",
    "weekdays at 9:30pm | weekends at 10am",
    "a 5-field cron expression, e.g. '0 9 * * 1-5' (minute hour day-of-month month day-of-week)",
    "an ISO time, e.g. 2026-12-01T09:00 (once; in the configured time zone unless it has an offset)",
    "in 30m | in 2h | in 1d (once)",
)

MIN_INTERVAL_SECONDS = 60  # the tick runs every minute
MAX_INTERVAL_SECONDS = 366 * 86400
# Longer than any gap between two matches of a satisfiable cron expression (29 February on a Monday
# recurs within 28 years; with cron's day-of-month OR day-of-week rule far sooner).
_SEARCH_DAYS = 366 * 29
_DST_SLACK = 180  # minutes: more than any DST change moves a wall time

_UNITS = {
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "d": 86400, "day": 86400, "days": 86400,
}  # fmt: skip
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")

_AMOUNT = r"(\d{1,6})\s*([a-z]+)"
_INTERVAL = re.compile(rf"^every\s+{_AMOUNT}$")
_IN = re.compile(rf"^in\s+{_AMOUNT}$")
_TIME = r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?"
_DAY_AT = re.compile(rf"^(?:every\s+)?([a-z]+?)s?\s+(?:at\s+)?{_TIME}$")
_DAILY_AT = re.compile(rf"^(?:every\s+day|daily)\s+(?:at\s+)?{_TIME}$")


class InvalidSchedule(BadRequest):
    """A schedule in none of the accepted forms; the message lists them."""


def _reject(text: str, why: str = "") -> InvalidSchedule:
    forms = "\n".join(f"  - {f}" for f in ACCEPTED_FORMS)
    detail = f" ({why})" if why else ""
    return InvalidSchedule(f"unrecognised schedule {text[:80]!r}{detail}. Accepted forms:\n{forms}")


@dataclass(frozen=True)
class Calendar:
    """A set of local wall times: cron's five fields, each as the values it allows."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # of the month, 1-31
    months: frozenset[int]  # 1-12
    weekdays: frozenset[int]  # cron numbering: 0 = Sunday
    days_restricted: bool = False  # cron: when both day fields are restricted, either may match
    weekdays_restricted: bool = False

    def matches_date(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        return in_month and in_week

    @cached_property
    def _times(self) -> tuple[int, ...]:
        """The allowed wall times of a day, as minutes since midnight, in order."""
        return tuple(sorted(h * 60 + m for h in self.hours for m in self.minutes))

    def next_after(self, after: float, tz: ZoneInfo) -> float | None:
        """The earliest matching instant after `after`. Wall times are scanned in order; as a DST
        change can move an instant by up to `_DST_SLACK` minutes against its wall time, the scan
        starts that much before `after` and goes on that much past the first match."""
        local = datetime.fromtimestamp(after, tz)
        start, now_wall = local.date(), local.hour * 60 + local.minute
        best: float | None = None
        best_wall: int | None = None
        for offset in range(-1, _SEARCH_DAYS):
            if best_wall is not None and offset * 1440 > best_wall + _DST_SLACK:
                break
            day = start + timedelta(days=offset)
            if not self.matches_date(day):
                continue
            for minute in self._times:
                wall = offset * 1440 + minute
                if wall < now_wall - _DST_SLACK:
                    continue
                if best_wall is not None and wall > best_wall + _DST_SLACK:
                    break
                at = datetime(day.year, day.month, day.day, minute // 60, minute % 60, tzinfo=tz).timestamp()
                if at > after and (best is None or at < best):
                    best = at
                    best_wall = wall if best_wall is None else best_wall
        return best


@dataclass(frozen=True)
class Schedule:
    """A parsed schedule. `text` is its canonical form: what a job stores."""

    text: str
    time_zone: str
    interval_seconds: int = 0
    at: float | None = None  # a one-shot's instant
    calendar: Calendar | None = None

    @property
    def once(self) -> bool:
        return self.at is not None

    def next_after(self, after: float, anchor: float | None = None) -> float | None:
        """The first run strictly after `after`; None when there is none (a one-shot that is past).

        An interval counts from `anchor` (a previous run) when given, so runs keep their phase:
        an every-30m job that ran at 10:00 runs next at 10:30, however late the tick was.
        """
        if self.at is not None:
            return self.at if self.at > after else None
        if self.interval_seconds:
            if anchor is None or anchor > after:
                return after + self.interval_seconds
            steps = math.floor((after - anchor) / self.interval_seconds) + 1
            return anchor + steps * self.interval_seconds
        assert self.calendar is not None
        return self.calendar.next_after(after, ZoneInfo(self.time_zone))


def parse_schedule(text: str, now: float, time_zone: str) -> Schedule:
    """Parse a schedule as a user wrote it; `now` resolves relative forms (`in 30m`)."""
    if not isinstance(text, str) or not text.strip():
        raise _reject("", "empty")
    if len(text) > 200:
        raise _reject(text, "too long")
    tz = ZoneInfo(time_zone)
    norm = " ".join(text.strip().lower().split())
    if m := _INTERVAL.match(norm):
        seconds = _amount(text, m.group(1), m.group(2))
        return Schedule(text=f"every {m.group(1).lstrip('0') or '0'}{_short(m.group(2))}", time_zone=time_zone,
                        interval_seconds=seconds)  # fmt: skip
    if m := _IN.match(norm):
        return _once(now + _amount(text, m.group(1), m.group(2)), time_zone, tz)
    if m := _DAILY_AT.match(norm):
        return _calendar(norm, time_zone, tz, _time(text, m.group(1), m.group(2), m.group(3)), frozenset(range(7)))
    if m := _DAY_AT.match(norm):
        weekdays = _weekdays(m.group(1))
        if weekdays is not None:
            return _calendar(norm, time_zone, tz, _time(text, m.group(2), m.group(3), m.group(4)), weekdays)
    if len(norm.split(" ")) == 5 and not norm.startswith(("every", "in ")):
        return _calendar(norm, time_zone, tz, None, None, cron=True)
    iso = _iso(text.strip(), tz)
    if iso is not None:
        return _once(iso, time_zone, tz)
    raise _reject(text)


def _short(unit: str) -> str:
    return {60: "m", 3600: "h", 86400: "d"}[_UNITS[unit]]


def _amount(text: str, number: str, unit: str) -> int:
    if unit not in _UNITS:
        raise _reject(text, f"unknown unit {unit!r}: use m, h or d")
    seconds = int(number) * _UNITS[unit]
    if seconds < MIN_INTERVAL_SECONDS:
        raise _reject(text, "the shortest interval is 1 minute")
    if seconds > MAX_INTERVAL_SECONDS:
        raise _reject(text, "the longest interval is 366 days")
    return seconds


def _once(at: float, time_zone: str, tz: ZoneInfo) -> Schedule:
    at = float(math.ceil(at))  # whole seconds: the run id is derived from the instant
    return Schedule(text=datetime.fromtimestamp(at, tz).isoformat(), time_zone=time_zone, at=at)


def _iso(text: str, tz: ZoneInfo) -> float | None:
    if not re.match(r"^\d{4}-\d{2}-\d{2}", text):
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise _reject(text, "not a valid ISO time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz)
    return parsed.timestamp()


def _time(text: str, hour: str, minute: str | None, meridiem: str | None) -> tuple[int, int]:
    h, m = int(hour), int(minute or 0)
    if meridiem:
        if not 1 <= h <= 12:
            raise _reject(text, "an am/pm hour is 1 to 12")
        h = h % 12 + (12 if meridiem == "pm" else 0)
    if not (0 <= h <= 23 and 0 <= m <= 59):
        raise _reject(text, "not a time of day")
    return h, m


def _weekdays(word: str) -> frozenset[int] | None:
    """Cron weekday numbers (0 = Sunday) for a day word, or None when it is no day word."""
    if word == "weekday":
        return frozenset(range(1, 6))
    if word == "weekend":
        return frozenset({0, 6})
    for i, name in enumerate(_DAYS):
        if word in (name, name[:3]):
            return frozenset({(i + 1) % 7})
    return None


def _calendar(
    norm: str,
    time_zone: str,
    tz: ZoneInfo,
    at: tuple[int, int] | None,
    weekdays: frozenset[int] | None,
    *,
    cron: bool = False,
) -> Schedule:
    if cron:
        calendar = _cron(norm)
    else:
        assert at is not None and weekdays is not None
        calendar = Calendar(
            minutes=frozenset({at[1]}),
            hours=frozenset({at[0]}),
            days=frozenset(range(1, 32)),
            months=frozenset(range(1, 13)),
            weekdays=weekdays,
        )
    # A cron expression that can never match (30 February) is refused now, not found out later.
    if calendar.next_after(datetime(2026, 1, 1, tzinfo=UTC).timestamp(), tz) is None:
        raise _reject(norm, "it never matches a real date")
    return Schedule(text=norm, time_zone=time_zone, calendar=calendar)


def _cron(norm: str) -> Calendar:
    minute, hour, dom, month, dow = norm.split(" ")
    weekdays = _field(norm, dow, 0, 7, _DAYS_CRON)
    return Calendar(
        minutes=_field(norm, minute, 0, 59),
        hours=_field(norm, hour, 0, 23),
        days=_field(norm, dom, 1, 31),
        months=_field(norm, month, 1, 12, {n: i + 1 for i, n in enumerate(_MONTHS)}),
        weekdays=frozenset(d % 7 for d in weekdays),  # 7 is Sunday too
        days_restricted=not dom.startswith("*"),
        weekdays_restricted=not dow.startswith("*"),
    )


_DAYS_CRON = {name[:3]: (i + 1) % 7 for i, name in enumerate(_DAYS)}


def _field(norm: str, spec: str, low: int, high: int, names: dict[str, int] | None = None) -> frozenset[int]:
    values: set[int] = set()
    for part in spec.split(","):
        base, slash, step_text = part.partition("/")
        step = _number(norm, step_text, names=None) if slash else 1
        if step < 1:
            raise _reject(norm, f"bad step in {spec!r}")
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, _, last = base.partition("-")
            start, end = _number(norm, first, names), _number(norm, last, names)
        else:
            start = _number(norm, base, names)
            end = high if slash else start
        if not (low <= start <= end <= high):
            raise _reject(norm, f"{spec!r} is outside {low}-{high}")
        values.update(range(start, end + 1, step))
    return frozenset(values)


def _number(norm: str, token: str, names: dict[str, int] | None) -> int:
    if names and token in names:
        return names[token]
    if not token.isdigit() or len(token) > 2:
        raise _reject(norm, f"{token!r} is not a number")
    return int(token)
