"""bench/ack_path.py's hop rule, on traces made up for a path with SQS and for one without (a
table's stream invoking the router, the workflow invoking the delivery): a stage's calls count up
to the one that hands the message on, found from how the next stage was invoked."""

from __future__ import annotations

from typing import Any

from bench.ack_path import _path, on_path
from bench.meter import Invocation


def call(
    t: float, invocation: int, service: str, operation: str, resource: str, background: bool = False
) -> dict[str, Any]:
    return {
        "t": t, "invocation": invocation, "service": service, "operation": operation, "resource": resource,
        "background": background,
    }  # fmt: skip


def stage(n: int, function: str, trigger: str, started: float, step: str = "", source: str = "") -> Invocation:
    return Invocation(n, function, step, trigger, 0.1, 0.01, started, started + 0.1, source=source)


def test_a_stage_ends_at_the_write_to_the_table_whose_stream_invokes_the_next() -> None:
    calls = [call(0.01, 1, "dynamodb", "PutItem", "inbox"), call(0.02, 1, "dynamodb", "UpdateItem", "receipts")]
    router = stage(2, "router", "stream", started=0.5, source="inbox")
    assert [c["operation"] for c in on_path(calls, router)] == ["PutItem"]


def test_a_workflow_task_counts_every_call_before_the_next_task_and_the_last_stage_until_the_send() -> None:
    events = [
        call(0.00, 1, "dynamodb", "PutItem", "inbox"),
        call(0.01, 1, "dynamodb", "UpdateItem", "idempotency"),
        call(0.20, 2, "events", "PutEvents", "events", background=True),
        call(0.21, 2, "dynamodb", "GetItem", "routes"),
        call(0.22, 2, "stepfunctions", "StartExecution", "turn"),
        call(0.23, 2, "dynamodb", "UpdateItem", "messages"),
        call(0.40, 3, "dynamodb", "UpdateItem", "routes"),
        call(0.41, 3, "dynamodb", "Query", "messages"),
        call(0.60, 4, "dynamodb", "PutItem", "outbox"),
        call(0.62, 4, "external", "request", "api.telegram.org"),
        call(0.63, 4, "dynamodb", "UpdateItem", "outbox"),
    ]
    invocations = [
        stage(1, "ingress", "api", 0.0),
        stage(2, "router", "stream", 0.15, source="inbox"),
        stage(3, "agent", "stepfunctions", 0.35, step="call_model"),
        stage(4, "delivery", "invoke", 0.55),
        stage(5, "agent", "stepfunctions", 0.7, step="commit"),
    ]
    found = _path(events, invocations, sent_at=0.62)
    assert found["hops"] == [
        "ingress: dynamodb.PutItem inbox",
        "router: dynamodb.GetItem routes",
        "router: stepfunctions.StartExecution turn",
        "agent (call_model): dynamodb.UpdateItem routes",
        "agent (call_model): dynamodb.Query messages",
        "delivery: dynamodb.PutItem outbox",
    ]
    assert found["path"][0] == "(API Gateway invokes ingress)"
    assert "(Lambda's stream poller: the inbox stream, invokes router)" in found["path"]
    assert found["all_calls"] == 10  # every AWS call, the platform's request not among them
