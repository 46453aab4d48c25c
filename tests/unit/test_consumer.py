"""The ordered batch consumer (services.consumer): a failure holds back its partition, attempts are
counted on the record's item, a message is dead-lettered with its reason after its attempts, and
retryable failures are retried without counting."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.errors import SessionBusy, TransientError
from hermes_gateway.services.consumer import Consumer, Record, retry_pause_seconds


class Attempts:
    """`Attempts` as the inbox counts them: per item; None once the item is gone."""

    def __init__(self, gone: set[tuple[str, str]] | None = None, fail: bool = False) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.reasons: list[str] = []
        self.gone = gone or set()
        self.fail = fail

    def failed(self, key: tuple[str, str], reason: str) -> int | None:
        if self.fail:
            raise TransientError("the table is throttling")
        if key in self.gone:
            return None
        self.counts[key] = self.counts.get(key, 0) + 1
        self.reasons.append(reason)
        return self.counts[key]


class DeadLetters:
    def __init__(self, fail: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.fail = fail

    def send(self, body: dict[str, Any]) -> str:
        if self.fail:
            raise TransientError("the queue is throttling")
        self.sent.append(body)
        return f"m{len(self.sent)}"


def record(n: int, partition: str, text: str = "ok", age: float = 0.0) -> Record:
    return Record(str(n), partition, {"event_id": f"e{n}", "text": text}, key=(partition, f"e{n}"), age_seconds=age)


def consumer(handled: list[str], attempts: Attempts, dead: DeadLetters, **extra: Any) -> Consumer:
    def handle(body: dict[str, Any]) -> None:
        if body["text"] == "poison":
            raise KeyError("a field the code needs")
        if body["text"] == "busy":
            raise SessionBusy("the lease changed hands repeatedly", 1)
        if body["text"] == "throttled":
            raise TransientError("DynamoDB is throttling")
        handled.append(body["event_id"])

    return Consumer(
        handle=handle,
        dead_letters=dead,
        kind="inbound",
        metric="InboundDeadLettered",
        attempts=attempts,
        max_attempts=3,
        retryable=(SessionBusy, TransientError),
        **extra,
    )


def test_a_failed_record_and_its_partitions_later_records_are_reported_the_others_go_on() -> None:
    handled: list[str] = []
    batch = [record(1, "a"), record(2, "a", "poison"), record(3, "b"), record(4, "a"), record(5, "b")]
    outcome = consumer(handled, Attempts(), DeadLetters()).consume(batch)
    assert outcome.failed == ["2", "4"]  # 4 is untouched: it must not overtake 2
    assert handled == ["e1", "e3", "e5"]
    assert outcome.response() == {"batchItemFailures": [{"itemIdentifier": "2"}, {"itemIdentifier": "4"}]}


def test_a_poison_message_is_counted_then_dead_lettered_with_its_reason_and_message() -> None:
    handled: list[str] = []
    attempts, dead = Attempts(), DeadLetters()
    c = consumer(handled, attempts, dead)
    batch = [record(1, "a", "poison"), record(2, "a")]
    # Given each retry of the batch (Lambda retries from the failed record)
    assert [c.consume(batch).failed for _ in range(2)] == [["1", "2"], ["1", "2"]]
    assert attempts.counts == {("a", "e1"): 2} and dead.sent == []
    # When it fails its last attempt
    outcome = c.consume(batch)
    # Then it is dead-lettered and reported done, and its partition goes on
    assert outcome.failed == [] and outcome.dead_lettered == 1 and handled == ["e2"]
    (letter,) = dead.sent
    assert letter == {
        "kind": "inbound",
        "reason": "KeyError: 'a field the code needs'",
        "attempts": 3,
        "message": {"event_id": "e1", "text": "poison"},
        "key": ["a", "e1"],
    }


@pytest.mark.parametrize("text", ["busy", "throttled"])
def test_a_busy_session_or_a_throttled_call_is_retried_without_counting(text: str) -> None:
    attempts, dead = Attempts(), DeadLetters()
    c = consumer([], attempts, dead)
    for _ in range(10):
        assert c.consume([record(1, "a", text)]).failed == ["1"]
    assert attempts.counts == {} and dead.sent == []


def test_an_unreadable_record_is_counted_and_dead_lettered_with_its_key() -> None:
    attempts, dead = Attempts(), DeadLetters()
    c = consumer([], attempts, dead)
    unreadable = Record("9", "a", None, key=("a", "e9"), unreadable="KeyError")
    for _ in range(3):
        c.consume([unreadable])
    (letter,) = dead.sent
    assert letter["message"] is None and letter["key"] == ["a", "e9"] and "KeyError" in letter["reason"]


def test_an_item_that_is_gone_is_dead_lettered_at_once() -> None:
    dead = DeadLetters()
    outcome = consumer([], Attempts(gone={("a", "e1")}), dead).consume([record(1, "a", "poison")])
    assert outcome.failed == [] and dead.sent[0]["attempts"] is None


def test_when_the_count_or_the_dead_letter_fails_the_record_is_retried_not_lost() -> None:
    assert consumer([], Attempts(fail=True), DeadLetters()).consume([record(1, "a", "poison")]).failed == ["1"]
    c = consumer([], Attempts(), DeadLetters(fail=True))
    for _ in range(4):
        assert c.consume([record(1, "a", "poison")]).failed == ["1"]  # still there for the next try


def test_without_an_attempts_counter_a_failure_is_left_to_the_source() -> None:
    c = Consumer(handle=lambda body: 1 / 0, dead_letters=DeadLetters(), kind="inbound", metric="M")
    for _ in range(10):
        assert c.consume([Record("1", "a", {"x": 1})]).failed == ["1"]


def test_a_failure_asks_for_a_pause_that_grows_with_the_records_age() -> None:
    c = consumer([], Attempts(), DeadLetters(), pause_floor_seconds=1, pause_cap_seconds=5)
    assert c.consume([record(1, "a")]).pause_seconds == 0  # nothing failed: no pause
    assert c.consume([record(1, "a", "busy", age=0.5)]).pause_seconds == 1
    assert c.consume([record(1, "a", "busy", age=12)]).pause_seconds == 3
    assert c.consume([record(1, "a", "busy", age=600)]).pause_seconds == 5


@given(st.floats(0, 10_000), st.integers(1, 60), st.integers(1, 10))
def test_the_pause_stays_between_its_floor_and_cap(age: float, floor: int, cap: int) -> None:
    pause = retry_pause_seconds(age, floor, cap)
    assert min(floor, cap) <= pause <= cap


@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=20))
def test_no_record_overtakes_an_earlier_failed_one_of_its_partition(plan: list[tuple[str, bool]]) -> None:
    handled: list[str] = []
    batch = [record(n, partition, "poison" if bad else "ok") for n, (partition, bad) in enumerate(plan)]
    outcome = consumer(handled, Attempts(), DeadLetters()).consume(batch)
    failed = set(outcome.failed)
    for n, (partition, _) in enumerate(plan):
        earlier_failed = any(str(m) in failed for m, (p, _) in enumerate(plan[:n]) if p == partition)
        if earlier_failed:
            assert str(n) in failed and f"e{n}" not in handled
