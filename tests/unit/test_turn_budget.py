"""One execution of the turn workflow fits in an Express execution's 300 s.

The tool loop (Respond -> RunTools -> Respond) is the only cycle; RunTools takes it again only
while the execution is younger than `turns.continue_after_seconds`, else it continues in a new
execution. So the latest an execution can end is that bound plus the longest way out of the loop
from one more Respond: the tail. Every task is counted at its full time limit once; a retried task
can still push an execution past 300 s, which then times out and the tick's lease recovery takes
the turn over (BEHAVIOUR §5).
"""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.domain.turn_state import Step
from hermes_gateway.errors import ConfigError
from hermes_gateway.settings import TURN_LIMIT_SECONDS, load_settings
from hermes_gateway.settings.sections import CONTINUE_TAIL_SECONDS
from tests.fakes.workflow import definition


def _exits(name: str, state: dict[str, Any]) -> list[str]:
    """Where a state may go next, leaving out the loop's way back to the model."""
    out = [state["Next"]] if "Next" in state else []
    out += [c["Next"] for c in state.get("Catch", [])]
    if state["Type"] == "Choice":
        out += [r["Next"] for r in state["Choices"] if not (name == "AfterTools" and r["StringEquals"] == Step.MODEL)]
        out.append(state["Default"])
    return out


def _longest(states: dict[str, Any], name: str, seen: frozenset[str] = frozenset()) -> int:
    assert name not in seen, f"a cycle through {name} besides the tool loop"
    state = states[name]
    own = int(state.get("TimeoutSeconds", 0)) if state["Type"] == "Task" else 0
    ways = [_longest(states, n, seen | {name}) for n in _exits(name, state)]
    return own + max(ways, default=0)


def test_the_tail_after_the_continue_check_is_what_the_settings_reserve() -> None:
    asl = definition()
    assert _longest(asl["States"], "Respond") == CONTINUE_TAIL_SECONDS  # Respond, RunTools, Continue, Fail


def test_the_longest_continue_bound_still_ends_the_execution_in_time() -> None:
    assert definition()["TimeoutSeconds"] == TURN_LIMIT_SECONDS
    largest = TURN_LIMIT_SECONDS - CONTINUE_TAIL_SECONDS
    assert load_settings(env={"GATEWAY_CONTINUE_AFTER_SECONDS": str(largest)}, config={}).turns.continue_after_seconds
    with pytest.raises(ConfigError, match="continue_after_seconds"):
        load_settings(env={"GATEWAY_CONTINUE_AFTER_SECONDS": str(largest + 1)}, config={})


def test_an_execution_without_the_loop_fits_too() -> None:
    # From the start: a resumed turn (Begin -> RunTools) or a fresh one (Begin -> Respond)
    assert _longest(definition()["States"], "Begin") <= TURN_LIMIT_SECONDS
