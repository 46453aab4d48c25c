"""The turn state machine, run in process from its definition (infra/statemachines/turn.asl.json).

Unit tests run turns through the real workflow's states: Task (with Parameters, ResultPath,
Catch), Choice on `$.next`, Succeed and Fail, so a transition the definition does not have cannot
pass here. Tasks are Python callables by resource placeholder (`${AgentFunctionArn}`,
`${DeliveryFunctionArn}`); state travels as JSON between them, as in Step Functions. Retry is
not simulated (a test that wants a task to run twice calls it twice, `retry=1` the second time:
the context object's `$$.State.RetryCount`); an error goes to the task's Catch.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

Task = Callable[[dict[str, Any]], Any]
DEFINITION = Path(__file__).resolve().parents[2] / "infra" / "statemachines" / "turn.asl.json"


def definition() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DEFINITION.read_text(encoding="utf-8"))
    return loaded


def _path(state: dict[str, Any], path: str) -> Any:
    if path == "$":
        return state
    current: Any = state
    for part in path.removeprefix("$.").split("."):
        current = current.get(part) if isinstance(current, dict) else None
    return current


def _parameters(template: dict[str, Any], state: dict[str, Any], retry: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    context = {"State": {"RetryCount": retry}}  # the context object, as far as the definition reads it
    for key, value in template.items():
        if key.endswith(".$"):
            path = str(value)
            out[key[:-2]] = _path(context, path.removeprefix("$")) if path.startswith("$$.") else _path(state, path)
        else:
            out[key] = value
    return out


def _with_result(state: dict[str, Any], result_path: str | None, result: Any) -> dict[str, Any]:
    if result_path is None:
        return dict(result) if isinstance(result, dict) else {}
    if result_path == "$":
        return dict(result)
    key = result_path.removeprefix("$.")
    return {**state, key: result}


def _choose(spec: dict[str, Any], state: dict[str, Any]) -> str:
    for rule in spec.get("Choices", []):
        if _path(state, rule["Variable"]) == rule["StringEquals"]:
            return str(rule["Next"])
    return str(spec["Default"])


def _caught(spec: dict[str, Any], state: dict[str, Any], exc: Exception) -> tuple[str, dict[str, Any]] | None:
    for catch in spec.get("Catch", []):
        if "States.ALL" in catch["ErrorEquals"] or type(exc).__name__ in catch["ErrorEquals"]:
            error = {"Error": type(exc).__name__, "Cause": str(exc)}
            return str(catch["Next"]), _with_result(state, catch.get("ResultPath", "$"), error)
    return None


class Workflow:
    """Runs executions of the turn state machine with the given task callables."""

    def __init__(self, tasks: dict[str, Task]) -> None:
        self.asl = definition()
        self.tasks = tasks  # resource placeholder -> callable(payload) -> result
        self.visited: list[str] = []

    def run(self, state: dict[str, Any], *, stop_before: str | None = None) -> tuple[str, dict[str, Any]]:
        """Run one execution from its input; (how it ended, the last state). `stop_before` ends
        it before that state runs (a test then runs the rest itself)."""
        name, current = str(self.asl["StartAt"]), json.loads(json.dumps(state))
        while True:
            if name == stop_before:
                return f"before:{name}", current
            spec = self.asl["States"][name]
            self.visited.append(name)
            kind = spec["Type"]
            if kind == "Choice":
                name = _choose(spec, current)
            elif kind == "Succeed":
                return "succeeded", current
            elif kind == "Fail":
                return "failed", current
            elif kind == "Task":
                outcome = self.task(name, current)
                if isinstance(outcome, tuple):
                    name, current = outcome
                elif spec.get("End"):
                    return "succeeded", outcome
                else:
                    name, current = str(spec["Next"]), outcome
            else:
                raise ValueError(f"state type {kind} is not simulated")

    def task(self, name: str, state: dict[str, Any], *, retry: int = 0) -> dict[str, Any] | tuple[str, dict[str, Any]]:
        """One Task state (`retry`: its try, 0 the first): its result applied to the state, or
        (the Catch's next, state)."""
        spec = self.asl["States"][name]
        placeholder = str(spec["Resource"])
        payload = _parameters(spec.get("Parameters", {}), state, retry) if "Parameters" in spec else state
        try:
            result = self.tasks[placeholder](json.loads(json.dumps(payload)))
        except Exception as exc:
            caught = _caught(spec, state, exc)
            if caught is None:
                raise
            return caught
        return _with_result(state, spec.get("ResultPath", "$"), json.loads(json.dumps(result)))
