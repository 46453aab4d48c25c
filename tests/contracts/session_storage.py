"""The session storage ports' contract (`domain.ports`), run against the in-memory DynamoDB of
the unit tests (tests/unit/test_session_storage_contract.py) and DynamoDB on moto
(tests/integration/test_session_storage_contract.py): both must follow the same rules.

Each `check_*` takes a factory `make(rules) -> SessionStores` and raises AssertionError on a
breach. They are grouped by port: routes (open, reset policy), leases (begin, queue, finish,
stop, recovery), transcript, catalogue and edits (fenced changes), sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermes_gateway.domain.limits import Counted, Counts, periods
from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.reach import SearchScope, search_scope
from hermes_gateway.domain.reset_policy import PolicyTable, ResetPolicy, SessionRules
from hermes_gateway.domain.sessions import (
    MAX_FAILED_RECOVERIES,
    Fence,
    InvalidSessionRequest,
    SessionEntry,
    SessionNotFound,
    SessionTally,
    TranscriptRow,
    sanitize_model_override,
)
from hermes_gateway.domain.source import SessionSource, sender_of, user_handle
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turns import QueuedInput
from hermes_gateway.errors import Conflict
from hermes_gateway.services import lifecycle

Make = Callable[[SessionRules], SessionStores]

DM = SessionSource(platform="telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Al")
THREAD = SessionSource(platform="discord", chat_id="c1", chat_type="thread", thread_id="t1", user_id="7")
KEY = "agent:main:telegram:dm:99"
T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC
HOUR = 3600.0


def idle_rules(minutes: int = 60, window: int = 3600) -> SessionRules:
    return SessionRules(PolicyTable(ResetPolicy("idle", minutes)), "UTC", window)


def fence(entry: SessionEntry) -> Fence:
    return Fence(entry.revision, entry.execution_generation)


def route(stores: SessionStores, key: str = KEY) -> SessionEntry:
    found = stores.routes.get(key)
    assert found is not None
    return found


def begin(stores: SessionStores, event: str, at: float, key: str = KEY) -> tuple[str, int, int]:
    """A message takes the lease: (token, user seq, reply seq)."""
    entry = route(stores, key)
    turn_id = lifecycle.turn_id_for(entry.session_id, event)
    token = lifecycle.lease_token_for(turn_id)
    begun = stores.leases.begin(entry, turn_id, token, event, at)
    assert begun is not None
    return token, begun.user_seq, begun.reply_seq


def finish(stores: SessionStores, token: str, at: float, key: str = KEY, tally: SessionTally | None = None) -> str:
    entry = route(stores, key)
    successor = lifecycle.Successor(key, entry.session_id, at, False)
    return stores.leases.finish(
        key, entry.session_id, token, successor.plan, at, tally=tally or SessionTally(), succeeded=True
    ).status


def chat(stores: SessionStores, *pairs: str, key: str = KEY, at: float = T0) -> None:
    """Turns of a conversation, each as the router and the turn write it."""
    entry = route(stores, key)
    for i in range(0, len(pairs), 2):
        token, user_seq, reply_seq = begin(stores, f"e{at}-{i}", at + i, key)
        stores.transcript.put(entry.session_id, TranscriptRow(user_seq, "user", pairs[i], at + i))
        if i + 1 < len(pairs):
            row = TranscriptRow(reply_seq, "assistant", pairs[i + 1], at + i, turn_id=f"t{i}")
            assert stores.transcript.put_reply(entry.session_id, row) == "written"
        finish(stores, token, at + i + 0.5, key, SessionTally(message_count=1 if i + 1 < len(pairs) else 0))


def rows(stores: SessionStores, session_id: str) -> list[str]:
    info = stores.catalogue.get_session(session_id)
    hidden = info.hidden if info else ()
    return [r.content for r in stores.transcript.rows(session_id, hidden)]


# -- routes: open and the reset policy ----------------------------------------------------------


def check_idle_policy_resets_once_and_records_why(make: Make) -> None:
    stores = make(idle_rules(60))
    first = stores.routes.open(DM, KEY, T0)
    chat(stores, "hello", "hi", at=T0)
    again = stores.routes.open(DM, KEY, T0 + 30 * 60)
    assert again.session_id == first.session_id and not again.created
    fresh = stores.routes.open(DM, KEY, T0 + 30 * 60 + 61 * 60)
    assert fresh.created and fresh.session_id != first.session_id
    assert fresh.reset_reason == "idle" and fresh.was_auto_reset and fresh.auto_reset_reason == "idle"
    assert fresh.reset_had_activity and fresh.prev_session_id == first.session_id and fresh.is_fresh_reset
    old = stores.catalogue.get_session(first.session_id)
    assert old is not None and old.ended_at == T0 + 91 * 60 and old.end_reason == "idle"
    assert old.message_count == 2  # the totals the route kept went to the record
    stored = route(stores)
    assert stored.was_auto_reset and stored.prev_session_id == first.session_id and stored.tally == SessionTally()


def check_touch_false_keeps_the_activity_clock(make: Make) -> None:
    stores = make(idle_rules(60))
    first = stores.routes.open(DM, KEY, T0)
    stores.routes.open(DM, KEY, T0 + 50 * 60, touch_activity=False)
    later = stores.routes.open(DM, KEY, T0 + 61 * 60)
    assert later.created and later.prev_session_id == first.session_id


def check_daily_policy_uses_the_time_zone(make: Make) -> None:
    rules = SessionRules(PolicyTable(ResetPolicy("daily", at_hour=4)), "Asia/Tokyo", 3600)
    stores = make(rules)
    start = 1_800_000_000.0 - (1_800_000_000.0 % 86400) + 18 * HOUR  # 18:00 UTC = 03:00 Tokyo
    first = stores.routes.open(DM, KEY, start)
    assert stores.routes.open(DM, KEY, start + 0.5 * HOUR).session_id == first.session_id
    after = stores.routes.open(DM, KEY, start + 1.5 * HOUR)  # 04:30 Tokyo, last activity 03:30
    assert after.created and after.reset_reason == "daily"


def check_threads_are_exempt_unless_named(make: Make) -> None:
    key = "agent:main:discord:thread:c1:t1"
    stores = make(idle_rules(1))
    first = stores.routes.open(THREAD, key, T0)
    assert stores.routes.open(THREAD, key, T0 + 10 * HOUR).session_id == first.session_id
    named = SessionRules(PolicyTable(ResetPolicy("idle", 1), {"thread": ResetPolicy("idle", 1)}), "UTC", 3600)
    stores = make(named)
    stores.routes.open(THREAD, key, T0)
    assert stores.routes.open(THREAD, key, T0 + 10 * HOUR).reset_reason == "idle"


def check_a_read_entry_saves_the_second_read(make: Make) -> None:
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    read = stores.routes.get(KEY)
    opened = stores.routes.open(DM, KEY, T0 + 1, read=read, touch_activity=False)
    assert read is not None and opened.session_id == read.session_id and opened.revision == read.revision


def check_single_flight_makes_one_session(make: Make) -> None:
    import threading

    stores = make(SessionRules())
    found: list[str] = []
    threads = [
        threading.Thread(target=lambda: found.append(stores.routes.open(DM, KEY, T0).session_id)) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(found)) == 1 and len(stores.catalogue.list_sessions("agent:main")) == 1


# -- leases -------------------------------------------------------------------------------------


def check_an_expired_lease_is_taken_over_and_marks_resume_pending(make: Make) -> None:
    stores = make(SessionRules(lease_ttl_seconds=60))
    stores.routes.open(DM, KEY, T0)
    begin(stores, "lost", T0)
    entry = route(stores)
    assert entry.lease_held(T0 + 30) and not entry.lease_held(T0 + 61)
    token = lifecycle.lease_token_for(lifecycle.turn_id_for(entry.session_id, "next"))
    begun = stores.leases.begin(entry, "turn-next", token, "next", T0 + 61)
    assert begun is not None and begun.took_over
    marked = route(stores)
    assert marked.resume_pending and marked.resume_reason == "lease_expired" and marked.lease_token == token


def check_resume_pending_continues_within_the_window(make: Make) -> None:
    stores = make(SessionRules(PolicyTable(ResetPolicy("idle", 24 * 60)), "UTC", 3600, lease_ttl_seconds=60))
    first = stores.routes.open(DM, KEY, T0)
    begin(stores, "lost", T0)
    begin(stores, "next", T0 + 61)  # takes over: resume_pending, marked at T0 + 61
    again = stores.routes.open(DM, KEY, T0 + 600)
    assert again.session_id == first.session_id and again.auto_continue is not None
    assert again.auto_continue.reason == "lease_expired"
    late = stores.routes.open(DM, KEY, T0 + 61 + 3601)
    assert late.created and late.reset_reason == "resume_pending_expired" and late.was_auto_reset


def check_suspended_entries_are_replaced(make: Make) -> None:
    stores = make(SessionRules())
    first = stores.routes.open(DM, KEY, T0)
    leases: Any = stores.leases
    for i in range(MAX_FAILED_RECOVERIES + 1):  # the first cut-short turn, then three failed recoveries
        assert leases.mark_failed(KEY, first.session_id, "crash", T0 + i) is (i == MAX_FAILED_RECOVERIES)
    assert route(stores).suspended
    fresh = stores.routes.open(DM, KEY, T0 + 100)
    assert fresh.created and fresh.reset_reason == "suspended" and not route(stores).suspended


def check_a_successful_turn_clears_the_recovery_count(make: Make) -> None:
    stores = make(SessionRules())
    first = stores.routes.open(DM, KEY, T0)
    leases: Any = stores.leases
    leases.mark_failed(KEY, first.session_id, "crash", T0)
    leases.mark_failed(KEY, first.session_id, "crash", T0 + 1)
    assert route(stores).failed_recoveries == 1
    token, _, _ = begin(stores, "ok", T0 + 2)
    finish(stores, token, T0 + 3)
    cleared = route(stores)
    assert not cleared.resume_pending and cleared.failed_recoveries == 0 and cleared.resume_reason is None


def check_active_work_is_never_reset(make: Make) -> None:
    stores = make(idle_rules(1))
    first = stores.routes.open(DM, KEY, T0)
    token, _, _ = begin(stores, "long", T0)
    busy = stores.routes.open(DM, KEY, T0 + 5 * 60)  # the lease lasts 360 s
    assert busy.session_id == first.session_id and not busy.created
    finish(stores, token, T0 + 5 * 60)
    assert stores.routes.open(DM, KEY, T0 + 90 * 60).reset_reason == "idle"


def check_every_write_bumps_revision_and_turns_bump_generation(make: Make) -> None:
    stores = make(SessionRules())
    first = stores.routes.open(DM, KEY, T0)
    touched = stores.routes.open(DM, KEY, T0 + 1)
    assert touched.revision == first.revision + 1 and touched.execution_generation == first.execution_generation
    begin(stores, "e1", T0 + 2)
    held = route(stores)
    assert held.revision == touched.revision + 1 and held.execution_generation == first.execution_generation + 1
    forced = stores.routes.open(DM, KEY, T0 + 3, force_new=True)
    assert forced.execution_generation == held.execution_generation + 1


def check_begin_allocates_seqs_and_remembers_the_event(make: Make) -> None:
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    token, user_seq, reply_seq = begin(stores, "e1", T0)
    assert (user_seq, reply_seq) == (1, 2)
    entry = route(stores)
    from hermes_gateway.domain.sessions import event_mark

    assert entry.next_seq == 2 and entry.reply_seq == 2 and event_mark("e1") in entry.recent_events
    assert entry.tally.message_count == 1  # the message is counted where the lease is taken
    assert stores.leases.begin(entry, "t", "tok", "e2", T0 + 1) is None  # another turn holds the lease
    token, _, _ = begin(stores, "e1", T0 + 1)  # the same message again: its own lease, by its token
    finish(stores, token, T0 + 2)
    assert stores.leases.begin(entry, "t", "tok", "e3", T0 + 3) is None  # a stale read: read again


def check_usage_is_counted_once_per_turn(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    token, _, _ = begin(stores, "e1", T0)
    tally = SessionTally(1, 1000, 500, 2000, 0, 3000, 0.01, estimated_turns=1)
    assert finish(stores, token, T0 + 1, tally=tally) == "released"
    assert finish(stores, token, T0 + 2, tally=tally) == "lost"  # a repeated finish counts nothing
    info = stores.catalogue.get_session(entry.session_id)
    assert info is not None
    assert (info.input_tokens, info.output_tokens, info.cache_read_tokens, info.message_count) == (1000, 500, 2000, 2)
    assert info.last_prompt_tokens == 3000 and info.cost_status == "estimated"
    assert info.estimated_cost_usd == pytest.approx(0.01)


def _queued(event: str, text: str, mode: str = "queue") -> QueuedInput:
    return QueuedInput(event, text, T0, DM, ReplyTarget("telegram", "99"), mode)


def check_a_users_counters_ride_on_the_writes_of_its_messages_and_turns(make: Make) -> None:
    """BEHAVIOUR §11: a message's counts go with the write that takes it (the lease or the queue),
    a turn's tokens and cost with the write that ends it; they outlive a reset, and a day that
    ended is dropped by the next message's write while the month's stay."""
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    day1, user = periods(T0), "0a1b2c3d"
    entry = route(stores)
    turn_id = lifecycle.turn_id_for(entry.session_id, "e1")
    token = lifecycle.lease_token_for(turn_id)
    group = "agent:main:telegram:group:-5:42"
    counted = Counted(user, Counts().plus_one(day1), day1, peers=(group,))
    assert stores.leases.begin(entry, turn_id, token, "e1", T0, counted=counted) is not None
    assert route(stores).ledgers[user].counts == counted.counts
    assert route(stores).ledgers[user].peers == {day1.day: frozenset({group})}
    # a second message queues behind the turn, counted in the queue's write
    again = Counted(user, counted.counts.plus_one(day1), day1)
    queued = stores.leases.enqueue(route(stores), _queued("e2", "two"), max_items=5, now=T0 + 1, counted=again)
    assert queued.status == "queued" and route(stores).ledgers[user].counts.minute_messages == 2
    # the turn's tokens and cost go to the user who started it, today's and this month's
    entry = route(stores)
    successor = lifecycle.Successor(KEY, entry.session_id, T0 + 2, True)
    tally = SessionTally(input_tokens=90, output_tokens=10, cost_usd=0.25)
    handed = stores.leases.finish(
        KEY, entry.session_id, token, successor.plan, T0 + 2, tally=tally, succeeded=True, spender=user
    )
    assert handed.status == "handed_off" and handed.next_turn is not None and handed.next_turn.lease_token
    spent = route(stores).ledgers[user].spent
    assert spent == {day1.day_tag: (100, 0.25), day1.month_tag: (100, 0.25)}
    assert finish(stores, handed.next_turn.lease_token, T0 + 3) == "released"
    # a reset replaces the session, not the user's counters
    stores.routes.open(DM, KEY, T0 + 4, force_new=True)
    assert route(stores).ledgers[user].spent == spent
    # the next day's first message drops yesterday's tokens and keeps the month's
    day2 = periods(T0 + 86_400)
    entry = route(stores)
    turn_id = lifecycle.turn_id_for(entry.session_id, "e3")
    next_day = Counted(user, entry.ledgers[user].counts.plus_one(day2), day2, peers=("agent:main:telegram:dm:7",))
    token = lifecycle.lease_token_for(turn_id)
    assert stores.leases.begin(entry, turn_id, token, "e3", T0 + 86_400, counted=next_day) is not None
    ledger = route(stores).ledgers[user]
    assert ledger.spent == {day2.month_tag: (100, 0.25)} and ledger.counts.day_messages == 1
    assert ledger.peers == {day2.day: frozenset({"agent:main:telegram:dm:7"})}
    assert ledger.counts.month_messages == 3


def check_messages_queue_behind_a_turn_and_are_handed_on(make: Make) -> None:
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    token, _, _ = begin(stores, "e1", T0)
    entry = route(stores)
    first = stores.leases.enqueue(entry, _queued("e2", "two"), max_items=2, now=T0 + 1)
    assert first.status == "queued" and first.first_notice
    second = stores.leases.enqueue(entry, _queued("e3", "three"), max_items=2, now=T0 + 2)
    assert second.status == "queued" and not second.first_notice  # the chat was told once
    assert stores.leases.enqueue(entry, _queued("e3", "three"), max_items=2, now=T0 + 3).status == "duplicate"
    assert stores.leases.enqueue(entry, _queued("e4", "four"), max_items=2, now=T0 + 3).status == "full"
    successor = lifecycle.Successor(KEY, entry.session_id, T0 + 4, False)
    handed = stores.leases.finish(  # the turn's reply counted with the message the next turn takes
        KEY, entry.session_id, token, successor.plan, T0 + 4, tally=SessionTally(message_count=1), succeeded=True
    )
    assert handed.status == "handed_off" and handed.next_turn is not None
    assert route(stores).tally.message_count == 3  # e1, its reply, and "two"
    assert [q.text for q in handed.queued] == ["two"] and handed.next_turn.user_seqs == (3,)
    assert handed.next_turn.reply_seq == 4 and route(stores).lease_token == handed.next_turn.lease_token
    again = stores.leases.finish(
        KEY, entry.session_id, token, successor.plan, T0 + 5, tally=SessionTally(), succeeded=True
    )
    assert again.status == "handed_off" and again.next_turn == handed.next_turn  # a repeat: the same hand-off
    assert route(stores).queued == 1


def check_a_finished_lease_is_not_busy(make: Make) -> None:
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    token, _, _ = begin(stores, "e1", T0)
    entry = route(stores)
    finish(stores, token, T0 + 1)
    assert stores.leases.enqueue(entry, _queued("e2", "two"), max_items=5, now=T0 + 2).status == "not_busy"


def check_stop_flags_the_running_turn_and_its_answer_seq(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    assert stores.leases.request_stop(KEY, T0) is None  # nothing running
    token, _, reply_seq = begin(stores, "e1", T0)
    stop = stores.leases.request_stop(KEY, T0 + 1)
    assert stop is not None and stop.reply_seq == reply_seq and stop.session_id == entry.session_id
    assert stores.control.state(KEY).stop_turn_id == stop.turn_id
    assert stores.transcript.mark_stopped(entry.session_id, reply_seq, stop.turn_id)
    late = TranscriptRow(reply_seq, "assistant", "too late", T0 + 2, turn_id=stop.turn_id)
    assert stores.transcript.put_reply(entry.session_id, late) == "stopped"
    assert rows(stores, entry.session_id) == []
    finish(stores, token, T0 + 3)
    assert stores.control.state(KEY).stop_turn_id is None


def check_steering_input_takes_seqs_and_moves_the_answer(make: Make) -> None:
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    token, _, reply_seq = begin(stores, "e1", T0)
    entry = route(stores)
    stores.leases.enqueue(entry, _queued("e2", "also this", "steer"), max_items=5, now=T0 + 1)
    taken = stores.control.take_steering(KEY, token, entry.lease_turn_id or "", T0 + 2)
    assert [q.text for q in taken.items] == ["also this"] and taken.seqs == (reply_seq + 1,)
    assert taken.reply_seq == reply_seq + 2 and route(stores).reply_seq == reply_seq + 2


def check_waiting_leases_are_found_and_expired(make: Make) -> None:
    stores = make(SessionRules(lease_ttl_seconds=60))
    stores.routes.open(DM, KEY, T0)
    begin(stores, "e1", T0)
    assert stores.leases.waiting(T0 + 61) == []  # a plain turn's lease is not in the index
    stores.leases.enqueue(route(stores), _queued("e2", "two"), max_items=5, now=T0 + 1)
    found = stores.leases.waiting(T0 + 61)
    assert [w.session_key for w in found] == [KEY]
    assert stores.leases.expire(found[0], T0 + 61) and not stores.leases.expire(found[0], T0 + 62)
    assert route(stores).resume_pending and route(stores).lease_token is None and route(stores).queued == 1
    assert stores.leases.recover(KEY, "recovery", "recover-1", T0 + 62)


def check_allocate_gives_fresh_seqs(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    begin(stores, "e1", T0)
    assert stores.leases.allocate(KEY, entry.session_id, 1, T0 + 1) == 3
    assert stores.leases.allocate(KEY, "another-session", 1, T0 + 1) is None


def check_a_paused_turn_is_answered_once_and_its_state_kept(make: Make) -> None:
    from hermes_gateway.domain.turns import PendingApproval

    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    token, _, _ = begin(stores, "e1", T0)
    turn_id = route(stores).lease_turn_id or ""
    approval = PendingApproval(turn_id, "deploy", "c1", "42", T0 + 300, entry.session_id)
    state = {"turn": {"turn_id": turn_id}, "loop": {"messages": [{"role": "user", "content": "x" * 5000}]}}
    assert stores.control.pause(KEY, token, approval, state)
    assert not stores.control.pause(KEY, "other", approval, state)
    assert stores.control.state(KEY).approval == approval and route(stores).approval_pending
    assert stores.control.paused_state(entry.session_id, turn_id) == state
    assert stores.leases.waiting(T0 + 301)[0].session_key == KEY  # the tick times it out
    first = stores.control.answer(KEY, turn_id, "approved", "session")
    second = stores.control.answer(KEY, turn_id, "denied")
    assert first is not None and second is not None
    assert (first.decision, first.scope) == (second.decision, second.scope) == ("approved", "session")
    assert stores.control.answer(KEY, "turn-9", "denied") is None
    stores.control.clear_approval(KEY, "turn-9")
    assert stores.control.state(KEY).approval is not None
    stores.control.clear_approval(KEY, turn_id)
    assert stores.control.state(KEY).approval is None and stores.leases.waiting(T0 + 301) == []


def check_approvals_beyond_one_call(make: Make) -> None:
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    stores.control.approve_tool(KEY, "deploy", "session", "sid-1")
    stores.control.approve_tool(KEY, "lookup", "session", "sid-1")
    stores.control.approve_tool(KEY, "rm", "always", "sid-1")
    state = stores.control.state(KEY)
    assert state.approved("deploy", "sid-1") and state.approved("lookup", "sid-1")
    assert not state.approved("deploy", "sid-2") and state.approved("rm", "sid-2")
    stores.control.set_yolo(KEY, True)
    assert stores.control.state(KEY).approved("anything", "sid-3")


# -- races: what conditional writes guarantee under concurrency ---------------------------------


def check_racing_messages_take_the_lease_once(make: Make) -> None:
    from tests.fakes.concurrency import race

    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    read = route(stores)

    def take(i: int) -> bool:
        return stores.leases.begin(read, f"t{i}", f"tok{i}", f"e{i}", T0 + 1) is not None

    assert sum(race(8, take)) == 1


def check_racing_policy_resets_of_one_key_make_exactly_one_new_session(make: Make) -> None:
    from tests.fakes.concurrency import race

    stores = make(idle_rules(60))
    first = stores.routes.open(DM, KEY, T0)
    entries = race(12, lambda _: stores.routes.open(DM, KEY, T0 + 2 * 3600))
    assert sum(e.created for e in entries) == 1
    assert len({e.session_id for e in entries}) == 1 and entries[0].session_id != first.session_id
    old = stores.catalogue.get_session(first.session_id)
    assert old is not None and old.end_reason == "idle"
    assert len(stores.catalogue.list_sessions("agent:main")) == 2


def check_racing_fenced_mutations_apply_exactly_once(make: Make) -> None:
    from tests.fakes.concurrency import race

    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, "m0", "m1", "m2", "m3")
    read = fence(route(stores))

    def undo(_: int) -> str:
        try:
            stores.edits.undo(entry.session_id, 1, fence=read, now=T0 + 10)
        except Conflict:
            return "conflict"
        return "applied"

    assert race(8, undo).count("applied") == 1
    assert rows(stores, entry.session_id) == ["m0", "m1"]


def check_two_sweeps_at_once_claim_each_session_once(make: Make) -> None:
    from tests.fakes.concurrency import race

    stores = make(idle_rules(60))
    for i in range(6):
        stores.routes.open(DM, f"agent:main:telegram:dm:{i}", T0)
    due = stores.sweep.due_for_expiry(T0 + 2 * 3600)
    claimed = race(2, lambda _: [stores.sweep.claim_expiry(e, T0 + 2 * 3600) for e in due])
    assert sum(1 for batch in claimed for c in batch if c is not None) == 6


# -- transcript ---------------------------------------------------------------------------------


def check_rows_are_written_once_and_read_in_bounded_windows(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, *[f"m{i}" for i in range(10)])
    assert not stores.transcript.put(entry.session_id, TranscriptRow(1, "user", "again", T0))  # the seq is taken
    window = stores.transcript.window(entry.session_id, upto_seq=None, limit=3)
    assert [r.content for r in window] == ["m7", "m8", "m9"]
    upto = stores.transcript.window(entry.session_id, upto_seq=5, limit=2)
    assert [r.seq for r in upto] == [4, 5]
    hidden = stores.transcript.window(entry.session_id, upto_seq=None, limit=3, hidden=((9, 10),))
    assert [r.content for r in hidden] == ["m5", "m6", "m7"]


def check_a_withdrawn_user_row_is_gone_and_answers_are_never_withdrawn(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1", "q2", "a2")
    stores.transcript.withdraw(entry.session_id, 3)  # q2: its turn was not run
    stores.transcript.withdraw(entry.session_id, 4)  # a2 is an answer: kept
    stores.transcript.withdraw(entry.session_id, 3)  # again, and a seq with no row: nothing
    stores.transcript.withdraw(entry.session_id, 99)
    assert rows(stores, entry.session_id) == ["q1", "a1", "a2"]
    assert stores.transcript.put(entry.session_id, TranscriptRow(3, "user", "q2", T0))  # its seq is free again


# -- catalogue and edits ------------------------------------------------------------------------


def check_undo_and_retry_soft_delete_turns(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1", "q2", "a2", "q3", "a3")
    undone = stores.edits.undo(entry.session_id, 2, fence=fence(route(stores)), now=T0 + 10)
    assert undone.removed == 4 and undone.user_text == "q2" and undone.rewound_to_seq == 2
    assert rows(stores, entry.session_id) == ["q1", "a1"]
    assert undone.entry.revision == route(stores).revision
    retried = stores.edits.retry(entry.session_id, fence=fence(route(stores)), now=T0 + 11)
    assert retried.user_text == "q1" and rows(stores, entry.session_id) == []
    nothing = stores.edits.undo(entry.session_id, 1, fence=fence(route(stores)), now=T0 + 12)
    assert nothing.removed == 0 and nothing.user_text is None
    chat(stores, "q4", key=KEY, at=T0 + 13)  # new rows after an undo are visible
    assert rows(stores, entry.session_id) == ["q4"]


def check_rewind_keeps_rows_up_to_a_seq(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1", "q2", "a2")
    result = stores.edits.rewind(entry.session_id, 3, fence=fence(route(stores)), now=T0 + 10)
    assert result.removed == 1 and rows(stores, entry.session_id) == ["q1", "a1", "q2"]
    with pytest.raises(InvalidSessionRequest):
        stores.edits.rewind(entry.session_id, 1, fence=Fence(route(stores).revision), now=T0 + 11)


def check_stale_fences_are_refused_and_change_nothing(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1")
    read = fence(route(stores))
    begin(stores, "running", T0 + 1)  # a turn starts: revision and generation move on
    sid, edits = entry.session_id, stores.edits
    refused: list[Callable[[], Any]] = [
        lambda: edits.rename(sid, "Plans", fence=read, now=T0 + 2),
        lambda: edits.rewind(sid, 0, fence=read, now=T0 + 2),
        lambda: edits.undo(sid, 1, fence=read, now=T0 + 2),
        lambda: edits.delete_session(sid, fence=read, now=T0 + 2),
        lambda: edits.reset(KEY, fence=read, now=T0 + 2),
        lambda: edits.branch(sid, fence=read, now=T0 + 2),
        lambda: edits.compress(sid, "summary", fence=read, now=T0 + 2),
        lambda: edits.set_model_override(KEY, sanitize_model_override({"model": "gpt-4o"}), fence=read, now=T0 + 2),
    ]
    before = route(stores)
    for attempt in refused:
        with pytest.raises(Conflict):
            attempt()
    after = route(stores)
    assert after.revision == before.revision and after.session_id == sid and after.model_override is None
    assert rows(stores, sid) == ["q1", "a1"]
    info = stores.catalogue.get_session(sid)
    assert info is not None and info.title is None and info.ended_at is None
    with pytest.raises(Conflict):
        edits.delete_session(sid, fence=Fence(after.revision, after.execution_generation - 1), now=T0 + 3)


def check_titles_are_unique_per_profile(make: Make) -> None:
    stores = make(SessionRules())
    a = stores.routes.open(DM, KEY, T0)
    stores.edits.rename(a.session_id, "  Trip   plans ", fence=fence(route(stores)), now=T0 + 1)
    assert stores.catalogue.get_session(a.session_id).title == "Trip plans"  # type: ignore[union-attr]
    b = stores.routes.open(DM, "agent:main:telegram:dm:100", T0 + 2)
    with pytest.raises(Conflict, match="title"):
        stores.edits.rename(b.session_id, "TRIP PLANS", fence=fence(route(stores, b.session_key)), now=T0 + 3)
    other = stores.routes.open(DM, "agent:coder:telegram:dm:99", T0 + 4)
    stores.edits.rename(other.session_id, "Trip plans", fence=fence(route(stores, other.session_key)), now=T0 + 5)
    assert stores.catalogue.find_session_by_title("agent:main", "trip PLANS").session_id == a.session_id  # type: ignore[union-attr]
    assert stores.catalogue.find_session_by_title("agent:coder", "trip plans").session_id == other.session_id  # type: ignore[union-attr]
    stores.edits.rename(a.session_id, "Other", fence=fence(route(stores)), now=T0 + 6)
    stores.edits.rename(b.session_id, "Trip plans", fence=fence(route(stores, b.session_key)), now=T0 + 7)
    assert stores.catalogue.find_session_by_title("agent:main", "Trip plans").session_id == b.session_id  # type: ignore[union-attr]
    with pytest.raises(InvalidSessionRequest):
        stores.edits.rename(a.session_id, "   ", fence=fence(route(stores)), now=T0 + 8)
    with pytest.raises(Conflict, match="title"):  # a branch named like another session
        stores.edits.branch(a.session_id, fence=fence(route(stores)), now=T0 + 9, title="TRIP plans")


def check_branch_copies_active_rows_into_a_child(make: Make) -> None:
    stores = make(SessionRules())
    parent = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1", "q2", "a2")
    stores.edits.undo(parent.session_id, 1, fence=fence(route(stores)), now=T0 + 10)
    child = stores.edits.branch(parent.session_id, fence=fence(route(stores)), now=T0 + 11, title="Fork")
    assert child.session_id != parent.session_id and route(stores).session_id == child.session_id
    assert child.execution_generation > parent.execution_generation
    assert rows(stores, child.session_id) == ["q1", "a1"]
    info = stores.catalogue.get_session(child.session_id)
    assert info is not None and info.parent_session_id == parent.session_id and info.title == "Fork"
    assert rows(stores, parent.session_id) == ["q1", "a1"]  # the parent is kept, its undo with it
    chat(stores, "q3", "a3", at=T0 + 20)  # the child's own turns follow its copied rows
    assert rows(stores, child.session_id) == ["q1", "a1", "q3", "a3"]


def check_compress_continues_in_a_child(make: Make) -> None:
    stores = make(SessionRules())
    parent = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1", "q2", "a2")
    child = stores.edits.compress(
        parent.session_id, "Summary so far", fence=fence(route(stores)), now=T0 + 10, keep_last=2
    )
    assert route(stores).session_id == child.session_id
    found = stores.transcript.rows(child.session_id)
    assert [(r.role, r.content) for r in found] == [("system", "Summary so far"), ("user", "q2"), ("assistant", "a2")]
    old = stores.catalogue.get_session(parent.session_id)
    assert old is not None and old.end_reason == "compressed" and old.continued_in == child.session_id
    assert old.message_count == 4
    again = stores.routes.open(DM, KEY, T0 + 20)
    assert again.session_id == child.session_id and not again.created


def check_a_compressed_session_keeps_its_title_in_the_child(make: Make) -> None:
    # Given a titled session
    stores = make(SessionRules())
    parent = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1")
    stores.edits.rename(parent.session_id, "Trip plans", fence=fence(route(stores)), now=T0 + 1)
    # When it is compressed, Then the session goes on in the child under its title
    child = stores.edits.compress(parent.session_id, "Summary", fence=fence(route(stores)), now=T0 + 10)
    info = stores.catalogue.get_session(child.session_id)
    assert info is not None and info.title == "Trip plans"
    assert stores.catalogue.find_session_by_title("agent:main", "trip plans").session_id == child.session_id  # type: ignore[union-attr]
    old = stores.catalogue.get_session(parent.session_id)
    assert old is not None and old.title is None  # one session has the title, as before
    # And an untitled session's child has none
    stores2 = make(SessionRules())
    plain = stores2.routes.open(DM, KEY, T0)
    chat(stores2, "q1", "a1")
    child2 = stores2.edits.compress(plain.session_id, "Summary", fence=fence(route(stores2)), now=T0 + 10)
    assert stores2.catalogue.get_session(child2.session_id).title is None  # type: ignore[union-attr]


def check_a_turn_holding_the_lease_compresses_and_answers_in_the_child(make: Make) -> None:
    stores = make(SessionRules())
    parent = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1", "q2", "a2")
    token, user_seq, _ = begin(stores, "e-long", T0 + 10)
    stores.transcript.put(parent.session_id, TranscriptRow(user_seq, "user", "q3", T0 + 10))
    with pytest.raises(Conflict):  # not the lease's holder
        stores.edits.compress(parent.session_id, "S", fence=None, now=T0 + 11, keep_last=1, lease_token="other")
    child = stores.edits.compress(parent.session_id, "S", fence=None, now=T0 + 11, keep_last=3, lease_token=token)
    entry = route(stores)
    assert entry.session_id == child.session_id and entry.lease_token == token  # the turn keeps its lease
    assert (entry.next_seq, entry.reply_seq) == (5, 5)  # summary, q2, a2, q3; the answer after them
    row = TranscriptRow(5, "assistant", "a3", T0 + 12, turn_id="t-long")
    assert stores.transcript.put_reply(child.session_id, row) == "written"
    ratio = SessionTally(message_count=1, last_prompt_tokens=900, prompt_ratio=1.25)
    assert finish(stores, token, T0 + 13, tally=ratio) == "released"
    assert route(stores).tally.prompt_ratio == pytest.approx(1.25)  # the next turn's calibration
    found = [(r.role, r.content) for r in stores.transcript.rows(child.session_id)]
    assert found == [("system", "S"), ("user", "q2"), ("assistant", "a2"), ("user", "q3"), ("assistant", "a3")]
    assert [r.content for r in stores.transcript.rows(parent.session_id)] == ["q1", "a1", "q2", "a2", "q3"]


def check_delete_removes_the_session_and_its_route(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1")
    stores.edits.rename(entry.session_id, "Gone", fence=fence(route(stores)), now=T0 + 1)
    stores.edits.delete_session(entry.session_id, fence=fence(route(stores)), now=T0 + 2)
    assert stores.routes.get(KEY) is None and stores.catalogue.get_session(entry.session_id) is None
    assert stores.transcript.rows(entry.session_id) == []
    assert stores.catalogue.find_session_by_title("agent:main", "Gone") is None
    fresh = stores.routes.open(DM, KEY, T0 + 3)
    assert fresh.created and fresh.session_id != entry.session_id
    with pytest.raises(SessionNotFound):
        stores.edits.rename(entry.session_id, "x", fence=fence(fresh), now=T0 + 4)


def check_model_override_is_fenced_and_sanitized(make: Make) -> None:
    stores = make(SessionRules())
    stores.routes.open(DM, KEY, T0)
    override = sanitize_model_override({"model": "gpt-4o", "provider": "openai", "base_url": "https://x.test/v1/"})
    changed = stores.edits.set_model_override(KEY, override, fence=fence(route(stores)), now=T0 + 1)
    assert changed.model_override == override and route(stores).model_override == override
    cleared = stores.edits.set_model_override(KEY, None, fence=fence(route(stores)), now=T0 + 2)
    assert cleared.model_override is None


def check_long_rows_read_back_as_written_everywhere(make: Make) -> None:
    # A reply of 1-2 KB (stored compressed on DynamoDB) reads back unchanged: in the window, in
    # every row, in search, and copied into a branch
    stores = make(SessionRules())
    parent = stores.routes.open(DM, KEY, T0)
    long_reply = "Der Blaue See liegt im Süden. " * 60 + "The end: lagoon."
    chat(stores, "tell me a story", long_reply)
    assert rows(stores, parent.session_id) == ["tell me a story", long_reply]
    window = stores.transcript.window(parent.session_id, upto_seq=None, limit=10)
    assert [r.content for r in window] == ["tell me a story", long_reply]
    hits = stores.catalogue.search("agent:main", "end: LAGOON")
    assert [(h.session_id, h.seq) for h in hits] == [(parent.session_id, 2)]
    child = stores.edits.branch(parent.session_id, fence=fence(route(stores)), now=T0 + 11)
    assert rows(stores, child.session_id) == ["tell me a story", long_reply]


def check_list_and_search_see_only_their_profile(make: Make) -> None:
    stores = make(SessionRules())
    main = stores.routes.open(DM, KEY, T0)
    coder = stores.routes.open(DM, "agent:coder:telegram:dm:99", T0 + 1)
    chat(stores, "Where is the Blue Lagoon?", at=T0 + 2)
    chat(stores, "blue lagoon secrets of coder", key="agent:coder:telegram:dm:99", at=T0 + 3)
    assert [i.session_id for i in stores.catalogue.list_sessions("agent:main")] == [main.session_id]
    assert [i.session_id for i in stores.catalogue.list_sessions("agent:coder")] == [coder.session_id]
    hits = stores.catalogue.search("agent:main", "BLUE lagoon")
    assert [(h.session_id, h.seq) for h in hits] == [(main.session_id, 1)] and "Blue Lagoon" in hits[0].snippet
    assert [h.session_id for h in stores.catalogue.search("agent:coder", "lagoon")] == [coder.session_id]
    assert stores.catalogue.search("agent:other", "lagoon") == []


def check_a_scoped_search_reads_only_its_reach(make: Make) -> None:
    # Given Al's DM, Bo's DM and a group on the same bot, each with a passport in it
    stores = make(SessionRules())
    bo = SessionSource(platform="telegram", chat_id="77", chat_type="dm", user_id="43", user_name="Bo")
    group = SessionSource(platform="telegram", chat_id="-100", chat_type="group", user_id="42")
    keys = {"al": KEY, "bo": "agent:main:telegram:dm:77", "group": "agent:main:telegram:group:-100:42"}
    opened = {
        "al": stores.routes.open(DM, keys["al"], T0),
        "bo": stores.routes.open(bo, keys["bo"], T0 + 1),
        "group": stores.routes.open(group, keys["group"], T0 + 2),
    }
    for n, name in enumerate(("al", "bo", "group")):
        chat(stores, f"my passport number is {name}", key=keys[name], at=T0 + 10 + n)
    # Al's earlier session (a reset) is his too
    later = stores.routes.open(DM, KEY, T0 + 20, force_new=True)

    def found(scope: SearchScope) -> set[str]:
        return {h.session_id for h in stores.catalogue.search("agent:main", "passport", scope=scope)}

    # When Al searches with the user scope, then only his own DM sessions are read
    al_reach = search_scope("agent:main", DM, scope="user", session_key=KEY)
    assert found(al_reach) == {opened["al"].session_id}
    assert later.session_id != opened["al"].session_id
    # the group's turn reads the group's sessions, the chat scope one key's, the profile all
    assert found(search_scope("agent:main", group, scope="user")) == {opened["group"].session_id}
    assert found(search_scope("agent:main", bo, scope="chat", session_key=keys["bo"])) == {opened["bo"].session_id}
    assert found(search_scope("agent:main", bo, scope="profile")) == {s.session_id for s in opened.values()}
    assert found(search_scope("agent:main", bo, scope="user", admin=True)) == {s.session_id for s in opened.values()}
    # a branch keeps its parent's reach
    child = stores.edits.branch(opened["bo"].session_id, fence=fence(route(stores, keys["bo"])), now=T0 + 30)
    assert found(search_scope("agent:main", bo, scope="user")) == {opened["bo"].session_id, child.session_id}
    # a scope names one profile: another namespace's scope is refused
    with pytest.raises(InvalidSessionRequest):
        stores.catalogue.search("agent:coder", "passport", scope=al_reach)


def check_a_user_row_keeps_its_sender(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    token, user_seq, _ = begin(stores, "e-sender", T0 + 1)
    stores.transcript.put(entry.session_id, TranscriptRow(user_seq, "user", "hi", T0 + 1, sender=sender_of(DM)))
    finish(stores, token, T0 + 2)
    found = stores.transcript.rows(entry.session_id)
    assert [(r.content, r.sender) for r in found] == [("hi", sender_of(DM))]
    assert sender_of(DM) == user_handle("telegram", "42") and sender_of(DM) != user_handle("discord", "42")
    child = stores.edits.branch(entry.session_id, fence=fence(route(stores)), now=T0 + 3)
    assert [r.sender for r in stores.transcript.rows(child.session_id)] == [sender_of(DM)]


def check_switch_session_resumes_an_older_one(make: Make) -> None:
    stores = make(SessionRules())
    first = stores.routes.open(DM, KEY, T0)
    chat(stores, "q1", "a1")
    second = stores.routes.open(DM, KEY, T0 + 10, force_new=True)
    chat(stores, "q2", "a2", at=T0 + 11)
    back = stores.edits.switch_session(KEY, first.session_id, fence=fence(route(stores)), now=T0 + 20)
    assert back.session_id == first.session_id
    assert stores.catalogue.get_session(first.session_id).ended_at is None  # type: ignore[union-attr]
    assert stores.catalogue.get_session(second.session_id).end_reason == "switched"  # type: ignore[union-attr]
    assert stores.catalogue.get_session(second.session_id).message_count == 2  # type: ignore[union-attr]
    chat(stores, "q3", "a3", at=T0 + 30)  # the resumed session's rows go after its own
    assert rows(stores, first.session_id) == ["q1", "a1", "q3", "a3"]
    other = stores.routes.open(DM, "agent:coder:telegram:dm:99", T0 + 40)
    with pytest.raises(SessionNotFound):
        stores.edits.switch_session(KEY, other.session_id, fence=fence(route(stores)), now=T0 + 41)


def check_an_ended_session_leaves_its_route_stale(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    assert stores.catalogue.end_session(entry.session_id, "detached", T0 + 1)
    assert not stores.catalogue.end_session(entry.session_id, "detached", T0 + 2)
    fresh = stores.routes.open(DM, KEY, T0 + 3)
    assert fresh.created and fresh.reset_reason == "stale_route"


def check_a_memory_flush_is_marked_once_over(make: Make) -> None:
    stores = make(SessionRules())
    entry = stores.routes.open(DM, KEY, T0)
    assert not stores.catalogue.memory_flushed(entry.session_id)
    stores.catalogue.mark_memory_flushed(entry.session_id, T0 + 1)
    stores.catalogue.mark_memory_flushed(entry.session_id, T0 + 2)
    assert stores.catalogue.memory_flushed(entry.session_id)
    stores.catalogue.mark_memory_flushed("20261129T000000-nosuchsession", T0)  # nobody waits on a missing one
    assert not stores.catalogue.memory_flushed("20261129T000000-nosuchsession")


# -- sweep --------------------------------------------------------------------------------------


def check_the_sweep_index_finds_expired_routes_once(make: Make) -> None:
    stores = make(idle_rules(60))
    entry = stores.routes.open(DM, KEY, T0)
    thread = stores.routes.open(THREAD, "agent:main:discord:thread:c1:t1", T0)  # exempt: never listed
    assert stores.sweep.due_for_expiry(T0 + 59 * 60) == []
    due = stores.sweep.due_for_expiry(T0 + 61 * 60)
    assert [d.session_key for d in due] == [KEY] and due[0].policy_deadline == T0 + 3600
    claimed = stores.sweep.claim_expiry(due[0], T0 + 61 * 60)
    assert claimed is not None and claimed.expiry_finalized
    assert stores.sweep.claim_expiry(due[0], T0 + 61 * 60) is None  # a second sweep loses
    assert stores.sweep.due_for_expiry(T0 + 62 * 60) == []
    assert stores.catalogue.end_session(entry.session_id, "idle", T0 + 61 * 60)
    assert thread.policy_deadline is None
    fresh = stores.routes.open(DM, KEY, T0 + 70 * 60)
    assert fresh.created and fresh.reset_reason in ("idle", "stale_route") and not fresh.expiry_finalized


def check_a_route_expires_by_ttl_and_its_session_is_closed_next_time(make: Make) -> None:
    stores = make(SessionRules(route_ttl_seconds=86_400))
    entry = stores.routes.open(DM, KEY, T0)
    expires = stores.routes.get(KEY)
    assert expires is not None
    # DynamoDB's TTL deletes the route for free once idle; the key's next session closes the old one.
    edits: Any = stores.edits
    edits.t.routes.delete({"session_key": KEY})
    fresh = stores.routes.open(DM, KEY, T0 + 2 * 86_400)
    assert fresh.created and fresh.session_id != entry.session_id
    closed = stores.catalogue.get_session(entry.session_id)
    assert closed is not None and closed.end_reason == "pruned"


CHECKS = [value for name, value in sorted(globals().items()) if name.startswith("check_")]
