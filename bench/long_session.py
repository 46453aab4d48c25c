"""One long conversation: a DM session of 200 messages, the echo model answering 1-2 KB, each message
sent once the last one's work is done (nothing else running), every message's requests and units
counted on their own.

Reports the read units of each message's path (every function's reads for it, the turn's Commit
included) and their growth: the 200th message's read units over the 1st's (`read_units_growth`),
so a transcript read that grows with the session shows; the write units and AWS requests beside
them; and what the whole session costs per million messages, priced like bench/message_cost.py
(each message ran alone, so its own invocations are the Lambda profile).

Usage: .venv/bin/python bench/long_session.py [--messages 200] [--reply-bytes 1024-2048]
Writes bench/results/long-session-latest.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    REPLY_BYTES,
    RESULTS,
    Session,
    Step,
    local_gateway,
    parse_bytes,
    post_update,
    reply_size,
    run_session,
    table_specs,
    telegram_update,
)
from bench.meter import Meter, counted_logs  # noqa: E402
from bench.pricing import PRICES, price, profile  # noqa: E402

WORDS = ["please", "check", "why", "the", "deploy", "of", "the", "gateway", "failed", "and", "what", "it", "cost"]


def totals(meter: Meter) -> tuple[float, float, int]:
    return sum(meter.rru.values()), sum(meter.wru.values()), sum(meter.calls.values())


def read_path(meter: Meter) -> dict[str, float]:
    """The traced message's read units by function step, operation and table (`agent (call_model)
    Query messages`), from the meter's trace."""
    steps = {i.id: i.function + (f" ({i.step})" if i.step else "") for i in meter.invocations}
    out: dict[str, float] = {}
    for event in meter.events:
        if event["read_units"]:
            key = f"{steps.get(event['invocation'], '?')} {event['operation']} {event['resource']}"
            out[key] = out.get(key, 0.0) + event["read_units"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def run(messages: int = 200, reply_bytes: tuple[int, int] | None = REPLY_BYTES) -> dict[str, Any]:
    meter = Meter(reply_bytes=reply_size(*reply_bytes) if reply_bytes else None)
    meter.install()
    rows: list[dict[str, float]] = []
    reads: dict[int, dict[str, float]] = {}  # the first and the last message's reads, by where they go
    started = time.perf_counter()
    try:
        with local_gateway() as (gateway, platform):
            meter.table_specs = table_specs()
            warm = Session("dm", 7_100, 7_100)
            run_session(gateway.url, platform, warm, [Step(telegram_update(1, "warm up", warm), False, False)], 0)
            meter.wait_idle()
            meter.reset()
            session = Session("dm", 77_000, 77_000)
            with counted_logs() as logs:
                for n in range(1, messages + 1):
                    traced = n in (1, messages)
                    if traced:  # the first and the last message: where their reads go
                        meter.events.clear()
                        meter.trace = True
                    before = totals(meter)
                    text = f"message {n}: " + " ".join(WORDS[(n + k) % len(WORDS)] for k in range(8))
                    if post_update(gateway.url, telegram_update(700_000 + n, text, session)) != 200:
                        raise RuntimeError("the webhook was refused")
                    platform.wait(*session.key, count=n, timeout=60)
                    meter.wait_idle(quiet=0.2)
                    after = totals(meter)
                    if traced:
                        reads[n] = read_path(meter)
                        meter.trace = False
                    rows.append(
                        {"message": n, "read_units": round(after[0] - before[0], 2),
                         "write_units": round(after[1] - before[1], 2), "aws_requests": after[2] - before[2]}
                    )  # fmt: skip
    finally:
        meter.uninstall()
    solo = profile(meter.invocations)
    priced = price(meter, messages, messages, logs.bytes, len(logs.metrics), solo)
    via_url = price(meter, messages, messages, logs.bytes, len(logs.metrics), solo, endpoint="function_url")
    first, last = rows[0], rows[-1]
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages": messages,
        "reply_bytes": list(reply_bytes) if reply_bytes else "echo",
        "read_units_growth": {
            "at_message": messages,
            "first": first["read_units"],
            "last": last["read_units"],
            "ratio": round(last["read_units"] / first["read_units"], 3) if first["read_units"] else None,
            "write_units_first": first["write_units"],
            "write_units_last": last["write_units"],
            "aws_requests_first": first["aws_requests"],
            "aws_requests_last": last["aws_requests"],
            "reads_first": reads.get(1, {}),
            "reads_last": reads.get(messages, {}),
        },
        "cost_per_million_usd": priced["cost_per_million_usd"],
        "cost_by_service": priced["cost_by_service"],
        "webhook_endpoint": priced["webhook_endpoint"],
        # the same session with the platforms posting to the ingress function's URL
        "cost_per_million_usd_function_url": via_url["cost_per_million_usd"],
        "per_message_mean": priced["per_message"],
        "prices_recorded": PRICES["recorded"],
        "by_message": rows,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--reply-bytes", default="1024-2048", help="the fake model's answer size, or 'echo'")
    args = parser.parse_args()
    report = run(args.messages, parse_bytes(args.reply_bytes))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "long-session-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    growth = report["read_units_growth"]
    print(
        f"{report['messages']} messages in {report['seconds']} s: read units {growth['first']} at the 1st, "
        f"{growth['last']} at message {growth['at_message']} (x{growth['ratio']}); "
        f"{report['cost_per_million_usd']} USD per million messages"
    )
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
