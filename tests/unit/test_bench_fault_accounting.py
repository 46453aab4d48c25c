"""bench/faults.py's accounting: a reply the platform posted for a send that timed out at the sender
is told from a reply the gateway sent twice, and a short run is sure to draw every kind of fault."""

from __future__ import annotations

import json
from dataclasses import replace

from bench.faults import SIZES, Faults, Ledger, LogCapture, Message, _posted_after_timeout
from hermes_gateway.services.turn.finish import HANDED_TO_DELIVERY

TIMED_OUT = "TransientError: telegram: timed out: no answer within 3 s"


def test_a_post_inside_a_timed_out_send_of_that_text_is_a_late_answer() -> None:
    sends = [("42", "Echo: hi", 10.0, 13.0, TIMED_OUT), ("42", "Echo: again", 20.0, 20.1, "sent")]
    assert _posted_after_timeout({"chat_id": 42, "text": "Echo: hi", "at": 10.2}, sends)
    # handled after the sender gave up (a loaded server read the request late), within a bound
    assert _posted_after_timeout({"chat_id": 42, "text": "Echo: hi", "at": 13.5}, sends)
    assert not _posted_after_timeout({"chat_id": 42, "text": "Echo: hi", "at": 13.0 + 31}, sends)
    assert not _posted_after_timeout({"chat_id": 42, "text": "Echo: hi", "at": 9.9}, sends)  # before it
    assert not _posted_after_timeout({"chat_id": 43, "text": "Echo: hi", "at": 10.2}, sends)  # another chat
    assert not _posted_after_timeout({"chat_id": 42, "text": "Echo: hello", "at": 10.2}, sends)
    assert not _posted_after_timeout({"chat_id": 42, "text": "Echo: again", "at": 20.05}, sends)  # it succeeded


def ledger_of(posts: list[tuple[str, bool]]) -> Ledger:
    message = Message(session=1, n=1, update_id=1, chat_id=42, text="s1 m1 x")
    ledger = Ledger({message.key: message}, {})
    for at, (kind, late) in enumerate(posts):
        ledger.record(kind, [message], float(at), None, late=late)
    return ledger


def test_only_the_extra_replies_a_late_answer_explains_are_counted_apart() -> None:
    assert ledger_of([("answer", True), ("answer", False)]).late_duplicates() == 1
    assert ledger_of([("answer", False), ("answer", False)]).late_duplicates() == 0  # the gateway's own
    # one late answer explains one extra reply, not two
    assert ledger_of([("answer", True), ("answer", False), ("answer", False)]).late_duplicates() == 1
    # a late answer that is the message's only reply of its kind is no duplicate
    assert ledger_of([("answer", True), ("apology", False)]).late_duplicates() == 0


def draws(faults: Faults, probability: float, n: int) -> list[bool]:
    return [faults.roll(probability, "platform") for _ in range(n)]


def test_a_kind_never_drawn_is_forced_at_its_sure_by_th_chance_and_only_then() -> None:
    profile = replace(SIZES["ci"], sure_by=3)
    assert draws(Faults(profile, seed=1), 0.0, 6) == [False, False, True, False, False, False]
    assert not any(draws(Faults(replace(profile, sure_by=0), seed=1), 0.0, 6))
    # a kind the dice drew before its sure_by-th chance is not forced again
    assert draws(Faults(profile, seed=1), 1.0, 4) == [True] * 4
    faults = Faults(profile, seed=1)
    assert faults.pick((("rate_limited", 0.0), ("timeout", 0.0)), "platform") is None
    assert faults.pick((("rate_limited", 0.0), ("timeout", 0.0)), "platform") is None
    assert faults.pick((("rate_limited", 0.0), ("timeout", 0.0)), "platform") == "rate_limited"
    # each kind keeps its own count
    assert faults.roll(0.0, "lambda") is False


def test_a_forced_crash_is_one_the_workflow_retries() -> None:
    faults = Faults(replace(SIZES["ci"], sure_by=1, crash_retried=0.0, crash_unretried=0.0), seed=1)
    event = {"step": "respond", "state": {"turn": {"turn_id": "turn-1"}}}
    crash = faults.crash(event)
    assert crash is not None and type(crash).__name__ == "Lambda.ServiceException"
    assert faults.crash(event) is None  # once per turn and task
    assert faults.crash({**event, "state": {"turn": {"turn_id": "turn-2"}}}) is None  # the kind happened


def test_the_full_run_is_left_to_the_dice() -> None:
    assert SIZES["full"].sure_by == 0 and SIZES["ci"].sure_by > 0


def test_turns_handed_to_the_delivery_function_are_read_off_their_warning_lines() -> None:
    capture = LogCapture()
    capture.lines = [
        json.dumps({"level": "WARNING", "message": HANDED_TO_DELIVERY, "correlation_id": "telegram:100002"}),
        json.dumps({"level": "INFO", "message": "agent:end", "correlation_id": "telegram:100003"}),
        json.dumps({"level": "WARNING", "message": HANDED_TO_DELIVERY, "correlation_id": "telegram:100002"}),
        json.dumps({"level": "INFO", "message": "quoted: " + HANDED_TO_DELIVERY, "correlation_id": "telegram:9"}),
        "not json " + HANDED_TO_DELIVERY,
    ]
    assert capture.correlations(HANDED_TO_DELIVERY) == ["telegram:100002"]
