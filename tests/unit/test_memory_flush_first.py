"""BEHAVIOUR §3: when a reset replaces a session that had a prompt, its memories are flushed first.
The flush is a turn of its own; the new session's first turn waits for it (within a limit), so a
note the flush saved is remembered in the first answer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.services.router import Access, route_message
from hermes_gateway.services.turn import FLUSH_POLL_SECONDS, TurnDeps, run_step
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents
from tests.unit.test_turn_service import NOW, World

DM = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Alice", message_id="5")


def routed_after_new(world: World) -> tuple[dict[str, Any], dict[str, Any]]:
    """A chat with a prompt, `/new`, then a message: (the flush turn, the new session's turn)."""
    world.step("commit", world.run_until_commit(world.route("remember: the door code is 4711")))
    world.clock += 5
    access = Access(pairing=FakePairingStore(), replies=FakeDeliveryQueue(), events=FakeEvents(), control=world.control)
    new = InboundMessage(source=DM, text="/new", event_id="telegram:default:2", received_at=world.clock)
    assert route_message(
        new, settings=world.settings, store=world.store, lease=world.store, starter=world.starter, access=access,
        now=world.clock,
    ).status == "command"  # fmt: skip
    [flush] = [turn for name, turn in world.starter.calls if name.startswith("flush-")]
    turn = world.route("what is the door code?", event="telegram:default:3")
    return flush, turn


def deps_with(world: World, sleeps: list[float], on_sleep: Any = None) -> TurnDeps:
    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if on_sleep is not None:
            on_sleep(len(sleeps))

    return replace(world.deps, sleep=sleep, flush_wait_seconds=3.0)


def test_the_first_turn_after_new_waits_for_the_flush_of_the_replaced_session() -> None:
    world = World()
    flush, turn = routed_after_new(world)
    assert turn["after_flush"] == flush["session_id"] != turn["session_id"]
    sleeps: list[float] = []

    def flush_finishes(count: int) -> None:
        if count == 2:  # the flush turn ends while the new turn waits
            state = flush
            for name in ("prepare", "call_model", "deliver", "commit"):
                state = run_step(name, state, world.deps)

    prepared = run_step("prepare", turn, deps_with(world, sleeps, flush_finishes))
    assert sleeps == [FLUSH_POLL_SECONDS, FLUSH_POLL_SECONDS]
    assert world.store.memory_flushed(flush["session_id"])
    assert "after_flush" not in prepared  # a continuation of this turn does not wait again


def test_a_flush_that_takes_too_long_is_not_waited_for_and_a_failed_one_releases_the_wait() -> None:
    world = World()
    flush, turn = routed_after_new(world)
    sleeps: list[float] = []
    prepared = run_step("prepare", turn, deps_with(world, sleeps))
    assert len(sleeps) == int(3.0 / FLUSH_POLL_SECONDS) + 1 and prepared["next"] == "model"
    # a flush that failed is over too: nobody waits on it
    run_step("fail", {**flush, "error": {"Error": "TransientError"}}, world.deps)
    assert world.store.memory_flushed(flush["session_id"])
    sleeps.clear()
    run_step("prepare", turn, deps_with(world, sleeps))
    assert sleeps == []


def test_a_session_that_was_not_reset_does_not_wait() -> None:
    world = World()
    turn = world.route("hello", source=DM)
    assert "after_flush" not in turn
    assert world.clock == NOW


def test_a_flush_started_again_saves_nothing_twice() -> None:
    world = World()
    flush, _ = routed_after_new(world)
    steps: list[str] = []
    for _attempt in range(2):
        state = run_step("prepare", flush, world.deps)
        # the state machine goes from Prepare straight to Commit when it says "stopped"
        rest = ["commit"] if state.get("next") == "stopped" else ["call_model", "deliver", "commit"]
        steps += ["prepare", *rest]
        for name in rest:
            state = run_step(name, state, world.deps)
    assert steps == ["prepare", "call_model", "deliver", "commit", "prepare", "commit"]
    assert state["status"] == "stopped" and world.store.memory_flushed(flush["session_id"])
