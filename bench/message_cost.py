"""Cost per message: a mixed Telegram load through local mode, every AWS request the functions make
counted by service and operation, priced with bench/prices.json into USD per million messages.

Local mode is booted in-process with the echo provider, its answers made 1-2 KB long (a realistic
reply; `--reply-bytes`); a stub Telegram Bot API on loopback plays the platform (it receives the
replies, so a session's next message waits for its reply, as a person would). The load: DMs,
group chats and forum topics; 10% of the updates are delivered twice (a platform retry), 5% are
gateway commands (/help). The run ends when every expected reply is in the outbox, marked sent.

Before the load, a few messages of the same mix run one at a time with nothing else running (the
*solo* phase): each function's CPU and wall time per invocation are taken from them, since in the
busy run one process's threads wait on each other's CPU.

What is counted (bench/meter.py) and how it is priced (bench/pricing.py, whose docstring states
every assumption): every AWS request a function makes (botocore's `_make_api_call` wrapped, the
function read from local mode's `Functions._call`), DynamoDB units from the items moto holds,
Lambda billed duration modelled from CPU time and round trips, the event source pollers'
requests, Step Functions Express duration modelled from its tasks, X-Ray at the default sampling
rule, log bytes and the custom metrics the EMF lines publish.

Usage: .venv/bin/python bench/message_cost.py [--messages N] [--sessions N] [--quick] [--reply-bytes 1024-2048]
       [--set GATEWAY_SESSIONS_RETENTION_DAYS=30 --out /tmp/retention.json]   (a non-default setting, priced apart)
Writes bench/results/message-cost-latest.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.meter import ByteSink, Invocation, Meter, counted_logs  # noqa: E402
from bench.pricing import PRICES, price, profile  # noqa: E402

__all__ = ["ByteSink", "Meter", "counted_logs"]  # the other benches import the meter from here too

RESULTS = ROOT / "bench" / "results"
SECRET = "bench-webhook-secret"
BOT_TOKEN = "123456:bench-token"  # the stub platform's, not a real token
REPLY_BYTES = (1024, 2048)
CALL_KEYS = ("function", "service", "operation", "resource")


def reply_size(low: int, high: int) -> Callable[[str], int]:
    """A reply length between `low` and `high` bytes, fixed by what it answers (runs repeat)."""
    return lambda text: low + zlib.crc32(text.encode()) % (high - low + 1)


def parse_bytes(text: str) -> tuple[int, int] | None:
    """`1024-2048` -> (1024, 2048); `1024` -> (1024, 1024); `echo` -> None (the provider's own answer)."""
    if text == "echo":
        return None
    low, _, high = text.partition("-")
    return int(low), int(high or low)


# --------------------------------------------------------------------------------------------------
# The platform and the load


class PlatformStub:
    """A Telegram Bot API on loopback that accepts every sendMessage and lets a caller wait for
    the n-th reply to a chat (and thread)."""

    def __init__(self) -> None:
        self.received: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
        self.requests = 0
        self._lock = threading.Lock()
        # One condition per chat, on one lock: a reply wakes the client waiting for that chat only
        # (with one for all, each post woke all 100 waiting conversations, GIL churn on the
        # interpreter the gateway runs in).
        self._replied: dict[tuple[str, str], threading.Condition] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with stub._lock:
                    stub.requests += 1
                    message_id = stub.requests
                    if self.path.endswith("/sendMessage"):
                        key = (str(body.get("chat_id")), str(body.get("message_thread_id") or ""))
                        stub.received[key].append((time.perf_counter(), str(body.get("text"))))
                        stub._replied_to(key).notify_all()
                answer = json.dumps({"ok": True, "result": {"message_id": message_id, "date": 0}}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="platform-stub", daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _replied_to(self, key: tuple[str, str]) -> threading.Condition:
        """The chat's condition (made on first use; the caller holds the lock)."""
        if key not in self._replied:
            self._replied[key] = threading.Condition(self._lock)
        return self._replied[key]

    def wait(self, chat_id: str, thread_id: str, count: int, timeout: float) -> list[tuple[float, str]]:
        deadline = time.monotonic() + timeout
        key = (chat_id, thread_id)
        with self._lock:
            while len(self.received[key]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no reply #{count} to chat {chat_id} thread {thread_id or '-'} in {timeout} s")
                self._replied_to(key).wait(left)
            return list(self.received[key])

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass(frozen=True)
class Session:
    kind: str  # dm | group | topic
    chat_id: int
    user_id: int
    thread_id: int | None = None

    @property
    def key(self) -> tuple[str, str]:
        return str(self.chat_id), str(self.thread_id or "")


@dataclass(frozen=True)
class Step:
    update: dict[str, Any]
    retried: bool  # the platform delivers it twice
    command: bool


def make_sessions(count: int, first: int = 0) -> list[Session]:
    """Half DMs, a quarter group chats, a quarter forum topics (five topics per forum); `first`
    numbers them apart from another set's."""
    sessions = []
    for n in range(first, first + count):
        kind = ("dm", "dm", "group", "topic")[n % 4]
        if kind == "dm":
            sessions.append(Session("dm", 10_000 + n, 10_000 + n))
        elif kind == "group":
            sessions.append(Session("group", -(4_000_000 + n), 20_000 + n))
        else:
            sessions.append(Session("topic", -(1_000_000_000 + n // 20), 30_000 + n, thread_id=100 + n))
    return sessions


def make_load(
    sessions: list[Session],
    messages: int,
    seed: int,
    retry_share: float,
    command_share: float,
    first_update: int = 500_000,
) -> dict[Session, list[Step]]:
    rng = random.Random(seed)
    plan: dict[Session, list[Step]] = {s: [] for s in sessions}
    retried = set(rng.sample(range(messages), round(messages * retry_share)))
    commands = set(rng.sample(sorted(set(range(messages)) - retried), round(messages * command_share)))
    for n in range(messages):
        session = sessions[n % len(sessions)]
        text = "/help" if n in commands else f"message {n}: " + " ".join(rng.choice(_WORDS) for _ in range(8))
        plan[session].append(Step(telegram_update(first_update + n, text, session), n in retried, n in commands))
    return plan


_WORDS = ("deploy", "the", "queue", "is", "green", "why", "lambda", "cost", "ok", "please", "check", "logs")


def telegram_update(update_id: int, text: str, session: Session) -> dict[str, Any]:
    chat: dict[str, Any] = {"id": session.chat_id, "type": "private", "first_name": "Al"}
    if session.kind != "dm":
        chat = {"id": session.chat_id, "type": "supergroup" if session.kind == "topic" else "group", "title": "Ops"}
    message: dict[str, Any] = {
        "message_id": update_id,
        "date": int(time.time()),
        "chat": chat,
        "from": {"id": session.user_id, "is_bot": False, "first_name": "Al"},
        "text": text,
    }
    if session.thread_id is not None:
        message["message_thread_id"] = session.thread_id
        message["is_topic_message"] = True
    return {"update_id": update_id, "message": message}


CONNECTION_RETRIES = Counter[str]()  # webhook posts retried after a refused or reset connection


def post_update(base_url: str, update: dict[str, Any], attempts: int = 5) -> int:
    """POST an update as Telegram would, retrying a connection the local HTTP front dropped (its
    listen backlog is small: a hundred clients at once overflow it). A retry of a request that
    did arrive is a duplicate, which the gateway answers once, as it must."""
    request = urllib.request.Request(
        base_url + "/webhooks/telegram",
        data=json.dumps(update).encode(),
        headers={"content-type": "application/json", "x-telegram-bot-api-secret-token": SECRET},
        method="POST",
    )
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as exc:
            if attempt == attempts - 1:
                raise
            CONNECTION_RETRIES[type(getattr(exc, "reason", exc)).__name__] += 1
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def outbox() -> list[dict[str, Any]]:
    """Every row of the running local mode's outbox, oldest first. Read in-process from the outbox
    table: `GET /local/outbox` serves the same rows, but only the newest 200."""
    from hermes_gateway import wiring

    return [row.to_dict() for row in wiring.outbox().recent(limit=1_000_000_000)]


def outbox_rows() -> int:
    """How many rows the running local mode's outbox holds: a counting scan, which moto answers
    without rendering the rows (what a clock polling while the gateway works should cost)."""
    from hermes_gateway import wiring

    return int(wiring.outbox().model.count())


def wait_outbox(count: int, timeout: float) -> list[dict[str, Any]]:
    """Until `count` replies are in the outbox (the router's busy notices do not count: see `run`)."""
    deadline = time.monotonic() + timeout
    rows = outbox()
    while len([r for r in rows if not r["delivery_id"].startswith("busy-")]) < count and time.monotonic() < deadline:
        time.sleep(0.5)
        rows = outbox()
    return rows


BENCH_CONTEXT_WINDOW = 128_000  # tokens: the window of the models the defaults name


@contextmanager
def local_gateway(environ: dict[str, str] | None = None) -> Iterator[tuple[Any, PlatformStub]]:
    """Local mode in this process with the echo provider, its Telegram replies going to a stub."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # before the handlers' logger exists
    from hermes_local.runtime import LocalGateway

    platform = PlatformStub()
    env = {
        "PATH": "/usr/bin:/bin",
        "GATEWAY_PROVIDER": "echo",
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
        "TELEGRAM_BOT_TOKEN": BOT_TOKEN,
        "TELEGRAM_API_BASE_URL": platform.base_url,
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        # As deployed by default: no lifecycle event on the bus (local mode's own default is every
        # one), and outbox rows with a preview of each chunk (local mode's keep the whole text)
        "GATEWAY_BUS_EVENTS": "",
        "HERMES_LOCAL_OUTBOX_PREVIEW": "1",  # hermes_gateway.wiring.LOCAL_OUTBOX_PREVIEW_ENV
        # The echo model stands in for a deployment's model, whose window is known by its name
        # (gpt-4o, claude, nova: 128k and more); echo's own would be the 8k fallback, which
        # compresses a 1-2 KB-reply session every few messages (a cost of small models, apart)
        "GATEWAY_CONTEXT_WINDOW": str(BENCH_CONTEXT_WINDOW),
        # The bench sends a month's messages in minutes: its groups would be paced to Telegram's
        # 20 sends a minute, and the run would measure their waits. Each group send still takes
        # its slot, in one write, as a group below the limit does.
        "TELEGRAM_GROUP_SENDS_PER_MINUTE": "60000",
        # Likewise a user's limit of messages a minute (a long session sends 200 in a few minutes):
        # the limit is checked on every message, with its reads, and never reached.
        "GATEWAY_LIMIT_MESSAGES_PER_MINUTE": "1000000",
        **(environ or {}),
    }
    gateway = LocalGateway(port=0, environ=env, tick_seconds=3600, poll_wait_seconds=1)
    try:
        gateway.start()
        from hermes_gateway.observability import logger

        logger.setLevel(env["POWERTOOLS_LOG_LEVEL"])  # the logger may predate this environment
        yield gateway, platform
    finally:
        gateway.stop()
        platform.close()


def table_specs() -> dict[str, Any]:
    from hermes_gateway.resources import TABLES

    return {os.environ[t.env_var]: t for t in TABLES if t.env_var in os.environ}


def run_session(
    base_url: str, platform: PlatformStub, session: Session, steps: list[Step], think: float
) -> list[float]:
    """One person's conversation: each message (twice when the platform retries it), then its reply."""
    latencies = []
    for n, step in enumerate(steps, start=1):
        sent = time.perf_counter()
        for _ in range(2 if step.retried else 1):
            status = post_update(base_url, step.update)
            if status != 200:
                raise RuntimeError(f"webhook answered {status}")
        replies = platform.wait(*session.key, count=n, timeout=120)
        latencies.append(replies[n - 1][0] - sent)
        if think:
            time.sleep(think)
    return latencies


def drive(
    base_url: str, platform: PlatformStub, plan: dict[Session, list[Step]], concurrency: int, think: float
) -> list[float]:
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="client") as pool:
        futures = [pool.submit(run_session, base_url, platform, s, steps, think) for s, steps in plan.items()]
        return [latency for future in futures for latency in future.result()]


# --------------------------------------------------------------------------------------------------
# Measuring


def solo_phase(gateway: Any, platform: PlatformStub, meter: Meter, count: int, seed: int) -> list[Invocation]:
    """`count` messages of the run's mix, one at a time with nothing else running; their invocations."""
    sessions = make_sessions(4, first=5_000)
    plan = make_load(sessions, count, seed + 1, 0.10, 0.05, first_update=900_000)
    invocations: list[Invocation] = []
    for session, steps in plan.items():
        for n, step in enumerate(steps, start=1):
            meter.wait_idle()
            meter.reset()
            for _ in range(2 if step.retried else 1):
                if post_update(gateway.url, step.update) != 200:
                    raise RuntimeError("the webhook was refused")
            platform.wait(*session.key, count=n, timeout=60)
            meter.wait_idle()
            invocations.extend(meter.invocations)
    meter.reset()
    return invocations


def calls_table(counter: Counter[Any], messages: int, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows of (names..., count, per_message), most frequent first."""
    return [
        {**dict(zip(names, key, strict=True)), "count": count, "per_message": round(count / messages, 3)}
        for key, count in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    ]


def by_service_operation(meter: Meter, messages: int) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = defaultdict(dict)
    totals: Counter[tuple[str, str]] = Counter()
    for (_, service, operation, _), count in meter.calls.items():
        totals[(service, operation)] += count
    for (service, operation), count in sorted(totals.items()):
        table[service][operation] = round(count / messages, 3)
    return dict(table)


def measured(meter: Meter, messages: int, sink: ByteSink) -> dict[str, Any]:
    """What the meter saw, per message (the keys every bench that prices a run reports)."""
    return {
        "aws_requests_per_message": by_service_operation(meter, messages),
        "aws_requests_per_message_total": round(sum(meter.calls.values()) / messages, 3),
        "function_requests": calls_table(meter.calls, messages, CALL_KEYS),
        "lambda_poller_requests_in_local_mode": calls_table(meter.pollers, messages, CALL_KEYS[1:]),
        "handoff_requests": calls_table(meter.handoffs, messages, CALL_KEYS[1:]),
        "other_requests_not_counted": calls_table(meter.others, messages, CALL_KEYS[1:]),
        "dynamodb_units_per_message": _units(meter, messages),
        "custom_metrics": sorted(f"{ns}/{name}" + "".join(f" {k}={v}" for k, v in dims)
                                 for ns, name, dims in sink.metrics),
        "model_wait_seconds_per_message": round(sum(meter.model_seconds) / messages, 6),
        "failed_invocations": meter.failed_invocations,
    }  # fmt: skip


def run(
    messages: int = 1000,
    sessions: int = 100,
    concurrency: int = 10,
    think: float = 1.0,
    seed: int = 9,
    retry_share: float = 0.10,
    command_share: float = 0.05,
    reply_bytes: tuple[int, int] | None = REPLY_BYTES,
    solo: int = 20,
    settings: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Drive the load and return the report (not written anywhere); `settings` are environment
    settings of the deployment priced (its defaults when none)."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # before the handlers' logger is first imported
    plan = make_load(make_sessions(sessions), messages, seed, retry_share, command_share)
    webhook_requests = sum(2 if step.retried else 1 for steps in plan.values() for step in steps)
    meter = Meter(reply_bytes=reply_size(*reply_bytes) if reply_bytes else None)
    meter.install()
    try:
        with local_gateway(settings) as (gateway, platform):
            meter.table_specs = table_specs()
            # One message first, outside the count: clients, imports and the first session are created.
            warm = Session("dm", 9_999, 9_999)
            run_session(gateway.url, platform, warm, [Step(telegram_update(1, "warm up", warm), False, False)], 0)
            alone = solo_phase(gateway, platform, meter, solo, seed) if solo else []
            meter.wait_idle()
            meter.reset()
            started = time.perf_counter()
            with counted_logs() as logs:
                latencies = drive(gateway.url, platform, plan, concurrency, think)
                wait_outbox(messages + 1 + solo, timeout=60)
                seconds = time.perf_counter() - started
                meter.wait_idle()  # the last turns commit and release their leases
            rows = outbox()
    finally:
        meter.uninstall()
    # A person here answers the instant a reply arrives, often before its turn has finished: the
    # router's busy notice ("still working on your previous message") is then a row of its own.
    chats = {str(s.chat_id) for s in plan}
    replies = [r for r in rows if r["chat_id"] in chats and not r["delivery_id"].startswith("busy-")]
    sent = sum(1 for r in replies if r["status"] == "sent")
    if len(replies) != messages or sent != messages:
        raise RuntimeError(f"expected {messages} replies sent, found {len(replies)} in the outbox ({sent} sent)")
    solo_profile = profile(alone)
    priced = price(meter, messages, webhook_requests, logs.bytes, len(logs.metrics), solo_profile)
    via_url = price(
        meter, messages, webhook_requests, logs.bytes, len(logs.metrics), solo_profile, endpoint="function_url"
    )
    busy = sum(n for (_, _, op, _), n in meter.calls.items() if op == "ChangeMessageVisibility")  # a busy retry
    return {
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "messages_tested": messages,
        "sessions": sessions,
        "load": {
            "dm_group_topic_sessions": dict(Counter(s.kind for s in plan)),
            "webhook_requests": webhook_requests,
            "platform_retries": round(retry_share * messages),
            "gateway_commands": round(command_share * messages),
            "client_concurrency": concurrency,
            "think_seconds": think,
            "seed": seed,
            "reply_bytes": list(reply_bytes) if reply_bytes else "echo",
            "solo_messages": solo,
        },
        **priced,
        # the same run priced with the platforms posting to the ingress function's URL
        # (`ingress.endpoint: function_url`): no API Gateway request, no access line
        "cost_per_million_usd_function_url": via_url["cost_per_million_usd"],
        "cost_by_service_function_url": via_url["cost_by_service"],
        "prices_recorded": PRICES["recorded"],
        **measured(meter, messages, logs),
        "lambda_solo_profile": solo_profile,
        "lambda_duration_ms_busy_run": {
            name: {
                "p50": round(statistics.median(d) * 1000, 1),
                "mean": round(statistics.fmean(d) * 1000, 1),
                "cpu_mean": round(statistics.fmean(c) * 1000, 1),
            }
            for name, d, c in _durations(meter)
        },
        "busy_retries": busy,
        "webhook_connection_retries": sum(CONNECTION_RETRIES.values()),
        "reply_latency_seconds": {
            "p50": round(statistics.median(latencies), 3),
            "p99": round(_percentile(latencies, 99), 3),
        },
        "seconds": round(seconds, 1),
        "approximations": APPROXIMATIONS,
    }


APPROXIMATIONS = [
    "Lambda: billed duration modelled as CPU time / CPU share + a round trip per AWS call (bench/pricing.py), "
    "from the solo phase's invocations by function and step; the wall-clock figure beside it",
    "DynamoDB units: item sizes from moto by DynamoDB's rules (1 KB writes, 4 KB reads, index writes, "
    "transactions x2); UpdateItem and PutItem use the larger of the before and after item",
    "Step Functions Express duration: the tasks' modelled durations plus an overhead each, 100 ms steps, 64 MB",
    "CloudWatch Logs: bytes logged in-process at INFO plus EMF metric lines (concurrent flushes may drop a few), "
    "Lambda's platform lines per invocation, API Gateway's access log line per request; storage not counted",
    "event source mappings at the reference traffic: one record per batch (an invocation, a receive, a delete)",
    "free tiers are not subtracted; secrets read from SSM once per container (cached 5 min) are not counted",
]


def _units(meter: Meter, messages: int) -> dict[str, dict[str, float]]:
    """Read and write units per message, by function and table."""
    keys = sorted(set(meter.rru) | set(meter.wru))
    return {
        f"{function}/{table}": {
            "read": round(meter.rru[(function, table)] / messages, 3),
            "write": round(meter.wru[(function, table)] / messages, 3),
        }
        for function, table in keys
    }


def _durations(meter: Meter) -> Iterator[tuple[str, list[float], list[float]]]:
    grouped: dict[str, list[Invocation]] = defaultdict(list)
    for invocation in meter.invocations:
        grouped[invocation.function].append(invocation)
    for name in sorted(grouped):
        yield name, [i.seconds for i in grouped[name]], [i.cpu_seconds for i in grouped[name]]


def _percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 600 over 60 keeps the whole `make bench` near 10 minutes on 2 cores (local mode is CPU-bound
    # at about 2 messages/s); `--messages 1000 --sessions 100` runs the larger mix.
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=10, help="sessions talking at once")
    parser.add_argument("--think", type=float, default=0.5, help="seconds between a reply and the next message")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--reply-bytes", default="1024-2048", help="the fake model's answer size, or 'echo'")
    parser.add_argument("--solo", type=int, default=20, help="messages measured alone first (Lambda time)")
    parser.add_argument("--quick", action="store_true", help="200 messages over 20 sessions, 8 alone")
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE",
        help="price a deployment with this environment setting (e.g. GATEWAY_SESSIONS_RETENTION_DAYS=30)",
    )  # fmt: skip
    parser.add_argument("--out", default=None, help="write the report here (default results/message-cost-latest.json)")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.sessions, args.solo = 200, 20, 8
    report = run(
        args.messages, args.sessions, args.concurrency, args.think, args.seed,
        reply_bytes=parse_bytes(args.reply_bytes), solo=args.solo,
        settings=dict(item.split("=", 1) for item in args.set) or None,
    )  # fmt: skip
    if args.set:
        report["settings"] = args.set
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else RESULTS / "message-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{report['messages_tested']} messages in {report['seconds']} s")
    print(f"cost per million messages: {report['cost_per_million_usd']} USD (model tokens excluded)")
    for service, usd in report["cost_by_service"].items():
        print(f"  {service:<16} {usd:8.4f}")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
