"""`hermes-gateway logs tail|trace` on moto's CloudWatch Logs: the log groups come from the stack's
outputs, the lines are written by a real Powertools Logger inside `inject_lambda_context`.

Moto stores and returns the events and runs StartQuery/GetQueryResults, but applies neither JSON
filter patterns nor Logs Insights `filter` commands (it returns every event): the exact filtering
seen here is the CLI's own check, and the pattern and query it sends are asserted separately."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger

from hermes_cli import logs, main
from hermes_gateway.observability import hash_id
from hermes_gateway.outputs import log_group_output_key, stack_name
from hermes_gateway.resources import FUNCTIONS
from hermes_local.runtime import LambdaContext

pytestmark = pytest.mark.integration

A_EVENT, A_SESSION = "telegram:default:1001", "agent:main:telegram:dm:42"
B_EVENT, B_SESSION = "slack:T1:Ev2", "agent:main:slack:dm:U7"
STREAM = "2026/11/29/[$LATEST]0f5e3c1a7d9e4a559d612b8c0c3c5a11"

_buffer = io.StringIO()
_writer = Logger(service="hermes-gateway-logs-test", stream=_buffer)


def group(function: str) -> str:
    return f"/aws/lambda/HermesGateway-qa-{function.capitalize()}Function-AbC123"


def powertools_lines(
    function: str, event_id: str, session_key: str, *messages: tuple[str, dict[str, Any]]
) -> list[str]:
    """What the function's handler logs for one event: Powertools JSON with the Lambda context."""
    name = group(function).rsplit("/", 1)[-1]
    context = LambdaContext(name, 512, f"arn:aws:lambda:us-east-1:123456789012:function:{name}")

    @_writer.inject_lambda_context(clear_state=True)
    def handler(event: Any, context: Any) -> None:
        _writer.append_keys(service="hermes-gateway", correlation_id=event_id, session=hash_id(session_key))
        for message, extra in messages:
            _writer.info(message, extra=extra)

    _buffer.seek(0)
    _buffer.truncate()
    handler({}, context)
    return _buffer.getvalue().splitlines()


def put(function: str, timestamp: int, *lines: str) -> None:
    events = [{"timestamp": timestamp + i, "message": line + "\n"} for i, line in enumerate(lines)]
    boto3.client("logs").put_log_events(logGroupName=group(function), logStreamName=STREAM, logEvents=events)


@pytest.fixture
def deployed(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """A stack `HermesGateway-qa` whose outputs name each function's log group, with two messages logged.

    Yields the requests the CLI sends to CloudWatch Logs (operation name, parameters)."""
    monkeypatch.setenv("GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    monkeypatch.setenv("GATEWAY_STAGE", "qa")
    template = {
        "Resources": {
            f"{spec.name.capitalize()}Logs": {
                "Type": "AWS::Logs::LogGroup",
                "Properties": {"LogGroupName": group(spec.name)},
            }
            for spec in FUNCTIONS
        },
        "Outputs": {
            log_group_output_key(spec.name): {"Value": {"Ref": f"{spec.name.capitalize()}Logs"}} for spec in FUNCTIONS
        },
    }
    boto3.client("cloudformation").create_stack(StackName=stack_name("qa"), TemplateBody=json.dumps(template))
    client = boto3.client("logs")
    for spec in FUNCTIONS:
        client.create_log_stream(logGroupName=group(spec.name), logStreamName=STREAM)

    now = int(time.time() * 1000)
    put(
        "router",
        now - 2 * 3600 * 1000,
        *powertools_lines("router", "telegram:default:900", A_SESSION, ("old turn", {})),
    )
    start = now - 60_000
    put(
        "ingress",
        start,
        *powertools_lines("ingress", A_EVENT, A_SESSION, ("webhook accepted", {"platform": "telegram"})),
    )
    put(
        "ingress",
        start + 50,
        *powertools_lines("ingress", B_EVENT, B_SESSION, ("webhook accepted", {"platform": "slack"})),
    )
    put(
        "router",
        start + 100,
        "START RequestId: 0f5e3c1a Version: $LATEST",
        *powertools_lines("router", A_EVENT, A_SESSION, ("turn started", {"turn_id": "turn-1"})),
        *powertools_lines("router", B_EVENT, B_SESSION, ("not authorized", {"platform": "slack"})),
        "END RequestId: 0f5e3c1a",
        "REPORT RequestId: 0f5e3c1a\tDuration: 41.20 ms\tBilled Duration: 42 ms\tMemory Size: 512 MB\t"
        "Max Memory Used: 96 MB\tInit Duration: 512.33 ms\t",
    )
    put("agent", start + 300, *powertools_lines("agent", A_EVENT, A_SESSION, ("model answered", {"turn_id": "turn-1"})))
    put(
        "delivery",
        start + 900,
        *powertools_lines("delivery", A_EVENT, A_SESSION, ("chunk sent", {"platform_message_id": "77"})),
    )

    requests: list[tuple[str, dict[str, Any]]] = []

    def recording_client() -> Any:
        logs_client = boto3.client("logs")

        def record(params: dict[str, Any], model: Any, **_: Any) -> None:
            requests.append((model.name, dict(params)))

        logs_client.meta.events.register("provide-client-params.logs.*", record)
        return logs_client

    monkeypatch.setattr(logs, "_logs_client", recording_client)
    yield requests


def rows(out: str) -> list[tuple[str, str, str]]:
    """(function, level, message) of each terminal row."""
    found = []
    for line in out.splitlines():
        _, function, level, rest = line.split(None, 3)
        found.append((function, level, rest.split("  ", 1)[0]))
    return found


def test_tail_interleaves_every_function_by_time_without_the_noise(
    deployed: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["logs", "tail", "--utc"]) == 0
    out = capsys.readouterr().out
    assert rows(out) == [
        ("ingress", "INFO", "webhook accepted"),
        ("ingress", "INFO", "webhook accepted"),
        ("router", "INFO", "turn started"),
        ("router", "INFO", "not authorized"),
        ("router", "-", "REPORT 41.2 ms, 96/512 MB, init 512.33 ms"),
        ("agent", "INFO", "model answered"),
        ("delivery", "INFO", "chunk sent"),
    ]
    assert f"correlation_id={A_EVENT} session={hash_id(A_SESSION)}" in out
    for noise in ("function_arn", "cold_start", "xray_trace_id", "function_request_id", "old turn", "START"):
        assert noise not in out


def test_tail_one_function(deployed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "tail", "--function", "router"]) == 0
    assert {function for function, _, _ in rows(capsys.readouterr().out)} == {"router"}
    assert [p["logGroupName"] for name, p in deployed if name == "FilterLogEvents"] == [group("router")]


def test_tail_one_session_by_its_raw_key(deployed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "tail", "--session", A_SESSION]) == 0
    assert rows(capsys.readouterr().out) == [
        ("ingress", "INFO", "webhook accepted"),
        ("router", "INFO", "turn started"),
        ("agent", "INFO", "model answered"),
        ("delivery", "INFO", "chunk sent"),
    ]
    sent = [p for name, p in deployed if name == "FilterLogEvents"]
    assert {p["logGroupName"] for p in sent} == {group(spec.name) for spec in FUNCTIONS}
    assert {p["filterPattern"] for p in sent} == {'{ $.session = "' + str(hash_id(A_SESSION)) + '" }'}


def test_tail_one_correlation_as_json(deployed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "tail", "--correlation", B_EVENT, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["@function"], line["message"]) for line in lines] == [
        ("ingress", "webhook accepted"),
        ("router", "not authorized"),
    ]
    assert all(line["correlation_id"] == B_EVENT and line["session"] == hash_id(B_SESSION) for line in lines)
    assert "function_arn" in lines[0]  # as logged: nothing dropped for scripts


def test_since_reaches_further_back(deployed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "tail", "--function", "router", "--since", "3h"]) == 0
    assert rows(capsys.readouterr().out)[0] == ("router", "INFO", "old turn")


def test_follow_prints_new_lines_once_until_ctrl_c(
    deployed: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    polls = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 1:
            later = int(time.time() * 1000)
            put("delivery", later, *powertools_lines("delivery", A_EVENT, A_SESSION, ("chunk sent", {"chunk": 2})))
        if len(polls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(logs, "sleep", sleep)
    assert main(["logs", "tail", "--function", "delivery", "--follow"]) == 0
    assert polls == [2.0, 2.0, 2.0]
    out = capsys.readouterr().out
    assert [message for _, _, message in rows(out)] == ["chunk sent", "chunk sent"]
    assert out.count("chunk=2") == 1


def test_trace_follows_one_message_from_webhook_to_delivery(deployed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "trace", A_EVENT, "--utc"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"trace correlation id {A_EVENT}"
    journey = [line.split()[2:5] for line in out[1:-1]]
    assert journey == [
        ["ingress", "INFO", "webhook"],
        ["router", "INFO", "turn"],
        ["agent", "INFO", "model"],
        ["delivery", "INFO", "chunk"],
    ]
    assert [line.split()[1] for line in out[1:-1]] == ["+0.000s", "+0.101s", "+0.300s", "+0.900s"]
    assert out[-1] == "4 line(s) across ingress → router → agent → delivery in 0.900s"
    (query,) = [p for name, p in deployed if name == "StartQuery"]
    assert set(query["logGroupNames"]) == {group(spec.name) for spec in FUNCTIONS}
    assert f'| filter correlation_id = "{A_EVENT}" |' in query["queryString"]


def test_trace_of_a_session_key_as_json(deployed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "trace", B_SESSION, "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(line["@function"], line["message"]) for line in lines] == [
        ("ingress", "webhook accepted"),
        ("router", "not authorized"),
    ]
    (query,) = [p for name, p in deployed if name == "StartQuery"]
    assert f'filter session = "{hash_id(B_SESSION)}"' in query["queryString"]


def test_a_trace_that_finds_nothing_fails_clearly(deployed: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "trace", "telegram:default:404"]) == 1
    assert "no log lines for correlation id telegram:default:404 since" in capsys.readouterr().err


def test_a_missing_stack_is_a_clear_error(aws: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setenv("GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    assert main(["logs", "tail", "--stage", "nope"]) == 2
    assert "no stack HermesGateway-nope in us-east-1: deploy it" in capsys.readouterr().err


def test_a_stack_without_log_group_outputs_says_to_deploy(
    aws: Any, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}
    boto3.client("cloudformation").create_stack(StackName=stack_name("old"), TemplateBody=json.dumps(template))
    assert main(["logs", "trace", A_EVENT, "--stage", "old"]) == 2
    assert "has no log group outputs (e.g. RouterLogGroupName)" in capsys.readouterr().err
