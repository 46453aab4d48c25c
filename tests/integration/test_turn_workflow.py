"""The turn workflow end to end on moto: the real ASL file run by moto's Step Functions
interpreter, whose Lambda tasks call the agent handler in-process; the router's logic with the
production wiring (DynamoDB, SQS, Step Functions in moto); a scripted model provider."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import TransientError
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolCall, ToolSpec
from hermes_gateway.resources import function
from hermes_gateway.services.router import RouteOutcome, route_message
from hermes_gateway.services.turn import APOLOGY
from hermes_local import pollers
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


class Gateway:
    def __init__(self, aws: Any, model: Model) -> None:
        self.aws = aws
        self.model = model
        self.sfn = boto3.client("stepfunctions")
        self.sqs = boto3.client("sqs")

    def send(self, text: str, event: str, source: SessionSource = ALICE) -> RouteOutcome:
        message = InboundMessage(source=source, text=text, event_id=event, received_at=time.time())
        return route_message(
            message,
            settings=wiring.settings(),
            store=wiring.session_store(),
            lease=wiring.session_store(),
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
        raise AssertionError(f"executions did not settle: {[(e['name'], e['status']) for e in self.executions()]}")

    def jobs(self) -> list[dict[str, Any]]:
        """Everything queued for delivery (replies, notices, pushes) since the last call, in order."""
        url = self.aws.bindings.queue("delivery")
        out: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get(
            "Messages", []
        ):
            out += batch
            for message in batch:  # a FIFO group hands out its next message once this one is gone
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return out

    def transcript(self) -> list[tuple[str, str]]:
        route = wiring.session_store().get_route(KEY)
        assert route is not None
        return [(r.role, r.content) for r in wiring.session_store().transcript(route.session_id)]


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
    install_lambda_dispatch(lambda name: agent if name.endswith("-agent") else None, _context)
    model = Model(echo)
    monkeypatch.setattr(wiring, "_provider", lambda override, profile=None: model)
    wiring.reset()
    yield Gateway(aws, model)
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
    texts = [json.loads(m["Body"])["text"] for m in gateway.jobs()]  # FIFO per chat: in order
    assert texts == [
        "I'm still working on your previous message; this one is queued for the next turn.",
        "re: first",
        *(f"re: m{n}" for n in range(1, 6)),
    ]
    route = wiring.session_store().get_route(KEY)
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
    # Given a delivery queue whose first send from the agent crashes right after the message is queued
    from hermes_gateway.adapters.aws import SqsQueue

    real_send = SqsQueue.send
    crashed: list[str] = []

    def send_then_crash(self: SqsQueue, body: dict[str, Any], **kwargs: Any) -> str:
        sent = real_send(self, body, **kwargs)
        if not crashed and str(body.get("delivery_id", "")).startswith("turn-"):
            crashed.append(body["delivery_id"])
            raise RuntimeError("the Lambda died after SendMessage")
        return sent

    monkeypatch.setattr(SqsQueue, "send", send_then_crash)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()

    # When a message is answered
    gateway.send("hello", "ev-1")
    executions = gateway.settle(1)

    # Then the execution went through Fail, which queued the same reply again (not an apology),
    # and the delivery function sends it once
    assert crashed and executions[0]["status"] == "FAILED"
    jobs = gateway.jobs()
    bodies = [json.loads(m["Body"]) for m in jobs]
    assert {b["delivery_id"] for b in bodies} == {crashed[0]}
    assert APOLOGY not in [b["text"] for b in bodies]
    delivery = load_handler_module(function("delivery")).lambda_handler
    for job in jobs:
        delivery(pollers.sqs_event([job], "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1"), _context("delivery"))
    assert [m["text"] for m in fake_telegram.sent] == ["re: hello"]
    assert gateway.transcript() == [("user", "hello"), ("assistant", "re: hello")]


def test_provider_failures_are_retried_then_apologized_for_once(gateway: Gateway) -> None:
    # Given a model that keeps failing with a transient error
    gateway.model.answer = lambda messages, tools: TransientError("503 from the model")

    gateway.send("hello", "ev-1")
    executions = gateway.settle(1)

    # Then CallModel was tried three times (Retry), and the user got one apology
    assert executions[0]["status"] == "FAILED"
    assert len(gateway.model.calls) == 3
    texts = [json.loads(m["Body"])["text"] for m in gateway.jobs()]
    assert texts == [APOLOGY]
    # And the message stays for /retry, the session is free
    assert gateway.transcript() == [("user", "hello")]
    route = wiring.session_store().get_route(KEY)
    assert route is not None and route.lease_token is None


def test_a_transient_failure_that_clears_on_retry_answers_normally(gateway: Gateway) -> None:
    failures = [TransientError("429")]
    gateway.model.answer = lambda messages, tools: failures.pop() if failures else echo(messages, tools)

    gateway.send("hello", "ev-1")

    assert [e["status"] for e in gateway.settle(1)] == ["SUCCEEDED"]
    assert [json.loads(m["Body"])["text"] for m in gateway.jobs()] == ["re: hello"]


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
    asked = [json.loads(m["Body"]) for m in approvals.jobs()]
    assert len(asked) == 1 and "/approve" in asked[0]["text"]
    assert wiring.turn_control().state(KEY).approval is not None

    # When the user approves
    answer = approvals.send("yes", "ev-2")
    executions = approvals.settle(2)

    # Then the continuation ran the tool and answered
    assert answer.status == "command"
    assert executions[1]["name"].endswith("-a1") and executions[1]["status"] == "SUCCEEDED"
    texts = [json.loads(m["Body"])["text"] for m in approvals.jobs()]
    assert any(t.startswith("Approved") for t in texts)
    assert any(t.startswith("tool said:") and "error" not in t for t in texts)
    assert [m for m in approvals.jobs() if json.loads(m["Body"]).get("kind") == "push"] == []
    route = wiring.session_store().get_route(KEY)
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
    texts = [json.loads(m["Body"])["text"] for m in gateway.jobs()]
    assert texts == ["Stopping the current turn."]
    assert len(gateway.model.calls) == 1
    route = wiring.session_store().get_route(KEY)
    assert route is not None and route.lease_token is None
