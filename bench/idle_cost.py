"""Idle cost per month of a deployment with no traffic, per observability tier, read from the
synthesized template and from one measured idle tick.

What bills while nothing happens, and how it is counted:
- By the month, from the template: alarms (per alarm metric: a math expression over N metrics is
  billed N), dashboards (beyond an account's first three, assumed taken), customer-managed KMS
  keys, Secrets Manager secrets, SNS topics (free; an e-mail is billed only when sent).
- Lambda's pollers: an SQS event source mapping long-polls its queue all the time (about 15 empty
  ReceiveMessage requests a minute, at the FIFO or standard request price); a DynamoDB stream's
  polling by Lambda is free.
- Custom metrics: a metric is billed for every hour it receives a data point, so a metric the tick
  emits every minute costs its whole monthly price. Counted: the metrics the measured tick emits
  (even a 0) and every log metric filter with a default value (it writes one whenever the log
  group receives a line).
- Each schedule: EventBridge Scheduler's invocations, the target function's requests and duration
  (at its memory), what the tick asks of AWS (the DynamoDB queries of each part, in read units),
  its log lines (the application's at INFO, measured; Lambda's START/END/REPORT when the function
  keeps them), and an X-Ray trace per run when the function is traced.

The tick is measured by running the expiry function's handler once in local mode (moto, in this
process) against empty tables, after a first run has warmed it: every AWS request it makes, the
rows it reads, the metrics it adds and the log lines it writes. Its duration here (moto, this
CPU) stands in for Lambda's.

Prices come from bench/prices.json (dated, us-east-1). The total is what an account whose free
tiers are used by something else pays; `if_free_tiers_unused_usd` is what is left after the
always-free allowances (10 alarm metrics, 10 custom metrics, 3 dashboards, 1 million Lambda
requests and 400,000 GB-seconds, 1 million SQS requests, 14 million Scheduler invocations,
100,000 X-Ray traces, 5 GB of logs).

Usage: .venv/bin/python bench/idle_cost.py   (writes bench/results/idle-cost-latest.json)
"""

from __future__ import annotations

import io
import json
import math
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

PRICES = json.loads((ROOT / "bench" / "prices.json").read_text(encoding="utf-8"))
TIERS = ("minimal", "standard", "full")
MINUTES_PER_MONTH = 30 * 24 * 60
POLLER_REQUESTS_PER_MINUTE = 15  # Lambda's SQS pollers on an empty queue (prices.json, notes)
SYSTEM_LOG_BYTES = 900  # Lambda's platform.start, runtimeDone and report records in JSON, one invocation
EMF_BYTES = 300  # the EMF record of an invocation that added metrics, beyond 40 bytes a metric
FREE_EACH_MONTH = {
    "cloudwatch_alarm_standard": 10,
    "cloudwatch_custom_metric": 10,
    "cloudwatch_dashboard": 3,
    "lambda_request": 1_000_000,
    "lambda_gb_second_arm": 400_000,
    "sqs": 1_000_000,  # standard and FIFO requests together
    "scheduler_invocation": 14_000_000,
    "xray_trace_recorded": 100_000,
    "cloudwatch_logs_ingested_gb": 5,
}
BILLED_MONTHLY = {
    "AWS::CloudWatch::Dashboard": ("cloudwatch_dashboard", "dashboards"),
    "AWS::KMS::Key": ("kms_customer_key", "customer-managed KMS keys"),
    "AWS::SecretsManager::Secret": ("secretsmanager_secret", "Secrets Manager secrets"),
    "AWS::SNS::Topic": ("sns_topic", "SNS topics"),
}


# --------------------------------------------------------------------------------------------------
# The idle tick, measured


@dataclass
class TickProfile:
    """What one idle run of a scheduled function costs, as measured in local mode."""

    seconds: float = 0.0  # wall time of the handler, billed in 1 ms steps
    requests: dict[str, int] = field(default_factory=dict)  # "service operation" -> count
    read_units: float = 0.0
    write_units: float = 0.0
    log_bytes: int = 0  # application lines at INFO (Powertools), EMF included
    metrics: list[str] = field(default_factory=list)  # the custom metrics it added (even as 0)


def _read_units(operation: str, params: dict[str, Any], response: dict[str, Any]) -> float:
    """DynamoDB's rule: the bytes read rounded up to 4 KB, a read unit each (half when eventually
    consistent, as every index read is); an empty result still costs the minimum."""
    if operation not in ("Query", "Scan", "GetItem"):
        return 0.0
    items = response.get("Items", [response["Item"]] if "Item" in response else [])
    blocks = max(1, math.ceil(len(json.dumps(items, default=str)) / 4096))
    return blocks * (1.0 if params.get("ConsistentRead") else 0.5)


def _write_units(operation: str, params: dict[str, Any]) -> float:
    """At least one write unit a written item (two in a transaction); an idle tick writes none."""
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        return 1.0
    if operation == "TransactWriteItems":
        return 2.0 * len(params.get("TransactItems", []))
    if operation == "BatchWriteItem":
        return float(sum(len(v) for v in params.get("RequestItems", {}).values()))
    return 0.0


class _Recorder:
    """Every AWS request made while `active`, except by Lambda's pollers (threads `poll-*`, which
    local mode runs for the SQS event sources; the template prices those)."""

    def __init__(self) -> None:
        self.active = False
        self.requests: Counter[str] = Counter()
        self.read_units = 0.0
        self.write_units = 0.0
        self.metrics: list[str] = []

    def api_call(self, service: str, operation: str, params: dict[str, Any], response: dict[str, Any]) -> None:
        if not self.active or threading.current_thread().name.startswith("poll-"):
            return
        self.requests[f"{service} {operation}"] += 1
        if service == "dynamodb":
            self.read_units += _read_units(operation, params, response)
            self.write_units += _write_units(operation, params)


@contextmanager
def _recording(recorder: _Recorder, log_stream: io.StringIO) -> Iterator[None]:
    from botocore.client import BaseClient

    from hermes_gateway.observability import logger, metrics

    original_call = BaseClient._make_api_call
    original_add = metrics.add_metric

    def api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        response = original_call(client, operation, params)
        recorder.api_call(client.meta.service_model.service_name, operation, params, response)
        return response

    def add_metric(*args: Any, **kwargs: Any) -> None:
        if recorder.active:
            recorder.metrics.append(str(kwargs.get("name", args[0] if args else "?")))
        original_add(*args, **kwargs)

    handler = logger.registered_handler
    original_stream = handler.stream  # type: ignore[attr-defined]
    original_level = logger.log_level
    BaseClient._make_api_call = api_call  # type: ignore[method-assign]
    metrics.add_metric = add_metric  # type: ignore[method-assign]
    handler.setStream(log_stream)  # type: ignore[attr-defined]
    logger.setLevel("INFO")  # the deployed level (the functions' ApplicationLogLevel)
    try:
        yield
    finally:
        BaseClient._make_api_call = original_call  # type: ignore[method-assign]
        metrics.add_metric = original_add  # type: ignore[method-assign]
        handler.setStream(original_stream)  # type: ignore[attr-defined]
        logger.setLevel(original_level)


def measure_idle_tick(function: str = "expiry", runs: int = 3) -> TickProfile:
    """Run a scheduled function on an empty local deployment: once to warm it, then `runs` times."""
    from hermes_cli.target import LOCAL_STATE_ENV
    from hermes_local.runtime import LocalGateway

    with tempfile.TemporaryDirectory() as state:  # not the state file of a `make run` on this machine
        environ = {"PATH": "/usr/bin:/bin", LOCAL_STATE_ENV: f"{state}/local.json"}
        gateway = LocalGateway(port=0, environ=environ, tick_seconds=3600, poll_wait_seconds=1)
        gateway.start()
        try:
            gateway.functions.invoke(function, _scheduled_event())
            profiles = [_measure_one(gateway, function) for _ in range(runs)]
        finally:
            gateway.stop()
    last = profiles[-1]
    last.seconds = statistics.median(p.seconds for p in profiles)
    return last


def _measure_one(gateway: Any, function: str) -> TickProfile:
    recorder, stream = _Recorder(), io.StringIO()
    with _recording(recorder, stream):
        recorder.active = True
        started = time.perf_counter()
        gateway.functions.invoke(function, _scheduled_event())
        seconds = time.perf_counter() - started
        recorder.active = False
    log_bytes = len(stream.getvalue().encode())
    if recorder.metrics:  # local mode does not print EMF; Lambda would, one record an invocation
        log_bytes += EMF_BYTES + 40 * len(recorder.metrics)
    return TickProfile(
        seconds=seconds,
        requests=dict(sorted(recorder.requests.items())),
        read_units=recorder.read_units,
        write_units=recorder.write_units,
        log_bytes=log_bytes,
        metrics=sorted(set(recorder.metrics)),
    )


def _scheduled_event() -> dict[str, Any]:
    return {"source": "aws.scheduler", "detail-type": "Scheduled Event", "time": time.time()}


# --------------------------------------------------------------------------------------------------
# The template, priced


@dataclass(frozen=True)
class Line:
    item: str
    price: str  # a key of prices.json's "monthly" or "per_request"
    quantity: float

    @property
    def unit_price(self) -> float:
        return float(PRICES["monthly"].get(self.price, PRICES["per_request"].get(self.price, 0.0)))

    @property
    def usd(self) -> float:
        return self.quantity * self.unit_price


def alarm_metrics(alarm: dict[str, Any]) -> int:
    """CloudWatch bills an alarm per metric it evaluates: a math expression's every metric."""
    metrics = alarm["Properties"].get("Metrics")
    return sum(1 for m in metrics if "MetricStat" in m) if metrics else 1


def template_lines(resources: dict[str, Any]) -> list[Line]:
    """What the template bills by the month, and Lambda's pollers of its event source mappings."""
    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for resource in resources.values():
        by_type[resource["Type"]].append(resource)
    alarms = by_type["AWS::CloudWatch::Alarm"]
    lines = [Line(f"CloudWatch alarms x{len(alarms)}", "cloudwatch_alarm_standard", sum(map(alarm_metrics, alarms)))]
    for cfn_type, (price, label) in BILLED_MONTHLY.items():
        if by_type[cfn_type]:
            lines.append(Line(f"{label} x{len(by_type[cfn_type])}", price, len(by_type[cfn_type])))
    defaulted = [f for f in by_type["AWS::Logs::MetricFilter"] if _has_default_value(f)]
    if defaulted:
        lines.append(
            Line(
                f"log metric filters with a default value x{len(defaulted)}", "cloudwatch_custom_metric", len(defaulted)
            )
        )
    for mapping in by_type["AWS::Lambda::EventSourceMapping"]:
        lines.append(_poller_line(mapping, resources))
    return [line for line in lines if line.quantity]


def _has_default_value(metric_filter: dict[str, Any]) -> bool:
    return any("DefaultValue" in t for t in metric_filter["Properties"]["MetricTransformations"])


def _poller_line(mapping: dict[str, Any], resources: dict[str, Any]) -> Line:
    source = mapping["Properties"]["EventSourceArn"]
    logical_id, attribute = source["Fn::GetAtt"]
    target = resources[logical_id]
    if target["Type"] == "AWS::SQS::Queue":
        fifo = bool(target["Properties"].get("FifoQueue"))
        kind = "FIFO" if fifo else "standard"
        return Line(
            f"Lambda's pollers of the {kind} queue {logical_id}",
            "sqs_fifo_request" if fifo else "sqs_request",
            POLLER_REQUESTS_PER_MINUTE * MINUTES_PER_MONTH,
        )
    if target["Type"] == "AWS::DynamoDB::Table" and attribute == "StreamArn":
        return Line(f"Lambda's polling of the stream of {logical_id} (free)", "dynamodb_stream_lambda_read", 0)
    raise ValueError(f"event source {logical_id} ({target['Type']}): no idle price known; add it to bench/idle_cost.py")


def schedule_lines(resources: dict[str, Any], tick: TickProfile) -> list[Line]:
    """Each schedule's runs with nothing to do, the target function's settings read from the template."""
    lines: list[Line] = []
    for schedule in (r for r in resources.values() if r["Type"] == "AWS::Scheduler::Schedule"):
        expression = schedule["Properties"]["ScheduleExpression"]
        runs = MINUTES_PER_MONTH / _minutes(expression)
        target = resources[schedule["Properties"]["Target"]["Arn"]["Fn::GetAtt"][0]]["Properties"]
        memory_gb = target["MemorySize"] / 1024
        billed_seconds = math.ceil(tick.seconds * 1000) / 1000
        logging = target.get("LoggingConfig", {})
        log_bytes = tick.log_bytes + (SYSTEM_LOG_BYTES if logging.get("SystemLogLevel", "INFO") != "WARN" else 0)
        traced = target.get("TracingConfig", {}).get("Mode") == "Active"
        what = f"schedule {expression}"
        lines += [
            Line(f"{what}: Scheduler invocations", "scheduler_invocation", runs),
            Line(f"{what}: Lambda requests", "lambda_request", runs),
            Line(f"{what}: Lambda duration ({billed_seconds * 1000:.0f} ms at {target['MemorySize']} MB)",
                 "lambda_gb_second_arm", runs * billed_seconds * memory_gb),
            Line(f"{what}: DynamoDB reads ({tick.read_units:g} units a run)", "dynamodb_read_request_unit",
                 runs * tick.read_units),
            Line(f"{what}: DynamoDB writes", "dynamodb_write_request_unit", runs * tick.write_units),
            Line(f"{what}: logs ({log_bytes} bytes a run)", "cloudwatch_logs_ingested_gb", runs * log_bytes / 1e9),
            Line(f"{what}: X-Ray traces", "xray_trace_recorded", runs if traced else 0),
            Line(f"{what}: custom metrics it emits ({', '.join(tick.metrics) or 'none'})", "cloudwatch_custom_metric",
                 len(tick.metrics)),
        ]  # fmt: skip
        lines += [_other_request(what, name, runs * count) for name, count in tick.requests.items()]
    return [line for line in lines if line.quantity]


# A request the tick makes, by service: DynamoDB's are priced in read and write units above, SSM
# standard parameters are free; a service not listed stops the bench rather than count as free.
_REQUEST_PRICES = {
    "dynamodb": None,
    "ssm": None,
    "sqs": "sqs_request",
    "events": "eventbridge_custom_event",
    "stepfunctions": "stepfunctions_express_request",
}


def _other_request(what: str, name: str, count: float) -> Line:
    service = name.split()[0]
    if service not in _REQUEST_PRICES:
        raise ValueError(f"the idle tick calls {name}: no price for it in bench/idle_cost.py")
    price = _REQUEST_PRICES[service]
    return Line(f"{what}: {name}", price or "free", count if price else 0)


def _minutes(expression: str) -> float:
    number, unit = expression.removeprefix("rate(").removesuffix(")").split()
    return float(number) * {"minute": 1, "minutes": 1, "hour": 60, "hours": 60, "day": 1440, "days": 1440}[unit]


def idle_cost(resources: dict[str, Any], tick: TickProfile) -> dict[str, Any]:
    lines = template_lines(resources) + schedule_lines(resources, tick)
    return {
        "idle_cost_per_month_usd": round(sum(line.usd for line in lines), 2),
        "if_free_tiers_unused_usd": round(_after_free_tiers(lines), 2),
        "lines": {line.item: round(line.usd, 4) for line in lines},
    }


def _after_free_tiers(lines: list[Line]) -> float:
    by_price: dict[str, float] = defaultdict(float)
    for line in lines:
        by_price["sqs" if line.price.startswith("sqs") else line.price] += line.quantity
    total = 0.0
    for line in lines:
        pool = "sqs" if line.price.startswith("sqs") else line.price
        free = FREE_EACH_MONTH.get(pool, 0)
        share = line.quantity / by_price[pool] if by_price[pool] else 0.0
        total += max(0.0, line.quantity - free * share) * line.unit_price
    return total


def synthesized_resources(tier: str) -> dict[str, Any]:
    """The default deployment's template in one observability tier (asset bundling skipped)."""
    from aws_cdk.assertions import Template

    from hermes_gateway.settings import load_settings
    from infra.app import SKIP_BUNDLING, build_app

    settings = load_settings(env={}, config={"operations": {"observability": tier}})
    _app, stack = build_app(settings, context=SKIP_BUNDLING)
    resources: dict[str, Any] = Template.from_stack(stack).to_json()["Resources"]
    return resources


def main() -> None:
    tick = measure_idle_tick()
    tiers = {tier: idle_cost(synthesized_resources(tier), tick) for tier in TIERS}
    report = {
        # the default tier's, as bench/run_all.py and bench/compare.py read it
        "idle_cost_per_month_usd": tiers["minimal"]["idle_cost_per_month_usd"],
        "tiers": tiers,
        "tick": asdict(tick),
        "prices_recorded": PRICES["recorded"],
    }
    out = ROOT / "bench" / "results" / "idle-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
