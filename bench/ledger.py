"""The ledger of one message: every AWS request, in order, with its units and its price, for a
message in an existing DM session with a 1 KB reply from the echo model; then what is billed
beside the requests (Lambda time, the event source pollers, Step Functions time, logs, X-Ray,
API Gateway). Printed as markdown, priced by bench/pricing.py (the same model as the headline).

Local mode in-process, a stub Telegram as the platform. The session's first message runs first
(it creates the session), then the traced one; each runs alone, so the Lambda figures are the
message's own.

Usage: .venv/bin/python bench/ledger.py [--reply-bytes 1024] [--write docs/cost.md --label before]
With --write, the ledger replaces the `### <label>` part of the file's `## One message` section
(created when missing), so a ledger taken after a change can be added beside the earlier one.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    Session,
    local_gateway,
    post_update,
    table_specs,
    telegram_update,
)
from bench.meter import Invocation, Meter, counted_logs  # noqa: E402
from bench.pricing import (  # noqa: E402
    ESM_REQUESTS_PER_RECORD,
    EXPRESS_MEMORY_GB,
    PRICES,
    billed,
    memory_mb,
    price,
    profile,
)

SECTION = "## One message"


def trace(reply_bytes: int) -> tuple[Meter, int, int]:
    """One message in an existing DM session, traced; the meter, its log bytes and custom metrics."""
    meter = Meter(trace=True, reply_bytes=lambda _text: reply_bytes)
    meter.install()
    try:
        with local_gateway() as (gateway, platform):
            meter.table_specs = table_specs()
            session = Session("dm", 4_242, 4_242)
            for n in (1, 2):  # the first creates the session (and warms the clients); the second is traced
                meter.wait_idle()
                meter.reset()
                with counted_logs() as logs:
                    if post_update(gateway.url, telegram_update(800_000 + n, f"hello {n}, how much?", session)) != 200:
                        raise RuntimeError("the webhook was refused")
                    platform.wait(*session.key, count=n, timeout=60)
                    meter.wait_idle()
    finally:
        meter.uninstall()
    return meter, logs.bytes, len(logs.metrics)


def request_price(event: dict[str, Any], fifo: set[str]) -> tuple[str, float]:
    """(units, USD per million messages) of one request; 0 where its cost is billed elsewhere."""
    per = PRICES["per_request"]
    service = event["service"]
    if service == "dynamodb":
        rru, wru = event["read_units"], event["write_units"]
        text = " + ".join(x for x in (f"{rru:g} RRU" if rru else "", f"{wru:g} WRU" if wru else "") if x)
        return text, (rru * per["dynamodb_read_request_unit"] + wru * per["dynamodb_write_request_unit"]) * 1e6
    if service == "sqs":
        key = "sqs_fifo_request" if event["resource"] in fifo else "sqs_request"
        return f"{event['chunks']} request", event["chunks"] * per[key] * 1e6
    if service == "events":
        return f"{event['chunks']} event", event["chunks"] * per["eventbridge_custom_event"] * 1e6
    if (service, event["operation"]) == ("stepfunctions", "StartExecution"):
        return "1 execution", per["stepfunctions_express_request"] * 1e6
    if service == "external":
        return "not AWS (its wait is in the Lambda time)", 0.0
    return "", 0.0  # a Lambda Invoke (the invocation is billed below), SSM standard parameters


def _label(invocation: Invocation | None) -> str:
    if invocation is None:
        return "?"
    return invocation.function + (f" ({invocation.step})" if invocation.step else "")


def ledger(meter: Meter, log_bytes: int, custom_metrics: int, reply_bytes: int) -> str:
    by_id = {i.id: i for i in meter.invocations}
    priced = price(meter, 1, 1, log_bytes, custom_metrics, profile(meter.invocations))
    via_url = price(meter, 1, 1, log_bytes, custom_metrics, profile(meter.invocations), endpoint="function_url")
    lines = [
        "| # | function | request | units | USD per million messages |",
        "|---:|---|---|---|---:|",
    ]
    events = sorted(meter.events, key=lambda e: e["t"])
    for n, event in enumerate(events, start=1):
        units, usd = request_price(event, meter.fifo_queues)
        what = f"{event['service']}.{event['operation']} {event['resource']}".rstrip()
        if event["background"]:
            what += " (on its own thread)"
        if event["service"] == "external":
            what = "the platform's send request"
        lines.append(f"| {n} | {_label(by_id.get(event['invocation']))} | {what} | {units} | {usd:.3f} |")
    lines += ["", "Billed beside the requests:", "", "| item | quantity | USD per million messages |", "|---|---|---:|"]
    lines += _beside(meter, priced)
    lines += [
        f"| **total** | {sum(1 for e in events if e['service'] != 'external')} AWS requests | "
        f"**{priced['cost_per_million_usd']:.2f}** |",
        "",
        "By service: " + ", ".join(f"{k} {v:.2f}" for k, v in priced["cost_by_service"].items() if v) + ".",
        "",
        f"With `ingress.endpoint: function_url` (the platforms post to the ingress function's URL: no API "
        f"Gateway request, no access line): **{via_url['cost_per_million_usd']:.2f}**.",
    ]
    return "\n".join(lines)


def _beside(meter: Meter, priced: dict[str, Any]) -> list[str]:
    per = PRICES["per_request"]
    memory = memory_mb()
    rows = []
    if priced["webhook_endpoint"] == "http_api":
        rows.append(f"| API Gateway: the webhook request | 1 | {per['apigateway_http_request'] * 1e6:.3f} |")
    for invocation in sorted(meter.invocations, key=lambda i: i.started):
        cost = billed(invocation, memory[invocation.function])
        gb_s = cost.model_ms / 1000 * memory[invocation.function] / 1024
        usd = (per["lambda_request"] + gb_s * per["lambda_gb_second_arm"]) * 1e6
        rows.append(
            f"| Lambda: {_label(invocation)} | {cost.model_ms:.0f} ms at {memory[invocation.function]} MB "
            f"({cost.cpu_ms:.1f} ms CPU, {cost.round_trip_ms:.0f} ms of round trips; {cost.wall_ms:.0f} ms "
            f"elapsed here) | {usd:.3f} |"
        )
        if invocation.trigger == "sqs":
            key = "sqs_fifo_request" if invocation.source in meter.fifo_queues else "sqs_request"
            rows.append(
                f"| Lambda's SQS poller: receive and delete ({invocation.source}) | {ESM_REQUESTS_PER_RECORD} requests "
                f"| {ESM_REQUESTS_PER_RECORD * per[key] * 1e6:.3f} |"
            )
    express = priced["per_message"]["express_billed_seconds_modelled"] * priced["per_message"]["express_executions"]
    rows.append(
        f"| Step Functions Express: duration | {express:.1f} s at 64 MB | "
        f"{express * EXPRESS_MEMORY_GB * per['stepfunctions_express_gb_second'] * 1e6:.3f} |"
    )
    rows.append(
        f"| CloudWatch Logs | {priced['per_message']['log_bytes'] / 1000:.1f} KB | "
        f"{priced['cost_by_service']['cloudwatch_logs']:.3f} |"
    )
    roots, share = priced["per_message"]["xray_trace_roots"], priced["per_message"]["xray_traced_share"]
    rows.append(
        f"| X-Ray: traces recorded | {roots:g} traces x {share:.0%} sampled | {priced['cost_by_service']['xray']:.3f} |"
    )
    return rows


def render(body: str, reply_bytes: int, label: str) -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return (
        f"### {label}\n\n"
        f"`bench/ledger.py` at commit {commit.stdout.strip() or '?'}, {time.strftime('%Y-%m-%d')}: a message in an "
        f"existing DM session, the echo model answering {reply_bytes} bytes, in the order the requests were made "
        "(prices of `bench/prices.json`, the model of `bench/pricing.py`: Lambda time is CPU time at the "
        "memory size's CPU share plus a round trip per call, an event source's batch holds one message).\n\n"
        f"{body}\n"
    )


def write(path: Path, part: str, label: str) -> None:
    """Put `part` (a `### label` block) into the file's `## One message` section."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# What it costs\n"
    if SECTION not in text:
        text = text.rstrip("\n") + f"\n\n{SECTION}\n\n"
    head, _, rest = text.partition(SECTION)
    following = re.search(r"^## ", rest, flags=re.MULTILINE)
    section, tail = (rest[: following.start()], rest[following.start() :]) if following else (rest, "")
    block = re.compile(rf"^### {re.escape(label)}\n.*?(?=^### |\Z)", flags=re.MULTILINE | re.DOTALL)
    section = block.sub(lambda _m: part + "\n", section) if block.search(section) else section.rstrip("\n") + (
        "\n\n" + part + "\n"
    )  # fmt: skip
    path.write_text(head + SECTION + section.rstrip("\n") + "\n" + ("\n" + tail if tail else ""), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reply-bytes", type=int, default=1024)
    parser.add_argument("--write", type=Path, help="put the ledger into this markdown file")
    parser.add_argument("--label", default="current", help="the ### heading of this ledger (before, after, ...)")
    args = parser.parse_args()
    meter, log_bytes, metrics = trace(args.reply_bytes)
    part = render(ledger(meter, log_bytes, metrics, args.reply_bytes), args.reply_bytes, args.label)
    if args.write:
        write(args.write, part, args.label)
        print(f"written to {args.write} (### {args.label})")
    else:
        print(part)


if __name__ == "__main__":
    main()
