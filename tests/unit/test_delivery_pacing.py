"""Send pacing (services/delivery.py `_pace`, domain/pacing.py, platforms/telegram.py `group_pace`):
a chat whose platform limits its sends (a Telegram group: 20 a minute) gets them spaced by the
delivery instead of meeting the platform's 429s."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from hermes_gateway.domain.pacing import PaceRule
from hermes_gateway.errors import RateLimited, TransientError
from hermes_gateway.platforms.telegram import GROUP_BURST, group_pace
from hermes_gateway.services.delivery import INLINE_RATE_LIMIT_SECONDS, DeliveryDeps, DeliveryJob, deliver_waiting
from tests.fakes.services import FakeOutbox, FakePacing, FakeSender

NOW = 1_764_400_000.0
GROUP = "-1001234567890"


class Clock:
    """Time that moves only when the delivery sleeps (or a test moves it)."""

    def __init__(self) -> None:
        self.now, self.slept = NOW, list[float]()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 3))
        self.now += seconds


def job(n: int, chat_id: str = GROUP, **extra: Any) -> DeliveryJob:
    return DeliveryJob.from_dict(
        {"delivery_id": f"d-{n}", "target": {"platform": "telegram", "chat_id": chat_id}, "text": f"m{n}", **extra}
    )


def deps(clock: Clock, pacing: FakePacing, sender: FakeSender, rule: PaceRule | None, **extra: Any) -> DeliveryDeps:
    return DeliveryDeps(
        outbox=extra.pop("outbox", FakeOutbox()),
        sender_for=lambda platform, via: sender,
        now=clock,
        sleep=clock.sleep,
        pacing=pacing,
        pace_for=lambda platform, chat_id: group_pace(chat_id, 20) if rule is None else rule,
        profile="main",
        **extra,
    )


def test_twenty_a_minute_is_a_send_every_three_and_a_third_seconds_after_a_burst_of_three() -> None:
    rule = PaceRule.per_minute(20, GROUP_BURST)
    assert rule is not None and rule.burst == 3
    assert rule.interval == pytest.approx(60 / 18 * 1.01, abs=1e-3) and rule.tolerance == 2 * rule.interval
    assert PaceRule.per_minute(0, 3) is None
    assert PaceRule.per_minute(2, 5) == PaceRule(60.6, 2)  # the burst is at most the rate


def test_a_constant_stream_of_sends_is_never_more_than_the_rate_in_any_minute() -> None:
    rule = PaceRule.per_minute(20, GROUP_BURST)
    assert rule is not None
    pacing, clock, sent = FakePacing(), Clock(), list[float]()
    for _ in range(200):  # a sender that always wants to send, and waits for each slot it is given
        at, taken = pacing.reserve("g", clock.now, rule.interval, rule.tolerance, INLINE_RATE_LIMIT_SECONDS)
        assert taken
        clock.now = at
        sent.append(at)
    most = max(sum(1 for t in sent if start <= t < start + 60) for start in sent)
    assert most == 20


@pytest.mark.parametrize(
    ("chat_id", "paced"), [(GROUP, True), ("-4123", True), ("123456", False), ("@news", False), ("-abc", False)]
)
def test_only_groups_are_paced_on_telegram(chat_id: str, paced: bool) -> None:
    assert (group_pace(chat_id, 20) is not None) is paced
    assert group_pace(chat_id, 0) is None  # the setting turned off


def test_a_quiet_group_gets_a_burst_at_once_then_one_send_per_slot() -> None:
    clock, pacing, sender = Clock(), FakePacing(), FakeSender()
    d = deps(clock, pacing, sender, None)
    for n in range(5):
        assert deliver_waiting(job(n), d, budget_seconds=10).status == "sent"
    interval = round(60 / 18 * 1.01, 3)
    assert clock.slept == [interval, interval]  # three at once, then one every 3.33 s
    assert [text for _, text, _ in sender.sent] == ["m0", "m1", "m2", "m3", "m4"]
    assert set(pacing.asked) == {f"telegram#main#{GROUP}"}


def test_a_slot_further_off_than_the_callers_budget_is_left_to_its_retry() -> None:
    clock, pacing, sender, outbox = Clock(), FakePacing(), FakeSender(), FakeOutbox()
    d = deps(clock, pacing, sender, PaceRule(10.0), outbox=outbox)  # one send every 10 s
    deliver_waiting(job(1), d, budget_seconds=5)
    with pytest.raises(RateLimited) as raised:
        deliver_waiting(job(2), d, budget_seconds=5)  # a turn's answer: 5 s of waiting at most
    assert raised.value.retry_after == pytest.approx(10.0) and raised.value.retry_after > INLINE_RATE_LIMIT_SECONDS
    assert len(sender.sent) == 1 and clock.slept == []
    assert outbox.entries["d-2#1"].status == "pending"  # not claimed: the retry takes it
    # The caller's retry, once the slot has come, sends it once
    clock.now += 10
    assert deliver_waiting(job(2), d, budget_seconds=5).status == "sent"
    assert [text for _, text, _ in sender.sent] == ["m1", "m2"]


def test_an_asynchronous_job_waits_for_a_slot_within_its_longer_budget() -> None:
    clock, pacing, sender = Clock(), FakePacing(), FakeSender()
    d = deps(clock, pacing, sender, PaceRule(10.0))
    deliver_waiting(job(1), d, budget_seconds=15)
    assert deliver_waiting(job(2), d, budget_seconds=15).status == "sent"  # the delivery function's 15 s
    assert clock.slept == [10.0] and len(sender.sent) == 2


def test_private_chats_and_unpaced_platforms_ask_nothing() -> None:
    clock, pacing, sender = Clock(), FakePacing(), FakeSender()
    d = deps(clock, pacing, sender, None)
    d.pace_for = lambda platform, chat_id: group_pace(chat_id, 20)
    for n in range(6):
        deliver_waiting(job(n, chat_id="4242"), d, budget_seconds=10)
    assert pacing.asked == [] and clock.slept == [] and len(sender.sent) == 6


def test_pacing_that_cannot_be_asked_lets_the_send_go(caplog: pytest.LogCaptureFixture) -> None:
    clock, sender = Clock(), FakeSender()
    d = deps(clock, FakePacing(error=TransientError("DynamoDB is throttling")), sender, None)
    caplog.set_level(logging.WARNING, logger="hermes-gateway")
    assert deliver_waiting(job(1), d, budget_seconds=10).status == "sent"
    assert "sending unpaced" in caplog.text


def test_each_chunk_of_a_long_answer_is_a_send_of_its_own() -> None:
    clock, pacing, sender = Clock(), FakePacing(), FakeSender()
    d = deps(clock, pacing, sender, PaceRule(2.0))  # one send every 2 s, no burst
    text = "\n\n".join(" ".join(f"w{i}" for i in range(600)) for _ in range(3))  # three Telegram messages
    long = DeliveryJob.from_dict(
        {"delivery_id": "d-long", "target": {"platform": "telegram", "chat_id": GROUP}, "text": text}
    )
    assert deliver_waiting(long, d, budget_seconds=10).status == "sent"
    assert len(sender.sent) == 3 and clock.slept == [2.0, 2.0]


def test_a_repeated_job_takes_no_slot_for_what_it_sent_before() -> None:
    clock, pacing, sender = Clock(), FakePacing(), FakeSender()
    d = deps(clock, pacing, sender, PaceRule(10.0))
    deliver_waiting(job(1), d, budget_seconds=10)
    assert deliver_waiting(job(1), d, budget_seconds=10).status == "sent"  # a duplicate of the job
    assert len(pacing.asked) == 1 and len(sender.sent) == 1
