"""The turn engine (services/turn.py, services/turn_commands.py) against in-memory fakes.

A small driver plays the state machine (infra/statemachines/turn.asl.json): it follows each task's
`next`, sends a raised error to Fail, and runs the executions the engine starts (queued turns,
continuations, approval answers) in the order they were started. State travels as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from hermes_gateway.domain.sessions import SessionEntry
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import TransientError
from hermes_gateway.observability import hash_id
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolCall, ToolSpec
from hermes_gateway.services.router import Access, RouteOutcome, route_message
from hermes_gateway.services.turn import APOLOGY, TurnDeps, run_step, system_prompt
from hermes_gateway.settings import Settings
from hermes_gateway.tools.base import SpecTool, Tool, ToolContext
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import FakeSessionStore
from tests.fakes.turns import FakeTurnControl

NOW = 1_764_400_000.0
ALICE = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Alice")
OPEN = {"TELEGRAM_ALLOW_ALL_USERS": "true"}

Step = str | list[tuple[str, dict[str, Any]]] | Callable[[list[ChatMessage]], str]


class ToolModel:
    """Plays a script: a text answers, a list of (tool, arguments) asks for tool calls. When the
    script is out it echoes the last user message. Keeps every request."""

    name = "tooly"

    def __init__(self, *script: Step, fail: list[Exception] | None = None) -> None:
        self.script = list(script)
        self.fail = list(fail or [])
        self.requests: list[tuple[str, list[ChatMessage], list[ToolSpec] | None]] = []
        self.calls = 0

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        self.requests.append((system, list(messages), tools))
        if self.fail:
            raise self.fail.pop(0)
        step: Step = self.script.pop(0) if self.script else (lambda ms: f"re: {ms[-1].content}")
        if isinstance(step, list):
            self.calls += 1
            calls = tuple(ToolCall(f"call-{self.calls}-{i}", name, args) for i, (name, args) in enumerate(step))
            return ModelReply("", "tooly", 5, 2, "tool_calls", tool_calls=calls)
        return ModelReply(step(messages) if callable(step) else step, "tooly", 5, 2)


def _tool(name: str, run: Callable[[dict[str, Any], ToolContext], str], *, approval: bool = False) -> Tool:
    spec = ToolSpec(name, f"the {name} tool", {"type": "object", "properties": {}, "additionalProperties": True})
    return SpecTool(spec, run, needs_approval=approval)


def _record(calls: list[str], name: str, result: str = "") -> str:
    calls.append(name)
    return result or name


class Engine:
    """The router and the turn tasks over one set of fakes, with a driver for executions."""

    def __init__(
        self, env: dict[str, str] | None = None, model: ToolModel | None = None, tools: list[Tool] | None = None
    ):
        self.settings: Settings = make_settings({**OPEN, **(env or {})})
        self.store = FakeSessionStore()
        self.control = FakeTurnControl(self.store)
        self.starter = FakeStarter()
        self.delivery = FakeDeliveryQueue()
        self.replies = FakeDeliveryQueue()
        self.events = FakeEvents()
        self.model = model or ToolModel()
        self.tools = tools or []
        self.clock = NOW
        self.ran: list[str] = []
        self.crash_before: dict[str, int] = {}  # step -> how many more runs raise before doing anything

    @property
    def deps(self) -> TurnDeps:
        return TurnDeps(
            settings=self.settings,
            store=self.store,
            lease=self.store,
            provider=lambda: self.model,
            delivery=self.delivery,
            now=lambda: self.clock,
            control=self.control,
            starter=self.starter,
            events=self.events,
            tools=lambda kind: [t for t in self.tools if kind == "chat" or t.name != "cronjob"],
        )

    def send(self, text: str, event: str, source: SessionSource = ALICE) -> RouteOutcome:
        access = Access(FakePairingStore(), self.replies, FakeEvents(), control=self.control)
        msg = InboundMessage(source=source, text=text, event_id=event, received_at=self.clock)
        return route_message(
            msg,
            settings=self.settings,
            store=self.store,
            lease=self.store,
            starter=self.starter,
            access=access,
            now=self.clock,
        )

    def step(self, name: str, state: dict[str, Any]) -> dict[str, Any]:
        if self.crash_before.get(name, 0) > 0:
            self.crash_before[name] -= 1
            raise RuntimeError(f"crash in {name}")
        result: dict[str, Any] = json.loads(json.dumps(run_step(name, json.loads(json.dumps(state)), self.deps)))
        return result

    def execute(self, name: str) -> str:
        """Run one execution as the state machine would; returns how it ended."""
        self.ran.append(name)
        state, current = self.starter.started[name], "prepare"
        routes = {
            "prepare": {"tools": "run_tools", "stopped": "commit"},
            "call_model": {"tools": "run_tools", "stopped": "commit"},
            "run_tools": {"model": "call_model", "paused": "", "continue": "continue", "stopped": "commit"},
        }
        defaults = {"prepare": "call_model", "call_model": "deliver", "run_tools": "call_model", "deliver": "commit"}
        while True:
            try:
                out = self.step(current, state)
            except Exception as exc:  # the Catch of every task
                self.step("fail", {**state, "error": {"Error": type(exc).__name__, "Cause": str(exc)}})
                return "failed"
            if current in ("commit", "continue"):
                return "ok" if current == "commit" else "continued"
            following = routes.get(current, {}).get(out.get("next", ""), defaults.get(current))
            if not following:
                return "paused"
            state, current = out, following

    def pump(self) -> list[str]:
        """Run every started execution not yet run, in start order, until none is left."""
        endings = []
        while pending := [name for name in self.starter.started if name not in self.ran]:
            endings.append(self.execute(pending[0]))
        return endings

    def texts(self) -> list[str]:
        return [b["text"] for b in self.delivery.bodies]

    def key(self) -> str:
        return "agent:main:telegram:dm:99"

    def route(self) -> SessionEntry:
        route = self.store.get_route(self.key())
        assert route is not None
        return route

    def transcript(self) -> list[tuple[str, str]]:
        route = self.store.get_route(self.key())
        assert route is not None
        return [(r.role, r.content) for r in self.store.transcript(route.session_id)]


# -- busy sessions -------------------------------------------------------------------------------


def test_a_burst_of_five_during_a_turn_is_answered_in_order_with_one_busy_notice() -> None:
    # Given a running turn
    engine = Engine()
    assert engine.send("first", "e0").status == "started"

    # When five more messages arrive before it ends
    outcomes = [engine.send(f"m{n}", f"e{n}") for n in range(1, 6)]
    engine.pump()

    # Then each was queued, the chat heard about it once, and every message got its answer in order
    assert [o.status for o in outcomes] == ["queued"] * 5
    assert [b["text"] for b in engine.replies.bodies] == [
        "I'm still working on your previous message; this one is queued for the next turn."
    ]
    assert engine.texts() == ["re: first"] + [f"re: m{n}" for n in range(1, 6)]
    assert engine.transcript() == [("user", "first"), ("assistant", "re: first")] + [
        row for n in range(1, 6) for row in (("user", f"m{n}"), ("assistant", f"re: m{n}"))
    ]
    # And the session is free again, its queue empty
    state = engine.control.state(engine.key())
    assert state.lease_token is None and state.queue == ()


def test_a_burst_can_be_answered_as_one_follow_up() -> None:
    engine = Engine({"GATEWAY_BUSY_FOLLOWUP": "one"})
    engine.send("first", "e0")
    for n in range(1, 6):
        engine.send(f"m{n}", f"e{n}")

    engine.pump()

    # Then two turns ran: the first, and one follow-up that saw all five messages
    assert engine.texts() == ["re: first", "re: m1\n\nm2\n\nm3\n\nm4\n\nm5"]
    assert [r for r in engine.transcript() if r[0] == "user"] == [
        ("user", t) for t in ["first", "m1", "m2", "m3", "m4", "m5"]
    ]


def test_the_busy_notice_can_be_switched_off_and_comes_again_for_the_next_turn() -> None:
    quiet = Engine({"GATEWAY_BUSY_ACK": "false"})
    quiet.send("first", "e0")
    quiet.send("second", "e1")
    assert quiet.replies.bodies == []

    engine = Engine()
    engine.send("first", "e0")
    engine.send("second", "e1")
    engine.execute(next(iter(engine.starter.started)))  # the first turn ends; the second starts
    engine.send("third", "e2")
    assert len(engine.replies.bodies) == 2


def test_a_redelivered_queued_message_is_queued_once() -> None:
    engine = Engine()
    engine.send("first", "e0")
    engine.send("second", "e1")
    engine.send("second", "e1")

    engine.pump()

    assert engine.texts() == ["re: first", "re: second"]


def test_a_message_queued_as_the_turn_releases_is_never_stranded() -> None:
    # Given a turn at its commit, and a message queued just before the commit's write
    engine = Engine()
    engine.send("first", "e0")
    name = next(iter(engine.starter.started))
    state = engine.starter.started[name]
    for step in ("prepare", "call_model", "deliver"):
        state = engine.step(step, state)
    engine.send("late", "e1")

    # When the commit runs (twice, as Express may)
    first = engine.step("commit", state)
    again = engine.step("commit", state)

    # Then the lease went to the queued message's turn, started once, and it is answered
    assert first["released"] == again["released"] == "handed_off"
    assert len(engine.starter.started) == 2
    engine.ran.append(name)
    engine.pump()
    assert engine.texts() == ["re: first", "re: late"]


def test_queue_command_queues_its_text() -> None:
    engine = Engine({"GATEWAY_BUSY_INPUT_MODE": "interrupt"})
    engine.send("first", "e0")

    outcome = engine.send("/queue later please", "e1")
    engine.pump()

    assert outcome.status == "queued" and outcome.reason == "queue"
    assert engine.texts() == ["re: first", "re: later please"]


def test_stop_ends_the_running_turn_at_the_next_safe_point() -> None:
    # Given a turn in its tool loop
    lookups: list[str] = []
    tool = _tool("lookup", lambda args, ctx: _record(lookups, "found"))
    engine = Engine(model=ToolModel([("lookup", {})], [("lookup", {})], "done"), tools=[tool])
    engine.send("research this", "e0")
    name = next(iter(engine.starter.started))
    state = engine.step("call_model", engine.step("prepare", engine.starter.started[name]))

    # When the user sends /stop, which bypasses the busy check
    stop = engine.send("/stop", "e1")
    out = engine.step("run_tools", state)

    # Then the turn stops there, sends nothing, and frees the session
    assert stop.status == "command"
    assert engine.replies.bodies[-1]["text"] == "Stopping the current turn."
    assert out["next"] == "stopped" and lookups == []
    result = engine.step("commit", out)
    assert result["status"] == "stopped" and result["released"] == "released"
    assert engine.texts() == []
    assert engine.send("/stop", "e2").status == "command"
    assert engine.replies.bodies[-1]["text"] == "Nothing is running."


def test_interrupt_stops_the_turn_and_answers_the_new_message() -> None:
    tool = _tool("lookup", lambda args, ctx: "found")
    engine = Engine({"TELEGRAM_BUSY_INPUT_MODE": "interrupt"}, ToolModel([("lookup", {})]), [tool])
    engine.send("long job", "e0")
    name = next(iter(engine.starter.started))
    state = engine.step("call_model", engine.step("prepare", engine.starter.started[name]))

    outcome = engine.send("actually, something else", "e1")
    out = engine.step("run_tools", state)
    engine.step("commit", out)
    engine.ran.append(name)
    engine.pump()

    assert outcome.reason == "interrupt"
    assert engine.replies.bodies[0]["text"] == "Stopping what I was doing to answer this."
    assert engine.texts() == ["re: long job\n\nactually, something else"]


def test_steer_injects_the_message_after_the_next_tool_call() -> None:
    tool = _tool("lookup", lambda args, ctx: "found")
    engine = Engine({"GATEWAY_BUSY_INPUT_MODE": "steer"}, ToolModel([("lookup", {})]), [tool])
    engine.send("find flights", "e0")
    name = next(iter(engine.starter.started))
    state = engine.step("call_model", engine.step("prepare", engine.starter.started[name]))

    engine.send("only direct ones", "e1")
    state = engine.step("run_tools", state)
    state = engine.step("call_model", state)

    # Then the model saw the tool result and then the user's new words, in one turn
    messages = engine.model.requests[-1][1]
    assert [(m.role, m.content) for m in messages[-2:]] == [("tool", "found"), ("user", "only direct ones")]
    assert engine.control.state(engine.key()).queue == ()
    engine.step("commit", engine.step("deliver", state))
    assert engine.starter.started.keys() == {name}


# -- the tool loop -------------------------------------------------------------------------------


def test_tool_results_and_errors_go_back_to_the_model() -> None:
    def broken(args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("database on fire")

    tools = [_tool("lookup", lambda args, ctx: f"value for {args.get('q')}"), _tool("broken", broken)]
    engine = Engine(model=ToolModel([("lookup", {"q": "x"}), ("broken", {})], "all done"), tools=tools)
    engine.send("go", "e0")

    assert engine.pump() == ["ok"]

    _, messages, offered = engine.model.requests[-1]
    tool_rows = [(m.name, m.content) for m in messages if m.role == "tool"]
    assert tool_rows[0] == ("lookup", "value for x")
    assert tool_rows[1][0] == "broken" and tool_rows[1][1].startswith("error: broken failed (RuntimeError)")
    assert "database on fire" not in tool_rows[1][1]
    assert offered is not None and {s.name for s in offered} == {"lookup", "broken"}
    assert engine.texts() == ["all done"]
    steps = [d for name, d in engine.events.emitted if name == "agent:step"]
    assert [s["step"] for s in steps] == ["model", "tool", "tool", "model"]
    names = [name for name, _ in engine.events.emitted]
    assert names[0] == "agent:start" and names[-1] == "agent:end"
    for _, detail in engine.events.emitted:
        assert detail["session"] == hash_id(engine.key()) and "go" not in json.dumps(detail)


def test_the_loop_is_bounded_by_iterations() -> None:
    tool = _tool("lookup", lambda args, ctx: "more")
    engine = Engine(
        {"GATEWAY_MAX_TOOL_ITERATIONS": "2"}, ToolModel([("lookup", {})], [("lookup", {})], "final"), [tool]
    )
    engine.send("loop forever", "e0")

    engine.pump()

    # Then after two model calls with tools, the third is asked without tools and must answer
    assert [r[2] is not None for r in engine.model.requests] == [True, True, False]
    assert engine.texts() == ["final"]


def test_a_long_turn_continues_in_a_new_execution_from_its_state() -> None:
    tool = _tool("slow", lambda args, ctx: "ok")
    engine = Engine(model=ToolModel([("slow", {})], [("slow", {})], "finished"), tools=[tool])
    engine.send("big job", "e0")
    first = next(iter(engine.starter.started))
    state = engine.step("call_model", engine.step("prepare", engine.starter.started[first]))

    # When the tools take the execution past its budget
    engine.clock += engine.settings.turns.continue_after_seconds + 1
    out = engine.step("run_tools", state)
    assert out["next"] == "continue"
    engine.step("continue", out)
    engine.step("continue", out)  # a repeated task starts nothing new
    engine.ran.append(first)

    # Then a continuation named after the turn picks the loop up and finishes it
    assert list(engine.starter.started) == [first, f"{first}-c1"]
    assert engine.pump() == ["ok"]
    assert engine.texts() == ["finished"]
    assert len([m for m in engine.model.requests[-1][1] if m.role == "tool"]) == 2


# -- approvals -----------------------------------------------------------------------------------


def _approval_engine(env: dict[str, str] | None = None) -> tuple[Engine, list[str]]:
    ran: list[str] = []
    tool = _tool("deploy", lambda args, ctx: _record(ran, "deploy", "deployed"), approval=True)
    return Engine(env, ToolModel([("deploy", {"to": "prod"})], "it is done"), [tool]), ran


def test_an_approval_is_asked_then_approved() -> None:
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")

    assert engine.pump() == ["paused"]
    ask = engine.delivery.bodies[-1]
    assert "`deploy`" in ask["text"] and "/approve" in ask["text"]
    assert [b["reply"] for b in ask["buttons"]] == ["/approve", "/approve session", "/deny"]
    assert ran == []
    # the session stays busy while it waits: other messages queue
    assert engine.send("meanwhile", "e1").status == "queued"

    reply = engine.send("/approve", "e2")
    assert engine.pump() == ["ok", "ok"]

    assert reply.status == "command" and "Approved" in engine.replies.bodies[-1]["text"]
    assert ran == ["deploy"]
    assert engine.texts()[-2:] == ["it is done", "re: meanwhile"]


def test_no_denies_and_the_model_hears_it() -> None:
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")
    engine.pump()

    engine.send("no", "e1")
    engine.pump()

    assert ran == []
    tool_result = next(m for m in engine.model.requests[-1][1] if m.role == "tool")
    assert "did not approve" in tool_result.content
    assert engine.texts()[-1] == "it is done"


def test_an_unanswered_approval_times_out_as_denied() -> None:
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")
    engine.pump()

    # When the next message comes after the timeout
    engine.clock += 301
    outcome = engine.send("hello?", "e1")
    engine.pump()

    # Then the approval was denied, the turn finished, and the new message was answered after it
    assert outcome.status == "queued"
    assert ran == []
    assert engine.texts()[-2:] == ["it is done", "re: hello?"]


def test_only_the_user_asked_or_an_admin_can_answer() -> None:
    engine, ran = _approval_engine({"GATEWAY_GROUP_SESSIONS_PER_USER": "false", "GATEWAY_ADMINS": "7"})
    group = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="42", user_name="Alice")
    bob = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="43", user_name="Bob")
    admin = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="7", user_name="Root")
    engine.send("deploy it", "e0", group)
    engine.pump()

    engine.send("/approve", "e1", bob)
    assert "Only the person who was asked" in engine.replies.bodies[-1]["text"]
    assert engine.pump() == []

    engine.send("/approve", "e2", admin)
    engine.pump()
    assert ran == ["deploy"]


def test_approve_session_and_yolo_stop_the_asking() -> None:
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")
    engine.pump()
    engine.send("/approve session", "e1")
    engine.pump()

    engine.model.script = [[("deploy", {})], "again done"]
    engine.send("deploy again", "e2")
    engine.pump()
    assert ran == ["deploy", "deploy"]

    yolo = Engine(model=ToolModel([("deploy", {})], "ok"), tools=engine.tools)
    yolo.send("/yolo", "e0")
    yolo.send("deploy", "e1")
    assert yolo.pump() == ["ok"]
    assert ran == ["deploy"] * 3


# -- failures ------------------------------------------------------------------------------------


def test_a_provider_failure_apologizes_once_and_keeps_the_message_for_retry() -> None:
    engine = Engine(model=ToolModel(fail=[TransientError("model down")]))
    engine.send("hello", "e0")

    assert engine.pump() == ["failed"]

    assert engine.texts() == [APOLOGY]
    assert engine.delivery.bodies[0]["delivery_id"].endswith("-failed")
    assert engine.transcript() == [("user", "hello")]
    assert engine.control.state(engine.key()).lease_token is None


def test_a_crash_after_the_model_answered_delivers_that_answer_not_an_apology() -> None:
    engine = Engine(model=ToolModel("the answer"))
    engine.crash_before["deliver"] = 1
    engine.send("q", "e0")

    assert engine.pump() == ["failed"]

    assert engine.texts() == ["the answer"]
    assert engine.transcript() == [("user", "q"), ("assistant", "the answer")]


def test_a_failed_turn_still_hands_the_lease_to_queued_messages() -> None:
    engine = Engine(model=ToolModel(fail=[TransientError("down")]))
    engine.send("one", "e0")
    engine.send("two", "e1")

    assert engine.pump() == ["failed", "ok"]
    assert engine.texts() == [APOLOGY, "re: one\n\ntwo"]


def test_every_task_run_twice_changes_nothing_twice() -> None:
    class Deterministic(ToolModel):
        """Asks for the tool until it has its result, then answers: the same request, the same reply."""

        def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
            self.requests.append((system, list(messages), tools))
            if messages[-1].role == "tool":
                return ModelReply("fine", "tooly", 5, 2)
            return ModelReply("", "tooly", 5, 2, "tool_calls", tool_calls=(ToolCall("c1", "note", {}),))

    tool = _tool("note", lambda args, ctx: "noted")
    engine = Engine(model=Deterministic(), tools=[tool])
    engine.send("hi", "e0")
    engine.send("then", "e1")
    name = next(iter(engine.starter.started))
    state = engine.starter.started[name]
    for step in ("prepare", "call_model", "run_tools", "call_model", "deliver", "commit"):
        out = engine.step(step, state)
        again = engine.step(step, state)
        assert again == out
        state = out

    route = engine.store.get_route(engine.key())
    assert route is not None
    assert engine.texts() == ["fine", "fine"]  # one delivery id, twice: the outbox keeps one
    assert {b["delivery_id"] for b in engine.delivery.bodies} == {name}
    assert engine.transcript() == [("user", "hi"), ("assistant", "fine"), ("user", "then")]
    assert len(engine.starter.started) == 2
    assert engine.store.sessions[route.session_id]["input_tokens"] > 0


# -- turn kinds and context ----------------------------------------------------------------------


def test_a_cron_turn_pushes_to_each_target_records_the_run_and_denies_approvals() -> None:
    recorded: list[tuple[str, str, str]] = []

    class Jobs:
        def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool:
            recorded.append((job_id, run_id, status))
            return True

    ran: list[str] = []
    tools = [
        _tool("deploy", lambda args, ctx: _record(ran, "x"), approval=True),
        _tool("cronjob", lambda args, ctx: "no"),
    ]
    engine = Engine(model=ToolModel([("deploy", {})], "daily summary"), tools=tools)
    deps = engine.deps
    deps.jobs = Jobs()
    from tests.fakes.services import FakeDirectory

    deps.tool_ports = {"directory": FakeDirectory()}
    turn = {
        "kind": "cron",
        "turn_id": "cron-j1-r1",
        "job": {"id": "j1", "name": "n", "prompt": "summarize", "deliver": ["origin", "telegram:555"],
                "origin": {"platform": "telegram", "chat_id": "99", "thread_id": None}, "run_id": "r1"},
        "started_at": NOW,
    }  # fmt: skip
    state = run_step("prepare", turn, deps)
    state = run_step("call_model", state, deps)
    assert {s.name for s in engine.model.requests[0][2] or []} == {"deploy"}
    state = run_step("run_tools", state, deps)
    state = run_step("call_model", state, deps)
    run_step("commit", run_step("deliver", state, deps), deps)

    assert ran == []
    assert engine.model.requests[0][1] == [ChatMessage("user", "summarize")]
    pushes = engine.delivery.bodies
    assert [(p["target"]["chat_id"], p["kind"], p["mirror"], p["cron"]) for p in pushes] == [
        ("99", "push", True, {"job_id": "j1", "run_id": "r1"}),
        ("555", "push", True, {"job_id": "j1", "run_id": "r1"}),
    ]
    assert recorded == [("j1", "r1", "ok")]


def test_a_failed_cron_turn_is_recorded_and_told_to_its_origin_chat_once() -> None:
    from hermes_gateway.services import cron
    from tests.fakes.jobs import FakeJobStore

    engine = Engine(model=ToolModel([], "unused"))
    jobs = FakeJobStore()
    origin = {"platform": "telegram", "chat_id": "99", "thread_id": None}
    job = cron.create_job(
        jobs, prompt="p", schedule="every 10m", deliver=["origin"], origin=origin, now=NOW, time_zone="UTC"
    )
    deps = engine.deps
    deps.jobs = jobs
    turn = {"kind": "cron", "turn_id": f"cron-{job.id}-r1", "job": job.turn_job("r1"), "started_at": NOW}
    failed = {**turn, "error": {"Error": "TransientError", "Cause": "model down"}}

    run_step("fail", failed, deps)
    run_step("fail", failed, deps)  # the task retried

    stored = jobs.get(job.id)
    assert stored is not None and stored.last_status == "error"
    assert [(b["target"]["chat_id"], b["kind"]) for b in engine.delivery.bodies] == [("99", "push")]


def test_a_flush_turn_has_only_memory_and_delivers_nothing() -> None:
    memory = _tool("memory", lambda args, ctx: "saved")
    engine = Engine(model=ToolModel([("memory", {"action": "add"})], "NO_REPLY"), tools=[memory])
    engine.send("I like tea", "e0")
    engine.pump()
    route = engine.store.get_route(engine.key())
    assert route is not None
    deps = engine.deps
    deps.tools = lambda kind: [memory] if kind == "flush" else []
    turn = {"kind": "flush", "turn_id": f"flush-{route.session_id}", "session_id": route.session_id,
            "session_key": engine.key(), "source": ALICE.to_dict(), "reason": "idle", "started_at": NOW}  # fmt: skip
    sent = len(engine.delivery.bodies)

    state = run_step("call_model", run_step("prepare", turn, deps), deps)
    state = run_step("call_model", run_step("run_tools", state, deps), deps)
    run_step("commit", run_step("deliver", state, deps), deps)

    assert len(engine.delivery.bodies) == sent
    assert [s.name for s in engine.model.requests[-2][2] or []] == ["memory"]
    assert "about to end" in engine.model.requests[-2][1][-1].content


def test_the_system_prompt_names_platforms_homes_and_the_session() -> None:
    settings = make_settings({**OPEN, "SLACK_ENABLED": "true", "TELEGRAM_HOME_CHANNEL": "12345"})
    text = system_prompt(ALICE, "sid-1", settings, session_key="agent:main:telegram:dm:99",
                         home_channels={"telegram": "12345"})  # fmt: skip
    assert "slack (home: not set)" in text
    assert f"telegram (home: telegram:{hash_id('12345')})" in text
    assert "12345" not in text and "dm:99" not in text
    assert "Session id: sid-1" in text
    slack = SessionSource("slack", chat_id="C1", chat_type="group", user_id="U1", scope_id="T1")
    assert "Session key: agent:main:slack:group:T1:C1:U1" in system_prompt(
        slack, "sid-2", settings, session_key="agent:main:slack:group:T1:C1:U1"
    )


def test_a_resumed_turn_tells_the_model_and_answers_the_unanswered_message() -> None:
    engine = Engine()
    engine.send("first", "e0")
    # the turn crashed without answering; the lease expired and the session is resume_pending
    route = engine.store.get_route(engine.key())
    assert route is not None and route.lease_token is not None
    engine.starter.started.clear()
    engine.clock += 1000
    for lease in engine.store.expired(engine.clock):
        engine.store.expire(lease, engine.clock)

    engine.send("hello again", "e1")
    engine.pump()

    system, messages, _ = engine.model.requests[-1]
    assert "cut short" in system
    assert [m.content for m in messages] == ["first\n\nhello again"]


@pytest.mark.parametrize("mode", ["queue", "steer", "interrupt"])
def test_every_busy_mode_answers_every_message(mode: str) -> None:
    engine = Engine({"GATEWAY_BUSY_INPUT_MODE": mode})
    engine.send("a", "e0")
    for n in range(1, 4):
        engine.send(f"b{n}", f"e{n}")

    engine.pump()

    answered = " ".join(engine.texts())
    assert all(word in answered for word in ("a", "b1", "b2", "b3"))
    assert engine.control.state(engine.key()).lease_token is None


def test_messages_queued_behind_a_crashed_turn_are_answered_first_after_its_lease_expires() -> None:
    # Given a turn that crashed with a message queued behind it, and its lease swept away
    engine = Engine()
    engine.send("first", "e0")
    engine.send("queued one", "e1")
    crashed = next(iter(engine.starter.started))
    engine.ran.append(crashed)
    engine.clock += 1000
    for lease in engine.store.expired(engine.clock):
        engine.store.expire(lease, engine.clock)

    # When a new message comes
    outcome = engine.send("newest", "e2")
    engine.pump()

    # Then the queued message goes first (with the cut-short one), then the newest: nothing lost, in order
    assert outcome.status == "queued" and outcome.reason == "recovered"
    assert engine.texts() == ["re: first\n\nqueued one", "re: newest"]
    assert engine.control.state(engine.key()).lease_token is None


def test_a_reset_flushes_the_replaced_sessions_memory_once_and_only_when_it_had_a_prompt() -> None:
    from hermes_gateway.domain.reset_policy import rules_from_settings

    # Given a chat whose sessions reset after 10 idle minutes
    engine = Engine({"GATEWAY_RESET_MODE": "idle", "GATEWAY_RESET_IDLE_MINUTES": "10"})
    engine.store.rules = rules_from_settings(engine.settings)
    engine.send("remember I like tea", "e0")
    engine.pump()
    first = engine.route().session_id

    # When the next message comes an hour later (and is redelivered)
    engine.clock += 3600
    engine.send("hello again", "e1")
    engine.send("hello again", "e1")

    # Then the old session gets one memory-only flush turn, and the new one its answer
    flushes = [name for name in engine.starter.started if name.startswith("flush-")]
    assert flushes == [f"flush-{first}"]
    flush = engine.starter.started[flushes[0]]
    assert (flush["kind"], flush["session_id"], flush["reason"]) == ("flush", first, "idle")
    assert engine.route().session_id != first


def test_new_flushes_the_session_it_replaces_but_not_an_empty_one() -> None:
    engine = Engine()
    engine.send("remember I like tea", "e0")
    engine.pump()
    first = engine.route().session_id

    engine.send("/new", "e1")
    engine.send("/new", "e2")  # the session it replaced had no prompt: nothing to flush

    assert [n for n in engine.starter.started if n.startswith("flush-")] == [f"flush-{first}"]


def _sweep(engine: Engine) -> dict[str, int]:
    from hermes_gateway.services.expiry import LeaseRecovery, recover_expired_leases

    deps = LeaseRecovery(engine.settings, engine.store, engine.store, engine.control, engine.starter)
    return recover_expired_leases(deps, engine.clock)


def test_the_sweep_answers_messages_queued_behind_a_crashed_turn_without_waiting_for_the_chat() -> None:
    # Given a turn that crashed with two messages queued behind it
    engine = Engine()
    engine.send("first", "e0")
    engine.send("one", "e1")
    engine.send("two", "e2")
    engine.ran.append(next(iter(engine.starter.started)))  # its execution never ends
    engine.clock += 1000

    # When the every-minute tick sees the expired lease (twice: a retried tick changes nothing more)
    first, again = _sweep(engine), _sweep(engine)
    engine.pump()

    # Then the queued messages are answered, in order, with nobody writing again
    assert first == {"leases_released": 1, "approvals_timed_out": 0, "queues_recovered": 1}
    assert again == {"leases_released": 0, "approvals_timed_out": 0, "queues_recovered": 0}
    assert engine.texts() == ["re: first\n\none", "re: two"]  # the cut-short message answered with the oldest
    assert engine.control.state(engine.key()).lease_token is None


def test_the_sweep_denies_an_unanswered_approval_and_finishes_the_turn() -> None:
    # Given a turn paused on an approval nobody answers
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")
    assert engine.pump() == ["paused"]

    # When the tick runs after the approval's timeout
    engine.clock += 301
    counts = _sweep(engine)
    engine.pump()

    # Then the call was denied (never run), the model heard it, and the turn answered and ended
    assert counts["approvals_timed_out"] == 1 and counts["leases_released"] == 0
    assert ran == []
    assert engine.texts()[-1] == "it is done"
    assert engine.control.state(engine.key()).lease_token is None


def test_the_sweep_leaves_a_lease_whose_turn_is_still_running() -> None:
    engine = Engine()
    engine.send("first", "e0")
    assert _sweep(engine) == {"leases_released": 0, "approvals_timed_out": 0, "queues_recovered": 0}
    assert engine.control.state(engine.key()).lease_token is not None


def test_the_sessions_model_override_picks_the_provider_of_that_turn() -> None:
    from hermes_gateway.domain.sessions import Fence, ModelOverride

    engine = Engine()
    engine.send("hi", "e0")
    engine.pump()
    route = engine.store.get_route(engine.key())
    assert route is not None
    engine.store.set_model_override(
        engine.key(),
        ModelOverride("gpt-x", "openai", "https://llm.example"),
        fence=Fence(route.revision, route.execution_generation),
        now=NOW,
    )
    chosen: list[dict[str, str]] = []
    other = ToolModel("from the override")

    def provider_for(override: dict[str, str]) -> ToolModel:
        chosen.append(override)
        return other

    engine.send("again", "e1")
    name = next(n for n in engine.starter.started if n not in engine.ran)
    deps = engine.deps
    deps.provider_for = provider_for
    state = run_step("call_model", run_step("prepare", engine.starter.started[name], deps), deps)

    assert chosen == [{"model": "gpt-x", "provider": "openai", "base_url": "https://llm.example"}]
    assert state["reply"]["text"] == "from the override"


def test_a_recovery_that_fails_three_times_suspends_the_session() -> None:
    # Given a session whose turn was cut short (resume_pending), and a model that stays down
    engine = Engine(model=ToolModel(fail=[TransientError("down")] * 5))
    engine.send("first", "first")
    engine.ran.append(next(iter(engine.starter.started)))
    route = engine.store.get_route(engine.key())
    assert route is not None
    engine.store.turn_failed(engine.key(), route.session_id, "lease_expired", NOW)
    engine.store.release(engine.key(), route.lease_token or "")
    # When three recoveries fail in a row
    for n in range(3):
        engine.send(f"try {n}", f"e{n}")
        name = next(x for x in engine.starter.started if x not in engine.ran)
        engine.starter.started[name]["resumed"] = "lease_expired"  # as the router marks a continued turn
        engine.pump()

    # Then the session is suspended (the next message starts a new one)
    route = engine.store.get_route(engine.key())
    assert route is not None and route.suspended and route.failed_recoveries == 3


def test_a_slack_session_after_a_reset_with_activity_carries_the_continuity_note() -> None:
    engine = Engine()
    engine.send("hi", "e0")
    name = next(iter(engine.starter.started))
    turn = {**engine.starter.started[name], "continuity_from": "20261129_010203_abcd1234"}

    state = engine.step("prepare", turn)

    assert "follows an earlier one (20261129_010203_abcd1234)" in state["system"]
