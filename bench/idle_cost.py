"""Idle cost per month of a deployment with no traffic, read from the synthesized template.

Counts everything billed by the month whatever the traffic (alarms, dashboards, KMS keys, secrets)
and adds what the schedules cost while nothing else happens (the every-minute tick: a Scheduler
invocation, a Lambda run and an index query). Prices come from bench/prices.json (with its date
and source). Free tiers are not subtracted, except the ones that hold for every account.

Usage: .venv/bin/python bench/idle_cost.py   (writes bench/results/idle-cost-latest.json)
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PRICES = json.loads((ROOT / "bench" / "prices.json").read_text(encoding="utf-8"))
MINUTES_PER_MONTH = 30 * 24 * 60
TICK_SECONDS = 0.15  # a tick that finds nothing to do, measured locally; Lambda bills 1 ms steps
LOG_BYTES_PER_TICK = 400  # the START, END and REPORT lines

BILLED_MONTHLY = {
    "AWS::CloudWatch::Alarm": "cloudwatch_alarm_standard",
    "AWS::CloudWatch::Dashboard": "cloudwatch_dashboard",
    "AWS::KMS::Key": "kms_customer_key",
    "AWS::SecretsManager::Secret": "secretsmanager_secret",
}


def idle_cost(resources: dict[str, Any], *, dashboards_already_in_account: int = 3) -> dict[str, Any]:
    counts = Counter(r["Type"] for r in resources.values())
    monthly = PRICES["monthly"]
    lines: dict[str, float] = {}
    for cfn_type, price_key in BILLED_MONTHLY.items():
        count = counts.get(cfn_type, 0)
        if cfn_type == "AWS::CloudWatch::Dashboard":
            # The first three dashboards of an account are free; assume they are taken.
            count = max(0, count - max(0, 3 - dashboards_already_in_account))
        if count:
            lines[f"{cfn_type} x{counts[cfn_type]}"] = round(count * monthly[price_key], 4)
    per = PRICES["per_request"]
    schedules = [r for r in resources.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    for schedule in schedules:
        expression = schedule["Properties"]["ScheduleExpression"]
        runs = MINUTES_PER_MONTH / _minutes(expression)
        memory_gb = 256 / 1024
        lambda_cost = runs * (per["lambda_request"] + per["lambda_gb_second_arm"] * memory_gb * TICK_SECONDS)
        query_cost = runs * per["dynamodb_read_request_unit"]
        logs_cost = runs * LOG_BYTES_PER_TICK / 1e9 * per["cloudwatch_logs_ingested_gb"]
        # Scheduler: the first 14 million invocations a month are free in every account.
        lines[f"schedule {expression}: Lambda, query, logs"] = round(lambda_cost + query_cost + logs_cost, 4)
    total = round(sum(lines.values()), 2)
    return {"idle_cost_per_month_usd": total, "lines": lines, "prices_recorded": PRICES["recorded"]}


def _minutes(expression: str) -> float:
    number, unit = expression.removeprefix("rate(").removesuffix(")").split()
    return float(number) * {"minute": 1, "minutes": 1, "hour": 60, "hours": 60, "day": 1440, "days": 1440}[unit]


def synthesized_resources() -> dict[str, Any]:
    for extra in (ROOT, ROOT / "layers" / "common"):
        sys.path.insert(0, str(extra))
    from aws_cdk.assertions import Template

    from hermes_gateway.settings import load_settings
    from infra.app import SKIP_BUNDLING, build_app

    _app, stack = build_app(load_settings(env={}, config={}), context=SKIP_BUNDLING)
    resources: dict[str, Any] = Template.from_stack(stack).to_json()["Resources"]
    return resources


def main() -> None:
    report = idle_cost(synthesized_resources())
    out = ROOT / "bench" / "results" / "idle-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
