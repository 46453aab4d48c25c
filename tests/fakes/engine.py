"""The router and the turn engine over in-memory stores, with the real turn workflow as driver.

`Engine.send` routes a message as the router does; `Engine.pump` runs the executions the router
and the turns started, in start order, through the states of infra/statemachines/turn.asl.json
(tests/fakes/workflow.py): the agent's tasks run in process, the Deliver state's jobs are kept
as the delivery function would have been invoked with them. What the turns send themselves
(approval questions, apologies, pushes) goes to `deliveries`; what the router answers, to
`replies`. State travels as JSON, as in Step Functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hermes_gateway.domain.ports import Deliveries, SessionStores
from hermes_gateway.domain.sessions import SessionEntry
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.domain.turn_state import TurnKind
from hermes_gateway.errors import TransientError
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolCall, ToolSpec
from hermes_gateway.services.router import Access, RouteOutcome, route_message
from hermes_gateway.services.turn import TurnDeps, run_step
from hermes_gateway.settings import Settings, rules_from_settings
from hermes_gateway.tools.base import SpecTool, Tool, ToolContext
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import memory_stores
from tests.fakes.workflow import Workflow

NOW = 1_764_400_000.0
ALICE = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Alice")
OPEN = {"TELEGRAM_ALLOW_ALL_USERS": "true"}

Script = str | list[tuple[str, dict[str, Any]]] | Callable[[list[ChatMessage]], str]


class ToolModel:
    """Plays a script: a text answers, a list of (tool, arguments) asks for tool calls. When the
    script is out it echoes the last user message. Keeps every request."""

    name = "tooly"

    def __init__(self, *script: Script, fail: list[Exception] | None = None) -> None:
        self.script = list(script)
        self.fail = list(fail or [])
        self.requests: list[tuple[str, list[ChatMessage], list[ToolSpec] | None]] = []
        self.calls = 0

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        self.requests.append((system, list(messages), tools))
        if self.fail:
            raise self.fail.pop(0)
        step: Script = self.script.pop(0) if self.script else (lambda ms: f"re: {ms[-1].content}")
        if isinstance(step, list):
            self.calls += 1
            calls = tuple(ToolCall(f"call-{self.calls}-{i}", name, args) for i, (name, args) in enumerate(step))
            return ModelReply("", "tooly", 5, 2, "tool_calls", tool_calls=calls)
        return ModelReply(step(messages) if callable(step) else step, "tooly", 5, 2)


def tool(
    name: str,
    run: Callable[[dict[str, Any], ToolContext], str],
    *,
    approval: bool = False,
    gate: Callable[[dict[str, Any], ToolContext], str | None] | None = None,
) -> Tool:
    spec = ToolSpec(name, f"the {name} tool", {"type": "object", "properties": {}, "additionalProperties": True})
    return SpecTool(spec, run, needs_approval=approval, gate=gate)


class Engine:
    def __init__(
        self, env: dict[str, str] | None = None, model: ToolModel | None = None, tools: list[Tool] | None = None
    ) -> None:
        self.settings: Settings = make_settings({**OPEN, **(env or {})})
        self.stores: SessionStores = memory_stores(rules_from_settings(self.settings))
        self.starter = FakeStarter()
        self.deliveries = FakeDeliveryQueue()  # what turns send themselves (asks, apologies, pushes)
        self.replies = FakeDeliveryQueue()  # what the router answers
        self.replies_ahead: Deliveries | None = None  # the router's replies that go before a turn
        self.delivered: list[dict[str, Any]] = []  # the jobs the Deliver state handed over
        self.events = FakeEvents()  # the turns' lifecycle events
        self.router_events = FakeEvents()  # the router's (commands, pairing, pre_route)
        self.model = model or ToolModel()
        self.tools = tools or []
        self.clock = NOW
        self.ran: list[str] = []
        self.crash_before: dict[str, int] = {}  # step -> how many more runs raise before doing anything
        self.deliver_fails = 0  # how many more Deliver invocations raise (a platform outage)
        self.overrides: dict[str, Any] = {}

    @property
    def deps(self) -> TurnDeps:
        deps = TurnDeps(
            settings=self.settings,
            leases=self.stores.leases,
            control=self.stores.control,
            transcript=self.stores.transcript,
            catalogue=self.stores.catalogue,
            edits=self.stores.edits,
            provider=lambda: self.model,
            deliveries=self.deliveries,
            starter=self.starter,
            now=lambda: self.clock,
            events=self.events,
            tools=lambda kind: [t for t in self.tools if kind is TurnKind.CHAT or t.name != "cronjob"],
            sleep=lambda seconds: None,
        )
        for name, value in self.overrides.items():
            setattr(deps, name, value)
        return deps

    def send(self, text: str, event: str, source: SessionSource = ALICE, **fields: Any) -> RouteOutcome:
        """Route a message (`fields`: more of the InboundMessage, as a platform's adapter fills it)."""
        access = Access(FakePairingStore(), self.replies, self.router_events, replies_ahead=self.replies_ahead)
        message = InboundMessage(source=source, text=text, event_id=event, received_at=self.clock, **fields)
        return route_message(
            message, settings=self.settings, stores=self.stores, starter=self.starter, access=access, now=self.clock
        )

    # -- running turns ------------------------------------------------------------------------

    def step(self, name: str, state: dict[str, Any], retry: int = 0) -> dict[str, Any]:
        """One agent task, as the workflow invokes it (state as JSON in and out)."""
        if self.crash_before.get(name, 0) > 0:
            self.crash_before[name] -= 1
            raise RuntimeError(f"crash in {name}")
        ran = run_step(name, json.loads(json.dumps(state)), self.deps, retry=retry)
        result: dict[str, Any] = json.loads(json.dumps(ran))
        return result

    def _agent(self, payload: dict[str, Any]) -> dict[str, Any]:
        return self.step(str(payload["step"]), payload["state"], int(payload.get("retry") or 0))

    def _deliver(self, payload: dict[str, Any]) -> dict[str, Any]:
        if self.deliver_fails > 0:
            self.deliver_fails -= 1
            raise TransientError("the platform is down")
        self.delivered.extend(payload["deliveries"])
        return {"sent": len(payload["deliveries"])}

    @property
    def workflow(self) -> Workflow:
        # the attachments function runs the same turn tasks' code (its one task, PrepareMedia)
        return Workflow(
            {
                "${AgentFunctionArn}": self._agent,
                "${AttachmentsFunctionArn}": self._agent,
                "${DeliveryFunctionArn}": self._deliver,
            }
        )

    def deliver_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The Deliver state alone (its result applied as the workflow applies it)."""
        out = self.workflow.task("Deliver", state)
        return out[1] if isinstance(out, tuple) else out

    def execute(self, name: str) -> str:
        """Run one execution as the state machine would; how it ended: ok | failed | paused."""
        self.ran.append(name)
        ending, state = self.workflow.run(self.starter.started[name])
        self.starter.finish(name, succeeded=ending != "failed", at=self.clock)
        if ending == "failed":
            return "failed"
        return "paused" if state.get("next") == "paused" else "ok"

    def pump(self) -> list[str]:
        """Run every started execution not yet run, in start order, until none is left."""
        endings = []
        while pending := [name for name in self.starter.started if name not in self.ran]:
            endings.append(self.execute(pending[0]))
        return endings

    def first(self) -> str:
        return next(iter(self.starter.started))

    # -- what happened ------------------------------------------------------------------------

    def sent(self) -> list[dict[str, Any]]:
        """Every job a turn handed to delivery: the Deliver state's and its own, in order."""
        return [*self.delivered, *self.deliveries.bodies]

    def texts(self) -> list[str]:
        """The answers the Deliver state sent, in order."""
        return [job["text"] for job in self.delivered]

    def key(self) -> str:
        return "agent:main:telegram:dm:99"

    def route(self) -> SessionEntry:
        found = self.stores.routes.get(self.key())
        assert found is not None
        return found

    def transcript(self) -> list[tuple[str, str]]:
        info = self.stores.catalogue.get_session(self.route().session_id)
        hidden = info.hidden if info else ()
        return [(r.role, r.content) for r in self.stores.transcript.rows(self.route().session_id, hidden)]
