"""Differential test: random sequences of session operations give the same observable results on
the in-memory fake and on the DynamoDB adapter (moto)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_gateway.adapters.dynamo_sessions import DynamoSessionStore
from hermes_gateway.domain.reset_policy import PolicyTable, ResetPolicy, SessionRules
from hermes_gateway.domain.sessions import ExpiredLease, Fence, TokenUsage
from hermes_gateway.domain.source import SessionSource
from tests.fakes.sessions import FakeSessionStore

pytestmark = pytest.mark.integration

RULES = SessionRules(PolicyTable(ResetPolicy("idle", 30)), "UTC", 1200)
SOURCE = SessionSource(platform="telegram", chat_id="99", user_id="42")
_example = itertools.count()

ops = st.lists(
    st.one_of(
        st.tuples(st.just("message"), st.sampled_from("ab"), st.integers(0, 45 * 60)),
        st.tuples(st.just("force"), st.sampled_from("ab"), st.just(0)),
        st.tuples(st.just("undo"), st.sampled_from("ab"), st.integers(1, 2)),
        st.tuples(st.just("rename"), st.sampled_from("ab"), st.integers(0, 2)),
        st.tuples(st.just("crash"), st.sampled_from("ab"), st.just(0)),
        st.tuples(st.just("succeed"), st.sampled_from("ab"), st.just(0)),
        st.tuples(st.just("usage"), st.sampled_from("ab"), st.integers(0, 3)),
        st.tuples(st.just("stale"), st.sampled_from("ab"), st.just(0)),
    ),
    min_size=1,
    max_size=10,
)


class Run:
    """One store, with its session ids renamed to creation order so two stores compare."""

    def __init__(self, store: Any, profile: str) -> None:
        self.store, self.profile, self.now = store, profile, 1_800_000_000.0
        self.names: dict[str, str] = {}

    def key(self, which: str) -> str:
        return f"agent:{self.profile}:telegram:dm:{which}"

    def name(self, session_id: str) -> str:
        return self.names.setdefault(session_id, f"s{len(self.names)}")

    def fence(self, which: str) -> Fence:
        entry = self.store.get_route(self.key(which))
        return Fence(entry.revision, entry.execution_generation) if entry else Fence(0, 0)

    def step(self, op: str, which: str, arg: int) -> Any:
        store, key = self.store, self.key(which)
        route = store.get_route(key)
        try:
            if op == "message":
                self.now += arg
                entry = store.get_or_create(SOURCE, key, self.now)
                seq = store.append_message(entry.session_id, "user", f"m{self.now}", self.now)
                return ("entry", self.name(entry.session_id), entry.created, entry.reset_reason, seq)
            if route is None:
                return "no route"
            sid = route.session_id
            if op == "force":
                entry = store.get_or_create(SOURCE, key, self.now, force_new=True)
                return ("forced", self.name(entry.session_id), entry.prev_session_id == sid)
            if op == "undo":
                result = store.undo(sid, arg, fence=self.fence(which), now=self.now)
                return ("undo", result.removed, result.user_text, result.rewound_to_seq)
            if op == "rename":
                info = store.rename(sid, f"Title {arg}", fence=self.fence(which), now=self.now)
                return ("renamed", info.title)
            if op == "crash":
                assert store.acquire(key, "t", "tok", self.now, 10)
                return ("expired", store.expire(ExpiredLease(key, "tok", "t", self.now + 10), self.now + 11))
            if op == "succeed":
                store.turn_succeeded(key, sid, self.now)
                return "ok"
            if op == "usage":
                fresh = store.record_usage(sid, f"turn{arg}", TokenUsage(arg, 2 * arg), self.now, model="gpt-4o")
                return ("usage", fresh)
            if op == "stale":
                store.undo(sid, 1, fence=Fence(route.revision - 1, route.execution_generation), now=self.now)
                return "applied a stale fence"
        except Exception as exc:  # compared by type: both stores must refuse the same way
            return ("error", type(exc).__name__)
        raise AssertionError(op)

    def state(self) -> Any:
        out: list[Any] = []
        for which in "ab":
            entry = self.store.get_route(self.key(which))
            if entry is None:
                out.append(None)
                continue
            info = self.store.get_session(entry.session_id)
            out.append(
                (
                    self.name(entry.session_id),
                    entry.revision,
                    entry.execution_generation,
                    entry.suspended,
                    entry.resume_pending,
                    entry.failed_recoveries,
                    entry.was_auto_reset,
                    entry.reset_had_activity,
                    [r.content for r in self.store.transcript(entry.session_id)],
                    (info.title, info.input_tokens, info.output_tokens, info.cost_status),
                )
            )
        return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_the_fake_and_dynamodb_agree(aws: Any, steps: list[tuple[str, str, int]]) -> None:
    profile = f"p{next(_example)}"
    fake, dynamo = Run(FakeSessionStore(RULES), profile), Run(DynamoSessionStore(aws.bindings, rules=RULES), profile)
    for op, which, arg in steps:
        assert fake.step(op, which, arg) == dynamo.step(op, which, arg), (op, which, arg)
        assert fake.state() == dynamo.state(), (op, which, arg)
