"""DynamoTurnControl on moto: the queue, the release-or-hand-off write, steering and approvals
keep the same rules as the in-memory fake (tests/fakes/turns.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hermes_gateway import wiring
from hermes_gateway.adapters.dynamo_turns import DynamoTurnControl
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.turns import NextTurn, PendingApproval, QueuedInput

pytestmark = pytest.mark.integration

SOURCE = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Alice")
KEY = "agent:main:telegram:dm:99"
NOW = time.time()


def item(event: str, mode: str = "queue") -> QueuedInput:
    return QueuedInput(
        event, f"text of {event}", NOW, SOURCE.to_dict(), {"platform": "telegram", "chat_id": "99"}, mode
    )


def plan_first(queue: list[QueuedInput]) -> NextTurn:
    head = queue[0]
    return NextTurn(1, f"turn-{head.event_id}", f"tok-{head.event_id}", {"turn_id": f"turn-{head.event_id}"})


@pytest.fixture
def control(aws: Any) -> DynamoTurnControl:
    store = wiring.session_store()
    store.get_or_create(SOURCE, KEY, NOW)
    assert store.acquire(KEY, "turn-0", "tok-0", NOW, 360)
    return wiring.turn_control()


def test_enqueue_only_while_busy_once_per_event_and_up_to_the_limit(control: DynamoTurnControl) -> None:
    assert control.enqueue(KEY, item("a"), max_items=2).status == "queued"
    assert control.enqueue(KEY, item("a"), max_items=2).status == "duplicate"
    assert control.enqueue(KEY, item("b"), max_items=2).status == "queued"
    assert control.enqueue(KEY, item("c"), max_items=2).status == "full"
    assert [q.event_id for q in control.state(KEY).queue] == ["a", "b"]

    assert wiring.session_store().release(KEY, "tok-0")
    assert control.enqueue(KEY, item("d"), max_items=5).status == "not_busy"


def test_finish_hands_off_in_order_repeats_the_same_hand_off_and_then_releases(control: DynamoTurnControl) -> None:
    control.enqueue(KEY, item("a"), max_items=5)
    control.enqueue(KEY, item("b"), max_items=5)

    first = control.finish(KEY, "tok-0", plan_first, 360, NOW)
    again = control.finish(KEY, "tok-0", plan_first, 360, NOW)

    assert first.status == again.status == "handed_off"
    assert first.next_turn == again.next_turn == {"turn_id": "turn-a"}
    state = control.state(KEY)
    assert (state.lease_token, state.lease_turn_id) == ("tok-a", "turn-a")
    assert [q.event_id for q in state.queue] == ["b"]
    # a handed-off message's id leaves the set: it is no longer "queued"
    assert control.enqueue(KEY, item("a"), max_items=5).status == "queued"

    assert control.finish(KEY, "tok-a", plan_first, 360, NOW).next_turn == {"turn_id": "turn-b"}
    assert control.finish(KEY, "tok-b", plan_first, 360, NOW).next_turn == {"turn_id": "turn-a"}
    assert control.finish(KEY, "tok-a", plan_first, 360, NOW).status == "released"
    assert control.finish(KEY, "tok-a", plan_first, 360, NOW).status == "lost"
    assert control.state(KEY).lease_token is None


def test_the_busy_notice_is_marked_once_per_turn(control: DynamoTurnControl) -> None:
    assert control.mark_busy_acknowledged(KEY, "turn-0")
    assert not control.mark_busy_acknowledged(KEY, "turn-0")
    assert control.mark_busy_acknowledged(KEY, "turn-1")


def test_heartbeat_and_steering_need_the_token(control: DynamoTurnControl) -> None:
    assert control.extend(KEY, "tok-0", NOW + 999)
    assert not control.extend(KEY, "other", NOW + 999)
    route = wiring.session_store().get_route(KEY)
    assert route is not None and route.lease_expires_at == pytest.approx(NOW + 999)

    control.enqueue(KEY, item("q1"), max_items=5)
    control.enqueue(KEY, item("s1", "steer"), max_items=5)
    assert control.take_steering(KEY, "other") == []
    assert [q.event_id for q in control.take_steering(KEY, "tok-0")] == ["s1"]
    assert [q.event_id for q in control.state(KEY).queue] == ["q1"]


def test_a_paused_turn_is_answered_once_and_its_state_kept(control: DynamoTurnControl) -> None:
    approval = PendingApproval("turn-0", "deploy", "c1", "42", NOW + 300, "sid-1")
    state = {"turn_id": "turn-0", "loop": {"messages": [{"role": "user", "content": "x"}], "approvals": 1}}

    assert control.pause(KEY, "tok-0", approval, state)
    assert not control.pause(KEY, "other", approval, state)
    assert control.state(KEY).approval == approval
    assert control.paused_state("sid-1", "turn-0") == state

    first = control.answer(KEY, "turn-0", "approved", "session")
    second = control.answer(KEY, "turn-0", "denied")
    assert first is not None and second is not None
    assert (first.decision, first.scope) == (second.decision, second.scope) == ("approved", "session")
    assert control.answer(KEY, "turn-9", "denied") is None

    control.clear_approval(KEY, "turn-9")
    assert control.state(KEY).approval is not None
    control.clear_approval(KEY, "turn-0")
    assert control.state(KEY).approval is None


def test_approvals_beyond_one_call(control: DynamoTurnControl) -> None:
    control.approve_tool(KEY, "deploy", "session", "sid-1")
    control.approve_tool(KEY, "lookup", "session", "sid-1")
    control.approve_tool(KEY, "rm", "always", "sid-1")
    state = control.state(KEY)
    assert state.approved("deploy", "sid-1") and state.approved("lookup", "sid-1")
    assert not state.approved("deploy", "sid-2") and state.approved("rm", "sid-2")

    control.set_yolo(KEY, True)
    assert control.state(KEY).approved("anything", "sid-3")
