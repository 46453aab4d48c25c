"""The session sweep (services/session_sweep.py) and the router's reset notice, on the fakes."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.domain.reset_policy import rules_from_settings
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.services.router import Access, route_message
from hermes_gateway.services.session_sweep import prune_idle_routes, sweep_expired_sessions
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import FakeSessionStore

T0 = 1_800_000_000.0
DM = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al")
KEY = "agent:main:telegram:dm:99"
IDLE = {"GATEWAY_RESET_MODE": "idle", "GATEWAY_RESET_IDLE_MINUTES": "60"}


def world(env: dict[str, str] | None = None) -> tuple[FakeSessionStore, Any]:
    settings = make_settings({**IDLE, **(env or {})})
    return FakeSessionStore(rules_from_settings(settings)), settings


def test_an_expired_session_is_flushed_then_ended() -> None:
    store, settings = world()
    entry = store.get_or_create(DM, KEY, T0)
    starter, events = FakeStarter(), FakeEvents()
    assert sweep_expired_sessions(store, starter, settings, T0 + 1800).expired == 0  # not due yet
    result = sweep_expired_sessions(store, starter, settings, T0 + 2 * 3600, events=events)
    assert result.expired == 1
    turn = starter.started[f"flush-{entry.session_id}"]
    assert turn["kind"] == "flush" and turn["session_key"] == KEY and turn["reason"] == "idle"
    assert turn["source"] == DM.to_dict() and turn["started_at"] == T0 + 2 * 3600
    info = store.get_session(entry.session_id)
    assert info is not None and info.end_reason == "idle"
    assert store.get_route(KEY).expiry_finalized  # type: ignore[union-attr]
    assert [name for name, _ in events.emitted] == ["session:end"]
    assert KEY not in str(events.emitted)  # hashed, never the raw key


def test_a_busy_session_is_left_for_a_later_sweep() -> None:
    store, settings = world()
    store.get_or_create(DM, KEY, T0)
    store.acquire(KEY, "turn-1", "tok", T0 + 3 * 3600 - 10, 600)
    result = sweep_expired_sessions(store, FakeStarter(), settings, T0 + 3 * 3600)
    assert (result.expired, result.skipped) == (0, 1)
    assert not store.get_route(KEY).expiry_finalized  # type: ignore[union-attr]


def test_a_flush_that_cannot_start_is_retried_by_the_next_sweep() -> None:
    store, settings = world()
    entry = store.get_or_create(DM, KEY, T0)

    class Broken(FakeStarter):
        def start(self, name: str, turn: dict[str, Any]) -> bool:
            raise RuntimeError("states unavailable")

    with pytest.raises(RuntimeError):
        sweep_expired_sessions(store, Broken(), settings, T0 + 2 * 3600)
    assert store.get_session(entry.session_id).ended_at is None  # type: ignore[union-attr]
    starter = FakeStarter()
    assert sweep_expired_sessions(store, starter, settings, T0 + 2 * 3600 + 60).expired == 1
    assert list(starter.started) == [f"flush-{entry.session_id}"]


def test_a_route_whose_policy_was_turned_off_leaves_the_index() -> None:
    store, _ = world()
    store.get_or_create(DM, KEY, T0)
    relaxed = make_settings({"GATEWAY_RESET_MODE": "none"})
    result = sweep_expired_sessions(store, FakeStarter(), relaxed, T0 + 2 * 3600)
    assert (result.expired, result.skipped) == (0, 1)
    store.rules = rules_from_settings(relaxed)  # the deadline is re-filed under the new rules
    sweep_expired_sessions(store, FakeStarter(), relaxed, T0 + 2 * 3600)
    assert store.due_for_expiry(T0 + 9 * 3600) == []


def test_idle_routes_are_pruned_and_their_sessions_end() -> None:
    store, settings = world({"GATEWAY_ROUTE_MAX_IDLE_DAYS": "30", "GATEWAY_RESET_MODE": "none"})
    old = store.get_or_create(DM, KEY, T0)
    store.get_or_create(DM, "agent:main:telegram:dm:100", T0 + 29 * 86400)
    assert prune_idle_routes(store, settings, T0 + 31 * 86400) == 1
    assert store.get_route(KEY) is None and store.get_route("agent:main:telegram:dm:100") is not None
    assert store.get_session(old.session_id).end_reason == "pruned"  # type: ignore[union-attr]
    off = make_settings({"GATEWAY_ROUTE_MAX_IDLE_DAYS": "0"})
    assert prune_idle_routes(store, off, T0 + 900 * 86400) == 0


def message(event: str, at: float) -> InboundMessage:
    return InboundMessage(source=DM, text="hi", event_id=event, received_at=at)


@pytest.mark.parametrize(("notice_env", "expected"), [({}, 1), ({"TELEGRAM_RESET_NOTICE": "false"}, 0)])
def test_the_chat_gets_one_reset_notice_unless_turned_off(notice_env: dict[str, str], expected: int) -> None:
    settings = make_settings({**IDLE, "TELEGRAM_ALLOWED_USERS": "42", **notice_env})
    store = FakeSessionStore(rules_from_settings(settings))
    replies = FakeDeliveryQueue()
    access = Access(pairing=FakePairingStore(), replies=replies, events=FakeEvents())
    starter = FakeStarter()

    def send(event: str, at: float) -> None:
        route_message(message(event, at), settings=settings, store=store, lease=store, starter=starter,
                      access=access, now=at)  # fmt: skip
        for turn in list(starter.started.values()):  # the turn ran and released its lease
            if "lease_token" in turn:  # (a memory flush of a replaced session holds none)
                store.release(KEY, turn["lease_token"])

    send("e1", T0)
    send("e2", T0 + 600)
    assert [job for job in replies.bodies if job["delivery_id"].startswith("reset-")] == []
    send("e3", T0 + 600 + 2 * 3600)
    notices = [job for job in replies.bodies if job["delivery_id"].startswith("reset-")]
    assert len(notices) == expected
    if expected:
        assert "fresh session" in notices[0]["text"] and notices[0]["target"]["chat_id"] == "99"


def test_the_fake_heals_a_route_left_on_a_compressed_parent() -> None:
    from dataclasses import replace

    from hermes_gateway.domain.sessions import Fence

    store = FakeSessionStore()
    first = store.get_or_create(DM, KEY, T0)
    read = store.get_route(KEY)
    assert read is not None
    child = store.compress(first.session_id, "s1", fence=Fence(read.revision, read.execution_generation), now=T0 + 1)
    store.routes[KEY] = replace(store.routes[KEY], session_id=first.session_id)
    healed = store.get_or_create(DM, KEY, T0 + 2)
    assert healed.session_id == child.session_id and not healed.created
