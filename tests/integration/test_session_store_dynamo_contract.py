"""The DynamoDB session store follows the session store contract (tests/session_contract.py) on
moto, and holds up under concurrency: racing resets, stale fences, two sweeps at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_sessions import DynamoSessionStore
from hermes_gateway.domain.reset_policy import SessionRules
from hermes_gateway.domain.sessions import Fence
from hermes_gateway.errors import Conflict
from tests.fakes.concurrency import race
from tests.fakes.services import make_settings
from tests.fakes.sessions import FakeSessionStore
from tests.session_contract import CHECKS, DM, KEY, T0, idle_rules

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_the_dynamo_store_follows_the_contract(
    aws: Any, check: Callable[[Callable[[SessionRules], Any]], None]
) -> None:
    check(lambda rules: DynamoSessionStore(aws.bindings, rules=rules))


def test_racing_policy_resets_of_one_key_make_exactly_one_new_session(aws: Any) -> None:
    # Given a session the idle policy has expired
    store = DynamoSessionStore(aws.bindings, rules=idle_rules(60))
    first = store.get_or_create(DM, KEY, T0)
    # When 12 messages for the key arrive at the same moment
    entries = race(12, lambda _: store.get_or_create(DM, KEY, T0 + 2 * 3600))
    # Then one of them replaced the session and all of them landed in that one new session
    assert sum(e.created for e in entries) == 1
    assert len({e.session_id for e in entries}) == 1 and entries[0].session_id != first.session_id
    sessions = list(store.models.session.scan())
    assert len(sessions) == 2
    assert [s.end_reason for s in sessions if s.session_id == first.session_id] == ["idle"]


def test_racing_fenced_mutations_apply_exactly_once(aws: Any) -> None:
    # Given a session and a fence read once
    store = DynamoSessionStore(aws.bindings)
    entry = store.get_or_create(DM, KEY, T0)
    for i in range(4):
        store.append_message(entry.session_id, "user" if i % 2 == 0 else "assistant", f"m{i}", T0 + i)
    read = store.get_route(KEY)
    assert read is not None
    fence = Fence(read.revision, read.execution_generation)

    # When eight clients undo with that same fence at once
    def undo(_: int) -> str:
        try:
            store.undo(entry.session_id, 1, fence=fence, now=T0 + 10)
        except Conflict:
            return "conflict"
        return "applied"

    outcomes = race(8, undo)
    # Then exactly one applied and one turn (not more) is gone
    assert sorted(outcomes).count("applied") == 1
    assert [r.content for r in store.transcript(entry.session_id)] == ["m0", "m1"]


class Starter:
    def __init__(self) -> None:
        self.started: dict[str, dict[str, Any]] = {}

    def start(self, name: str, turn: dict[str, Any]) -> bool:
        if name in self.started:
            return False
        self.started[name] = turn
        return True

    def is_running(self, name: str) -> bool:
        return False


@pytest.mark.parametrize("kind", ["dynamo", "fake"])
def test_two_sweeps_at_once_flush_and_end_each_session_once(aws: Any, kind: str) -> None:
    from hermes_gateway.services.session_sweep import sweep_expired_sessions

    settings = make_settings({"GATEWAY_RESET_MODE": "idle", "GATEWAY_RESET_IDLE_MINUTES": "60"})
    from hermes_gateway.domain.reset_policy import rules_from_settings

    rules = rules_from_settings(settings)
    store: Any = DynamoSessionStore(aws.bindings, rules=rules) if kind == "dynamo" else FakeSessionStore(rules)
    keys = [f"agent:main:telegram:dm:{i}" for i in range(6)]
    ids = [store.get_or_create(DM, key, T0).session_id for key in keys]
    starts: list[tuple[str, dict[str, Any]]] = []

    class Recording(Starter):
        def start(self, name: str, turn: dict[str, Any]) -> bool:
            starts.append((name, turn))
            return super().start(name, turn)

    starter = Recording()
    results = race(2, lambda _: sweep_expired_sessions(store, starter, settings, T0 + 2 * 3600))
    assert sum(r.expired for r in results) == 6
    assert sorted(name for name, _ in starts) == sorted(f"flush-{sid}" for sid in ids)  # each started once
    turn = starts[0][1]
    assert turn["kind"] == "flush" and turn["reason"] == "idle" and turn["source"]["platform"] == "telegram"
    assert set(turn) == {"kind", "turn_id", "session_id", "session_key", "source", "reason", "started_at"}
    assert all(store.get_session(sid).end_reason == "idle" for sid in ids)
    # A third sweep finds nothing
    assert sweep_expired_sessions(store, starter, settings, T0 + 3 * 3600).expired == 0


def test_a_route_left_on_a_compressed_parent_is_healed_to_the_newest_child(aws: Any) -> None:
    # Given a session compressed twice, and a route that still points at the first parent
    store = DynamoSessionStore(aws.bindings)
    first = store.get_or_create(DM, KEY, T0)
    store.append_message(first.session_id, "user", "q1", T0)
    read = store.get_route(KEY)
    assert read is not None
    child = store.compress(first.session_id, "s1", fence=Fence(read.revision, read.execution_generation), now=T0 + 1)
    grandchild = store.compress(
        child.session_id, "s2", fence=Fence(child.revision, child.execution_generation), now=T0 + 2
    )
    Route = store.models.route
    Route(KEY).update(actions=[Route.session_id.set(first.session_id)])
    # When the next message arrives, it lands in the newest continuation (no new session)
    healed = store.get_or_create(DM, KEY, T0 + 3)
    assert healed.session_id == grandchild.session_id and not healed.created
    assert [r.content for r in store.transcript(healed.session_id)] == ["s2"]
