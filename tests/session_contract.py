"""The session store's contract, run against the in-memory fake (tests/unit) and the DynamoDB
adapter on moto (tests/integration): both must follow the same rules.

Each `check_*` takes a factory `make(rules) -> store` and raises AssertionError on a breach.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermes_gateway.domain.reset_policy import PolicyTable, ResetPolicy, SessionRules
from hermes_gateway.domain.sessions import (
    MAX_FAILED_RECOVERIES,
    ExpiredLease,
    Fence,
    InvalidSessionRequest,
    SessionEntry,
    SessionNotFound,
    TokenUsage,
    sanitize_model_override,
)
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import Conflict

Make = Callable[[SessionRules], Any]

DM = SessionSource(platform="telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Al")
THREAD = SessionSource(platform="discord", chat_id="c1", chat_type="thread", thread_id="t1", user_id="7")
KEY = "agent:main:telegram:dm:99"
T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC
HOUR = 3600.0


def idle_rules(minutes: int = 60, window: int = 3600) -> SessionRules:
    return SessionRules(PolicyTable(ResetPolicy("idle", minutes)), "UTC", window)


def fence(entry: SessionEntry) -> Fence:
    return Fence(entry.revision, entry.execution_generation)


def route(store: Any, key: str = KEY) -> SessionEntry:
    found: SessionEntry | None = store.get_route(key)
    assert found is not None
    return found


def check_idle_policy_resets_once_and_records_why(make: Make) -> None:
    store = make(idle_rules(60))
    first = store.get_or_create(DM, KEY, T0)
    store.append_message(first.session_id, "user", "hello", T0)
    # Within the idle window the session is reused (and the activity clock moves)
    again = store.get_or_create(DM, KEY, T0 + 30 * 60)
    assert again.session_id == first.session_id and not again.created
    # Past it, the next message starts a new session and says why
    fresh = store.get_or_create(DM, KEY, T0 + 30 * 60 + 61 * 60)
    assert fresh.created and fresh.session_id != first.session_id
    assert fresh.reset_reason == "idle" and fresh.was_auto_reset and fresh.auto_reset_reason == "idle"
    assert fresh.reset_had_activity and fresh.prev_session_id == first.session_id and fresh.is_fresh_reset
    old = store.get_session(first.session_id)
    assert old.ended_at == T0 + 91 * 60 and old.end_reason == "idle"
    # The persisted entry carries the same flags
    stored = route(store)
    assert stored.was_auto_reset and stored.prev_session_id == first.session_id


def check_touch_false_keeps_the_activity_clock(make: Make) -> None:
    store = make(idle_rules(60))
    first = store.get_or_create(DM, KEY, T0)
    store.get_or_create(DM, KEY, T0 + 50 * 60, touch_activity=False)
    later = store.get_or_create(DM, KEY, T0 + 61 * 60)
    assert later.created and later.prev_session_id == first.session_id


def check_daily_policy_uses_the_time_zone(make: Make) -> None:
    # 04:00 in Tokyo is 19:00 UTC the day before.
    rules = SessionRules(PolicyTable(ResetPolicy("daily", at_hour=4)), "Asia/Tokyo", 3600)
    store = make(rules)
    start = 1_800_000_000.0 - (1_800_000_000.0 % 86400) + 18 * HOUR  # 18:00 UTC = 03:00 Tokyo
    first = store.get_or_create(DM, KEY, start)
    same = store.get_or_create(DM, KEY, start + 0.5 * HOUR)  # 03:30 Tokyo
    assert same.session_id == first.session_id
    after = store.get_or_create(DM, KEY, start + 1.5 * HOUR)  # 04:30 Tokyo, last activity 03:30
    assert after.created and after.reset_reason == "daily"


def check_threads_are_exempt_unless_named(make: Make) -> None:
    key = "agent:main:discord:thread:c1:t1"
    store = make(idle_rules(1))
    first = store.get_or_create(THREAD, key, T0)
    assert store.get_or_create(THREAD, key, T0 + 10 * HOUR).session_id == first.session_id
    named = SessionRules(PolicyTable(ResetPolicy("idle", 1), {"thread": ResetPolicy("idle", 1)}), "UTC", 3600)
    store = make(named)
    first = store.get_or_create(THREAD, key, T0)
    assert store.get_or_create(THREAD, key, T0 + 10 * HOUR).reset_reason == "idle"


def _expire_lease(store: Any, at: float, token: str = "tok") -> None:
    assert store.acquire(KEY, "turn-1", token, at, 60)
    assert store.expire(ExpiredLease(KEY, token, "turn-1", at + 60), at + 61)


def check_resume_pending_continues_within_the_window(make: Make) -> None:
    store = make(idle_rules(24 * 60, window=3600))
    first = store.get_or_create(DM, KEY, T0)
    _expire_lease(store, T0)
    marked = route(store)
    assert marked.resume_pending and marked.resume_reason == "lease_expired" and marked.resume_marked_at == T0 + 61
    again = store.get_or_create(DM, KEY, T0 + 600)
    assert again.session_id == first.session_id and again.auto_continue is not None
    assert again.auto_continue.reason == "lease_expired"
    # Past the freshness window (and with a policy other than none) it is replaced
    late = store.get_or_create(DM, KEY, T0 + 61 + 3601)
    assert late.created and late.reset_reason == "resume_pending_expired" and late.was_auto_reset


def check_resume_pending_with_mode_none_always_resumes(make: Make) -> None:
    store = make(SessionRules(resume_window_seconds=3600))
    first = store.get_or_create(DM, KEY, T0)
    _expire_lease(store, T0)
    later = store.get_or_create(DM, KEY, T0 + 10 * HOUR)
    assert later.session_id == first.session_id and later.auto_continue is not None


def check_suspended_entries_are_replaced(make: Make) -> None:
    store = make(SessionRules())
    first = store.get_or_create(DM, KEY, T0)
    for i in range(MAX_FAILED_RECOVERIES + 1):  # the first cut-short turn, then three failed recoveries
        assert store.turn_failed(KEY, first.session_id, "crash", T0 + i) is (i == MAX_FAILED_RECOVERIES)
    assert route(store).suspended
    fresh = store.get_or_create(DM, KEY, T0 + 100)
    assert fresh.created and fresh.reset_reason == "suspended" and not route(store).suspended


def check_a_successful_turn_clears_the_recovery_count(make: Make) -> None:
    store = make(SessionRules())
    first = store.get_or_create(DM, KEY, T0)
    store.turn_failed(KEY, first.session_id, "crash", T0)
    store.turn_failed(KEY, first.session_id, "crash", T0 + 1)
    assert route(store).failed_recoveries == 1
    store.turn_succeeded(KEY, first.session_id, T0 + 2)
    cleared = route(store)
    assert not cleared.resume_pending and cleared.failed_recoveries == 0 and cleared.resume_reason is None
    # An expired lease counts the same way as a reported failure
    _expire_lease(store, T0 + 10, "a")
    _expire_lease(store, T0 + 100, "b")
    assert route(store).failed_recoveries == 1


def check_active_work_is_never_reset(make: Make) -> None:
    store = make(idle_rules(1))
    first = store.get_or_create(DM, KEY, T0)
    assert store.acquire(KEY, "turn-1", "tok", T0, 3600)
    busy = store.get_or_create(DM, KEY, T0 + 30 * 60)
    assert busy.session_id == first.session_id and not busy.created
    store.release(KEY, "tok")
    assert store.get_or_create(DM, KEY, T0 + 90 * 60).reset_reason == "idle"


def check_every_route_write_bumps_revision_and_turns_bump_generation(make: Make) -> None:
    store = make(SessionRules())
    first = store.get_or_create(DM, KEY, T0)
    touched = store.get_or_create(DM, KEY, T0 + 1)
    assert touched.revision == first.revision + 1 and touched.execution_generation == first.execution_generation
    store.acquire(KEY, "turn-1", "tok", T0 + 2, 60)
    held = route(store)
    assert held.revision == touched.revision + 1 and held.execution_generation == first.execution_generation + 1
    forced = store.get_or_create(DM, KEY, T0 + 3, force_new=True)
    assert forced.execution_generation == held.execution_generation + 1


def check_usage_is_counted_once_per_turn_with_a_cost(make: Make) -> None:
    store = make(SessionRules())
    entry = store.get_or_create(DM, KEY, T0)
    usage = TokenUsage(1000, 500, cache_read_tokens=2000, cache_write_tokens=0, prompt_tokens=3000)
    assert store.record_usage(entry.session_id, "turn-1", usage, T0, model="gpt-4o", provider="openai")
    assert not store.record_usage(entry.session_id, "turn-1", usage, T0, model="gpt-4o", provider="openai")
    info = store.get_session(entry.session_id)
    assert (info.input_tokens, info.output_tokens, info.cache_read_tokens) == (1000, 500, 2000)
    assert info.last_prompt_tokens == 3000 and info.total_tokens == 3500
    # gpt-4o: 1000 * 2.50 + 500 * 10.00 + 2000 * 1.25 per million = 0.01
    assert info.cost_status == "estimated" and info.estimated_cost_usd == pytest.approx(0.01)
    assert store.turn_usage(entry.session_id, "turn-1") == usage
    store.record_usage(entry.session_id, "turn-2", TokenUsage(10, 10), T0, model="mystery-model", provider="openai")
    assert store.get_session(entry.session_id).cost_status == "unknown"


def _chat(store: Any, session_id: str, *pairs: str) -> None:
    for i, text in enumerate(pairs):
        store.append_message(session_id, "user" if i % 2 == 0 else "assistant", text, T0 + i)


def check_undo_and_retry_soft_delete_turns(make: Make) -> None:
    store = make(SessionRules())
    entry = store.get_or_create(DM, KEY, T0)
    _chat(store, entry.session_id, "q1", "a1", "q2", "a2", "q3", "a3")
    undone = store.undo(entry.session_id, 2, fence=fence(route(store)), now=T0 + 10)
    assert undone.removed == 4 and undone.user_text == "q2" and undone.rewound_to_seq == 2
    assert [r.content for r in store.transcript(entry.session_id)] == ["q1", "a1"]
    assert undone.entry.revision == route(store).revision
    retried = store.retry(entry.session_id, fence=fence(route(store)), now=T0 + 11)
    assert retried.user_text == "q1" and store.transcript(entry.session_id) == []
    nothing = store.undo(entry.session_id, 1, fence=fence(route(store)), now=T0 + 12)
    assert nothing.removed == 0 and nothing.user_text is None
    # New rows after an undo are visible; the undone ones stay hidden
    store.append_message(entry.session_id, "user", "q4", T0 + 13)
    assert [r.content for r in store.transcript(entry.session_id)] == ["q4"]


def check_rewind_keeps_rows_up_to_a_seq(make: Make) -> None:
    store = make(SessionRules())
    entry = store.get_or_create(DM, KEY, T0)
    _chat(store, entry.session_id, "q1", "a1", "q2", "a2")
    result = store.rewind(entry.session_id, 3, fence=fence(route(store)), now=T0 + 10)
    assert result.removed == 1 and [r.seq for r in store.transcript(entry.session_id)] == [1, 2, 3]
    with pytest.raises(InvalidSessionRequest):
        store.rewind(entry.session_id, 1, fence=Fence(route(store).revision), now=T0 + 11)  # no generation


def check_stale_fences_are_refused_and_change_nothing(make: Make) -> None:
    store = make(SessionRules())
    entry = store.get_or_create(DM, KEY, T0)
    _chat(store, entry.session_id, "q1", "a1")
    read = fence(route(store))
    store.acquire(KEY, "turn-1", "tok", T0 + 1, 60)  # a turn starts: revision and generation move on
    sid = entry.session_id
    refused: list[Callable[[], Any]] = [
        lambda: store.rename(sid, "Plans", fence=read, now=T0 + 2),
        lambda: store.rewind(sid, 0, fence=read, now=T0 + 2),
        lambda: store.undo(sid, 1, fence=read, now=T0 + 2),
        lambda: store.delete_session(sid, fence=read, now=T0 + 2),
        lambda: store.reset(KEY, fence=read, now=T0 + 2),
        lambda: store.branch(sid, fence=read, now=T0 + 2),
        lambda: store.compress(sid, "summary", fence=read, now=T0 + 2),
        lambda: store.set_model_override(KEY, sanitize_model_override({"model": "gpt-4o"}), fence=read, now=T0 + 2),
    ]
    before = route(store)
    for attempt in refused:
        with pytest.raises(Conflict):
            attempt()
    after = route(store)
    assert after.revision == before.revision and after.session_id == sid and after.model_override is None
    assert [r.content for r in store.transcript(sid)] == ["q1", "a1"]
    assert store.get_session(sid).title is None and store.get_session(sid).ended_at is None
    # A fence with the right revision but a stale generation is refused too
    only_revision = Fence(after.revision, after.execution_generation - 1)
    with pytest.raises(Conflict):
        store.delete_session(sid, fence=only_revision, now=T0 + 3)


def check_titles_are_unique_per_profile(make: Make) -> None:
    store = make(SessionRules())
    a = store.get_or_create(DM, KEY, T0)
    store.rename(a.session_id, "  Trip   plans ", fence=fence(route(store)), now=T0 + 1)
    assert store.get_session(a.session_id).title == "Trip plans"
    b = store.get_or_create(DM, "agent:main:telegram:dm:100", T0 + 2)
    with pytest.raises(Conflict):
        store.rename(b.session_id, "TRIP PLANS", fence=fence(route(store, b.session_key)), now=T0 + 3)
    other = store.get_or_create(DM, "agent:coder:telegram:dm:99", T0 + 4)
    store.rename(other.session_id, "Trip plans", fence=fence(route(store, other.session_key)), now=T0 + 5)
    assert store.find_session_by_title("agent:main", "trip PLANS").session_id == a.session_id
    assert store.find_session_by_title("agent:coder", "trip plans").session_id == other.session_id
    # Renaming frees the old title
    store.rename(a.session_id, "Other", fence=fence(route(store)), now=T0 + 6)
    store.rename(b.session_id, "Trip plans", fence=fence(route(store, b.session_key)), now=T0 + 7)
    assert store.find_session_by_title("agent:main", "Trip plans").session_id == b.session_id
    with pytest.raises(InvalidSessionRequest):
        store.rename(a.session_id, "   ", fence=fence(route(store)), now=T0 + 8)


def check_a_taken_title_is_refused_as_taken_whatever_the_session_had(make: Make) -> None:
    store = make(SessionRules())
    a = store.get_or_create(DM, KEY, T0)
    store.rename(a.session_id, "Trip plans", fence=fence(route(store)), now=T0 + 1)
    b = store.get_or_create(DM, "agent:main:telegram:dm:100", T0 + 2)
    with pytest.raises(Conflict, match="title"):  # an untitled session
        store.rename(b.session_id, "trip plans", fence=fence(route(store, b.session_key)), now=T0 + 3)
    store.rename(b.session_id, "Other", fence=fence(route(store, b.session_key)), now=T0 + 4)
    with pytest.raises(Conflict, match="title"):  # a titled one (its old title is released in the same write)
        store.rename(b.session_id, "Trip plans", fence=fence(route(store, b.session_key)), now=T0 + 5)
    with pytest.raises(Conflict, match="title"):  # a branch named like another session
        store.branch(b.session_id, fence=fence(route(store, b.session_key)), now=T0 + 6, title="TRIP plans")
    assert store.get_session(b.session_id).title == "Other"


def check_branch_copies_active_rows_into_a_child(make: Make) -> None:
    store = make(SessionRules())
    parent = store.get_or_create(DM, KEY, T0)
    _chat(store, parent.session_id, "q1", "a1", "q2", "a2")
    store.undo(parent.session_id, 1, fence=fence(route(store)), now=T0 + 10)
    child = store.branch(parent.session_id, fence=fence(route(store)), now=T0 + 11, title="Fork")
    assert child.session_id != parent.session_id and route(store).session_id == child.session_id
    assert child.execution_generation > parent.execution_generation
    assert [r.content for r in store.transcript(child.session_id)] == ["q1", "a1"]
    info = store.get_session(child.session_id)
    assert info.parent_session_id == parent.session_id and info.title == "Fork"
    assert [r.content for r in store.transcript(parent.session_id)] == ["q1", "a1"]  # the parent is kept


def check_compress_continues_in_a_child(make: Make) -> None:
    store = make(SessionRules())
    parent = store.get_or_create(DM, KEY, T0)
    _chat(store, parent.session_id, "q1", "a1", "q2", "a2")
    child = store.compress(parent.session_id, "Summary so far", fence=fence(route(store)), now=T0 + 10, keep_last=2)
    assert route(store).session_id == child.session_id
    rows = store.transcript(child.session_id)
    assert [(r.role, r.content) for r in rows] == [("system", "Summary so far"), ("user", "q2"), ("assistant", "a2")]
    old = store.get_session(parent.session_id)
    assert old.end_reason == "compressed" and old.continued_in == child.session_id
    # The next message lands in the continuation, not a new session
    again = store.get_or_create(DM, KEY, T0 + 20)
    assert again.session_id == child.session_id and not again.created


def check_delete_removes_the_session_and_its_route(make: Make) -> None:
    store = make(SessionRules())
    entry = store.get_or_create(DM, KEY, T0)
    _chat(store, entry.session_id, "q1", "a1")
    store.rename(entry.session_id, "Gone", fence=fence(route(store)), now=T0 + 1)
    store.delete_session(entry.session_id, fence=fence(route(store)), now=T0 + 2)
    assert store.get_route(KEY) is None and store.get_session(entry.session_id) is None
    with pytest.raises(SessionNotFound):
        store.transcript(entry.session_id)  # a failed read raises; never an empty history
    assert store.find_session_by_title("agent:main", "Gone") is None
    fresh = store.get_or_create(DM, KEY, T0 + 3)
    assert fresh.created and fresh.session_id != entry.session_id


def check_model_override_is_fenced_and_sanitized(make: Make) -> None:
    store = make(SessionRules())
    store.get_or_create(DM, KEY, T0)
    override = sanitize_model_override({"model": "gpt-4o", "provider": "openai", "base_url": "https://x.test/v1/"})
    changed = store.set_model_override(KEY, override, fence=fence(route(store)), now=T0 + 1)
    assert changed.model_override == override and route(store).model_override == override
    cleared = store.set_model_override(KEY, None, fence=fence(route(store)), now=T0 + 2)
    assert cleared.model_override is None


def check_list_and_search_see_only_their_profile(make: Make) -> None:
    store = make(SessionRules())
    main = store.get_or_create(DM, KEY, T0)
    coder = store.get_or_create(DM, "agent:coder:telegram:dm:99", T0 + 1)
    store.append_message(main.session_id, "user", "Where is the Blue Lagoon?", T0 + 2)
    store.append_message(coder.session_id, "user", "blue lagoon secrets of coder", T0 + 3)
    assert [i.session_id for i in store.list_sessions("agent:main")] == [main.session_id]
    assert [i.session_id for i in store.list_sessions("agent:coder")] == [coder.session_id]
    hits = store.search("agent:main", "BLUE lagoon")
    assert [(h.session_id, h.seq) for h in hits] == [(main.session_id, 1)] and "Blue Lagoon" in hits[0].snippet
    assert [h.session_id for h in store.search("agent:coder", "lagoon")] == [coder.session_id]
    assert store.search("agent:other", "lagoon") == []


def check_stop_flags_the_running_turn(make: Make) -> None:
    store = make(SessionRules())
    store.get_or_create(DM, KEY, T0)
    assert store.request_stop(KEY, T0) is None  # nothing running
    store.acquire(KEY, "turn-1", "tok", T0, 60)
    assert store.request_stop(KEY, T0 + 1) == "turn-1"
    assert store.stop_requested(KEY, "turn-1") and not store.stop_requested(KEY, "turn-2")
    store.release(KEY, "tok")
    assert not store.stop_requested(KEY, "turn-1")


def check_the_sweep_index_finds_expired_routes_once(make: Make) -> None:
    store = make(idle_rules(60))
    entry = store.get_or_create(DM, KEY, T0)
    dm_thread = store.get_or_create(THREAD, "agent:main:discord:thread:c1:t1", T0)  # exempt: never listed
    assert store.due_for_expiry(T0 + 59 * 60) == []
    due = store.due_for_expiry(T0 + 61 * 60)
    assert [d.session_key for d in due] == [KEY] and due[0].policy_deadline == T0 + 3600
    claimed = store.claim_expiry(due[0], T0 + 61 * 60)
    assert claimed is not None and claimed.expiry_finalized
    assert store.claim_expiry(due[0], T0 + 61 * 60) is None  # a second sweep loses
    assert store.due_for_expiry(T0 + 62 * 60) == []
    assert store.end_session(entry.session_id, "idle", T0 + 61 * 60)
    assert not store.end_session(entry.session_id, "idle", T0 + 61 * 60)
    assert dm_thread.policy_deadline is None
    # The chat's next message starts a new session for the policy's reason
    fresh = store.get_or_create(DM, KEY, T0 + 70 * 60)
    assert fresh.created and fresh.reset_reason == "idle" and not fresh.expiry_finalized


def check_idle_routes_are_pruned_unless_changed(make: Make) -> None:
    store = make(SessionRules())
    store.get_or_create(DM, KEY, T0)
    store.get_or_create(DM, "agent:main:telegram:dm:100", T0 + 10 * HOUR)
    idle = store.idle_routes(T0 + HOUR)
    assert [e.session_key for e in idle] == [KEY]
    store.get_or_create(DM, KEY, T0 + 2 * HOUR)  # touched after it was listed
    assert not store.prune_route(idle[0])
    fresh = store.idle_routes(T0 + 3 * HOUR)
    assert store.prune_route(fresh[0]) and store.get_route(KEY) is None


def check_switch_session_resumes_an_older_one(make: Make) -> None:
    store = make(SessionRules())
    first = store.get_or_create(DM, KEY, T0)
    second = store.get_or_create(DM, KEY, T0 + 1, force_new=True)
    back = store.switch_session(KEY, first.session_id, fence=fence(route(store)), now=T0 + 2)
    assert back.session_id == first.session_id and store.get_session(first.session_id).ended_at is None
    assert store.get_session(second.session_id).end_reason == "switched"
    other = store.get_or_create(DM, "agent:coder:telegram:dm:99", T0 + 3)
    with pytest.raises(SessionNotFound):
        store.switch_session(KEY, other.session_id, fence=fence(route(store)), now=T0 + 4)


def check_a_memory_flush_is_marked_once_over(make: Make) -> None:
    store = make(SessionRules())
    entry = store.get_or_create(DM, KEY, T0)
    assert not store.memory_flushed(entry.session_id)
    store.mark_memory_flushed(entry.session_id, T0 + 1)
    store.mark_memory_flushed(entry.session_id, T0 + 2)  # again: no error
    assert store.memory_flushed(entry.session_id)
    store.mark_memory_flushed("20261129T000000-nosuchsession", T0)  # nobody waits on a missing one
    assert not store.memory_flushed("20261129T000000-nosuchsession")


CHECKS = [value for name, value in sorted(globals().items()) if name.startswith("check_")]
