"""The limit rules (domain/limits.py, BEHAVIOUR §11): windows and when they reset, overrides,
which limit a user has reached, what they are told, and their usage as counted on routes."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.limits import (
    Counts,
    Ledger,
    Limits,
    Usage,
    breach,
    limit_reply,
    parse_overrides,
    periods,
    spender_key,
    total,
    usage_reply,
)
from hermes_gateway.domain.source import SessionSource

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC, a Friday


def test_a_platform_overrides_only_the_limits_it_names() -> None:
    base = Limits(messages_per_minute=20, tokens_per_day=0, usd_per_day=1.0)
    assert base.overridden("messages_per_minute=5; tokens_per_day=50000") == Limits(5, 50_000, 1.0)
    assert base.overridden("usd_per_day=0.25") == Limits(20, 0, 0.25)
    assert base.overridden("") == base
    assert Limits().off and not Limits(messages_per_minute=1).off


@pytest.mark.parametrize(
    "text",
    ["messages=5", "messages_per_minute=-1", "messages_per_minute=2.5", "tokens_per_day", "usd_per_day=x"],
)
def test_an_unusable_override_is_refused_with_the_entry(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected|whole number") as raised:
        parse_overrides(text)
    assert text.split("=")[0] in str(raised.value)


def test_windows_are_the_clock_minute_and_the_days_of_the_time_zone() -> None:
    utc = periods(T0 + 41)
    assert utc.minute_ends == T0 + 60 and utc.day_ends == T0 + 16 * 3600  # midnight UTC
    # Los Angeles is still on Thursday the 14th at 08:00 UTC (00:00 PST is at 08:00 UTC)
    la = periods(T0 - 1, "America/Los_Angeles")
    assert la.day == utc.day - 1 and la.day_ends == T0
    assert periods(T0, "America/Los_Angeles").day == utc.day
    assert utc.month == (2027 - 1970) * 12 and utc.month_tag == f"m{utc.month}"


def test_a_day_across_a_dst_change_ends_at_local_midnight() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    before = datetime(2027, 3, 28, 1, 30, tzinfo=berlin).timestamp()  # the night clocks go forward
    ends = periods(before, "Europe/Berlin").day_ends
    assert datetime.fromtimestamp(ends, berlin) == datetime(2027, 3, 29, 0, 0, tzinfo=berlin)
    assert ends - before == 21.5 * 3600  # a 23-hour day


def test_counts_start_again_when_their_window_ends() -> None:
    p = periods(T0)
    counts = Counts().plus_one(p).plus_one(p)
    assert (counts.minute_messages, counts.day_messages, counts.month_messages) == (2, 2, 2)
    next_minute = counts.plus_one(periods(T0 + 60))
    assert (next_minute.minute_messages, next_minute.day_messages) == (1, 3)
    next_day = counts.at(periods(T0 + 86_400))
    assert (next_day.minute_messages, next_day.day_messages, next_day.month_messages) == (0, 0, 2)
    next_month = counts.at(periods(T0 + 31 * 86_400))
    assert next_month.month_messages == 0
    assert Counts.from_list(counts.as_list()) == counts and Counts.from_list([]) == Counts()


@given(st.lists(st.floats(min_value=0, max_value=3 * 86_400), max_size=40))
def test_the_count_of_a_window_is_the_messages_sent_in_it(offsets: list[float]) -> None:
    counts = Counts()
    times = sorted(T0 + o for o in offsets)
    for at in times:
        counts = counts.plus_one(periods(at))
    if times:
        last = periods(times[-1])
        assert counts.minute_messages == sum(1 for t in times if int(t // 60) == last.minute)
        assert counts.day_messages == sum(1 for t in times if periods(t).day == last.day)


def test_the_limit_reached_is_the_one_that_resets_last() -> None:
    p = periods(T0 + 15)
    limits = Limits(messages_per_minute=5, tokens_per_day=1000, usd_per_day=0.5)
    assert breach(limits, Usage(minute_messages=4, day_tokens=999, day_usd=0.49), p) is None
    minute = breach(limits, Usage(minute_messages=5), p)
    assert minute is not None and minute.limit == "messages_per_minute" and minute.resets_at == T0 + 60
    assert minute.window == f"messages_per_minute@{p.minute}"
    both = breach(limits, Usage(minute_messages=9, day_tokens=1000), p)
    assert both is not None and both.limit == "tokens_per_day" and both.resets_at == p.day_ends
    dollars = breach(limits, Usage(day_usd=0.5), p)
    assert dollars is not None and dollars.window == f"usd_per_day@{p.day}"
    assert breach(Limits(), Usage(minute_messages=10**6, day_tokens=10**9, day_usd=10**6), p) is None


def test_the_answer_names_the_limit_and_when_it_resets() -> None:
    p = periods(T0 + 19)
    minute = breach(Limits(messages_per_minute=5), Usage(minute_messages=5), p)
    assert minute is not None
    text = limit_reply(minute, p)
    assert "5 messages a minute" in text and "08:01:00 UTC" in text and "in 41 s" in text
    tokens = breach(Limits(tokens_per_day=50_000), Usage(day_tokens=50_000), periods(T0, "Europe/Berlin"))
    assert tokens is not None
    text = limit_reply(tokens, periods(T0, "Europe/Berlin"))
    assert "50,000 tokens a day" in text and "00:00 Europe/Berlin" in text and "in 15 h 0 min" in text
    dollars = breach(Limits(usd_per_day=2), Usage(day_usd=2.5), p)
    assert dollars is not None and "$2.00 of model use a day" in limit_reply(dollars, p)


def test_a_users_usage_is_summed_over_routes_by_period() -> None:
    today = periods(T0)
    yesterday = periods(T0 - 86_400)
    dm = Ledger(
        Counts().plus_one(today),
        {today.day_tag: (300, 0.03), yesterday.day_tag: (50, 0.01), today.month_tag: (350, 0.04)},
    )
    group = Ledger(Counts().plus_one(yesterday).plus_one(today), {today.day_tag: (100, 0.01)})
    used = total([dm, group], today)
    assert used == Usage(2, 2, 400, pytest.approx(0.04), 3, 350, 0.04)
    assert dm.stale_tags(today) == [yesterday.day_tag]
    assert Ledger().usage(today) == Usage()


def test_a_spender_is_the_id_per_user_sessions_carry() -> None:
    alt = SessionSource("telegram", user_id="42", user_id_alt="alt")
    assert spender_key(alt) == spender_key(SessionSource("telegram", user_id="alt"))
    assert spender_key(SessionSource("slack", user_id="alt")) != spender_key(alt)  # another platform: another user
    whatsapp = SessionSource("whatsapp", user_id="+15551234567@s.whatsapp.net")
    assert spender_key(whatsapp) == spender_key(SessionSource("whatsapp", user_id="15551234567"))
    assert spender_key(SessionSource("telegram")) is None
    assert len(spender_key(alt) or "") == 8


def test_usage_says_today_this_month_and_the_limits() -> None:
    p = periods(T0)
    used = Usage(3, 12, 34_210, 0.041, 230, 1_203_000, 0.91)
    text = usage_reply(used, p, Limits(messages_per_minute=20, tokens_per_day=100_000), exempt=False)
    assert "days in UTC" in text
    assert "Today: 12 messages, 34,210 tokens, about $0.0410" in text
    assert "This month (January): 230 messages, 1,203,000 tokens, about $0.9100" in text
    assert "Limits: 20 messages a minute; 100,000 tokens a day." in text
    assert "Limits: none for you (admin)." in usage_reply(used, p, Limits(messages_per_minute=20), exempt=True)
    assert "Limits: none." in usage_reply(used, p, Limits(), exempt=False)
