"""The turn workflow end to end on moto: the real ASL file run by moto's Step Functions
interpreter, whose Lambda tasks call the agent handler in-process; the router's logic with the
production wiring (DynamoDB, Lambda invokes, Step Functions in moto); a scripted model provider.
The delivery function is a recorder here: every job it is given, in the order given."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import TransientError
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolCall, ToolSpec
from hermes_gateway.resources import function
from hermes_gateway.services.router import RouteOutcome, route_message
from hermes_gateway.services.turn import APOLOGY
from hermes_local.aws import install_lambda_dispatch
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.integration

ALICE = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Alice")
KEY = "agent:main:telegram:dm:99"


def _context(name: str) -> LambdaContext:
    return LambdaContext(
        name, 512, f"arn:aws:lambda:us-east-1:123456789012:function:{name}", deadline=time.time() + 120
    )


class Model:
    """A scripted provider: `answer(messages, tools)` decides; `gate` (when set) holds the first
    call until the test opens it, so messages can arrive while the turn runs."""

    name = "scripted"

    def __init__(self, answer: Callable[[list[ChatMessage], list[ToolSpec] | None], ModelReply | Exception]) -> None:
        self.answer = answer
        self.calls: list[list[ChatMessage]] = []
        self.gate: threading.Event | None = None
        self.waiting = threading.Event()
        self._lock = threading.Lock()

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        with self._lock:
            self.calls.append(list(messages))
        if self.gate is not None:
            self.waiting.set()
            assert self.gate.wait(30), "the test never opened the gate"
            self.gate = None
        out = self.answer(messages, tools)
        if isinstance(out, Exception):
            raise out
        return out


def echo(messages: list[ChatMessage], tools: list[ToolSpec] | None) -> ModelReply:
    return ModelReply(f"re: {messages[-1].content}", "scripted", 3, 2)


class Deliveries:
    """The delivery function as these tests see it: it keeps every job (a turn's, invoked and
    waited for, and the router's, invoked asynchronously), in order, and reports each recorded."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.crash_once_on: str | None = None  # a delivery id prefix: the function dies once after taking it
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        jobs = event.get("deliveries", [event])
        with self._lock:
            self.jobs.extend(jobs)
            prefix, crash = self.crash_once_on, False
            if prefix is not None and any(job["delivery_id"].startswith(prefix) for job in jobs):
                self.crash_once_on, crash = None, True
        if crash:
            raise RuntimeError("the delivery function died after it took the job")
        return {"deliveries": [{"delivery_id": job["delivery_id"], "status": "recorded"} for job in jobs]}

    def take(self) -> list[dict[str, Any]]:
        with self._lock:
            taken, self.jobs = self.jobs, []
        return taken


class Gateway:
    def __init__(self, aws: Any, model: Model, deliveries: Deliveries) -> None:
        self.aws = aws
        self.model = model
        self.deliveries = deliveries
        self.sfn = boto3.client("stepfunctions")

    def send(self, text: str, event: str, source: SessionSource = ALICE) -> RouteOutcome:
        message = InboundMessage(source=source, text=text, event_id=event, received_at=time.time())
        return route_message(
            message,
            settings=wiring.settings(),
            stores=wiring.session_stores(),
            starter=wiring.turn_starter(),
            access=wiring.access(),
            now=time.time(),
        )

    def executions(self) -> list[dict[str, Any]]:
        arn = self.aws.bindings.state_machine("turn")
        found: list[dict[str, Any]] = self.sfn.list_executions(stateMachineArn=arn)["executions"]
        return found

    def settle(self, count: int, timeout: float = 30) -> list[dict[str, Any]]:
        """Wait until `count` executions exist and none runs; their statuses, in start order."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            found = self.executions()
            if len(found) >= count and all(e["status"] != "RUNNING" for e in found):
                time.sleep(0.1)  # a task may still be starting the next one
                again = self.executions()
                if len(again) == len(found) and all(e["status"] != "RUNNING" for e in again):
                    return sorted(again, key=lambda e: e["startDate"])
            time.sleep(0.05)
        failures = [  # why a task failed, for the message below
            event.get("lambdaFunctionFailedEventDetails", {}).get("cause", "")[:300]
            for e in self.executions()
            for event in self.sfn.get_execution_history(executionArn=e["executionArn"])["events"]
            if event["type"] == "LambdaFunctionFailed"
        ]
        raise AssertionError(
            f"executions did not settle: {[(e['name'], e['status']) for e in self.executions()]}; {failures}"
        )

    def jobs(self) -> list[dict[str, Any]]:
        """Every job given to the delivery function (replies, notices, pushes) since the last call, in order."""
        return self.deliveries.take()

    def transcript(self) -> list[tuple[str, str]]:
        route = wiring.session_stores().routes.get(KEY)
        assert route is not None
        return [(r.role, r.content) for r in wiring.session_stores().transcript.rows(route.session_id)]


@pytest.fixture
def gateway(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Gateway]:
    """Given the deployment in moto, the agent handler behind the state machine's Lambda tasks,
    retries that do not really sleep, and a scripted model."""
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

    monkeypatch.setenv("TELEGRAM_ALLOW_ALL_USERS", "true")
    monkeypatch.setattr(LambdaSimpleBackend, "invoke", LambdaSimpleBackend.invoke)  # restored afterwards
    monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=lambda seconds: None))
    agent = load_handler_module(function("agent")).lambda_handler
    deliveries = Deliveries()
    handlers = {"agent": agent, "delivery": deliveries}
    # Only this deployment's functions: an execution an earlier test left running in moto calls
    # its own deployment's names, which must not reach this test's recorder
    ours = {aws.bindings.function(name).rsplit(":", 1)[-1]: name for name in handlers}
    install_lambda_dispatch(lambda name: handlers.get(ours.get(name, "")), _context)
    model = Model(echo)
    monkeypatch.setattr(wiring, "_provider", lambda override, profile=None: model)
    # the Respond task sending its turn's answer itself hands it to the same recorder
    monkeypatch.setattr(
        wiring, "_deliver_here", lambda job: deliveries({"deliveries": [job]}, None)["deliveries"][0]["status"]
    )
    wiring.reset()
    yield Gateway(aws, model, deliveries)
    wiring.reset()


def test_a_burst_of_five_during_a_turn_is_answered_in_order_with_nothing_lost(gateway: Gateway) -> None:
    # Given a turn whose model call is still running
    gateway.model.gate = threading.Event()
    assert gateway.send("first", "ev-0").status == "started"
    assert gateway.model.waiting.wait(10)

    # When five messages arrive during it
    outcomes = [gateway.send(f"m{n}", f"ev-{n}") for n in range(1, 6)]
    gateway.model.gate.set()
    executions = gateway.settle(6)

    # Then they were queued, and six turns answered six messages in order
    assert [o.status for o in outcomes] == ["queued"] * 5
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 6
    assert gateway.transcript() == [("user", "first"), ("assistant", "re: first")] + [
        row for n in range(1, 6) for row in (("user", f"m{n}"), ("assistant", f"re: m{n}"))
    ]
    texts = [m["text"] for m in gateway.jobs()]  # a turn's replies are delivered before the next turn
    assert texts == [
        "I'm still working on your previous message; this one is queued for the next turn.",
        "re: first",
        *(f"re: m{n}" for n in range(1, 6)),
    ]
    route = wiring.session_stores().routes.get(KEY)
    assert route is not None and route.lease_token is None


def test_a_burst_can_be_one_follow_up(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATEWAY_BUSY_FOLLOWUP", "one")
    wiring.reset()
    gateway.model.gate = threading.Event()
    gateway.send("first", "ev-0")
    assert gateway.model.waiting.wait(10)
    for n in range(1, 6):
        gateway.send(f"m{n}", f"ev-{n}")
    gateway.model.gate.set()

    assert [e["status"] for e in gateway.settle(2)] == ["SUCCEEDED"] * 2
    assert gateway.transcript()[-1] == ("assistant", "re: m1\n\nm2\n\nm3\n\nm4\n\nm5")


def test_a_crash_between_the_model_call_and_delivery_sends_one_reply_and_no_apology(
    gateway: Gateway, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a delivery that dies right after it took the turn's reply
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    gateway.deliveries.crash_once_on = "turn-"  # a reply's delivery id starts with its turn id

    # When a message is answered
    gateway.send("hello", "ev-1")
    executions = gateway.settle(1)

    # Then the Respond task's send failed and left it to the Deliver task, which handed the same
    # job to the delivery function again (not an apology), the turn succeeded, and the real
    # delivery function sends the reply once
    assert executions[0]["status"] == "SUCCEEDED"
    jobs = gateway.jobs()
    assert len(jobs) == 2 and len({job["delivery_id"] for job in jobs}) == 1
    assert APOLOGY not in [job["text"] for job in jobs]
    delivery = load_handler_module(function("delivery")).lambda_handler
    for job in jobs:
        delivery(job, _context("delivery"))
    assert [m["text"] for m in fake_telegram.sent] == ["re: hello"]
    assert gateway.transcript() == [("user", "hello"), ("assistant", "re: hello")]


def test_a_model_that_keeps_failing_is_apologized_for_once(gateway: Gateway) -> None:
    # Given a model that keeps failing with a transient error (a real provider retries inside
    # its own budget first; this scripted one has none)
    gateway.model.answer = lambda messages, tools: TransientError("503 from the model")

    gateway.send("hello", "ev-1")
    executions = gateway.settle(1)

    # Then the workflow did not ask it again (one budget per task), and the user got one apology
    assert executions[0]["status"] == "FAILED"
    assert len(gateway.model.calls) == 1
    texts = [m["text"] for m in gateway.jobs()]
    assert texts == [APOLOGY]
    # And the message stays for /retry, the session is free
    assert gateway.transcript() == [("user", "hello")]
    route = wiring.session_stores().routes.get(KEY)
    assert route is not None and route.lease_token is None


def test_a_transient_failure_that_clears_on_retry_answers_normally(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a task whose first try meets a throttled table
    from hermes_gateway.adapters.dynamo_transcript import DynamoTranscript

    real_window = DynamoTranscript.window
    failures = [TransientError("the messages table is throttled")]

    def window(self: DynamoTranscript, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_window(self, *args, **kwargs)

    monkeypatch.setattr(DynamoTranscript, "window", window)

    gateway.send("hello", "ev-1")

    # Then the workflow's Retry ran the task again and the answer went out once
    assert [e["status"] for e in gateway.settle(1)] == ["SUCCEEDED"]
    assert not failures and len(gateway.model.calls) == 1
    assert [m["text"] for m in gateway.jobs()] == ["re: hello"]


def _send_local(messages: list[ChatMessage], tools: list[ToolSpec] | None) -> ModelReply:
    if messages[-1].role == "tool":
        return ModelReply(f"tool said: {messages[-1].content[:40]}", "scripted", 3, 2)
    if "note" not in messages[-1].content:
        return echo(messages, tools)
    call = ToolCall("call-1", "send_message", {"target": "local", "text": "note to self"})
    return ModelReply("", "scripted", 3, 2, "tool_calls", tool_calls=(call,))


@pytest.fixture
def approvals(gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> Gateway:
    monkeypatch.setenv("GATEWAY_TOOLS_NEEDING_APPROVAL", "send_message")
    wiring.reset()
    gateway.model.answer = _send_local
    return gateway


def test_an_approval_is_asked_then_answered(approvals: Gateway) -> None:
    # Given a turn whose tool needs approval
    approvals.send("write a note", "ev-1")
    assert [e["status"] for e in approvals.settle(1)] == ["SUCCEEDED"]  # paused: the execution ended
    asked = approvals.jobs()
    assert len(asked) == 1 and "/approve" in asked[0]["text"]
    assert wiring.session_stores().control.state(KEY).approval is not None

    # When the user approves
    answer = approvals.send("yes", "ev-2")
    executions = approvals.settle(2)

    # Then the continuation ran the tool and answered
    assert answer.status == "command"
    assert executions[1]["name"].endswith("-a1") and executions[1]["status"] == "SUCCEEDED"
    texts = [m["text"] for m in approvals.jobs()]
    assert any(t.startswith("Approved") for t in texts)
    assert any(t.startswith("tool said:") and "error" not in t for t in texts)
    assert [m for m in approvals.jobs() if m.get("kind") == "push"] == []
    route = wiring.session_stores().routes.get(KEY)
    assert route is not None and route.lease_token is None


def test_an_unanswered_approval_times_out_as_denied(approvals: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    approvals.send("write a note", "ev-1")
    approvals.settle(1)
    approvals.jobs()

    # When the next message comes after the approval timed out
    later = time.time() + 400
    monkeypatch.setattr(time, "time", lambda: later)
    outcome = approvals.send("are you there?", "ev-2")
    executions = approvals.settle(3)

    # Then the paused turn continued with a denial, and the new message was answered after it
    assert outcome.status == "queued"
    assert [e["status"] for e in executions] == ["SUCCEEDED"] * 3
    tool_results = [m.content for call in approvals.model.calls for m in call if m.role == "tool"]
    assert tool_results and "did not approve" in tool_results[0]
    assert approvals.transcript()[-2:] == [("user", "are you there?"), ("assistant", "re: are you there?")]


def test_stop_interrupts_the_running_turn(gateway: Gateway) -> None:
    # Given a turn whose model is thinking (and will ask for a tool)
    gateway.model.answer = _send_local
    gateway.model.gate = threading.Event()
    gateway.send("take a long note", "ev-1")
    assert gateway.model.waiting.wait(10)

    # When the user sends /stop, which bypasses the busy check
    stop = gateway.send("/stop", "ev-2")
    gateway.model.gate.set()
    executions = gateway.settle(1)

    # Then the turn ends at the next safe point: no tool ran, nothing was answered, the session is free
    assert stop.status == "command"
    assert executions[0]["status"] == "SUCCEEDED"
    texts = [m["text"] for m in gateway.jobs()]
    assert texts == ["Stopping the current turn."]
    assert len(gateway.model.calls) == 1
    route = wiring.session_stores().routes.get(KEY)
    assert route is not None and route.lease_token is None


def test_the_agent_shows_typing_while_the_model_works_and_the_answer_replies_to_the_message(
    gateway: Gateway, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the bot's token in the agent function (its sender shows the typing indicator), renewed
    # every 0.1 s, and a model call that is still running
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    monkeypatch.setattr(TelegramSender, "typing_refresh_seconds", 0.1)
    wiring.reset()
    gateway.model.gate = threading.Event()

    # When the user's message 5 is answered
    gateway.send("hello", "ev-1", replace(ALICE, message_id="5"))
    assert gateway.model.waiting.wait(10)
    deadline = time.time() + 5
    while len(fake_telegram.chat_actions()) < 2 and time.time() < deadline:
        time.sleep(0.02)
    gateway.model.gate.set()
    assert [e["status"] for e in gateway.settle(1)] == ["SUCCEEDED"]

    # Then the chat was shown typing, and again, while the model worked
    assert fake_telegram.chat_actions()[:2] == [{"chat_id": 99, "action": "typing"}] * 2
    # and the real delivery function sends the answer as a reply to message 5 (reply_to_mode first)
    (job,) = gateway.jobs()
    assert job["reply_to_message_id"] == "5"
    load_handler_module(function("delivery")).lambda_handler(job, _context("delivery"))
    (sent,) = fake_telegram.sent
    assert sent["text"] == "re: hello"
    assert sent["reply_parameters"] == {"message_id": 5, "allow_sending_without_reply": True}
    methods = [r.api_method for r in fake_telegram.requests]
    assert methods.index("sendChatAction") < methods.index("sendMessage")
