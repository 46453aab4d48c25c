"""The tasks of one agent turn, run by the turn state machine (infra/statemachines/turn.asl.json).

PrepareMedia (a message's files, on the attachments function) -> Respond (prepare, ask the model,
keep its answer) -> RunTools <-> Respond (bounded) -> Deliver
(the delivery function sends the answer) -> Finish (the session's totals, and the lease released
or handed on, in one write); Fail on any error, Continue when a turn outruns one execution. A
Respond task that has its answer sends it and finishes the turn itself when it can
(`finish.respond_and_end`, `next: done`): Deliver and Finish are then the ways back after a failure.
Each task takes the typed `TurnState` and returns it; `next` (a `Step`) tells the workflow's
Choice states where to go. Every task is idempotent on the turn id, because an Express execution
may run a task more than once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from hermes_gateway.domain.turn_state import TurnState
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import correlate, hash_id
from hermes_gateway.services.turn.attachments import prepare_media
from hermes_gateway.services.turn.context import FLUSH_PROMPT, system_prompt
from hermes_gateway.services.turn.deps import TurnDeps
from hermes_gateway.services.turn.finish import APOLOGY, continue_turn, fail, finish, respond_and_end
from hermes_gateway.services.turn.respond import SILENT_REPLIES
from hermes_gateway.services.turn.tools import DENIED_RESULT, UNATTENDED_DENIED, run_tools

Task = Callable[[TurnState, TurnDeps], TurnState]
# The workflow's task names (`Parameters.step` in the ASL) and what each runs.
STEPS: dict[str, Task] = {
    "media": prepare_media,  # the attachments function's one task
    "respond": respond_and_end,  # respond, then deliver and finish here when it can
    "tools": run_tools,
    "finish": finish,
    "continue": continue_turn,
    "fail": fail,
}


def turn_profile(state: Mapping[str, Any]) -> str | None:
    """The profile a turn runs as (its message's, or a cron run's job's); None for the
    deployment's own. Read before the state is typed: it chooses the settings the task runs with."""
    turn = state.get("turn") or {}
    found = (turn.get("source") or {}).get("profile") or (turn.get("job") or {}).get("profile")
    return str(found) if found else None


def run_step(step: str, payload: Mapping[str, Any], deps: TurnDeps, *, retry: int = 0) -> dict[str, Any]:
    """One task: the state from JSON, the task, the state back to JSON (the workflow's boundary).
    `retry`: how many times Step Functions tried this task before (its `$$.State.RetryCount`)."""
    try:
        task = STEPS[step]
    except KeyError:
        raise PermanentError(f"unknown turn step {step!r}") from None
    state = replace(TurnState.from_json(payload), attempt=retry)
    correlate(state.turn.event_id, hash_id(state.turn.session_key))
    return task(state, deps).to_json()


__all__ = [
    "APOLOGY",
    "DENIED_RESULT",
    "FLUSH_PROMPT",
    "SILENT_REPLIES",
    "STEPS",
    "UNATTENDED_DENIED",
    "TurnDeps",
    "run_step",
    "system_prompt",
    "turn_profile",
]
