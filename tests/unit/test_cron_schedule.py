"""The schedule parser (BEHAVIOUR §7): every accepted form, rejections that list the forms, and
next-run times checked against a brute-force minute scan and across DST changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_gateway.domain.schedule import ACCEPTED_FORMS, InvalidSchedule, parse_schedule

NY = "America/New_York"
NOW = datetime(2026, 11, 29, 13, 50, tzinfo=UTC).timestamp()  # a Sunday


def local(epoch: float | None, tz: str = "UTC") -> datetime:
    assert epoch is not None
    return datetime.fromtimestamp(epoch, ZoneInfo(tz))


@pytest.mark.parametrize(
    ("text", "canonical", "first"),
    [
        ("every 30m", "every 30m", "2026-11-29T14:20:00+00:00"),
        ("every 2h", "every 2h", "2026-11-29T15:50:00+00:00"),
        ("every 1d", "every 1d", "2026-11-30T13:50:00+00:00"),
        ("Every 90 minutes", "every 90m", "2026-11-29T15:20:00+00:00"),
        ("every monday 9am", "every monday 9am", "2026-11-30T09:00:00+00:00"),
        ("weekdays at 9:30pm", "weekdays at 9:30pm", "2026-11-30T21:30:00+00:00"),
        ("weekends at 10am", "weekends at 10am", "2026-12-05T10:00:00+00:00"),
        ("every day at 18:00", "every day at 18:00", "2026-11-29T18:00:00+00:00"),
        ("0 9 * * 1-5", "0 9 * * 1-5", "2026-11-30T09:00:00+00:00"),
        ("*/15 * * * *", "*/15 * * * *", "2026-11-29T14:00:00+00:00"),
        ("0 0 1 jan,jul *", "0 0 1 jan,jul *", "2027-01-01T00:00:00+00:00"),
        ("2026-12-01T09:00", "2026-12-01T09:00:00+00:00", "2026-12-01T09:00:00+00:00"),
        ("2026-12-01T09:00:00+01:00", "2026-12-01T08:00:00+00:00", "2026-12-01T08:00:00+00:00"),
        ("in 30m", "2026-11-29T14:20:00+00:00", "2026-11-29T14:20:00+00:00"),
        ("in 2 hours", "2026-11-29T15:50:00+00:00", "2026-11-29T15:50:00+00:00"),
    ],
)
def test_each_accepted_form_parses_to_its_canonical_text_and_first_run(text: str, canonical: str, first: str) -> None:
    # Given a schedule as a user writes it, When it is parsed at a fixed time in UTC
    schedule = parse_schedule(text, NOW, "UTC")
    # Then it keeps a canonical form, and its first run is where a person would expect it
    assert schedule.text == canonical
    assert local(schedule.next_after(NOW)).isoformat() == first
    # And the canonical form parses again (later) to the same schedule
    again = parse_schedule(schedule.text, NOW + 3600, "UTC")
    assert again.next_after(NOW) == schedule.next_after(NOW)


@pytest.mark.parametrize(
    "text",
    ["sometimes", "every 10s", "every 0m", "every 400d", "0 0 30 2 *", "61 * * * *", "* * * *", "every funday 9am",
     "weekdays at 25:00", "13pm", "2026-13-01T00:00", "", "   ", "in soon", "0 9 * * 8", "*/0 * * * *"],
)  # fmt: skip
def test_anything_else_is_rejected_with_the_accepted_forms_listed(text: str) -> None:
    with pytest.raises(InvalidSchedule) as raised:
        parse_schedule(text, NOW, "UTC")
    message = str(raised.value)
    for form in ACCEPTED_FORMS:
        assert form in message


def test_one_shots_are_once_and_recurring_schedules_are_not() -> None:
    assert parse_schedule("in 5m", NOW, "UTC").once
    assert parse_schedule("2027-01-01T00:00", NOW, "UTC").once
    assert not parse_schedule("every 5m", NOW, "UTC").once
    assert parse_schedule("in 5m", NOW, "UTC").next_after(NOW + 600) is None


def test_a_naive_iso_time_is_read_in_the_configured_zone() -> None:
    schedule = parse_schedule("2026-12-01T09:00", NOW, NY)
    assert local(schedule.next_after(NOW), NY).hour == 9
    assert schedule.text == "2026-12-01T09:00:00-05:00"


def test_a_daily_time_stays_at_its_wall_time_across_dst_changes() -> None:
    # Given a daily 09:00 job in New York, spanning the March and November changes
    schedule = parse_schedule("every day at 9am", NOW, NY)
    at = datetime(2027, 3, 10, 12, tzinfo=ZoneInfo(NY)).timestamp()
    for _ in range(8):  # When its runs are followed across 14 March
        at = schedule.next_after(at) or 0
        # Then each is at 09:00 local, whatever the offset
        assert (local(at, NY).hour, local(at, NY).minute) == (9, 0)


def test_a_time_skipped_by_spring_forward_runs_once_an_hour_later() -> None:
    schedule = parse_schedule("30 2 * * *", NOW, NY)
    runs = []
    at = datetime(2027, 3, 13, 12, tzinfo=ZoneInfo(NY)).timestamp()
    for _ in range(3):
        at = schedule.next_after(at) or 0
        runs.append(local(at, NY).strftime("%m-%d %H:%M"))
    assert runs == ["03-14 03:30", "03-15 02:30", "03-16 02:30"]


def test_a_time_repeated_by_fall_back_runs_once() -> None:
    schedule = parse_schedule("30 1 * * *", NOW, NY)
    at = datetime(2026, 10, 31, 12, tzinfo=ZoneInfo(NY)).timestamp()
    first = schedule.next_after(at) or 0
    second = schedule.next_after(first) or 0
    assert local(first, NY).strftime("%m-%d %H:%M") == "11-01 01:30"
    assert local(second, NY).strftime("%m-%d %H:%M") == "11-02 01:30"


def test_an_interval_keeps_its_phase_from_the_anchor() -> None:
    schedule = parse_schedule("every 30m", NOW, "UTC")
    anchor = NOW
    # A tick 95 minutes late finds the next run on the anchor's 30-minute grid
    assert schedule.next_after(anchor + 95 * 60, anchor=anchor) == anchor + 120 * 60


def _brute_next(fields: tuple[set[int], set[int], set[int]], after: float) -> float:
    """The next UTC minute whose minute, hour and weekday (cron numbering) are in the sets."""
    minutes, hours, weekdays = fields
    at = datetime.fromtimestamp(after, UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    for _ in range(8 * 24 * 60):
        if at.minute in minutes and at.hour in hours and (at.weekday() + 1) % 7 in weekdays:
            return at.timestamp()
        at += timedelta(minutes=1)
    raise AssertionError("no match within 8 days")


@settings(max_examples=60, deadline=None)
@given(
    minutes=st.sets(st.integers(0, 59), min_size=1, max_size=4),
    hours=st.sets(st.integers(0, 23), min_size=1, max_size=3),
    weekdays=st.sets(st.integers(0, 6), min_size=1, max_size=3),
    after=st.integers(int(NOW), int(NOW) + 400 * 86400),
)
def test_cron_next_run_matches_a_brute_force_minute_scan(
    minutes: set[int], hours: set[int], weekdays: set[int], after: int
) -> None:
    expression = " ".join(
        [",".join(map(str, sorted(minutes))), ",".join(map(str, sorted(hours))), "*", "*",
         ",".join(map(str, sorted(weekdays)))]
    )  # fmt: skip
    schedule = parse_schedule(expression, NOW, "UTC")
    assert schedule.next_after(after) == _brute_next((minutes, hours, weekdays), after)


@settings(max_examples=60, deadline=None)
@given(
    text=st.sampled_from(
        [
            "every 5m",
            "every 3h",
            "every monday 9am",
            "weekdays at 9:30pm",
            "*/7 3-5 * * *",
            "0 12 15 * *",
            "45 23 * * 0",
        ]
    ),
    tz=st.sampled_from(["UTC", NY, "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata"]),
    after=st.floats(NOW, NOW + 3 * 365 * 86400),
)
def test_next_run_is_later_and_monotonic(text: str, tz: str, after: float) -> None:
    schedule = parse_schedule(text, NOW, tz)
    first = schedule.next_after(after, anchor=NOW)
    assert first is not None and first > after
    # Nothing fires between `after` and the next run: asking again from just before it gives it
    assert schedule.next_after(first - 1, anchor=NOW) == first
    # And later questions never get earlier answers
    later = schedule.next_after(after + 3600, anchor=NOW)
    assert later is not None and later >= first


def _reference_next(calendar: Any, after: float, tz: ZoneInfo) -> float:
    """The plain definition: the earliest candidate of every matching day, read with fold=0."""
    start = datetime.fromtimestamp(after, tz).date()
    for offset in range(-1, 30):
        day = start + timedelta(days=offset)
        if not calendar.matches_date(day):
            continue
        found = [
            t
            for h in calendar.hours
            for m in calendar.minutes
            if (t := datetime(day.year, day.month, day.day, h, m, tzinfo=tz).timestamp()) > after
        ]
        if found:
            return min(found)
    raise AssertionError("no match within 30 days")


DST_CHANGES = [
    (NY, datetime(2027, 3, 14, 7, tzinfo=UTC)),
    (NY, datetime(2026, 11, 1, 6, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2027, 3, 28, 1, tzinfo=UTC)),
]


@settings(max_examples=80, deadline=None)
@given(
    change=st.sampled_from(DST_CHANGES),
    minutes=st.sets(st.integers(0, 59), min_size=1, max_size=5),
    hours=st.sets(st.integers(0, 23), min_size=1, max_size=6),
    shift=st.integers(-6 * 3600, 6 * 3600),
)
def test_cron_next_run_across_a_dst_change_is_the_earliest_candidate(
    change: tuple[str, datetime], minutes: set[int], hours: set[int], shift: int
) -> None:
    tz, at = change
    expression = f"{','.join(map(str, sorted(minutes)))} {','.join(map(str, sorted(hours)))} * * *"
    schedule = parse_schedule(expression, NOW, tz)
    after = at.timestamp() + shift
    assert schedule.calendar is not None
    assert schedule.next_after(after) == _reference_next(schedule.calendar, after, ZoneInfo(tz))
