"""The turn engine (services/turn/, services/turn_commands.py, services/lifecycle.py) over
in-memory stores, driven through the real turn workflow (tests/fakes/engine.py)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

import pytest

from hermes_gateway.domain.sessions import Fence, ModelOverride
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.turn_state import CronRun, Step, TurnNotes, TurnState
from hermes_gateway.errors import TransientError
from hermes_gateway.observability import hash_id
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolCall, ToolSpec
from hermes_gateway.services import lifecycle
from hermes_gateway.services.expiry import LeaseRecovery, recover_expired_leases
from hermes_gateway.services.turn import APOLOGY, run_step, system_prompt
from hermes_gateway.tools.base import ToolContext
from tests.fakes.engine import ALICE, NOW, OPEN, Engine, ToolModel, tool
from tests.fakes.services import FakeDirectory, make_settings

BUSY = "I'm still working on your previous message; this one is queued for the next turn."


def _record(calls: list[str], name: str, result: str = "") -> str:
    calls.append(name)
    return result or name


# -- one message, its path -----------------------------------------------------------------------


def test_a_turn_without_tools_is_three_tasks_and_one_delivery_without_sending_in_respond() -> None:
    engine = Engine()
    assert engine.send("hello", "e0").status == "started"

    workflow = engine.workflow
    ending, _ = workflow.run(engine.starter.started[engine.first()])

    assert ending == "succeeded"
    assert [s for s in workflow.visited if workflow.asl["States"][s]["Type"] == "Task"] == [
        "Respond",
        "Deliver",
        "Finish",
    ]
    assert [job["text"] for job in engine.delivered] == ["re: hello"]
    assert engine.transcript() == [("user", "hello"), ("assistant", "re: hello")]
    route = engine.route()
    assert route.lease_token is None and route.tally.message_count == 2 and route.tally.input_tokens == 5


# -- a turn that ends in its Respond task (deps.deliver: the deployment's) ------------------------


def _sending_here(engine: Engine, fails: int = 0) -> list[dict[str, Any]]:
    """The Respond task sends its answer itself; its first `fails` sends meet a platform outage."""
    sent: list[dict[str, Any]] = []
    left = [fails]

    def deliver(job: Any) -> str:
        if left[0] > 0:
            left[0] -= 1
            raise TransientError("the platform is down")
        sent.append(dict(job))
        return "sent"

    engine.overrides["deliver"] = deliver
    return sent


def _run_first(engine: Engine) -> tuple[str, dict[str, Any], list[str]]:
    """The first turn's execution: how it ended, its last state, the Task states it ran."""
    workflow = engine.workflow
    ending, state = workflow.run(engine.starter.started[engine.first()])
    return ending, state, [s for s in workflow.visited if workflow.asl["States"][s]["Type"] == "Task"]


def test_a_turn_without_tools_is_one_task_when_respond_can_send_its_answer() -> None:
    engine = Engine()
    sent = _sending_here(engine)
    engine.send("hello", "e0")
    ending, state, tasks = _run_first(engine)

    assert ending == "succeeded" and state["next"] == Step.DONE and tasks == ["Respond"]
    assert [job["text"] for job in sent] == ["re: hello"] and engine.delivered == []
    assert engine.transcript() == [("user", "hello"), ("assistant", "re: hello")]
    route = engine.route()
    assert route.lease_token is None and route.tally.message_count == 2 and route.tally.input_tokens == 5


def test_an_answer_respond_could_not_send_is_sent_by_deliver_then_finished_once() -> None:
    engine = Engine()
    sent = _sending_here(engine, fails=1)
    engine.send("hello", "e0")
    ending, _, tasks = _run_first(engine)

    assert ending == "succeeded" and tasks == ["Respond", "Deliver", "Finish"]
    assert sent == [] and engine.texts() == ["re: hello"]
    route = engine.route()
    assert route.lease_token is None and route.tally.message_count == 2


def test_a_finish_that_met_a_throttle_in_respond_is_done_by_the_finish_task() -> None:
    engine = Engine()
    sent = _sending_here(engine)
    leases, throttled = engine.stores.leases, [1]
    finish = leases.finish

    def finish_once_throttled(*args: Any, **kwargs: Any) -> Any:
        if throttled[0]:
            throttled[0] = 0
            raise TransientError("throttled")
        return finish(*args, **kwargs)

    leases.finish = finish_once_throttled  # type: ignore[method-assign]
    engine.send("hello", "e0")
    ending, _, tasks = _run_first(engine)

    assert ending == "succeeded" and tasks == ["Respond", "Finish"]
    assert [job["text"] for job in sent] == ["re: hello"] and engine.delivered == []
    route = engine.route()
    assert route.lease_token is None and route.tally.message_count == 2  # counted once


def test_a_model_that_took_most_of_the_task_leaves_sending_and_finishing_to_the_workflow() -> None:
    engine = Engine()
    sent = _sending_here(engine)
    engine.send("hello", "e0")
    calls = [0]

    def now() -> float:  # the task starts at NOW; the model answers a minute later
        calls[0] += 1
        return NOW if calls[0] == 1 else NOW + 61

    engine.overrides["now"] = now
    ending, _, tasks = _run_first(engine)

    assert ending == "succeeded" and tasks == ["Respond", "Deliver", "Finish"]
    assert sent == [] and engine.texts() == ["re: hello"]


def test_a_respond_task_that_died_after_sending_and_finishing_gets_no_apology() -> None:
    # Fail's input is the state before the task that died: no answer in it. The answer's row is in
    # the transcript: that answer is handed on under the turn's delivery id (the outbox sends it
    # once), not the apology, and the lease the turn already released is left alone.
    engine = Engine()
    sent = _sending_here(engine)
    engine.send("hello", "e0")
    started = engine.starter.started[engine.first()]
    assert run_step("respond", started, engine.deps)["next"] == Step.DONE

    run_step("fail", {**started, "error": {"Error": "Sandbox.Timedout"}}, engine.deps)

    turn_id = started["turn"]["turn_id"]
    assert [(job["delivery_id"], job["text"]) for job in sent] == [(turn_id, "re: hello")]
    assert [(job["delivery_id"], job["text"]) for job in engine.deliveries.bodies] == [(turn_id, "re: hello")]
    assert APOLOGY not in [job["text"] for job in engine.deliveries.bodies]
    route = engine.route()
    assert route.lease_token is None and route.tally.message_count == 2


# -- busy sessions -------------------------------------------------------------------------------


def test_a_burst_of_five_during_a_turn_is_answered_in_order_with_one_busy_notice() -> None:
    engine = Engine()
    assert engine.send("first", "e0").status == "started"

    outcomes = [engine.send(f"m{n}", f"e{n}") for n in range(1, 6)]
    engine.pump()

    assert [o.status for o in outcomes] == ["queued"] * 5
    assert [b["text"] for b in engine.replies.bodies] == [BUSY]
    assert engine.texts() == ["re: first"] + [f"re: m{n}" for n in range(1, 6)]
    assert engine.transcript() == [("user", "first"), ("assistant", "re: first")] + [
        row for n in range(1, 6) for row in (("user", f"m{n}"), ("assistant", f"re: m{n}"))
    ]
    state = engine.stores.control.state(engine.key())
    assert state.lease_token is None and state.queue == ()


def test_a_burst_can_be_answered_as_one_follow_up() -> None:
    engine = Engine({"GATEWAY_BUSY_FOLLOWUP": "one"})
    engine.send("first", "e0")
    for n in range(1, 6):
        engine.send(f"m{n}", f"e{n}")

    engine.pump()

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
    engine.execute(engine.first())  # the first turn ends; the second starts
    engine.send("third", "e2")
    assert len(engine.replies.bodies) == 2


def test_a_redelivered_message_is_routed_once() -> None:
    engine = Engine()
    engine.send("first", "e0")
    again = engine.send("first", "e0")
    engine.send("second", "e1")
    engine.send("second", "e1")

    engine.pump()

    assert again.status == "already_started"
    assert engine.texts() == ["re: first", "re: second"]
    assert engine.send("first", "e0").status == "already_answered"


def test_an_answered_message_redriven_into_a_busy_sessions_queue_does_not_hold_the_lease() -> None:
    # Was a bug (make faults: a lease held after every execution succeeded): an answered message
    # put back in the inbox long after (the route no longer remembers its event) waited behind a
    # running turn; the hand-off named its turn as before, the start found that execution, and
    # the lease stayed with a turn that would never run until it expired.
    engine = Engine()
    engine.send("hello", "e0")
    for n in range(1, 10):  # the route remembers the newest few events only
        engine.send(f"m{n}", f"e{n}")
    engine.pump()
    answered = len(engine.texts())
    assert engine.send("busy", "e10").status == "started"
    assert engine.send("hello", "e0").status == "queued"  # the redrive, behind the running turn

    engine.pump()

    assert engine.texts()[answered:] == ["re: busy"]  # e0 is not answered twice
    assert [text for role, text in engine.transcript() if role == "user"].count("hello") == 1  # nor kept twice
    assert engine.route().lease_token is None
    assert engine.send("next", "e11").status == "started"  # the session takes its next message


def test_a_redriven_answered_message_whose_hand_off_start_was_throttled_does_not_hold_the_lease() -> None:
    # Was a bug (make faults: a lease held by a turn whose one execution had succeeded): as above,
    # but the start of the turn the lease was handed to was throttled, so the Finish task did the
    # hand-off again; the repeat found that turn's execution and took it for the one its first
    # try had started, still running.
    engine = Engine()
    engine.send("hello", "e0")
    for n in range(1, 10):
        engine.send(f"m{n}", f"e{n}")
    engine.pump()
    answered = len(engine.texts())
    engine.clock += 60  # a redrive comes later
    assert engine.send("busy", "e10").status == "started"
    assert engine.send("hello", "e0").status == "queued"
    engine.starter.fail_next_start = TransientError("Step Functions is throttling")

    engine.pump()

    assert engine.starter.fail_next_start is None  # the hand-off's start met it
    assert engine.texts()[answered:] == ["re: busy"]
    assert [text for role, text in engine.transcript() if role == "user"].count("hello") == 1
    assert engine.route().lease_token is None
    assert engine.send("next", "e11").status == "started"


def test_a_message_queued_as_the_turn_finishes_is_never_stranded() -> None:
    # Given a turn just before its Finish, and a message queued just before Finish's write
    engine = Engine()
    engine.send("first", "e0")
    name = engine.first()
    ending, state = engine.workflow.run(engine.starter.started[name], stop_before="Finish")
    assert ending == "before:Finish"
    engine.send("late", "e1")

    # When Finish runs (twice, as Express may)
    engine.step("finish", state)
    engine.step("finish", state)

    # Then the lease went to the queued message's turn, started once (the repeat found it started:
    # it is running, and keeps the lease), and it is answered
    assert len(engine.starter.started) == 2
    late = engine.starter.started[next(n for n in engine.starter.started if n != name)]
    assert engine.route().lease_token == late["turn"]["lease_token"]
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
    lookups: list[str] = []
    lookup = tool("lookup", lambda args, ctx: _record(lookups, "found"))
    engine = Engine(model=ToolModel([("lookup", {})], [("lookup", {})], "done"), tools=[lookup])
    engine.send("research this", "e0")
    state = engine.step("respond", engine.starter.started[engine.first()])
    assert state["next"] == "tools"

    stop = engine.send("/stop", "e1")
    out = engine.step("tools", state)

    assert stop.status == "command" and engine.replies.bodies[-1]["text"] == "Stopping the current turn."
    assert out["next"] == "finish" and out["stopped"] and lookups == []
    engine.step("finish", out)
    assert engine.texts() == [] and engine.route().lease_token is None
    assert engine.send("/stop", "e2").status == "command"
    assert engine.replies.bodies[-1]["text"] == "Nothing is running."


def test_stop_while_the_model_answers_drops_the_answer() -> None:
    engine = Engine(model=ToolModel("an answer nobody wants"))
    engine.send("long question", "e0")
    engine.send("/stop", "e1")  # before the model's answer is kept

    assert engine.pump() == ["ok"]

    assert engine.texts() == [] and engine.transcript() == [("user", "long question")]
    assert engine.route().lease_token is None


def test_interrupt_stops_the_turn_and_answers_the_new_message() -> None:
    lookup = tool("lookup", lambda args, ctx: "found")
    engine = Engine({"TELEGRAM_BUSY_INPUT_MODE": "interrupt"}, ToolModel([("lookup", {})]), [lookup])
    engine.send("long job", "e0")
    name = engine.first()
    state = engine.step("respond", engine.starter.started[name])

    outcome = engine.send("actually, something else", "e1")
    out = engine.step("tools", state)
    engine.step("finish", out)
    engine.ran.append(name)
    engine.pump()

    assert outcome.reason == "interrupt"
    assert engine.replies.bodies[0]["text"] == "Stopping what I was doing to answer this."
    assert engine.texts() == ["re: long job\n\nactually, something else"]


def test_steer_injects_the_message_after_the_next_tool_call() -> None:
    lookup = tool("lookup", lambda args, ctx: "found")
    engine = Engine({"GATEWAY_BUSY_INPUT_MODE": "steer"}, ToolModel([("lookup", {})]), [lookup])
    engine.send("find flights", "e0")
    name = engine.first()
    state = engine.step("respond", engine.starter.started[name])

    engine.send("only direct ones", "e1")
    state = engine.step("tools", state)
    state = engine.step("respond", state)

    messages = engine.model.requests[-1][1]
    assert [(m.role, m.content) for m in messages[-2:]] == [("tool", "found"), ("user", "only direct ones")]
    assert engine.stores.control.state(engine.key()).queue == ()
    engine.step("finish", engine.deliver_state(state))
    assert engine.starter.started.keys() == {name}
    assert engine.transcript() == [
        ("user", "find flights"),
        ("user", "only direct ones"),
        ("assistant", "re: only direct ones"),
    ]


# -- the tool loop -------------------------------------------------------------------------------


def test_tool_results_and_errors_go_back_to_the_model() -> None:
    def broken(args: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("database on fire")

    tools = [tool("lookup", lambda args, ctx: f"value for {args.get('q')}"), tool("broken", broken)]
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
    more = tool("lookup", lambda args, ctx: "more")
    engine = Engine(
        {"GATEWAY_MAX_TOOL_ITERATIONS": "2"}, ToolModel([("lookup", {})], [("lookup", {})], "final"), [more]
    )
    engine.send("loop forever", "e0")

    engine.pump()

    assert [r[2] is not None for r in engine.model.requests] == [True, True, False]
    assert engine.texts() == ["final"]


def test_a_long_turn_continues_in_a_new_execution_from_its_state() -> None:
    slow = tool("slow", lambda args, ctx: "ok")
    engine = Engine(model=ToolModel([("slow", {})], [("slow", {})], "finished"), tools=[slow])
    engine.send("big job", "e0")
    first = engine.first()
    state = engine.step("respond", engine.starter.started[first])

    engine.clock += engine.settings.turns.continue_after_seconds + 1
    out = engine.step("tools", state)
    assert out["next"] == "continue"
    engine.step("continue", out)
    engine.step("continue", out)  # a repeated task starts nothing new
    engine.ran.append(first)
    # the next execution has a lease of its own time limit
    assert engine.route().lease_expires_at == pytest.approx(engine.clock + engine.settings.sessions.lease_ttl_seconds)

    assert list(engine.starter.started) == [first, f"{first}-c1"]
    assert engine.pump() == ["ok"]
    assert engine.texts() == ["finished"]
    assert len([m for m in engine.model.requests[-1][1] if m.role == "tool"]) == 2


# -- approvals -----------------------------------------------------------------------------------


def _approval_engine(env: dict[str, str] | None = None) -> tuple[Engine, list[str]]:
    ran: list[str] = []
    deploy = tool("deploy", lambda args, ctx: _record(ran, "deploy", "deployed"), approval=True)
    return Engine(env, ToolModel([("deploy", {"to": "prod"})], "it is done"), [deploy]), ran


def test_an_approval_is_asked_then_approved() -> None:
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")

    assert engine.pump() == ["paused"]
    ask = engine.deliveries.bodies[-1]
    assert "`deploy`" in ask["text"] and "/approve" in ask["text"]
    assert [b["reply"] for b in ask["buttons"]] == ["/approve", "/approve session", "/deny"]
    assert ran == []
    assert engine.send("meanwhile", "e1").status == "queued"  # the session stays busy while it waits

    reply = engine.send("/approve", "e2")
    assert engine.pump() == ["ok", "ok"]

    assert reply.status == "command" and "Approved" in engine.replies.bodies[-1]["text"]
    assert ran == ["deploy"]
    assert engine.texts()[-2:] == ["it is done", "re: meanwhile"]


def test_an_approval_answered_minutes_later_runs_in_one_execution() -> None:
    # Given a turn paused for an approval
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")
    assert engine.pump() == ["paused"]

    # When the answer comes more than continue_after_seconds after the pause
    engine.clock += engine.settings.turns.continue_after_seconds + 60
    engine.send("/approve", "e1")

    # Then the resumed execution keeps its own clock: no continuation is started
    assert engine.pump() == ["ok"]
    assert ran == ["deploy"] and engine.texts()[-1] == "it is done"
    assert not [name for name in engine.starter.started if re.search(r"-c\d+$", name)]


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

    engine.clock += 301
    outcome = engine.send("hello?", "e1")
    engine.pump()

    assert outcome.status == "queued" and ran == []
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


def _outside_engine(env: dict[str, str] | None = None) -> tuple[Engine, list[str]]:
    """A tool whose call to "elsewhere" reaches past the turn's chat (like send_message's gate)."""
    ran: list[str] = []

    def gate(args: dict[str, Any], ctx: ToolContext) -> str | None:
        return "send a message to elsewhere, outside this chat" if args.get("to") == "elsewhere" else None

    send = tool("send", lambda args, ctx: _record(ran, f"send:{args['to']}"), gate=gate)
    return Engine(env, ToolModel([("send", {"to": "elsewhere"})], "sent"), [send]), ran


def test_a_call_beyond_the_turns_reach_waits_for_an_admin_or_approver_not_the_user() -> None:
    # Given a user's turn whose model sends outside the chat (a tool no setting marks for approval)
    engine, ran = _outside_engine({"GATEWAY_ADMINS": "7", "GATEWAY_APPROVERS": "8"})
    engine.send("/yolo", "e0")  # the user's own bypass does not cover it
    engine.send("send it", "e1")
    assert engine.pump() == ["paused"]
    ask = engine.deliveries.bodies[-1]
    assert "outside this chat" in ask["text"] and "admin or approver" in ask["text"]
    assert [b["reply"] for b in ask["buttons"]] == ["/approve", "/deny"]

    # When the user answers, nothing runs; when an approver does, it runs once
    engine.send("/approve", "e2")
    assert "Only an admin or an approver" in engine.replies.bodies[-1]["text"] and engine.pump() == []
    assert ran == []
    approver = replace(ALICE, user_id="8", user_name="Ops")
    engine.send("/approve always", "e3", approver)
    assert engine.replies.bodies[-1]["text"] == "Approved: `send`."  # once: never "from now on"
    assert engine.pump() == ["ok"] and ran == ["send:elsewhere"]

    # and the next such call asks again ("always" is the user's tools' scope, not reach's)
    engine.model.script = [[("send", {"to": "elsewhere"})], "again"]
    engine.send("send it again", "e4")
    assert engine.pump() == ["paused"] and ran == ["send:elsewhere"]


def test_a_call_inside_the_turns_reach_runs_without_asking() -> None:
    engine, ran = _outside_engine()
    engine.model.script = [[("send", {"to": "origin"})], "sent"]
    engine.send("send it here", "e0")
    assert engine.pump() == ["ok"] and ran == ["send:origin"]


def test_an_unattended_call_beyond_reach_is_denied() -> None:
    class Jobs:
        def get(self, job_id: str) -> None:
            return None

        def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool:
            return True

    engine, ran = _outside_engine()
    engine.overrides = {"jobs": Jobs(), "tool_ports": {"directory": FakeDirectory()}}
    engine.starter.start("cron", _cron_state())
    assert engine.pump() == ["ok"]
    assert ran == []
    tool_result = next(m for m in engine.model.requests[-1][1] if m.role == "tool")
    assert "nobody is here to give it" in tool_result.content


# -- failures ------------------------------------------------------------------------------------


def test_a_provider_failure_apologizes_once_and_keeps_the_message_for_retry() -> None:
    engine = Engine(model=ToolModel(fail=[TransientError("model down")]))
    engine.send("hello", "e0")

    assert engine.pump() == ["failed"]

    assert [b["text"] for b in engine.deliveries.bodies] == [APOLOGY]
    assert engine.deliveries.bodies[0]["delivery_id"].endswith("-failed")
    assert engine.transcript() == [("user", "hello")]
    assert engine.route().lease_token is None


def test_a_crash_after_the_model_answered_delivers_that_answer_not_an_apology() -> None:
    engine = Engine(model=ToolModel("the answer"))
    engine.crash_before["finish"] = 1
    engine.send("q", "e0")

    assert engine.pump() == ["failed"]

    assert [job["text"] for job in engine.sent()] == ["the answer", "the answer"]  # one delivery id
    assert {job["delivery_id"] for job in engine.sent()} == {engine.first()}
    assert engine.transcript() == [("user", "q"), ("assistant", "the answer")]
    assert engine.route().lease_token is None


def test_a_platform_outage_hands_the_answer_to_the_delivery_function() -> None:
    engine = Engine(model=ToolModel("the answer"))
    engine.deliver_fails = 1
    engine.send("q", "e0")

    assert engine.pump() == ["ok"]

    assert engine.texts() == [] and [b["text"] for b in engine.deliveries.bodies] == ["the answer"]
    assert engine.route().lease_token is None


def test_a_failed_turn_still_hands_the_lease_to_queued_messages() -> None:
    engine = Engine(model=ToolModel(fail=[TransientError("down")]))
    engine.send("one", "e0")
    engine.send("two", "e1")

    assert engine.pump() == ["failed", "ok"]
    assert [b["text"] for b in engine.deliveries.bodies] == [APOLOGY]
    assert engine.texts() == ["re: one\n\ntwo"]


def test_every_task_run_twice_changes_nothing_twice() -> None:
    class Deterministic(ToolModel):
        """Asks for the tool until it has its result, then answers: the same request, the same reply."""

        def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
            self.requests.append((system, list(messages), tools))
            if messages[-1].role == "tool":
                return ModelReply("fine", "tooly", 5, 2)
            return ModelReply("", "tooly", 5, 2, "tool_calls", tool_calls=(ToolCall("c1", "note", {}),))

    engine = Engine(model=Deterministic(), tools=[tool("note", lambda args, ctx: "noted")])
    engine.send("hi", "e0")
    engine.send("then", "e1")
    name = engine.first()
    state = engine.starter.started[name]
    for step in ("respond", "tools", "respond", "deliver", "finish"):
        if step == "deliver":
            out, again = engine.deliver_state(state), engine.deliver_state(state)
        else:
            out, again = engine.step(step, state), engine.step(step, state)
        assert again == out
        state = out

    assert engine.texts() == ["fine", "fine"]  # one delivery id, twice: the outbox keeps one
    assert {b["delivery_id"] for b in engine.delivered} == {name}
    assert engine.transcript() == [("user", "hi"), ("assistant", "fine"), ("user", "then")]
    assert len(engine.starter.started) == 2
    assert engine.route().tally.input_tokens == 10  # two model calls, counted once


# -- turn kinds and context ----------------------------------------------------------------------


def _cron_state(job_id: str = "j0123456789ab", run_id: str = "r1", **job: Any) -> dict[str, Any]:
    run = CronRun(
        job_id,
        run_id,
        job.get("prompt", "summarize"),
        name="n",
        deliver=tuple(job.get("deliver", ("origin", "telegram:555"))),
        origin={"platform": "telegram", "chat_id": "99", "thread_id": None},
    )
    return TurnState(lifecycle.cron_turn(run, NOW)).to_json()


def test_a_cron_turn_pushes_to_each_target_records_the_run_and_denies_approvals() -> None:
    recorded: list[tuple[str, str, str]] = []

    class Jobs:
        def get(self, job_id: str) -> None:
            return None

        def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool:
            recorded.append((job_id, run_id, status))
            return True

    ran: list[str] = []
    tools = [tool("deploy", lambda args, ctx: _record(ran, "x"), approval=True), tool("cronjob", lambda a, c: "no")]
    engine = Engine(model=ToolModel([("deploy", {})], "daily summary"), tools=tools)
    engine.overrides = {"jobs": Jobs(), "tool_ports": {"directory": FakeDirectory()}}
    engine.starter.start("cron", _cron_state())

    assert engine.pump() == ["ok"]

    assert ran == []
    assert engine.model.requests[0][1] == [ChatMessage("user", "summarize")]
    assert {s.name for s in engine.model.requests[0][2] or []} == {"deploy"}
    assert [(p["target"]["chat_id"], p["kind"], p["mirror"], p["cron"]) for p in engine.delivered] == [
        ("99", "push", True, {"job_id": "j0123456789ab", "run_id": "r1"}),
        ("555", "push", True, {"job_id": "j0123456789ab", "run_id": "r1"}),
    ]
    assert recorded == [("j0123456789ab", "r1", "ok")]


def test_a_failed_cron_turn_is_recorded_and_told_to_its_origin_chat_once() -> None:
    from hermes_gateway.services import cron
    from tests.fakes.jobs import FakeJobStore

    engine = Engine(model=ToolModel([], "unused"))
    jobs = FakeJobStore()
    origin = {"platform": "telegram", "chat_id": "99", "thread_id": None}
    job = cron.create_job(
        jobs, prompt="p", schedule="every 10m", deliver=["origin"], origin=origin, now=NOW, time_zone="UTC"
    )
    engine.overrides = {"jobs": jobs}
    turn = lifecycle.cron_turn(CronRun.from_json(job.turn_job("r1")), NOW)
    failed = TurnState(turn, error={"Error": "TransientError", "Cause": "model down"}).to_json()

    engine.step("fail", failed)
    engine.step("fail", failed)  # the task retried

    stored = jobs.get(job.id)
    assert stored is not None and stored.last_status == "error"
    assert [(b["target"]["chat_id"], b["kind"]) for b in engine.deliveries.bodies] == [("99", "push")]


def test_a_flush_turn_has_only_memory_and_delivers_nothing() -> None:
    memory = tool("memory", lambda args, ctx: "saved")
    engine = Engine(tools=[memory])
    engine.send("I like tea", "e0")
    engine.pump()
    engine.model.script = [[("memory", {"action": "add"})], "NO_REPLY"]
    session_id = engine.route().session_id
    engine.overrides = {"tools": lambda kind: [memory] if kind.value == "flush" else []}
    turn = lifecycle.flush_turn(session_id, engine.key(), ALICE, "idle", NOW)
    sent = len(engine.sent())
    engine.starter.start(turn.turn_id, TurnState(turn).to_json())

    assert engine.pump() == ["ok"]

    assert len(engine.sent()) == sent
    assert [s.name for s in engine.model.requests[-2][2] or []] == ["memory"]
    assert "about to end" in engine.model.requests[-2][1][-1].content
    assert engine.stores.catalogue.memory_flushed(session_id)


def test_the_system_prompt_names_platforms_homes_and_the_session() -> None:
    settings = make_settings({**OPEN, "SLACK_ENABLED": "true", "TELEGRAM_HOME_CHANNEL": "12345"})
    text = system_prompt(
        ALICE, "sid-1", settings, session_key="agent:main:telegram:dm:99", home_channels={"telegram": "12345"}
    )
    assert "slack (home: not set)" in text
    assert f"telegram (home: telegram:{hash_id('12345')})" in text
    assert "12345" not in text and "dm:99" not in text
    assert "Session id: sid-1" in text
    slack = SessionSource("slack", chat_id="C1", chat_type="group", user_id="U1", scope_id="T1")
    assert "Session key: agent:main:slack:group:T1:C1:U1" in system_prompt(
        slack, "sid-2", settings, session_key="agent:main:slack:group:T1:C1:U1"
    )


def test_a_turn_cut_short_is_answered_by_the_next_message_with_its_unanswered_one() -> None:
    # Given a turn that crashed without answering (its execution never ends)
    engine = Engine()
    engine.send("first", "e0")
    engine.ran.append(engine.first())
    engine.clock += 1000  # its lease has expired

    # When the next message comes, it takes the lease over and the session resumes
    assert engine.send("hello again", "e1").status == "started"
    engine.pump()

    system, messages, _ = engine.model.requests[-1]
    assert "cut short" in system
    assert [m.content for m in messages] == ["first\n\nhello again"]
    assert engine.texts() == ["re: first\n\nhello again"]


@pytest.mark.parametrize("mode", ["queue", "steer", "interrupt"])
def test_every_busy_mode_answers_every_message(mode: str) -> None:
    engine = Engine({"GATEWAY_BUSY_INPUT_MODE": mode})
    engine.send("a", "e0")
    for n in range(1, 4):
        engine.send(f"b{n}", f"e{n}")

    engine.pump()

    answered = " ".join(engine.texts())
    assert all(word in answered for word in ("a", "b1", "b2", "b3"))
    assert engine.route().lease_token is None


def test_messages_queued_behind_a_crashed_turn_are_answered_first_after_its_lease_expires() -> None:
    engine = Engine()
    engine.send("first", "e0")
    engine.send("queued one", "e1")
    engine.ran.append(engine.first())
    engine.clock += 1000

    outcome = engine.send("newest", "e2")
    engine.pump()

    assert outcome.status == "queued" and outcome.reason == "recovered"
    assert engine.texts() == ["re: first\n\nqueued one", "re: newest"]
    assert engine.route().lease_token is None


def test_a_reset_flushes_the_replaced_sessions_memory_once_and_only_when_it_had_a_prompt() -> None:
    engine = Engine({"GATEWAY_RESET_MODE": "idle", "GATEWAY_RESET_IDLE_MINUTES": "10"})
    engine.send("remember I like tea", "e0")
    engine.pump()
    first = engine.route().session_id

    engine.clock += 3600
    engine.send("hello again", "e1")
    engine.send("hello again", "e1")

    flushes = [name for name in engine.starter.started if name.startswith("flush-")]
    assert flushes == [f"flush-{first}"]
    flush = TurnState.from_json(engine.starter.started[flushes[0]]).turn
    assert (flush.kind.value, flush.session_id, flush.flush_reason) == ("flush", first, "idle")
    assert engine.route().session_id != first


def test_new_flushes_the_session_it_replaces_but_not_an_empty_one() -> None:
    engine = Engine()
    engine.send("remember I like tea", "e0")
    engine.pump()
    first = engine.route().session_id

    engine.send("/new", "e1")
    engine.send("/new", "e2")  # the session it replaced had no prompt: nothing to flush

    assert [n for n in engine.starter.started if n.startswith("flush-")] == [f"flush-{first}"]


def _tick(engine: Engine) -> dict[str, int]:
    stores = engine.stores
    deps = LeaseRecovery(
        engine.settings, stores.routes, stores.leases, stores.control, stores.transcript, engine.starter
    )
    return recover_expired_leases(deps, engine.clock)


def test_the_tick_answers_messages_queued_behind_a_crashed_turn_without_waiting_for_the_chat() -> None:
    engine = Engine()
    engine.send("first", "e0")
    engine.send("one", "e1")
    engine.send("two", "e2")
    engine.ran.append(engine.first())  # its execution never ends
    engine.clock += 1000

    first, again = _tick(engine), _tick(engine)
    engine.pump()

    assert first == {"leases_released": 1, "approvals_timed_out": 0, "queues_recovered": 1}
    assert again == {"leases_released": 0, "approvals_timed_out": 0, "queues_recovered": 0}
    assert engine.texts() == ["re: first\n\none", "re: two"]
    assert engine.route().lease_token is None


def test_the_tick_denies_an_unanswered_approval_and_finishes_the_turn() -> None:
    engine, ran = _approval_engine()
    engine.send("deploy it", "e0")
    assert engine.pump() == ["paused"]

    engine.clock += 301
    counts = _tick(engine)
    engine.pump()

    assert counts["approvals_timed_out"] == 1 and counts["leases_released"] == 0
    assert ran == [] and engine.texts()[-1] == "it is done"
    assert engine.route().lease_token is None


def test_the_tick_reads_no_plain_turn_and_leaves_a_running_one() -> None:
    engine = Engine()
    engine.send("first", "e0")
    engine.clock += 1000  # even expired: a plain turn's lease is the next message's to take over
    assert _tick(engine) == {"leases_released": 0, "approvals_timed_out": 0, "queues_recovered": 0}
    assert engine.route().lease_token is not None


def test_the_sessions_model_override_picks_the_provider_of_that_turn() -> None:
    engine = Engine()
    engine.send("hi", "e0")
    engine.pump()
    route = engine.route()
    engine.stores.edits.set_model_override(
        engine.key(),
        ModelOverride("gpt-x", "openai", "https://llm.example"),
        fence=Fence(route.revision, route.execution_generation),
        now=NOW,
    )
    chosen: list[ModelOverride] = []
    other = ToolModel("from the override")

    def provider_for(override: ModelOverride) -> ToolModel:
        chosen.append(override)
        return other

    engine.send("again", "e1")
    name = next(n for n in engine.starter.started if n not in engine.ran)
    engine.overrides = {"provider_for": provider_for}
    state = engine.step("respond", engine.starter.started[name])

    assert chosen == [ModelOverride("gpt-x", "openai", "https://llm.example")]
    assert state["reply"]["text"] == "from the override"


def test_a_recovery_that_fails_three_times_suspends_the_session() -> None:
    engine = Engine(model=ToolModel(fail=[TransientError("down")] * 5))
    engine.send("first", "first")
    engine.ran.append(engine.first())
    engine.clock += 1000  # the first turn was cut short: the next message resumes it
    for n in range(3):  # each resumes the cut-short turn, and fails again
        engine.send(f"try {n}", f"e{n}")
        engine.pump()
        engine.clock += 1

    route = engine.route()
    assert route.suspended and route.failed_recoveries == 3
    assert engine.send("again", "e9").status == "started" and engine.route().session_id != route.session_id


def test_a_slack_session_after_a_reset_with_activity_carries_the_continuity_note() -> None:
    engine = Engine()
    engine.send("hi", "e0")
    state = TurnState.from_json(engine.starter.started[engine.first()])
    noted = replace(state, turn=replace(state.turn, notes=TurnNotes(continuity_from="20261129_010203_abcd1234")))

    out = engine.step("respond", noted.to_json())

    assert "follows an earlier one (20261129_010203_abcd1234)" in out["system"]


def test_the_state_of_a_turn_at_its_bounds_stays_under_the_limit() -> None:
    import base64
    import os

    from hermes_gateway.domain.turn_state import STATE_LIMIT_BYTES

    # Given tools whose every result is as long as a result may be and does not compress
    noise = tool("dump", lambda args, ctx: base64.b64encode(os.urandom(12_000)).decode())
    calls = [[("dump", {})] for _ in range(50)]
    engine = Engine({"GATEWAY_MAX_TOOL_ITERATIONS": "50"}, ToolModel(*calls, "done"), [noise])
    engine.send("dump everything", "e0")
    sizes: list[int] = []
    step = engine.step

    def measured(name: str, state: dict[str, Any], retry: int = 0) -> dict[str, Any]:
        out = step(name, state, retry)
        sizes.append(len(json.dumps(out)))
        return out

    engine.step = measured  # type: ignore[method-assign]

    # When the loop runs to its bound, then the turn answers
    assert engine.pump() == ["ok"]

    # Then no state between tasks ever came near Step Functions' 256 KiB
    assert engine.texts() == ["done"] and max(sizes) <= STATE_LIMIT_BYTES


def test_step_values_are_the_workflows_choices() -> None:
    from tests.fakes.workflow import definition

    asl = definition()
    chosen = {
        rule["StringEquals"]
        for state in asl["States"].values()
        if state["Type"] == "Choice"
        for rule in state["Choices"]
    }
    assert chosen <= {step.value for step in Step}
    assert {Step.TOOLS.value, Step.DELIVER.value, Step.MODEL.value, Step.PAUSED.value, Step.CONTINUE.value} <= chosen
    # every task the workflow names is a step of the engine
    from hermes_gateway.services.turn import STEPS

    named = {
        state["Parameters"]["step"]
        for state in asl["States"].values()
        if state["Type"] == "Task" and "step" in state.get("Parameters", {})
    }
    assert named == set(STEPS)


def test_run_step_refuses_an_unknown_step() -> None:
    from hermes_gateway.errors import PermanentError

    engine = Engine()
    engine.send("hi", "e0")
    with pytest.raises(PermanentError):
        run_step("dance", engine.starter.started[engine.first()], engine.deps)
