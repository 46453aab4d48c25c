"""The reset policy (BEHAVIOUR §3): pure rules, with properties and worked examples."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hermes_gateway.domain.reset_policy import (
    NO_RESET,
    PolicyTable,
    ResetPolicy,
    RouteState,
    SessionRules,
    daily_boundary,
    next_deadline,
    parse_policy_map,
    reset_notice,
    reset_reason,
    route_decision,
)
from hermes_gateway.errors import ConfigError
from hermes_gateway.settings import rules_from_settings
from tests.fakes.services import make_settings

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Australia/Lord_Howe", "America/Santiago"]
policies = st.builds(
    ResetPolicy,
    st.sampled_from(["none", "idle", "daily", "both"]),
    st.integers(1, 3 * 1440),
    st.integers(0, 23),
)
instants = st.floats(1_600_000_000, 2_000_000_000, allow_nan=False)


def at(text: str, zone: str = "UTC") -> float:
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


@settings(max_examples=400, deadline=None)
@given(policies, instants, st.floats(0, 5 * 86400), st.sampled_from(ZONES))
def test_the_deadline_splits_time_into_keep_then_reset(
    policy: ResetPolicy, last: float, elapsed: float, zone: str
) -> None:
    # For any policy, the reset reason holds after the deadline and never before it
    now = last + elapsed
    deadline = next_deadline(policy, last, zone)
    reason = reset_reason(policy, last, now, zone)
    if deadline is None:
        assert policy.mode == "none" and reason is None
    elif now > deadline:
        assert reason is not None
    elif now < deadline:
        assert reason is None


@settings(max_examples=300, deadline=None)
@given(policies, instants, st.floats(0, 5 * 86400), st.floats(0, 5 * 86400), st.sampled_from(ZONES))
def test_once_due_a_session_stays_due(policy: ResetPolicy, last: float, a: float, b: float, zone: str) -> None:
    early, late = sorted((a, b))
    if reset_reason(policy, last, last + early, zone) is not None:
        assert reset_reason(policy, last, last + late, zone) is not None


@example(1853940600.0, 2, "Australia/Lord_Howe")  # a 30-minute DST gap: found by Hypothesis
@settings(max_examples=300, deadline=None)
@given(instants, st.integers(0, 23), st.sampled_from(ZONES))
def test_the_daily_boundary_is_the_latest_reset_hour_not_after_now(now: float, hour: int, zone: str) -> None:
    boundary = daily_boundary(now, hour, zone)
    assert now - 26 * 3600 < boundary <= now
    tz = ZoneInfo(zone)
    local = datetime.fromtimestamp(boundary, tz)
    wanted = datetime(local.year, local.month, local.day, hour, tzinfo=tz)
    if datetime.fromtimestamp(wanted.timestamp(), tz).replace(tzinfo=None) == wanted.replace(tzinfo=None):
        assert (local.hour, local.minute) == (hour, 0)
    else:  # DST skipped the hour (by 60 minutes, or 30 on Lord Howe): the first instant after the gap
        assert boundary == wanted.timestamp() and local.replace(tzinfo=None) > wanted.replace(tzinfo=None)


@example(1853940600.0, 2, "Australia/Lord_Howe")  # its clocks skip 02:00-02:30 on 2028-10-01
@settings(max_examples=300, deadline=None)
@given(instants, st.integers(0, 23), st.sampled_from(ZONES))
def test_a_reset_hour_skipped_by_dst_resolves_forward(now: float, hour: int, zone: str) -> None:
    """Never earlier than the hour asked for, and never more than the DST gap later."""
    boundary = daily_boundary(now, hour, zone)
    local = datetime.fromtimestamp(boundary, ZoneInfo(zone))
    minutes_after = (local.hour - hour) % 24 * 60 + local.minute
    assert 0 <= minutes_after <= 60


@settings(max_examples=300, deadline=None)
@given(
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    policies,
    st.floats(0, 3 * 86400),
    st.floats(0, 3 * 86400),
    st.integers(-1, 7200),
)
def test_the_decision_order(
    suspended: bool,
    resume_pending: bool,
    lease_held: bool,
    ended: bool,
    policy: ResetPolicy,
    idle: float,
    since_marked: float,
    window: int,
) -> None:
    now = 1_800_000_000.0
    rules = SessionRules(PolicyTable(policy), "UTC", window)
    state = RouteState("telegram", "dm", now - idle, suspended, resume_pending, now - since_marked, lease_held, ended)
    decision = route_decision(state, rules, now)
    policy_reason = reset_reason(policy, now - idle, now, "UTC")
    if lease_held and (suspended or resume_pending or policy_reason):
        # Active work is never reset; a stale route is healed only when nothing else applied
        assert decision.reason is None or decision.reason == "stale_route"
    elif suspended:
        assert decision.reason == "suspended" and not decision.auto_reset
    elif resume_pending and policy_reason:
        assert decision.reason == policy_reason and decision.auto_reset
    elif resume_pending and policy.mode != "none" and window > 0 and since_marked > window:
        assert decision.reason == "resume_pending_expired"
    elif resume_pending:
        # resumed (auto-continue), unless its session has ended: then the route heals
        assert decision.reason == "stale_route" if ended else (decision.auto_continue and decision.reason is None)
    elif policy_reason:
        assert decision.reason == policy_reason and decision.auto_reset
    else:
        assert decision.reason == ("stale_route" if ended else None)


@pytest.mark.parametrize(
    ("policy", "last", "now", "zone", "expected"),
    [
        # idle: strictly more than idle_minutes since the last activity
        (ResetPolicy("idle", 60), "2026-11-29 10:00", "2026-11-29 11:00", "UTC", None),
        (ResetPolicy("idle", 60), "2026-11-29 10:00", "2026-11-29 11:00:01", "UTC", "idle"),
        # daily at 04:00: active before today's 04:00 and it is now after it
        (ResetPolicy("daily", at_hour=4), "2026-11-29 03:59", "2026-11-29 04:00", "UTC", "daily"),
        (ResetPolicy("daily", at_hour=4), "2026-11-29 04:01", "2026-11-30 03:59", "UTC", None),
        # before today's hour, yesterday's boundary counts
        (ResetPolicy("daily", at_hour=4), "2026-11-28 03:00", "2026-11-29 02:00", "UTC", "daily"),
        (ResetPolicy("daily", at_hour=4), "2026-11-28 05:00", "2026-11-29 02:00", "UTC", None),
        # evaluated in the configured zone: 04:00 Berlin is 03:00 UTC in winter
        (ResetPolicy("daily", at_hour=4), "2026-11-29 02:30", "2026-11-29 03:30", "Europe/Berlin", "daily"),
        # both: idle is reported first
        (ResetPolicy("both", 30, 4), "2026-11-29 03:00", "2026-11-29 05:00", "UTC", "idle"),
        (ResetPolicy("both", 600, 4), "2026-11-29 03:00", "2026-11-29 05:00", "UTC", "daily"),
        (NO_RESET, "2020-01-01 00:00", "2026-11-29 05:00", "UTC", None),
    ],
)
def test_worked_examples(policy: ResetPolicy, last: str, now: str, zone: str, expected: str | None) -> None:
    # the instants are given in UTC; `zone` is where the policy's hour is read
    assert reset_reason(policy, at(last), at(now), zone) == expected


def test_threads_reset_only_under_a_policy_that_names_them() -> None:
    table = PolicyTable(ResetPolicy("idle"), {"*": ResetPolicy("daily")}, {"slack": {"*": ResetPolicy("both")}})
    assert table.policy_for("telegram", "thread") == NO_RESET
    assert table.policy_for("slack", "thread") == NO_RESET
    named = PolicyTable(ResetPolicy("idle"), {"thread": ResetPolicy("daily")})
    assert named.policy_for("telegram", "thread").mode == "daily"


def test_the_most_specific_policy_wins() -> None:
    table = PolicyTable(
        ResetPolicy("idle", 10),
        {"group": ResetPolicy("daily")},
        {"discord": {"dm": ResetPolicy("both"), "*": ResetPolicy("none")}},
    )
    assert table.policy_for("discord", "dm").mode == "both"  # platform + chat type
    assert table.policy_for("discord", "group").mode == "none"  # platform *
    assert table.policy_for("telegram", "group").mode == "daily"  # gateway chat type
    assert table.policy_for("telegram", "dm") == ResetPolicy("idle", 10)  # gateway default


def test_policy_maps_parse_and_reject_clearly() -> None:
    base = ResetPolicy("none", 100, 6)
    parsed = parse_policy_map(" dm=idle:720 ; group=daily@5;*=both ", base)
    assert parsed == {
        "dm": ResetPolicy("idle", 720, 6),
        "group": ResetPolicy("daily", 100, 5),
        "*": ResetPolicy("both", 100, 6),
    }
    for bad in ("dm=sometimes", "dm", "room=idle", "dm=idle@24", "dm=idle:0", "dm=idle;dm=daily"):
        with pytest.raises(ValueError, match=r"dm|room"):
            parse_policy_map(bad)


def test_settings_build_the_rules() -> None:
    settings = make_settings(
        {
            "GATEWAY_RESET_MODE": "idle",
            "GATEWAY_RESET_IDLE_MINUTES": "90",
            "GATEWAY_RESET_POLICY": "thread=daily",
            "TELEGRAM_RESET_POLICY": "group=both:30@2",
            "GATEWAY_TIME_ZONE": "Europe/Berlin",
            "GATEWAY_RESUME_WINDOW_SECONDS": "0",
        }
    )
    rules = rules_from_settings(settings)
    assert rules.time_zone == "Europe/Berlin" and rules.resume_window_seconds == 0
    assert rules.policy_for("discord", "dm") == ResetPolicy("idle", 90, 4)
    assert rules.policy_for("discord", "thread") == ResetPolicy("daily", 90, 4)
    assert rules.policy_for("telegram", "group") == ResetPolicy("both", 30, 2)
    assert rules.policy_for("telegram", "dm") == ResetPolicy("idle", 90, 4)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"GATEWAY_RESET_MODE": "weekly"}, "GATEWAY_RESET_MODE"),
        ({"GATEWAY_RESET_AT_HOUR": "24"}, "GATEWAY_RESET_AT_HOUR"),
        ({"GATEWAY_RESET_IDLE_MINUTES": "0"}, "GATEWAY_RESET_IDLE_MINUTES"),
        ({"SLACK_RESET_POLICY": "dm=idle:x"}, "SLACK_RESET_POLICY"),
        ({"GATEWAY_ROUTE_MAX_IDLE_DAYS": "-1"}, "GATEWAY_ROUTE_MAX_IDLE_DAYS"),
    ],
)
def test_bad_reset_settings_name_the_setting(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        make_settings(env)


def test_the_notice_is_one_short_line() -> None:
    assert (
        reset_notice("idle")
        == "Started a fresh session after a quiet spell. Use /resume to go back to the previous one."
    )
    assert "\n" not in reset_notice(None)
