"""BEHAVIOUR §3: when a reset replaces a session that had a prompt, its memories are flushed first.
The flush is a turn of its own; the new session's first turn waits for it (within a limit), so a
note the flush saved is remembered in the first answer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hermes_gateway.domain.turn_state import TurnState
from hermes_gateway.services.turn import TurnDeps, run_step
from hermes_gateway.services.turn.respond import FLUSH_POLL_SECONDS
from tests.fakes.engine import NOW, Engine


def routed_after_new(engine: Engine) -> tuple[dict[str, Any], dict[str, Any]]:
    """A chat with a prompt, `/new`, then a message: (the flush turn, the new session's turn)."""
    engine.send("remember: the door code is 4711", "telegram:default:1")
    engine.pump()
    engine.clock += 5
    assert engine.send("/new", "telegram:default:2").status == "command"
    [flush] = [state for name, state in engine.starter.calls if name.startswith("flush-")]
    outcome = engine.send("what is the door code?", "telegram:default:3")
    assert outcome.turn_id is not None
    return flush, engine.starter.started[outcome.turn_id]


def deps_with(engine: Engine, sleeps: list[float], on_sleep: Any = None) -> TurnDeps:
    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if on_sleep is not None:
            on_sleep(len(sleeps))

    return replace(engine.deps, sleep=sleep, flush_wait_seconds=3.0)


def test_the_first_turn_after_new_waits_for_the_flush_of_the_replaced_session() -> None:
    engine = Engine()
    flush, turn = routed_after_new(engine)
    flush_turn, new_turn = TurnState.from_json(flush).turn, TurnState.from_json(turn).turn
    assert new_turn.notes.after_flush == flush_turn.session_id != new_turn.session_id
    sleeps: list[float] = []

    def flush_finishes(count: int) -> None:
        if count == 2:  # the flush turn ends while the new turn waits
            engine.workflow.run(flush)

    run_step("respond", turn, deps_with(engine, sleeps, flush_finishes))
    assert sleeps == [FLUSH_POLL_SECONDS, FLUSH_POLL_SECONDS]
    assert engine.stores.catalogue.memory_flushed(flush_turn.session_id or "")


def test_a_flush_that_takes_too_long_is_not_waited_for_and_a_failed_one_releases_the_wait() -> None:
    engine = Engine()
    flush, turn = routed_after_new(engine)
    sleeps: list[float] = []
    answered = run_step("respond", turn, deps_with(engine, sleeps))
    assert len(sleeps) == int(3.0 / FLUSH_POLL_SECONDS) + 1 and answered["next"] == "deliver"
    # a flush that failed is over too: nobody waits on it
    run_step("fail", {**flush, "error": {"Error": "TransientError"}}, engine.deps)
    assert engine.stores.catalogue.memory_flushed(TurnState.from_json(flush).turn.session_id or "")
    sleeps.clear()
    run_step("respond", turn, deps_with(engine, sleeps))
    assert sleeps == []


def test_a_session_that_was_not_reset_does_not_wait() -> None:
    engine = Engine()
    engine.send("hello", "e1")
    assert TurnState.from_json(engine.starter.started[engine.first()]).turn.notes.after_flush is None
    assert engine.clock == NOW


def test_a_flush_started_again_saves_nothing_twice() -> None:
    engine = Engine()
    flush, _ = routed_after_new(engine)
    calls = len(engine.model.requests)
    workflow = engine.workflow
    workflow.run(flush)
    after_first = len(engine.model.requests)
    workflow.visited.clear()
    workflow.run(flush)  # the same flush started again: no second model call
    assert after_first == calls + 1 and len(engine.model.requests) == after_first
    assert workflow.visited == ["Begin", "Respond", "AfterRespond", "Finish"]
