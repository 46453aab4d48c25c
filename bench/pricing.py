"""The price model: what a metered run (bench/meter.py) costs in AWS, in USD per million messages.

Counted requests are priced as they are (DynamoDB units from item sizes, SQS and EventBridge per
64 KB, Step Functions per execution). Time is modelled, because local mode runs every function in
one busy Python process with moto answering in microseconds, where Lambda gives each invocation
its own share of a CPU and every AWS call is a network round trip:

- Lambda billed duration (the headline) = the handler's own CPU time (its thread, plus the work it
  hands to threads of its own), scaled by its memory size's CPU share (Lambda gives a full vCPU
  at 1,769 MB, proportionally less below), plus one round trip per AWS call it makes on its own
  thread (`ROUND_TRIP_MS`); rounded up to 1 ms. The wall-clock figure (the invocation's elapsed
  time with nothing else running, moto standing in for AWS) is reported beside it.
- Both come from a *solo* profile when one is given: every function invocation of a few messages
  run one at a time (nothing else running), by function and step; a key the profile lacks is
  taken from the run itself. `per_invocation` prices each invocation and execution of the run
  by its own figures instead (the realistic profile, whose model waits differ by message).
- The model's wait: an invocation that asked the model is billed its requests' elapsed time as
  well (Lambda bills every millisecond it waits), or the CPU it spent reading the stream at its
  memory size's share when that took longer; what it asked of AWS or the platform meanwhile is
  no round trip of its own (bench/meter.py). What it slept (bench/meter.py `count_sleeps`) is
  billed too. The echo model answers in microseconds: the message bench's figures barely move.
- A function invoked by an event source mapping is priced as one invocation per record (and the
  poller's receive and delete per record): at the reference traffic (`REFERENCE_MESSAGES_PER_MONTH`,
  about 0.4 messages a second) a batch holds one message. Local mode's single poller batches
  more, which would understate both.
- Step Functions Express duration = the execution's tasks' modelled durations plus
  `TASK_OVERHEAD_MS` each (Step Functions scheduling a task and taking its result), in 100 ms
  steps at 64 MB; the model's wait is apart (per model-second).
- X-Ray: the default sampling rule (a reservoir of 1 trace a second for the whole account, then
  5%) at the reference traffic. A trace starts at every invocation no traced caller leads to: API
  Gateway's HTTP API does not trace, so the webhook's invocation starts one; an event source
  mapping's batch starts one (SQS and stream records are linked to, not part of, their producer's
  trace); Step Functions' tasks and invokes by a traced function join their caller's.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean
from typing import Any

from bench.meter import ESM_TRIGGERS, TRACE_ROOTS, Invocation, Meter
from bench.plan import default_plan

ROOT = Path(__file__).resolve().parents[1]
PRICES: dict[str, Any] = json.loads((ROOT / "bench" / "prices.json").read_text(encoding="utf-8"))

LAMBDA_PLATFORM_LOG_BYTES = 400  # START, END and REPORT lines per invocation (as bench/idle_cost.py)
ACCESS_LOG_BYTES = 330  # one API Gateway access log line (infra/capabilities/api.py's format), filled in
EXPRESS_MEMORY_GB = 64 / 1024  # Express executions are billed in 64 MB steps; a turn's payload fits the first
FULL_VCPU_MB = 1769  # Lambda's memory size with one full vCPU; below it the share is proportional
REFERENCE_MESSAGES_PER_MONTH = 1_000_000
SECONDS_PER_MONTH = 30 * 24 * 3600
# Assumed in-region round trips from Lambda (p50, TLS connection kept), not measured here: moto
# answers in microseconds. DynamoDB single-item calls take single-digit milliseconds.
ROUND_TRIP_MS: dict[str, float] = {
    "dynamodb": 5.0,
    "dynamodb.Query": 6.0,
    "dynamodb.TransactWriteItems": 10.0,
    "dynamodb.TransactGetItems": 8.0,
    "sqs": 10.0,
    "stepfunctions": 20.0,
    "events": 15.0,
    "lambda": 15.0,
    "ssm": 10.0,
    # An object of a few hundred KB to or from S3 in-region: tens of milliseconds to the last byte.
    "s3": 20.0,
    # SES v2 SendEmail of a raw message of a few KB (assumed, as the others: SES accepts it for sending)
    "sesv2": 60.0,
    # A platform's API (Telegram's Bot API is hosted in Europe) or any other non-AWS request a function
    # makes; the model's wait is apart (per model-second).
    "external": 150.0,
}
DEFAULT_ROUND_TRIP_MS = 10.0
TASK_OVERHEAD_MS = 20.0
XRAY_RESERVOIR_PER_SECOND = 1
XRAY_FIXED_RATE = 0.05
XRAY_TRAFFIC_LEVELS = (0.1, 0.386, 1.0, 10.0, 100.0)  # messages a second (0.386: a million a month)
PRICED_SERVICES = frozenset({"sqs", "dynamodb", "stepfunctions", "events", "ssm", "lambda", "dynamodbstreams", "s3"})
# S3 bills requests in two tiers (prices.json s3_put_request, s3_get_request); deletes are free.
S3_PUT_TIER = frozenset({
    "PutObject", "CopyObject", "PostObject", "ListObjects", "ListObjectsV2", "ListBuckets",
    "CreateMultipartUpload", "UploadPart", "UploadPartCopy", "CompleteMultipartUpload",
})  # fmt: skip
S3_FREE = frozenset({"DeleteObject", "DeleteObjects", "AbortMultipartUpload"})
GB = 1024**3  # S3 storage is billed per GB (2^30 bytes) and month
DAYS_PER_MONTH = 30
ESM_REQUESTS_PER_RECORD = 2  # the poller's ReceiveMessage and DeleteMessageBatch for a batch of one


def s3_requests(operations: Iterable[tuple[str, int]]) -> dict[str, int]:
    """S3 requests by price tier: `put` (PUT, COPY, POST, LIST, multipart parts), `get` (GET, HEAD
    and every other request), `free` (deletes)."""
    tiers = {"put": 0, "get": 0, "free": 0}
    for operation, count in operations:
        tier = "put" if operation in S3_PUT_TIER else "free" if operation in S3_FREE else "get"
        tiers[tier] += count
    return tiers


def s3_requests_usd(operations: Iterable[tuple[str, int]]) -> float:
    """What S3 bills for these (operation, count) requests, in USD."""
    per = PRICES["per_request"]
    tiers = s3_requests(operations)
    return float(tiers["put"] * per["s3_put_request"] + tiers["get"] * per["s3_get_request"])


def s3_storage_usd_per_million(bytes_per_message: float, retention_days: int) -> float:
    """Storage of what each message leaves in the bucket, kept `retention_days` (then expired),
    per million messages: bytes / 2^30 x retention_days / 30 months x the GB-month price."""
    months = retention_days / DAYS_PER_MONTH
    return float(bytes_per_message * 1e6 / GB * months * PRICES["monthly"]["s3_standard_gb_month"])


def _s3_operations(meter: Meter) -> list[tuple[str, int]]:
    return [(operation, n) for (_, service, operation, _), n in meter.calls.items() if service == "s3"]


def round_trip_ms(service: str, operation: str) -> float:
    return ROUND_TRIP_MS.get(f"{service}.{operation}", ROUND_TRIP_MS.get(service, DEFAULT_ROUND_TRIP_MS))


def cpu_share(memory_mb: int) -> float:
    return min(1.0, memory_mb / FULL_VCPU_MB)


def memory_mb() -> dict[str, int]:
    from hermes_gateway.resources import FUNCTIONS

    return {spec.name: spec.memory_mb for spec in FUNCTIONS}


@dataclass(frozen=True)
class Billed:
    """One unit of a function's work (an invocation; a record of a batch) as Lambda would bill it."""

    wall_ms: float  # elapsed, rounded up to 1 ms
    model_ms: float  # CPU / CPU share + round trips + the model's wait + sleeps, rounded up to 1 ms
    cpu_ms: float
    round_trip_ms: float
    calls: float
    model_wait_ms: float = 0.0  # of model_ms, the model's requests (or reading their stream, when longer)
    slept_ms: float = 0.0


def billed(invocation: Invocation, memory: int) -> Billed:
    per = max(1, invocation.records) if invocation.trigger in ESM_TRIGGERS else 1
    share = cpu_share(memory)
    cpu = invocation.cpu_seconds * 1000 / per
    model_cpu = min(cpu, invocation.model_cpu_seconds * 1000 / per)
    waiting = max(invocation.model_seconds * 1000 / per, model_cpu / share)
    trips = sum(round_trip_ms(s, o) for s, o in invocation.round_trips) / per
    slept = invocation.slept * 1000 / per
    return Billed(
        wall_ms=math.ceil(invocation.seconds * 1000 / per),
        model_ms=math.ceil((cpu - model_cpu) / share + trips + waiting + slept),
        cpu_ms=cpu,
        round_trip_ms=trips,
        calls=invocation.aws_calls / per,
        model_wait_ms=waiting,
        slept_ms=slept,
    )


def profile(invocations: Iterable[Invocation], memory: dict[str, int] | None = None) -> dict[str, dict[str, float]]:
    """Mean billed figures by function and step (or trigger): what one unit of that work costs."""
    memory = memory or memory_mb()
    grouped: dict[str, list[Billed]] = defaultdict(list)
    for invocation in invocations:
        grouped[invocation.key].append(billed(invocation, memory[invocation.function]))
    return {
        key: {
            "n": len(rows),
            "wall_ms": round(fmean(r.wall_ms for r in rows), 2),
            "model_ms": round(fmean(r.model_ms for r in rows), 2),
            "cpu_ms": round(fmean(r.cpu_ms for r in rows), 2),
            "round_trip_ms": round(fmean(r.round_trip_ms for r in rows), 2),
            "aws_calls": round(fmean(r.calls for r in rows), 2),
            **_if_any("model_wait_ms", [r.model_wait_ms for r in rows]),
            **_if_any("slept_ms", [r.slept_ms for r in rows]),
        }
        for key, rows in sorted(grouped.items())
    }


def _if_any(name: str, values: list[float]) -> dict[str, float]:
    """`{name: mean}` when any value is 1 ms or more (the echo model's waits are not worth a key)."""
    return {name: round(fmean(values), 2)} if any(v >= 1 for v in values) else {}


def units_of_work(invocations: Iterable[Invocation]) -> Counter[str]:
    """Invocations by key as Lambda would make them: one per record for an event source mapping."""
    counted: Counter[str] = Counter()
    for invocation in invocations:
        counted[invocation.key] += max(1, invocation.records) if invocation.trigger in ESM_TRIGGERS else 1
    return counted


def xray_sampled_fraction(
    per_second: float, reservoir: int = XRAY_RESERVOIR_PER_SECOND, fixed_rate: float = XRAY_FIXED_RATE
) -> float:
    """The share of requests a sampling rule traces at a Poisson rate: `reservoir` a second, then
    `fixed_rate` of the rest."""
    if per_second <= 0:
        return 1.0
    # E[min(N, reservoir)] for N ~ Poisson(per_second): sum of P(N > k) for k < reservoir
    term, cdf, taken = math.exp(-per_second), 0.0, 0.0
    for k in range(reservoir):
        cdf += term
        taken += 1.0 - cdf
        term *= per_second / (k + 1)
    return (taken + fixed_rate * (per_second - taken)) / per_second


def _lookup(key: str, solo: dict[str, dict[str, float]], own: dict[str, dict[str, float]]) -> dict[str, float]:
    return solo.get(key) or own[key]


@dataclass(frozen=True)
class LambdaCost:
    requests: float
    gb_seconds: float  # the CPU model (in the total)
    gb_seconds_wall: float  # elapsed alone
    gb_seconds_busy: float  # elapsed in the busy run (what the meter used to bill)
    by_key: dict[str, dict[str, Any]]

    def usd(self, gb_seconds: float) -> float:
        per = PRICES["per_request"]
        return float(self.requests * per["lambda_request"] + gb_seconds * per["lambda_gb_second_arm"])


def lambda_cost(
    meter: Meter, solo: dict[str, dict[str, float]], messages: int, per_invocation: bool = False
) -> LambdaCost:
    memory = memory_mb()
    own = profile(meter.invocations, memory)
    if per_invocation:
        solo = {}  # each key's mean over the run's own invocations: their sum, as each is billed
    work = units_of_work(meter.invocations)
    model = wall = 0.0
    by_key: dict[str, dict[str, Any]] = {}
    for key, n in sorted(work.items()):
        figures, gb = _lookup(key, solo, own), memory[key.split("/", 1)[0]] / 1024
        model += n * figures["model_ms"] / 1000 * gb
        wall += n * figures["wall_ms"] / 1000 * gb
        by_key[key] = {"invocations_per_message": round(n / messages, 3), **figures,
                       "measured": "alone" if key in solo else "in the run"}  # fmt: skip
    busy = sum(math.ceil(i.seconds * 1000) / 1000 * memory[i.function] / 1024 for i in meter.invocations)
    return LambdaCost(sum(work.values()), model, wall, busy, by_key)


def express_seconds(
    meter: Meter, solo: dict[str, dict[str, float]], per_invocation: bool = False
) -> tuple[float, float]:
    """Billed Express seconds of the run's executions: modelled (their tasks' modelled durations
    plus an overhead each; `per_invocation`: each task's own) and as measured in local mode
    (StartExecution to the last task's end)."""
    memory = memory_mb()
    own = profile(meter.invocations)
    tasks = [i for i in meter.invocations if i.trigger == "stepfunctions"]

    def task_ms(task: Invocation) -> float:
        if per_invocation:
            return billed(task, memory[task.function]).model_ms
        return _lookup(task.key, solo, own)["model_ms"]

    modelled = measured = 0.0
    for name, started in meter.executions.items():
        mine = [t for t in tasks if name in t.strings]  # a task's input names its execution
        work_ms = sum(task_ms(t) for t in mine) + TASK_OVERHEAD_MS * len(mine)
        modelled += math.ceil(work_ms / 100) / 10
        measured += math.ceil((max((t.ended for t in mine), default=started) - started) * 10) / 10
    return modelled, measured


def trace_roots(meter: Meter, traced: Callable[[str], bool] = lambda function: True) -> float:
    """Invocations that start an X-Ray trace (one per record for an event source mapping), of the
    functions `traced` says X-Ray traces."""
    return sum(
        max(1, i.records) if i.trigger in ESM_TRIGGERS else 1
        for i in meter.invocations
        if i.trigger in TRACE_ROOTS and traced(i.function)
    )


def webhook_endpoint() -> str:
    """Where the deployment's platforms post (`ingress.endpoint`): `http_api` bills each request and
    logs an access line; `function_url` bills neither (the ingress invocation is the same)."""
    from hermes_gateway import wiring

    endpoint: str = wiring.settings().ingress.endpoint
    return endpoint


def traced_by_default() -> Callable[[str], bool]:
    """Which functions the deployment's observability tier traces (none in minimal, the default)."""
    traces: Callable[[str], bool] = default_plan().traces
    return traces


def xray_usd_per_million(roots_per_message: float, messages_per_second: float) -> float:
    rate = roots_per_message * messages_per_second
    return float(roots_per_message * xray_sampled_fraction(rate) * PRICES["per_request"]["xray_trace_recorded"] * 1e6)


def price(
    meter: Meter,
    messages: int,
    webhook_requests: int,
    log_bytes: int,
    custom_metrics: int = 0,
    solo: dict[str, dict[str, float]] | None = None,
    endpoint: str | None = None,
    per_invocation: bool = False,
) -> dict[str, Any]:
    """USD per million messages by service, and what is reported apart, for `messages` messages.
    `endpoint`: the webhook endpoint priced (None: the deployment's, `webhook_endpoint()`);
    `per_invocation`: every invocation and execution priced by its own figures, not a solo profile."""
    per = PRICES["per_request"]
    endpoint = endpoint or webhook_endpoint()
    api_requests = webhook_requests if endpoint == "http_api" else 0
    scale = 1_000_000 / messages
    solo = solo or {}
    lam = lambda_cost(meter, solo, messages, per_invocation)
    sqs, sqs_by = _sqs_requests(meter)
    executions = len(meter.executions)
    express_model_s, express_measured_s = express_seconds(meter, solo, per_invocation)
    express_gb_s = per["stepfunctions_express_gb_second"] * EXPRESS_MEMORY_GB
    rru, wru = sum(meter.rru.values()), sum(meter.wru.values())
    # Lambda's own lines are ingested only where the tier keeps them (full; minimal drops them)
    plan = default_plan()
    platform_lines = LAMBDA_PLATFORM_LOG_BYTES * lam.requests if plan.platform_log_lines else 0
    log_total = log_bytes + platform_lines + ACCESS_LOG_BYTES * api_requests
    roots_per_message = trace_roots(meter, plan.traces) / messages
    roots_if_traced = trace_roots(meter) / messages  # the standard tier traces the message path
    reference_rate = REFERENCE_MESSAGES_PER_MONTH / SECONDS_PER_MONTH
    by_service = {
        "apigateway": api_requests * per["apigateway_http_request"] * scale,
        "lambda": lam.usd(lam.gb_seconds) * scale,
        "sqs": (sqs["fifo"] * per["sqs_fifo_request"] + sqs["standard"] * per["sqs_request"]) * scale,
        "dynamodb": (rru * per["dynamodb_read_request_unit"] + wru * per["dynamodb_write_request_unit"]) * scale,
        "stepfunctions": (executions * per["stepfunctions_express_request"] + express_model_s * express_gb_s) * scale,
        "eventbridge": meter.bus_events * per["eventbridge_custom_event"] * scale,
        "s3": s3_requests_usd(_s3_operations(meter)) * scale,
        "cloudwatch_logs": log_total / 1e9 * per["cloudwatch_logs_ingested_gb"] * scale,
        "xray": xray_usd_per_million(roots_per_message, reference_rate),
    }
    by_service = {name: round(usd, 4) for name, usd in by_service.items()}
    return {
        "cost_per_million_usd": round(sum(by_service.values()), 2),
        "cost_by_service": by_service,
        "webhook_endpoint": endpoint,
        "in_total": IN_TOTAL,
        "per_message": {
            "webhook_requests": round(webhook_requests / messages, 3),
            "lambda_invocations": {k: v["invocations_per_message"] for k, v in lam.by_key.items()},
            "lambda_gb_seconds": round(lam.gb_seconds / messages, 5),
            "lambda_gb_seconds_wall_clock": round(lam.gb_seconds_wall / messages, 5),
            "lambda_gb_seconds_busy_process": round(lam.gb_seconds_busy / messages, 5),
            "sqs_requests": {k: round(v / messages, 3) for k, v in sorted(sqs.items())},
            "sqs_requests_by_function_and_poller": {k: round(v / messages, 3) for k, v in sorted(sqs_by.items())},
            "dynamodb_read_units": round(rru / messages, 3),
            "dynamodb_write_units": round(wru / messages, 3),
            "express_executions": round(executions / messages, 3),
            "express_billed_seconds_modelled": round(express_model_s / max(executions, 1), 3),
            "express_billed_seconds_measured": round(express_measured_s / max(executions, 1), 3),
            "event_bus_events": round(meter.bus_events / messages, 3),
            "s3_requests": {k: round(v / messages, 3) for k, v in s3_requests(_s3_operations(meter)).items()},
            "log_bytes": round(log_total / messages),
            "xray_trace_roots": round(roots_per_message, 3),
            "xray_traced_share": round(xray_sampled_fraction(roots_per_message * reference_rate), 3),
        },
        "lambda_by_function": lam.by_key,
        "unpriced_requests_per_message": _unpriced(meter, messages),
        "not_in_total": _apart(lam, scale, executions, express_measured_s, roots_if_traced, custom_metrics),
        "assumptions": assumptions(),
    }


def _apart(
    lam: LambdaCost, scale: float, executions: int, express_measured_s: float, roots: float, custom_metrics: int
) -> dict[str, Any]:
    """What is reported beside the total, not in it."""
    per = PRICES["per_request"]
    express = executions * per["stepfunctions_express_request"]
    express += express_measured_s * per["stepfunctions_express_gb_second"] * EXPRESS_MEMORY_GB
    idle = PRICES["monthly"]["sqs_event_source_idle_fifo"]
    return {
        "lambda_usd_per_million_wall_clock": round(lam.usd(lam.gb_seconds_wall) * scale, 4),
        "lambda_wall_clock_assumption": "each invocation's elapsed time measured alone (moto standing in for "
        "AWS, a full core of this machine), rounded up to 1 ms, x its memory",
        "lambda_usd_per_million_busy_process": round(lam.usd(lam.gb_seconds_busy) * scale, 4),
        "stepfunctions_usd_per_million_measured_duration": round(express * scale, 4),
        "model_wait_usd_per_million_per_model_second": _model_wait(memory_mb()),
        "xray_usd_per_million_by_traffic_when_traced": {
            f"{rate:g} messages/s": round(xray_usd_per_million(roots, rate), 3) for rate in XRAY_TRAFFIC_LEVELS
        },
        "custom_metrics": custom_metrics,
        "custom_metrics_usd_per_month": round(custom_metrics * PRICES["monthly"]["cloudwatch_custom_metric"], 2),
        "custom_metrics_note": "each metric name x dimension values the functions' EMF lines published in "
        "the run, billed for every hour it is published: a month of steady traffic",
        "idle_polling": "Lambda's SQS pollers receive about 15 times a minute per queue with no traffic "
        f"(prices.json monthly.sqs_event_source_idle_fifo: {idle} USD a month per FIFO queue): idle cost, "
        "bench/idle_cost.py's; local mode's empty receives are not counted",
        "free_tiers": "not subtracted",
    }


IN_TOTAL = [
    "API Gateway: each webhook request, retries included (none with ingress.endpoint: function_url)",
    "Lambda: one request per invocation (one per record for an event source mapping) and GB-seconds from "
    "the CPU model (CPU time / the memory size's CPU share + a round trip per AWS call)",
    "SQS: the functions' requests (each 64 KB) and the event source pollers' receive and delete per record",
    "DynamoDB: request units from item sizes and indexes (transactions double, failed conditions cost their write)",
    "Step Functions Express: a request per execution and the modelled duration (tasks + overhead, 100 ms steps, 64 MB)",
    "EventBridge: each event the functions put on the bus (each 64 KB)",
    "S3: the functions' requests to the media bucket, PUT and GET tiers (storage apart: bench/media_cost.py)",
    "CloudWatch Logs: bytes logged at INFO with the EMF lines, Lambda's platform lines, API Gateway's access "
    "lines (an HTTP API's only)",
    "X-Ray: traces recorded under the default sampling rule at a million messages a month, of the "
    "functions the observability tier traces (none in minimal, the default)",
]


def assumptions() -> dict[str, Any]:
    return {
        "round_trip_ms": {**ROUND_TRIP_MS, "other": DEFAULT_ROUND_TRIP_MS},
        "cpu_share": f"memory / {FULL_VCPU_MB} MB (1 vCPU at {FULL_VCPU_MB} MB), this machine's core as Lambda's",
        "task_overhead_ms": TASK_OVERHEAD_MS,
        "reference_messages_per_month": REFERENCE_MESSAGES_PER_MONTH,
        "event_source_batches": "one record per batch (the reference traffic), so one invocation, one receive "
        "and one delete per record",
        "xray_sampling": f"default rule: {XRAY_RESERVOIR_PER_SECOND} a second for the account, then "
        f"{XRAY_FIXED_RATE:.0%}; a trace per invocation that no traced caller leads to (webhook, event "
        "source batch, schedule)",
    }


def _model_wait(memory: dict[str, int]) -> dict[str, float]:
    """What each second a turn waits on the model adds per million messages: the agent's Lambda
    duration (it waits inside CallModel) and the Express execution's."""
    per = PRICES["per_request"]
    agent = memory.get("agent", 512) / 1024 * per["lambda_gb_second_arm"] * 1e6
    express = EXPRESS_MEMORY_GB * per["stepfunctions_express_gb_second"] * 1e6
    return {"lambda": round(agent, 2), "stepfunctions": round(express, 2), "total": round(agent + express, 2)}


def _sqs_requests(meter: Meter) -> tuple[Counter[str], Counter[str]]:
    """SQS requests by FIFO and standard, and by who made them: the functions (64 KB chunks) and
    the event source pollers (per record)."""
    from hermes_gateway.resources import QUEUES

    fifo_names = set(meter.fifo_queues) | {q.name for q in QUEUES if q.fifo}
    counted: Counter[str] = Counter()
    by: Counter[str] = Counter()
    for (service, resource), chunks in meter.billed.items():
        if service == "sqs":
            counted["fifo" if resource in fifo_names else "standard"] += chunks
            by[f"functions: {resource}"] += chunks
    for invocation in meter.invocations:
        if invocation.trigger == "sqs":
            requests = ESM_REQUESTS_PER_RECORD * max(1, invocation.records)
            counted["fifo" if invocation.source in fifo_names else "standard"] += requests
            by[f"poller: {invocation.source}"] += requests
    return counted, by


def _unpriced(meter: Meter, messages: int) -> dict[str, float]:
    unpriced: Counter[str] = Counter()
    for (_, service, operation, _), n in meter.calls.items():
        if service not in PRICED_SERVICES:
            unpriced[f"{service}.{operation}"] += n
    return {k: round(v / messages, 3) for k, v in sorted(unpriced.items())}
