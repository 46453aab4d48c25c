"""Local throughput: messages per second end to end through local mode with the echo provider, at
1, 10 and 100 concurrent sessions.

One local mode is booted in-process (a stub Telegram on loopback receives the replies). At a level
of N, N conversations run at once; each sends a message, waits until the platform has the reply,
then sends the next. A conversation rotates over three sessions of its own, so a session's next
message never arrives while its previous turn is still committing (that would measure the busy
session's one-second retry instead of the pipeline). The clock runs from the first send to the
moment every reply is in the outbox (the table `GET /local/outbox` shows, its rows counted
in-process: a counting scan, so the clock's polling takes little from the gateway it times).
Each level runs three times over fresh sessions (`--repeats`), and the median run is reported.

This measures local mode on this machine: one poller per queue plays Lambda's event sources (the
router handles its batches one after another, where Lambda runs up to 20 at once) and moto plays
AWS, all in one Python process. It is a regression signal, not a forecast of AWS.

Usage: .venv/bin/python bench/throughput.py [--quick] [--repeats 3]
Writes bench/results/throughput-latest.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.message_cost import (  # noqa: E402
    CONNECTION_RETRIES,
    RESULTS,
    Session,
    local_gateway,
    outbox_rows,
    post_update,
    telegram_update,
)

# concurrent sessions -> messages each conversation sends: under a minute per level on 2 cores
DEFAULT_LEVELS = {1: 30, 10: 10, 100: 2}
QUICK_LEVELS = {1: 4, 10: 2, 100: 1}
# Each level is run this often and the median run reported: on this shared 2-core machine one run
# of the 100-session level took 32 to 48 ms of CPU a message with the same code.
REPEATS = 3
ROTATION = 3  # sessions per conversation


def conversation(base_url: str, platform: Any, turns: list[tuple[Session, dict[str, Any]]]) -> list[float]:
    """Send each update, and wait for its reply before the next; the reply latencies."""
    sent: dict[Session, int] = {}
    latencies = []
    for session, update in turns:
        started = time.perf_counter()
        if post_update(base_url, update) != 200:
            raise RuntimeError("the webhook was refused")
        sent[session] = sent.get(session, 0) + 1
        replies = platform.wait(*session.key, count=sent[session], timeout=120)
        latencies.append(replies[sent[session] - 1][0] - started)
    return latencies


def run(levels: dict[int, int] | None = None, repeats: int = REPEATS) -> dict[str, Any]:
    """Each level `repeats` times over fresh sessions; a level's figures are the median run's (by
    messages per second), every run kept in `runs`."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # before the handlers' logger is first imported
    levels = levels or DEFAULT_LEVELS
    results: dict[str, Any] = {}
    update_ids = itertools.count(1_000)
    with local_gateway() as (gateway, platform):
        warm = Session("dm", 1, 1)
        conversation(gateway.url, platform, [(warm, telegram_update(1, "warm up", warm))])
        time.sleep(1.0)
        rows = outbox_rows()
        for level, (concurrent, per_conversation) in enumerate(levels.items(), start=1):
            runs = []
            for run in range(repeats):
                sessions_from = (level * 10 + run) * 1_000_000
                runs.append(
                    measure(gateway.url, platform, concurrent, per_conversation, sessions_from, update_ids, rows)
                )
                rows += runs[-1]["messages"]
            middle = sorted(runs, key=lambda r: r["messages_per_second"])[len(runs) // 2]
            results[str(concurrent)] = {**middle, "runs": runs}
            rates = ", ".join(f"{r['messages_per_second']:.2f}" for r in runs)
            print(
                f"  {concurrent:>3} concurrent sessions: {middle['messages_per_second']:6.2f} messages/s, the median of"
                f" {repeats} ({rates}); {middle['cpu_ms_per_message']:.1f} ms CPU each"
            )
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "repeats": repeats,
        "webhook_connection_retries": dict(CONNECTION_RETRIES),
        "levels": results,
        "local_messages_per_second": {k: v["messages_per_second"] for k, v in results.items()},
    }


def measure(
    base_url: str, platform: Any, concurrent: int, per_conversation: int, first_session: int,
    update_ids: Iterator[int], rows_before: int,
) -> dict[str, Any]:  # fmt: skip
    """One run of a level: `concurrent` conversations of `per_conversation` messages each, over
    sessions numbered from `first_session`; the clock stops when the outbox holds a row for each
    beyond `rows_before`."""
    plans = []
    for n in range(concurrent):
        own = [Session("dm", first_session + n * 10 + k, first_session + n * 10 + k) for k in range(ROTATION)]
        turns = [own[m % ROTATION] for m in range(per_conversation)]
        plans.append([(s, telegram_update(next(update_ids), f"message {m}", s)) for m, s in enumerate(turns)])
    messages = concurrent * per_conversation
    started, cpu_started = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(max_workers=concurrent, thread_name_prefix="client") as pool:
        latencies = [x for f in [pool.submit(conversation, base_url, platform, p) for p in plans] for x in f.result()]
    while outbox_rows() < rows_before + messages:
        if time.perf_counter() - started > 300:
            raise RuntimeError(f"{concurrent} concurrent sessions: replies missing from the outbox")
        time.sleep(0.05)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    time.sleep(1.0)  # the last turns commit before the next run starts
    return {
        "messages": messages,
        "seconds": round(seconds, 2),
        "messages_per_second": round(messages / seconds, 2),
        # the interpreter's CPU (every thread: gateway, embedded AWS, stub, clients) per
        # message: steadier than the rate on a shared machine, whose speed varies
        "cpu_ms_per_message": round(cpu_seconds / messages * 1000, 1),
        "reply_p50_seconds": round(statistics.median(latencies), 3),
        "reply_max_seconds": round(max(latencies), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few messages per level, once (a smoke run)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per level (the median is reported)")
    args = parser.parse_args()
    report = run(QUICK_LEVELS if args.quick else DEFAULT_LEVELS, 1 if args.quick else args.repeats)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "throughput-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if report["webhook_connection_retries"]:
        print(f"webhook posts retried after a dropped connection: {report['webhook_connection_retries']}")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
