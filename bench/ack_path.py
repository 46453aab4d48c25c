"""The ack path and the hops: what a platform waits for, and how many AWS calls stand between a
webhook and the platform send request.

1. Ack path: the ingress handler in-process on moto (mock_aws, no network), invoked with API
   Gateway's payload 2.0 event as tests/integration/test_handlers.py does. N new updates (and a
   duplicate every tenth): the time per request (p50, p99) and the AWS calls made before the 200,
   counted by wrapping botocore's `_make_api_call`. Every socket connect is counted too: the ack
   must never reach a platform (nor anything else). moto answers in microseconds, so in AWS each
   of these calls adds its own round trip (a few milliseconds) to the times measured here.
2. Hops: one message traced through local mode (echo provider, a stub Telegram as the platform):
   the ordered (function, service, operation) of every AWS call the functions make, and from it
   the calls on the path from webhook receipt to the platform send request. A stage's calls count
   up to the one that hands the message on, found from how the next stage was invoked (a write to
   the queue or table its event source reads, a StartExecution, a Lambda Invoke) and, when none
   did (a workflow's next task starts when this one returns), up to the next stage's start; in the
   last stage, up to the platform request. What a stage does after its hand-off (the idempotency
   record's completion), work it hands to a thread of its own (lifecycle events) and the turn's
   Commit run beside the path and are not counted. The model request is not an AWS call; the
   hand-offs themselves (Lambda's pollers, Step Functions' task invokes) are listed apart. Nothing
   here names a queue or table: the same rule follows a path without SQS.

Usage: .venv/bin/python bench/ack_path.py [--requests N] [--no-hops]
Writes bench/results/ack-path-latest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    RESULTS,
    SECRET,
    Session,
    Step,
    counted_logs,
    local_gateway,
    post_update,
    run_session,
    table_specs,
    telegram_update,
)
from bench.meter import ESM_TRIGGERS, Meter  # noqa: E402

OFF_PATH_STEPS = {"finish", "fail"}  # turn tasks after Deliver: they run after the platform send


@contextmanager
def counted_connects() -> Iterator[list[Any]]:
    """Every socket connect made inside, by anyone in this process (the address is kept)."""
    original = socket.socket.connect
    seen: list[Any] = []

    def connect(sock: socket.socket, address: Any) -> None:
        seen.append(address)
        original(sock, address)

    socket.socket.connect = connect  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        socket.socket.connect = original  # type: ignore[method-assign]


@contextmanager
def ingress_on_moto() -> Iterator[Any]:
    """The ingress handler with every table and queue of the deployment in moto (mock_aws)."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # before the logger is first imported
    from moto import mock_aws

    from hermes_gateway import wiring
    from hermes_gateway.resources import function
    from hermes_local.aws import configure_moto, create_resources
    from hermes_local.runtime import load_handler_module

    saved = dict(os.environ)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        AWS_REGION="us-east-1", POWERTOOLS_METRICS_DISABLED="true", TELEGRAM_WEBHOOK_SECRET=SECRET,
    )  # fmt: skip
    for name in ("AWS_ENDPOINT_URL", "MOTO_PORT", "HERMES_SECRETS_PREFIX", "HERMES_LOCAL_MODE"):
        os.environ.pop(name, None)
    configure_moto()
    try:
        with mock_aws():
            _, env = create_resources("us-east-1", prefix=f"ack-{os.getpid()}")
            os.environ.update(env)
            wiring.reset()
            yield load_handler_module(function("ingress")).lambda_handler
    finally:
        os.environ.clear()
        os.environ.update(saved)
        wiring.reset()


def webhook_event(update: dict[str, Any]) -> dict[str, Any]:
    from hermes_local.http_front import api_gateway_v2_event

    headers = [("Content-Type", "application/json"), ("X-Telegram-Bot-Api-Secret-Token", SECRET)]
    return api_gateway_v2_event("POST", "/webhooks/telegram", headers, json.dumps(update).encode(), "203.0.113.9")


def ack(requests: int = 500) -> dict[str, Any]:
    """Time the ingress handler over `requests` new updates (plus a duplicate of every tenth)."""
    session = Session("dm", 99, 42)
    meter = Meter(trace=True, units=False)
    new_times: list[float] = []
    duplicate_times: list[float] = []
    calls_new: Counter[int] = Counter()
    calls_duplicate: Counter[int] = Counter()
    operations: Counter[tuple[str, str, str]] = Counter()
    statuses: Counter[int] = Counter()
    with ingress_on_moto() as handler:
        from hermes_local.runtime import LambdaContext

        meter.install()
        try:
            # Logs at INFO and metrics on, as deployed: formatting them is part of the ack's work.
            with counted_connects() as connects, counted_logs():
                context = LambdaContext("ingress", 512, "arn:aws:lambda:us-east-1:123456789012:function:ingress")
                handler(webhook_event(telegram_update(1, "warm up", session)), context)  # imports, clients
                meter.reset()
                for n in range(requests):
                    update = telegram_update(1000 + n, f"message {n}", session)
                    kinds = [("new", update)] + ([("duplicate", update)] if n % 10 == 0 else [])
                    for kind, body in kinds:
                        event = webhook_event(body)
                        context.deadline = time.time() + 10
                        with meter.within("ingress") as invocation:
                            started = time.perf_counter()
                            response = handler(event, context)
                            elapsed = time.perf_counter() - started
                        statuses[int(response["statusCode"])] += 1
                        made = [e for e in meter.events if e["invocation"] == invocation and e["service"] != "external"]
                        (new_times if kind == "new" else duplicate_times).append(elapsed)
                        (calls_new if kind == "new" else calls_duplicate)[len(made)] += 1
                        if kind == "new":
                            operations.update((e["service"], e["operation"], e["resource"]) for e in made)
                    meter.events.clear()
        finally:
            meter.uninstall()
    return {
        "ack_requests": requests,
        "ack_p50_ms": round(statistics.median(new_times) * 1000, 2),
        "ack_p99_ms": round(_percentile(new_times, 99) * 1000, 2),
        "ack_duplicate_p50_ms": round(statistics.median(duplicate_times) * 1000, 2),
        "ack_aws_calls": max(calls_new),
        "ack_aws_calls_histogram": {str(k): v for k, v in sorted(calls_new.items())},
        "ack_aws_calls_duplicate": max(calls_duplicate),
        "ack_aws_operations_per_request": {
            f"{service}.{operation} ({resource})": round(count / requests, 3)
            for (service, operation, resource), count in operations.most_common()
        },
        "ack_statuses": {str(k): v for k, v in sorted(statuses.items())},
        "ack_network_connections": len(connects),
    }


def trace_hops() -> dict[str, Any]:
    """Trace one message of an existing session, and the first message of a new one, end to end."""
    meter = Meter(trace=True)
    meter.install()
    try:
        with local_gateway() as (gateway, platform):
            meter.table_specs = table_specs()
            warm = Session("dm", 7, 7)
            run_session(gateway.url, platform, warm, [Step(telegram_update(1, "warm up", warm), False, False)], 0)
            time.sleep(1.0)
            session = Session("dm", 77, 77)
            traced = {}
            for n, label in ((1, "new_session"), (2, "existing_session")):
                meter.reset()
                if post_update(gateway.url, telegram_update(100 + n, f"hello {n}", session)) != 200:
                    raise RuntimeError("the webhook was refused")
                sent_at = platform.wait(*session.key, count=n, timeout=60)[n - 1][0]
                meter.wait_idle()  # the turn's Commit and the idempotency record's completion
                traced[label] = _path(list(meter.events), list(meter.invocations), sent_at)
    finally:
        meter.uninstall()
    main, new = traced["existing_session"], traced["new_session"]
    return {
        "hops": len(main["hops"]),
        "hops_list": main["hops"],
        "hops_path_with_handoffs": main["path"],
        "hops_new_session": len(new["hops"]),
        "hops_new_session_list": new["hops"],
        "message_aws_calls": main["all_calls"],
        "message_aws_calls_list": main["calls"],
    }


def _path(events: list[dict[str, Any]], invocations: list[Any], sent_at: float) -> dict[str, Any]:
    """The calls on the path to the platform send, in order, and the hand-offs between stages."""
    aws = sorted((e for e in events if e["service"] != "external"), key=lambda e: e["t"])
    calls = [f"{_label(i)}: {_call(e)}" for i in sorted(invocations, key=lambda i: i.started) for e in aws
             if e["invocation"] == i.id]  # fmt: skip
    stages = [
        i for i in sorted(invocations, key=lambda i: i.started) if i.started < sent_at and i.step not in OFF_PATH_STEPS
    ]
    hops: list[str] = []
    path: list[str] = []
    for n, invocation in enumerate(stages):
        following = stages[n + 1] if n + 1 < len(stages) else None
        path.append(_handoff(invocation))
        mine = [e for e in aws if e["invocation"] == invocation.id and not e["background"] and e["t"] < sent_at]
        for event in on_path(mine, following):
            hop = f"{_label(invocation)}: {_call(event)}"
            hops.append(hop)
            path.append(hop)
        if "model" in invocation.step:
            path.append("(the model request: not an AWS call)")
    path.append("(the platform's send request)")
    return {"hops": hops, "path": path, "calls": calls, "all_calls": len(calls)}


def on_path(calls: list[dict[str, Any]], following: Any) -> list[dict[str, Any]]:
    """A stage's calls up to the one that hands the message to the next stage: a write to the queue
    or table whose event source invokes it, its StartExecution, its Lambda Invoke. When no call of
    the stage did (the workflow runs its next task when this one returns), the calls made before
    the next stage began. The last stage's calls all count (they are cut at the platform send)."""
    if following is None:
        return calls
    for n, call in enumerate(calls):
        if hands_on(call, following):
            return calls[: n + 1]
    return [c for c in calls if c["t"] < following.started]


def hands_on(call: dict[str, Any], following: Any) -> bool:
    service, operation, resource = call["service"], call["operation"], call["resource"]
    if following.trigger in ESM_TRIGGERS:
        return resource == following.source and operation.startswith(WRITES)
    if following.trigger == "stepfunctions":
        return (service, operation) == ("stepfunctions", "StartExecution")
    return (service, operation, resource) == ("lambda", "Invoke", following.function)


WRITES = ("Send", "Put", "Update", "TransactWrite", "BatchWrite")


def _call(event: dict[str, Any]) -> str:
    return f"{event['service']}.{event['operation']} {event['resource']}".rstrip()


def _label(invocation: Any) -> str:
    return invocation.function + (f" ({invocation.step})" if invocation.step else "")


def _handoff(invocation: Any) -> str:
    """What invoked a stage, read from its trigger."""
    name = invocation.function
    return {
        "api": f"(API Gateway invokes {name})",
        "sqs": f"(Lambda's SQS poller: sqs.ReceiveMessage {invocation.source}, invokes {name})",
        "stream": f"(Lambda's stream poller: the {invocation.source} stream, invokes {name})",
        "stepfunctions": f"(Step Functions invokes {name}: {invocation.step})",
        "schedule": f"(EventBridge Scheduler invokes {name})",
    }.get(invocation.trigger, f"(invoked: {name})")


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-len(ordered) * pct // 100) - 1))]


def run(requests: int = 500, hops: bool = True) -> dict[str, Any]:
    report: dict[str, Any] = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    report.update(ack(requests))
    if hops:
        report.update(trace_hops())
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--no-hops", action="store_true", help="only the ack path (no local mode)")
    args = parser.parse_args()
    report = run(args.requests, hops=not args.no_hops)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "ack-path-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(
        f"ack: p50 {report['ack_p50_ms']} ms, p99 {report['ack_p99_ms']} ms, {report['ack_aws_calls']} AWS calls "
        f"({report['ack_aws_calls_duplicate']} for a duplicate), {report['ack_network_connections']} connections"
    )
    if "hops" in report:
        print(f"hops: {report['hops']} (new session: {report['hops_new_session']})")
        for line in report["hops_path_with_handoffs"]:
            print(f"  {line}")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
