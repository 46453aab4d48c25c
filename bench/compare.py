"""Compare two bench result files: every numeric key's old → new value and its relative change,
with regressions flagged (more cost, more time, more calls or hops, less throughput).

Nested objects are compared key by key (`cost_by_service.dynamodb`); lists and text are skipped.
A change counts as a regression when it goes the wrong way by more than the tolerance (5% by
default, relative). Throughput (`…per_second`) is better higher; run sizes, seeds and outcomes a
seed decides (`messages_tested`, `seed`, `jobs_sent`, …) are shown but never flagged; everything
else (cost, time, calls, hops, import ratio, duplicated, lost) is better lower.
Always exits 0: the comparison informs a review, it does not gate it.

Usage: .venv/bin/python bench/compare.py OLD.json NEW.json [--tolerance 0.05] [--all]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HIGHER_IS_BETTER = ("per_second",)  # a key part ending so: throughput
# Key parts that describe the run, or outcomes a fixed seed decides, rather than its quality.
NEUTRAL = frozenset(
    {
        "messages_tested", "sessions", "seed", "runs_per_median", "cpus", "messages", "ack_requests",
        "webhook_requests", "platform_retries", "gateway_commands", "client_concurrency", "think_seconds",
        "dm_group_topic_sessions", "jobs", "jobs_sent", "jobs_dead_lettered", "gone", "unknown",
        "faults_injected", "chunks_recorded", "chunks_sent", "send_requests", "retried", "dead_lettered",
        "handler_invocations", "ack_statuses", "ack_aws_calls_histogram",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    key: str
    old: float | None
    new: float | None
    change: float | None  # relative: (new - old) / |old|; None when it cannot be computed
    verdict: str  # regression | better | same | changed | added | removed


def flatten(data: Any, prefix: str = "") -> dict[str, float]:
    """Every number in nested objects, under dotted keys (booleans, text and lists are left out)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(data, int | float) and not isinstance(data, bool) and math.isfinite(data):
        out[prefix] = float(data)
    return out


def direction(key: str) -> int:
    """+1 when higher is better, -1 when lower is better, 0 when neither (run sizes, seeds)."""
    parts = key.split(".")
    if any(part in NEUTRAL for part in parts):
        return 0
    if any(part.endswith(HIGHER_IS_BETTER) for part in parts):
        return 1
    return -1


def compare(old: dict[str, Any], new: dict[str, Any], tolerance: float = 0.05) -> list[Row]:
    before, after = flatten(old), flatten(new)
    rows = []
    for key in sorted(before.keys() | after.keys()):
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            rows.append(Row(key, a, b, None, "added" if a is None else "removed"))
            continue
        change = (b - a) / abs(a) if a else (0.0 if b == a else None)
        rows.append(Row(key, a, b, change, _verdict(key, a, b, change, tolerance)))
    return rows


def _verdict(key: str, old: float, new: float, change: float | None, tolerance: float) -> str:
    if old == new:
        return "same"
    sense = direction(key)
    if sense == 0:
        return "changed"
    worse = (new - old) * sense < 0
    beyond = change is None or abs(change) > tolerance
    if not beyond:
        return "same"
    return "regression" if worse else "better"


def render(rows: list[Row], show_all: bool = False) -> str:
    shown = [r for r in rows if show_all or r.verdict != "same"]
    if not shown:
        return "no numeric change beyond the tolerance"
    width = max(len(r.key) for r in shown)
    lines = []
    for row in shown:
        flag = {"regression": "  REGRESSION", "better": "  better"}.get(row.verdict, "")
        if row.verdict in ("added", "removed"):
            lines.append(f"{row.key:<{width}}  {_number(row.old):>12} → {_number(row.new):<12}  ({row.verdict})")
            continue
        lines.append(
            f"{row.key:<{width}}  {_number(row.old):>12} → {_number(row.new):<12}  {_percent(row.change)}{flag}"
        )
    regressions = sum(1 for r in rows if r.verdict == "regression")
    lines.append(f"{regressions} regression(s), {sum(1 for r in rows if r.verdict == 'better')} improvement(s)")
    return "\n".join(lines)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}"


def _percent(change: float | None) -> str:
    return "    n/a" if change is None else f"{change * 100:+7.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.05, help="relative change ignored (default 0.05)")
    parser.add_argument("--all", action="store_true", help="also list the keys that did not change")
    args = parser.parse_args(argv)
    old = json.loads(args.old.read_text(encoding="utf-8"))
    new = json.loads(args.new.read_text(encoding="utf-8"))
    print(f"{args.old} → {args.new}")
    print(render(compare(old, new, args.tolerance), show_all=args.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
