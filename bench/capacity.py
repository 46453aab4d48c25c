"""How far one deployment goes: a discrete-event simulation of the message path under a rising
offered load, with every stage's concurrency limit and every rate limit in the way.

The path is data (`default_pipeline`, or `--pipeline FILE.json`; `--print-pipeline` writes the
default as JSON to start from): an ordered list of steps, each either
- a *stage* that holds one unit of its own concurrency (a stream mapping's lanes; none for a
  function invoked directly) and one unit of the account's Lambda concurrency for its service
  time, optionally one at a time per session or per chat (a stream's order per partition key,
  the turn lease) and optionally taking every waiting message of its key at once
  (a turn takes the messages queued behind the lease: one turn, one reply), or
- a *limit*: a token bucket (rate, burst) for the whole deployment, or per session, chat or group
  (API Gateway's stage throttle, StartExecution, a table's or a partition's write capacity, the
  platform's send limits, which the delivery is taken to pace itself to).

Service times come from the last cost run (`results/message-cost-latest.json`: each function's
modelled billed duration per message, the DynamoDB units per table), so the simulation follows
the code; the model's wait is a parameter (`--model-seconds`, default 2). Messages arrive as a
Poisson stream over many sessions (half DMs, a quarter groups, a quarter forum topics, five to a
forum), or into one busy group (`--hot`). For each offered load: messages answered per second,
latency from the webhook to the platform send (p50, p99), and each step's utilization; the knee
is the highest load whose messages (those of the steady state) are all answered with a p99 under
`knee_p99_factor` x the p99 at the lowest load; the binding limit is the step most over its
limit at the next load up. The analytic ceiling of each step (its limit over its demand per
message) is printed beside it.

Usage: .venv/bin/python bench/capacity.py [--scenario defaults|new-account|raised|function-url] [--hot]
       [--model-seconds 2] [--seconds 60] [--pipeline FILE.json] [--print-pipeline]
Writes bench/results/capacity-latest.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
COST = RESULTS / "message-cost-latest.json"

# Used when there is no cost run yet: modelled billed milliseconds per message (bench/ledger.py, before the redesign)
FALLBACK_MS = {"ingress": 63.0, "router": 201.0, "agent": 257.0, "delivery": 244.0}
FALLBACK_WRU = {"routes": 20.0, "messages": 13.0, "sessions": 12.0, "outbox": 7.0, "idempotency": 2.1}


@dataclass(frozen=True)
class Step:
    name: str
    kind: str  # stage | limit
    setting: str  # what raises it
    source: str  # where the figure comes from
    # a stage
    functions: tuple[str, ...] = ()  # whose measured time it is (summed per message)
    service_ms: float = 0.0  # per message; 0: from the cost run
    extra_ms: float = 0.0  # added to the service time (e.g. the model's wait)
    concurrency: int | None = None  # the stage's own limit (None: only the account's)
    lambda_pool: bool = True  # holds a unit of the account's Lambda concurrency
    serial: str | None = None  # session | chat: one at a time per key
    batch: bool = False  # takes every waiting message of its key at once
    # a limit
    per_second: float = 0.0
    burst: float = 0.0
    scope: str = "all"  # all | session | chat | group
    per_message: float = 1.0  # tokens a message takes (e.g. 1.1 webhook requests with retries)
    per_reply: bool = False  # tokens per reply (after a turn answers its messages together), not per message
    table: str = ""  # a DynamoDB table whose write units per message are the tokens


STREAM_SHARDS = 4  # a small on-demand table's stream (DynamoDB adds shards as the write rate grows)


@dataclass(frozen=True)
class Pipeline:
    steps: tuple[Step, ...]
    account_concurrency: int
    knee_p99_factor: float = 2.0


def default_pipeline(model_seconds: float = 2.0, account_concurrency: int = 1000) -> Pipeline:
    """The path as built, at the deployment's default settings: the inbox table's stream invokes the
    router (in order per session), the workflow invokes the delivery itself."""
    from hermes_gateway.resources import INBOX_SOURCE

    lanes = STREAM_SHARDS * INBOX_SOURCE.parallelization_factor
    steps = (
        Step("api_gateway_stage_throttle", "limit", "infra/capabilities/api.py THROTTLE_RATE_PER_SECOND, "
             "THROTTLE_BURST (the account's own HTTP API quota is 10,000 a second)",
             "the stage's throttle settings", per_second=50, burst=100, per_message=1.1),
        Step("ingress", "stage", "account concurrency", "modelled duration per message", functions=("ingress",)),
        Step("inbox_partition_writes", "limit", "none (one session's messages)",
             "DynamoDB: 1,000 write units a second per partition (the inbox is partitioned by session)",
             per_second=1000, burst=1000, scope="session", table="inbox"),
        Step("router", "stage", "the stream's shards (they grow with the table's write rate) x "
             "StreamSource.parallelization_factor (resources.py; 10, Lambda's maximum)",
             f"a DynamoDB stream mapping runs one batch per lane at a time, {STREAM_SHARDS} shards assumed "
             f"(a small on-demand table) x {INBOX_SOURCE.parallelization_factor} lanes, in order per session",
             functions=("router",), concurrency=lanes, serial="session"),
        Step("start_execution", "limit", "a Service Quotas increase",
             "Step Functions StartExecution throttle for Express (a token bucket per account; placeholder "
             "figure, check the Service Quotas console)", per_second=6000, burst=6000),
        Step("routes_table_writes", "limit", "none needed on demand: a table doubles its previous peak in 30 min; "
             "warm it or switch to provisioned capacity before a launch",
             "DynamoDB on demand: a new table serves 4,000 write units a second at once", per_second=4000,
             burst=4000, table="routes"),
        Step("session_partition_writes", "limit", "split the hot item (fewer writes per message on one key)",
             "DynamoDB: 1,000 write units a second per partition (one session's transcript)",
             per_second=1000, burst=1000, scope="session", table="messages"),
        Step("turn", "stage", "account concurrency; the model's speed",
             "the turn's tasks' modelled duration plus the model's wait, one turn per session (the lease), "
             "queued messages answered together", functions=("agent",), extra_ms=model_seconds * 1000,
             serial="session", batch=True),
        Step("delivery", "stage", "account concurrency",
             "invoked by the turn's Deliver task (a session's replies in its turns' order); the platform's "
             "round trip is in the duration", functions=("delivery",)),
        Step("telegram_per_bot", "limit", "more bots (named profiles), or another platform",
             "Telegram: about 30 messages a second per bot", per_second=30, burst=30, per_reply=True),
        Step("telegram_per_chat", "limit", "none (a platform limit)", "Telegram: about 1 message a second per chat",
             per_second=1, burst=1, scope="chat", per_reply=True),
        Step("telegram_per_group", "limit", "none (a platform limit): answer a busy group's queued messages together",
             "Telegram: 20 messages a minute per group", per_second=20 / 60, burst=20, scope="group", per_reply=True),
    )  # fmt: skip
    return Pipeline(steps, account_concurrency)


SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "new-account": {"account_concurrency": 10},
    # Every setting the deployment controls raised: the API throttle (the stream's lanes are at
    # Lambda's maximum already; more come with more shards).
    "raised": {
        "api_gateway_stage_throttle": {"per_second": 1000, "burst": 2000},
    },
    # `ingress.endpoint: function_url`: the platforms post to the ingress function's URL, which has no
    # stage throttle (the account's concurrency bounds the ingress like every function)
    "function-url": {"remove": ("api_gateway_stage_throttle",)},
}


def with_scenario(pipeline: Pipeline, name: str) -> Pipeline:
    changes = SCENARIOS[name]
    kept = [s for s in pipeline.steps if s.name not in changes.get("remove", ())]
    steps = tuple(replace(s, **changes[s.name]) if s.name in changes else s for s in kept)
    return replace(pipeline, steps=steps, account_concurrency=changes.get("account_concurrency",
                   pipeline.account_concurrency))  # fmt: skip


def measured(path: Path = COST) -> tuple[dict[str, float], dict[str, float], str]:
    """Per message: each function's modelled billed ms and each table's write units (from the cost run)."""
    if not path.exists():
        return dict(FALLBACK_MS), dict(FALLBACK_WRU), "built-in figures (no cost run found)"
    report = json.loads(path.read_text(encoding="utf-8"))
    if not report.get("lambda_by_function"):
        return dict(FALLBACK_MS), dict(FALLBACK_WRU), f"built-in figures ({path.name} has no modelled times)"
    ms: dict[str, float] = defaultdict(float)
    for key, row in (report.get("lambda_by_function") or {}).items():
        ms[key.split("/", 1)[0]] += row["model_ms"] * row["invocations_per_message"]
    wru: dict[str, float] = defaultdict(float)
    for key, row in (report.get("dynamodb_units_per_message") or {}).items():
        wru[key.split("/", 1)[1]] += row["write"]
    return dict(ms), dict(wru), f"{path.relative_to(ROOT)} ({report.get('measured_at', '?')})"


def resolve(pipeline: Pipeline, ms: dict[str, float], wru: dict[str, float]) -> Pipeline:
    """Fill service times and table tokens from the measurements."""
    steps = []
    for step in pipeline.steps:
        if step.kind == "stage" and not step.service_ms:
            step = replace(step, service_ms=sum(ms.get(f, 0.0) for f in step.functions))
        if step.kind == "limit" and step.table:
            step = replace(step, per_message=wru.get(step.table, 0.0))
        steps.append(step)
    return replace(pipeline, steps=tuple(steps))


def ceilings(pipeline: Pipeline) -> dict[str, float]:
    """Messages a second each step sustains on its own (its limit over its demand per message)."""
    out: dict[str, float] = {}
    pool_ms = 0.0
    for step in pipeline.steps:
        seconds = (step.service_ms + step.extra_ms) / 1000
        if step.kind == "limit" and step.scope == "all" and step.per_message:
            out[step.name] = step.per_second / step.per_message
        elif step.kind == "stage" and step.concurrency and seconds:
            out[step.name] = step.concurrency / seconds
        if step.kind == "stage" and step.lambda_pool:
            pool_ms += step.service_ms + step.extra_ms
    if pool_ms:
        out["account_concurrency"] = pipeline.account_concurrency / (pool_ms / 1000)
    return out


# --------------------------------------------------------------------------------------------------
# The simulation


@dataclass
class Message:
    id: int
    arrived: float
    session: int
    chat: int
    group: bool


@dataclass
class Bucket:
    rate: float
    size: float
    tokens: float
    at: float = 0.0

    def take(self, now: float, amount: float) -> float:
        """Reserve `amount` tokens; the time the request may go (now, or later)."""
        self.tokens = min(self.size, self.tokens + (now - self.at) * self.rate)
        self.at = now
        self.tokens -= amount
        return now if self.tokens >= 0 else now - self.tokens / self.rate


@dataclass
class StageState:
    step: Step
    index: int
    waiting: deque[tuple[float, list[Message]]] = field(default_factory=deque)
    running: int = 0
    busy_keys: set[int] = field(default_factory=set)
    busy_seconds: float = 0.0
    busy_by_key: dict[int, float] = field(default_factory=lambda: defaultdict(float))


class Simulation:
    def __init__(self, pipeline: Pipeline, seed: int = 1) -> None:
        self.pipeline = pipeline
        self.rng = random.Random(seed)
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.pool = 0
        self.stages = {i: StageState(s, i) for i, s in enumerate(pipeline.steps) if s.kind == "stage"}
        self.buckets: dict[tuple[int, int], Bucket] = {}
        self.tokens: dict[tuple[int, int], float] = defaultdict(float)  # (step, key) -> tokens taken
        self.done: list[tuple[Message, float]] = []
        self.arrival_times: list[float] = []

    def _at(self, when: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, payload))

    def run(self, per_second: float, seconds: float, sessions: list[tuple[int, int, bool]]) -> None:
        now, n = 0.0, 0
        while True:
            now += self.rng.expovariate(per_second)
            if now > seconds:
                break
            session, chat, group = sessions[self.rng.randrange(len(sessions))]
            self._at(now, "enter", (0, [Message(n, now, session, chat, group)]))
            self.arrival_times.append(now)
            n += 1
        while self.events:
            when, _, kind, payload = heapq.heappop(self.events)
            if when > seconds * 4 + 60:
                break  # what is still queued by then is not answered in time
            if kind == "enter":
                self._enter(when, *payload)
            else:
                self._finish(when, *payload)

    def _enter(self, now: float, index: int, messages: list[Message]) -> None:
        if index == len(self.pipeline.steps):
            self.done.extend((m, now) for m in messages)
            return
        step = self.pipeline.steps[index]
        if step.kind == "limit":
            if step.scope == "group" and not messages[0].group:
                self._enter(now, index + 1, messages)  # a group's limit: not a DM's
                return
            key = self._key(step.scope, messages[0])
            bucket = self.buckets.get((index, key))
            if bucket is None:
                size = max(step.burst, 1.0)
                bucket = self.buckets[(index, key)] = Bucket(step.per_second, size, size, now)
            amount = step.per_message * (1 if step.per_reply else len(messages))
            self.tokens[(index, key)] += amount
            self._at(bucket.take(now, amount), "enter", (index + 1, messages))
            return
        self.stages[index].waiting.append((now, messages))
        self._start(now)

    def _start(self, now: float) -> None:
        limit = self.pipeline.account_concurrency
        for state in sorted(self.stages.values(), key=lambda s: s.waiting[0][0] if s.waiting else math.inf):
            step = state.step
            while state.waiting and (step.concurrency is None or state.running < step.concurrency):
                if step.lambda_pool and self.pool >= limit:
                    return
                entry = self._next(state)
                if entry is None:
                    break
                messages, key = entry
                state.running += 1
                self.pool += step.lambda_pool
                if key is not None:
                    state.busy_keys.add(key)
                mean = (step.service_ms + step.extra_ms) / 1000
                took = self.rng.lognormvariate(math.log(mean) - 0.045, 0.3) if mean > 0 else 0.0
                state.busy_seconds += took
                if key is not None:
                    state.busy_by_key[key] += took
                self._at(now + took, "finish", (state.index, key, messages))

    def _next(self, state: StageState) -> tuple[list[Message], int | None] | None:
        """The first waiting entry whose key is free (all of its key's entries for a batching stage)."""
        step = state.step
        for position, (_, messages) in enumerate(state.waiting):
            key = self._key(step.serial, messages[0]) if step.serial else None
            if key is not None and key in state.busy_keys:
                continue
            del state.waiting[position]
            if step.batch and key is not None:
                taken = [e for e in state.waiting if self._key(step.serial, e[1][0]) == key]
                for entry in taken:
                    state.waiting.remove(entry)
                messages = messages + [m for _, ms in taken for m in ms]
            return messages, key
        return None

    def _finish(self, now: float, index: int, key: int | None, messages: list[Message]) -> None:
        state = self.stages[index]
        state.running -= 1
        self.pool -= state.step.lambda_pool
        if key is not None:
            state.busy_keys.discard(key)
        self._enter(now, index + 1, messages)
        self._start(now)

    @staticmethod
    def _key(scope: str | None, message: Message) -> int:
        if scope == "session":
            return message.session
        if scope in ("chat", "group"):
            return message.chat
        return 0


def sessions_mix(count: int = 20_000) -> list[tuple[int, int, bool]]:
    """(session, chat, is a group) for half DMs, a quarter groups, a quarter forum topics (five a forum)."""
    out = []
    for n in range(count):
        kind = n % 4
        chat = 10_000_000 + n // 20 if kind == 3 else n  # a forum's topics share its chat
        out.append((n, chat, kind >= 2))
    return out


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))] if ordered else math.nan


def simulate(pipeline: Pipeline, per_second: float, seconds: float, hot: bool, seed: int = 1) -> dict[str, Any]:
    """One offered load, at least 400 arrivals; the steady state is the second half of them."""
    seconds = max(seconds, 400 / per_second)
    sim = Simulation(pipeline, seed)
    sim.run(per_second, seconds, [(1, 1, True)] if hot else sessions_mix())
    half = seconds / 2
    arrived = sum(1 for t in sim.arrival_times if half <= t <= seconds)
    latencies = sorted(t - m.arrived for m, t in sim.done if half <= m.arrived <= seconds)
    missing = arrived - len(latencies)  # still queued when the simulation stopped: past any p99
    p99 = percentile(latencies + [math.inf] * missing, 99)
    return {
        "offered_per_second": per_second,
        "answered_per_second": round(sum(1 for _, t in sim.done if half <= t <= seconds) / half, 4),
        # answered at all before the simulation stopped (four times the arrivals' span, plus a minute)
        "answered_share": round(len(latencies) / arrived, 3) if arrived else 1.0,
        "latency_p50_s": round(percentile(latencies, 50), 2) if latencies else None,
        "latency_p99_s": round(p99, 2) if math.isfinite(p99) else None,
        # each step's demand over what it can do (its busiest key's, for a per-session or per-chat
        # one): above 1, messages wait (or are refused) there
        "demand": {k: round(v, 3) for k, v in sorted(demand(sim, seconds).items(), key=lambda kv: -kv[1])},
    }


def demand(sim: Simulation, seconds: float) -> dict[str, float]:
    out: dict[str, float] = {}
    pipeline = sim.pipeline
    for index, step in enumerate(pipeline.steps):
        if step.kind == "stage":
            state = sim.stages[index]
            shares = [state.busy_seconds / (step.concurrency * seconds)] if step.concurrency else []
            shares += [max(state.busy_by_key.values(), default=0.0) / seconds] if step.serial else []
            if shares:
                out[step.name] = max(shares)
        elif step.per_second:
            taken = [amount for (i, _), amount in sim.tokens.items() if i == index]
            out[step.name] = max(taken, default=0.0) / (step.per_second * seconds)
    pool_seconds = sum(s.busy_seconds for s in sim.stages.values() if s.step.lambda_pool)
    out["account_concurrency"] = pool_seconds / (pipeline.account_concurrency * seconds)
    return out


def sweep(pipeline: Pipeline, loads: list[float], seconds: float, hot: bool) -> dict[str, Any]:
    """Every load; the knee (the highest load answered in full, its p99 near the unloaded one) and
    the step that binds first (the one most over its limit at the next load up)."""
    rows = [simulate(pipeline, load, seconds, hot) for load in loads]
    base = rows[0]["latency_p99_s"] or math.inf
    knee = None
    for row in rows:
        p99 = row["latency_p99_s"]
        answered = row["answered_share"] >= 0.99
        if answered and p99 is not None and p99 <= pipeline.knee_p99_factor * base:
            knee = row
    over = [r for r in rows if knee is None or r["offered_per_second"] > knee["offered_per_second"]]
    return {
        "knee_messages_per_second": knee["offered_per_second"] if knee else None,
        "binding_limit": next(iter(over[0]["demand"])) if over else None,
        "rows": rows,
    }


LOADS = [0.5, 1, 2, 3, 4, 5, 10, 20, 25, 30, 35, 40, 45, 50, 75, 100, 150, 200, 300]
HOT_LOADS = [0.02, 0.05, 0.1, 0.2, 0.33, 0.5, 1, 2, 5]


def run(scenario: str, model_seconds: float, seconds: float, hot: bool, pipeline_file: Path | None) -> dict[str, Any]:
    ms, wru, source = measured()
    if pipeline_file:
        pipeline = load_pipeline(pipeline_file)
    else:
        pipeline = with_scenario(default_pipeline(model_seconds), scenario)
    pipeline = resolve(pipeline, ms, wru)
    analytic = ceilings(pipeline)
    # A busy group's limits are per minute (20 sends): give them ten minutes to show.
    result = sweep(pipeline, HOT_LOADS if hot else LOADS, max(seconds, 600.0) if hot else seconds, hot)
    return {
        "scenario": "file " + str(pipeline_file) if pipeline_file else scenario,
        "hot_group": hot,
        "model_seconds": model_seconds,
        "simulated_seconds": seconds,
        "service_times_from": source,
        "account_concurrency": pipeline.account_concurrency,
        "ceilings_messages_per_second": {k: round(v, 1) for k, v in sorted(analytic.items(), key=lambda kv: kv[1])},
        **result,
        "pipeline": [asdict(s) for s in pipeline.steps],
    }


def load_pipeline(path: Path) -> Pipeline:
    data = json.loads(path.read_text(encoding="utf-8"))
    steps = tuple(Step(**{**s, "functions": tuple(s.get("functions", ()))}) for s in data["steps"])
    return Pipeline(steps, int(data["account_concurrency"]), float(data.get("knee_p99_factor", 2.0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="defaults")
    parser.add_argument("--model-seconds", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds of arrivals per load")
    parser.add_argument("--hot", action="store_true", help="every message into one busy group")
    parser.add_argument("--pipeline", type=Path, help="a pipeline as JSON (see --print-pipeline)")
    parser.add_argument("--print-pipeline", action="store_true")
    parser.add_argument("--all", action="store_true", help="every scenario, and the busy group, into one file")
    args = parser.parse_args()
    if args.print_pipeline:
        pipeline = with_scenario(default_pipeline(args.model_seconds), args.scenario)
        print(json.dumps({"account_concurrency": pipeline.account_concurrency,
                          "steps": [asdict(s) for s in pipeline.steps]}, indent=2))  # fmt: skip
        return
    if args.all:
        report: dict[str, Any] = {name: run(name, args.model_seconds, args.seconds, False, None) for name in SCENARIOS}
        report["busy_group"] = run("defaults", args.model_seconds, args.seconds, True, None)
    else:
        report = {"run": run(args.scenario, args.model_seconds, args.seconds, args.hot, args.pipeline)}
    for name, result in report.items():
        print(f"{name}: knee {result['knee_messages_per_second']} messages/s, binding {result['binding_limit']}")
        lowest = list(result["ceilings_messages_per_second"].items())[:4]
        print("  ceilings: " + ", ".join(f"{k} {v}" for k, v in lowest))
        for row in result["rows"]:
            top, share = next(iter(row["demand"].items()))
            print(
                f"  {row['offered_per_second']:>6} offered: {row['answered_per_second']:>7} answered/s, "
                f"p50 {row['latency_p50_s']} s, p99 {row['latency_p99_s']} s; most demanded {top} {share:.0%}"
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "capacity-latest.json"
    stamped = {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **report}
    out.write_text(json.dumps(stamped, indent=2) + "\n", encoding="utf-8")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.exit(main())
