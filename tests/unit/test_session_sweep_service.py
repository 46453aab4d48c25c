"""The session sweep (services/session_sweep.py) and the router's reset notice, on in-memory stores."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.domain.turn_state import TurnState
from hermes_gateway.services.session_sweep import sweep_expired_sessions
from hermes_gateway.settings import Settings, rules_from_settings
from tests.fakes.engine import Engine
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import memory_stores

T0 = 1_800_000_000.0
DM = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al")
KEY = "agent:main:telegram:dm:99"
IDLE = {"GATEWAY_RESET_MODE": "idle", "GATEWAY_RESET_IDLE_MINUTES": "60"}


def world(env: dict[str, str] | None = None) -> tuple[SessionStores, Settings]:
    settings = make_settings({**IDLE, **(env or {})})
    return memory_stores(rules_from_settings(settings)), settings


def sweep(stores: SessionStores, starter: Any, settings: Settings, now: float, **kwargs: Any) -> Any:
    return sweep_expired_sessions(stores.sweep, stores.catalogue, starter, settings, now, **kwargs)


def test_an_expired_session_is_flushed_then_ended() -> None:
    stores, settings = world()
    entry = stores.routes.open(DM, KEY, T0)
    starter, events = FakeStarter(), FakeEvents()
    assert sweep(stores, starter, settings, T0 + 1800).expired == 0  # not due yet
    result = sweep(stores, starter, settings, T0 + 2 * 3600, events=events)
    assert result.expired == 1
    turn = TurnState.from_json(starter.started[f"flush-{entry.session_id}"]).turn
    assert turn.kind.value == "flush" and turn.session_key == KEY and turn.flush_reason == "idle"
    assert turn.source is not None and turn.source.user_id == "42" and turn.started_at == T0 + 2 * 3600
    info = stores.catalogue.get_session(entry.session_id)
    assert info is not None and info.end_reason == "idle"
    assert stores.routes.get(KEY).expiry_finalized  # type: ignore[union-attr]
    assert [name for name, _ in events.emitted] == ["session:end"]
    assert KEY not in str(events.emitted)  # hashed, never the raw key


def test_a_busy_session_is_left_for_a_later_sweep() -> None:
    # Given a one-minute idle policy and a turn that runs past the session's deadline
    stores, settings = world({"GATEWAY_RESET_IDLE_MINUTES": "1"})
    entry = stores.routes.open(DM, KEY, T0)
    assert stores.leases.begin(entry, "turn-1", "tok", "e1", T0) is not None
    result = sweep(stores, FakeStarter(), settings, T0 + 120)  # due since T0 + 60; the lease lasts 360 s
    assert (result.expired, result.skipped) == (0, 1)
    assert not stores.routes.get(KEY).expiry_finalized  # type: ignore[union-attr]


def test_a_flush_that_cannot_start_is_retried_by_the_next_sweep() -> None:
    stores, settings = world()
    entry = stores.routes.open(DM, KEY, T0)

    class Broken(FakeStarter):
        def start(self, name: str, turn: dict[str, Any]) -> bool:
            raise RuntimeError("states unavailable")

    with pytest.raises(RuntimeError):
        sweep(stores, Broken(), settings, T0 + 2 * 3600)
    assert stores.catalogue.get_session(entry.session_id).ended_at is None  # type: ignore[union-attr]
    starter = FakeStarter()
    assert sweep(stores, starter, settings, T0 + 2 * 3600 + 60).expired == 1
    assert list(starter.started) == [f"flush-{entry.session_id}"]


def test_a_route_whose_policy_was_turned_off_leaves_the_index() -> None:
    stores, _ = world()
    stores.routes.open(DM, KEY, T0)
    relaxed = make_settings({"GATEWAY_RESET_MODE": "none"})
    relaxed_stores = memory_stores(rules_from_settings(relaxed), client=stores.routes.t.client)  # type: ignore[attr-defined]
    result = sweep(relaxed_stores, FakeStarter(), relaxed, T0 + 2 * 3600)
    assert (result.expired, result.skipped) == (0, 1)
    assert relaxed_stores.sweep.due_for_expiry(T0 + 9 * 3600) == []  # re-filed under the new rules


def message(event: str, at: float) -> InboundMessage:
    return InboundMessage(source=DM, text="hi", event_id=event, received_at=at)


@pytest.mark.parametrize(("notice_env", "expected"), [({}, 1), ({"TELEGRAM_RESET_NOTICE": "false"}, 0)])
def test_the_chat_gets_one_reset_notice_unless_turned_off(notice_env: dict[str, str], expected: int) -> None:
    engine = Engine({**IDLE, "TELEGRAM_ALLOWED_USERS": "42", **notice_env})
    engine.clock = T0
    engine.send("hi", "e1")
    engine.pump()
    engine.clock = T0 + 600
    engine.send("hi", "e2")
    engine.pump()
    assert [job for job in engine.replies.bodies if job["delivery_id"].startswith("reset-")] == []
    engine.clock = T0 + 600 + 2 * 3600
    turns_before_notice: list[list[str]] = []

    class Ahead(FakeDeliveryQueue):  # waited for, so the turn's answer comes after the notice
        def send(self, body: dict[str, Any]) -> str:
            turns_before_notice.append([name.split("-")[0] for name in engine.starter.started])
            return super().send(body)

    engine.replies_ahead = ahead = Ahead()
    engine.send("hi", "e3")
    notices = [job for job in ahead.bodies if job["delivery_id"].startswith("reset-")]
    assert len(notices) == expected
    assert not [job for job in engine.replies.bodies if job["delivery_id"].startswith("reset-")]
    if expected:
        assert "fresh session" in notices[0]["text"] and notices[0]["target"]["chat_id"] == "99"
        assert turns_before_notice == [["turn", "turn", "flush"]]  # the new session's turn not yet started
    assert [name.split("-")[0] for name in engine.starter.started] == ["turn", "turn", "flush", "turn"]
