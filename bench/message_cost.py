"""Cost per message: a mixed Telegram load through local mode, every AWS request the functions make
counted by service and operation, priced with bench/prices.json into USD per million messages.

Local mode is booted in-process with the echo provider; a stub Telegram Bot API on loopback plays
the platform (it receives the replies, so a session's next message waits for its reply, as a
person would). The load: DMs, group chats and forum topics; 10% of the updates are delivered twice
(a platform retry), 5% are gateway commands (/help). The run ends when every expected reply is in
the outbox, marked sent (the outbox table is read in-process: GET /local/outbox shows only the
newest 200 rows).

What is counted and how (the approximations are written into the result too):
- AWS requests: `botocore.client.BaseClient._make_api_call` is wrapped. A request counts for a
  function when it is made inside one of its invocations (local mode's `Functions._call` is
  wrapped to mark the thread). The pollers that play Lambda's SQS event sources (threads
  `poll-*`) are Lambda's own pollers in AWS: they are reported apart, never in the total; so
  are Step Functions' own Lambda invokes of the agent and this harness's reads.
- DynamoDB request units: from the item sizes in moto (before and after each write, read from
  its backend) by DynamoDB's rules: a write is ceil(larger item / 1 KB) WRU, plus one write per
  global secondary index the item is in (two when the index key changes); a consistent read is
  ceil(size / 4 KB) RRU (half when eventually consistent); a query sums the returned items;
  transactions cost double; a failed condition still costs its write.
- Lambda: invocations per function, and GB-seconds from the measured in-process duration (each
  rounded up to 1 ms) x the configured memory (hermes_gateway.resources.FUNCTIONS). An estimate:
  moto's latency and this machine's CPU stand in for AWS's, and one busy Python process runs
  everything, so it is on the high side; a modelled figure (the handler's CPU time plus 10 ms per
  AWS call) is reported beside it, outside the total.
- Step Functions Express: one request per execution, and its duration (StartExecution to the end
  of the last task) billed in 100 ms steps at 64 MB.
- API Gateway (HTTP API): one request per webhook delivery, retries included.
- CloudWatch Logs: the bytes the functions log at the deployed level (INFO, with the metrics'
  EMF lines), plus Lambda's START/END/REPORT lines and an API Gateway access log line per request.
- Not counted: the model's tokens (the echo provider has none); the model's wait time is reported
  apart (Lambda bills it as agent duration). X-Ray is modelled apart (not measured), as are
  Lambda's pollers.

Usage: .venv/bin/python bench/message_cost.py [--messages N] [--sessions N] [--quick]
Writes bench/results/message-cost-latest.json.
"""

from __future__ import annotations

import argparse
import functools
import http.client
import io
import itertools
import json
import logging
import math
import os
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT, ROOT / "layers" / "common", ROOT / "local"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

PRICES = json.loads((ROOT / "bench" / "prices.json").read_text(encoding="utf-8"))
RESULTS = ROOT / "bench" / "results"
SECRET = "bench-webhook-secret"
BOT_TOKEN = "123456:bench-token"  # the stub platform's, not a real token
LAMBDA_PLATFORM_LOG_BYTES = 400  # START, END and REPORT lines per invocation (as bench/idle_cost.py)
ACCESS_LOG_BYTES = 330  # one API Gateway access log line (infra/capabilities/api.py's format), filled in
EXPRESS_MEMORY_GB = 64 / 1024  # Express executions are billed in 64 MB steps; a turn's payload fits the first
AWS_CALL_SECONDS = 0.010  # a typical in-region DynamoDB, SQS or Step Functions round trip from Lambda
XRAY_SAMPLED = 0.05  # X-Ray's default rule: the first request each second, then 5%

_context = threading.local()  # .function, .invocation: the function invocation running on this thread


# --------------------------------------------------------------------------------------------------
# Metering


@dataclass
class Invocation:
    id: int
    function: str
    step: str  # the turn step, for the agent
    seconds: float
    cpu_seconds: float
    started: float
    ended: float
    aws_calls: int = 0


@dataclass
class Meter:
    """Counts AWS requests in this process by who made them, and the functions' invocations.

    `install()` wraps botocore's `_make_api_call` and local mode's `Functions._call`;
    `uninstall()` puts them back. With `trace=True` every request a function makes is kept in
    order, with the invocation it belongs to."""

    table_specs: dict[str, Any] = field(default_factory=dict)  # physical table name -> TableSpec
    trace: bool = False
    units: bool = True  # DynamoDB request units (reads each written item in moto before and after)
    calls: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)  # function, service, op, resource
    pollers: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # service, op, resource
    others: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    rru: Counter[tuple[str, str]] = field(default_factory=Counter)  # (function, table) -> read units
    wru: Counter[tuple[str, str]] = field(default_factory=Counter)
    invocations: list[Invocation] = field(default_factory=list)
    executions: dict[str, list[float]] = field(default_factory=dict)  # turn id -> [start, last task end]
    poller_batches: int = 0  # receives that returned messages
    bus_events: int = 0  # entries the functions put on the event bus (EventBridge bills each)
    failed_invocations: int = 0  # invocations that raised (Lambda would retry their batch)
    model_seconds: list[float] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # the trace
    _calls_in: Counter[int] = field(default_factory=Counter)  # invocation -> AWS calls it made
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list)

    def reset(self) -> None:
        with self._lock:
            for counter in (self.calls, self.pollers, self.others, self.rru, self.wru):
                counter.clear()
            self.invocations.clear()
            self.executions.clear()
            self.model_seconds.clear()
            self.events.clear()
            self.poller_batches = self.bus_events = self.failed_invocations = 0
            self._calls_in.clear()

    def install(self) -> Meter:
        import botocore.client

        from hermes_local.runtime import Functions

        original_call = botocore.client.BaseClient._make_api_call
        original_invoke = Functions._call
        meter = self

        def _make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            return meter._metered(original_call, client, operation, params)

        def _call(functions: Any, name: str, event: dict[str, Any], context: Any) -> Any:
            return meter._invoked(original_invoke, functions, name, event, context)

        self._patch(botocore.client.BaseClient, "_make_api_call", _make_api_call)
        self._patch(Functions, "_call", _call)
        self._patch_provider()
        return self

    def uninstall(self) -> None:
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def _patch_provider(self) -> None:
        """Time every model request (the model's wait, which Lambda bills as agent duration)."""
        import hermes_gateway.providers as providers

        original = providers.make_provider
        meter = self

        class Timed:
            def __init__(self, inner: Any) -> None:
                self.inner, self.name = inner, inner.name

            def complete(self, system: str, messages: list[Any], tools: list[Any] | None = None) -> Any:
                started = time.perf_counter()
                try:
                    return self.inner.complete(system, messages, tools)
                finally:
                    with meter._lock:
                        meter.model_seconds.append(time.perf_counter() - started)

        def make_provider(*args: Any, **kwargs: Any) -> Any:
            return Timed(original(*args, **kwargs))

        self._patch(providers, "make_provider", make_provider)

    # -- the two wrappers

    def _invoked(self, original: Callable[..., Any], functions: Any, name: str, event: Any, context: Any) -> Any:
        with self.within(name, event):
            return original(functions, name, event, context)

    @contextmanager
    def within(self, name: str, event: Any = None) -> Iterator[int]:
        """Count what runs inside as one invocation of the function `name` (on this thread)."""
        outer = (getattr(_context, "function", None), getattr(_context, "invocation", None))
        invocation = next(self._ids)
        _context.function, _context.invocation = name, invocation
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            yield invocation
        except BaseException:
            with self._lock:
                self.failed_invocations += 1
            raise
        finally:
            ended = time.perf_counter()
            _context.function, _context.invocation = outer
            event = event if isinstance(event, dict) else {}
            step = str(event.get("step") or "")
            with self._lock:
                made = self._calls_in.pop(invocation, 0)
                self.invocations.append(
                    Invocation(invocation, name, step, ended - started, time.thread_time() - cpu, started, ended, made)
                )
                turn_id = (event.get("turn") or {}).get("turn_id") if name == "agent" else None
                if turn_id:
                    span = self.executions.setdefault(turn_id, [started, ended])
                    span[0], span[1] = min(span[0], started), max(span[1], ended)

    def _metered(self, original: Callable[..., Any], client: Any, operation: str, params: dict[str, Any]) -> Any:
        function = getattr(_context, "function", None)
        service = client.meta.service_model.service_name
        resource = _resource(service, params)
        metered = self.units and service == "dynamodb" and function is not None
        before = self._dynamo_items(operation, params) if metered else None
        started = time.perf_counter()
        result: Any = None
        try:
            result = original(client, operation, params)
            return result
        finally:
            with self._lock:
                if service == "events" and operation == "PutEvents":
                    # counted wherever it runs: functions publish events on a thread of their own
                    self.bus_events += len(params.get("Entries", []))
                if function is not None:
                    self.calls[(function, service, operation, resource)] += 1
                    self._calls_in[_context.invocation] += 1
                    if self.trace:
                        self.events.append(
                            {"t": started, "ms": round((time.perf_counter() - started) * 1000, 2),
                             "function": function, "invocation": _context.invocation,
                             "service": service, "operation": operation, "resource": resource}
                        )  # fmt: skip
                    if service == "stepfunctions" and operation == "StartExecution":
                        self.executions.setdefault(str(params.get("name")), [started, started])[0] = started
                elif threading.current_thread().name.startswith("poll-"):
                    self.pollers[(service, operation, resource)] += 1
                    if operation == "ReceiveMessage" and result and result.get("Messages"):
                        self.poller_batches += 1
                else:
                    self.others[(service, operation, resource)] += 1
            if before is not None and function is not None:
                after = self._dynamo_items(operation, params)
                units = self._request_units(operation, params, result, before, after)
                with self._lock:
                    for (table, kind), amount in units.items():
                        (self.rru if kind == "read" else self.wru)[(function, table)] += amount

    # -- DynamoDB request units

    def _dynamo_items(self, operation: str, params: dict[str, Any]) -> list[tuple[str, Any]]:
        """(table, the item as moto holds it now, or None) for each item a write touches."""
        if operation not in _WRITES:
            return []
        return [(table, _moto_item(table, key)) for table, key in _written_keys(operation, params)]

    def _request_units(
        self, operation: str, params: dict[str, Any], result: Any, before: list[Any], after: list[Any]
    ) -> Counter[tuple[str, str]]:
        """(table, "read" | "write") -> request units; a transaction's units go to each item's table."""
        units: Counter[tuple[str, str]] = Counter()
        factor = 2.0 if operation.startswith("Transact") else 1.0
        if operation in _WRITES:
            for (table, old), (_, new) in zip(before, after, strict=True):
                base = max(1, math.ceil(max(_size(old), _size(new)) / 1024))
                # Index upkeep is an ordinary write, even for a transaction's item.
                units[(_resource("dynamodb", {"TableName": table}), "write")] += base * factor
                units[(_resource("dynamodb", {"TableName": table}), "write")] += self._index_writes(table, old, new)
            for item in params.get("TransactItems", []):
                if "ConditionCheck" in item:  # billed as a write; there is no item change to see
                    units[(_resource("dynamodb", item["ConditionCheck"]), "write")] += factor
            return units
        table = _resource("dynamodb", params)
        consistent = 1.0 if params.get("ConsistentRead") else 0.5
        if operation == "GetItem":
            item = (result or {}).get("Item")
            units[(table, "read")] += consistent * max(1, math.ceil(_json_size(item) / 4096))
        elif operation in ("Query", "Scan"):
            total = sum(_json_size(item) for item in (result or {}).get("Items", []))
            units[(table, "read")] += consistent * max(1, math.ceil(total / 4096))
        elif operation == "TransactGetItems":
            for item in params.get("TransactItems", []):
                units[(_resource("dynamodb", item["Get"]), "read")] += factor
        return units  # table management, TTL: not per message

    def _index_writes(self, table: str, old: Any, new: Any) -> int:
        """Writes to the table's global secondary indexes (all project every attribute)."""
        spec = self.table_specs.get(table)
        if spec is None or (old and new and old[1] == new[1]):
            return 0  # nothing changed (a failed condition): no index is written
        writes = 0
        for index in spec.indexes:
            names = [index.partition.name] + ([index.sort.name] if index.sort else [])
            old_key, new_key = _index_key(old, names), _index_key(new, names)
            if old_key is not None and new_key is not None and old_key != new_key:
                writes += 2  # the index entry moves: a delete and a put
            elif old_key is not None or new_key is not None:
                writes += 1
        return writes


PRICED_SERVICES = {"sqs", "dynamodb", "stepfunctions", "events", "ssm"}  # ssm: standard parameters are free
CALL_KEYS = ("function", "service", "operation", "resource")
_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


def _resource(service: str, params: dict[str, Any]) -> str:
    """The logical name of the table, queue or state machine a request is about ("" when none)."""
    name = params.get("TableName") or params.get("QueueUrl") or params.get("stateMachineArn") or ""
    if not name and params.get("Entries"):
        name = params["Entries"][0].get("EventBusName", "")
    if not name and params.get("TransactItems"):
        first = params["TransactItems"][0]
        name = next(iter(first.values())).get("TableName", "")
    name = str(name).rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".fifo")
    for known in _logical_names():
        if name == known or name.endswith("-" + known):
            return known
    return name


@functools.cache
def _logical_names() -> tuple[str, ...]:
    """Every table, queue (and dead-letter queue) and state machine name, longest first."""
    from hermes_gateway import resources

    names = {t.name for t in resources.TABLES} | {resources.TURN_STATE_MACHINE.name}
    names |= {q.name for q in resources.QUEUES} | {f"{q.name}-dlq" for q in resources.QUEUES}
    bus = getattr(resources, "EVENT_BUS", None)
    if bus is not None:
        names.add(bus.name)
    return tuple(sorted(names, key=len, reverse=True))


def _written_keys(operation: str, params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if operation in ("UpdateItem", "DeleteItem"):
        return [(params["TableName"], params["Key"])]
    if operation == "PutItem":
        return [(params["TableName"], params["Item"])]
    if operation == "TransactWriteItems":
        keys = []
        for item in params["TransactItems"]:
            for kind in ("Put", "Update", "Delete"):
                if kind in item:
                    keys.append((item[kind]["TableName"], item[kind].get("Key") or item[kind]["Item"]))
        return keys
    if operation == "BatchWriteItem":
        keys = []
        for table, requests in params["RequestItems"].items():
            for request in requests:
                if "PutRequest" in request:
                    keys.append((table, request["PutRequest"]["Item"]))
                else:
                    keys.append((table, request["DeleteRequest"]["Key"]))
        return keys
    return []


def _moto_item(table_name: str, key: dict[str, Any]) -> Any:
    """The item as moto's backend (in this process) holds it, or None."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import DynamoType

    from hermes_local.aws import ACCOUNT_ID

    try:
        table = dynamodb_backends[ACCOUNT_ID][os.environ.get("AWS_REGION", "us-east-1")].get_table(table_name)
        hash_key = DynamoType(key[table.hash_key_attr])
        range_key = DynamoType(key[table.range_key_attr]) if table.range_key_attr else None
        item = table.get_item(hash_key, range_key)
    except Exception:  # noqa: BLE001 - a table or key moto does not know: nothing to measure
        return None
    return None if item is None else (item.size(), {k: v.value for k, v in item.attrs.items()})


def _size(item: Any) -> int:
    return int(item[0]) if item else 0


def _index_key(item: Any, names: list[str]) -> tuple[Any, ...] | None:
    if not item or any(name not in item[1] for name in names):
        return None
    return tuple(str(item[1][name]) for name in names)


def _json_size(item: dict[str, Any] | None) -> int:
    """An item's size from its DynamoDB JSON: attribute names plus values (close to DynamoDB's rule)."""
    if not item:
        return 0
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


_DYNAMO_TYPES = frozenset({"S", "B", "N", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"})


def _value_size(value: Any) -> int:
    if not (isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _DYNAMO_TYPES):
        # An answer boto3's resource layer already turned into Python values (in place)
        return _python_size(value)
    kind, inner = next(iter(value.items()))
    if kind in ("S", "B"):
        return len(inner.encode() if isinstance(inner, str) else inner)
    if kind == "N":
        return len(inner) // 2 + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in inner)
    return sum(len(str(v)) for v in inner)  # sets


def _python_size(value: Any) -> int:
    """The same rule for a deserialized value (a boto3 resource's item)."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int | float | Decimal):
        return len(str(value)) // 2 + 1
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, dict):
        return 3 + sum(len(str(k).encode()) + _python_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple | set | frozenset):
        return 3 + sum(_python_size(v) + 1 for v in value)
    return len(str(value))


# --------------------------------------------------------------------------------------------------
# Log volume


class ByteSink(io.TextIOBase):
    """A text stream that only counts what is written to it."""

    def __init__(self) -> None:
        self.bytes = 0
        self.lines = 0
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.bytes += len(text.encode("utf-8", "replace"))
            self.lines += text.count("\n")
        return len(text)

    def writable(self) -> bool:
        return True


@contextmanager
def counted_logs() -> Iterator[ByteSink]:
    """The functions' log lines (at INFO, as deployed) and metric (EMF) lines, counted, not shown.

    Local mode keeps metrics off (POWERTOOLS_METRICS_DISABLED); here each flush is serialized as
    Lambda would print it and counted instead. Every function shares one metric set in this
    process, so adding, flushing and clearing are serialized with a lock (a flush may carry
    another thread's metrics: the bytes are about right, the lines fewer)."""
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider as Emf

    from hermes_gateway.observability import logger

    sink = ByteSink()
    handler = logger.registered_handler
    saved_stream, saved_level = getattr(handler, "stream", None), logger.log_level
    saved_methods = {name: Emf.__dict__[name] for name in ("add_metric", "clear_metrics", "flush_metrics")}
    lock = threading.RLock()

    def add_metric(provider: Any, *args: Any, **kwargs: Any) -> None:
        with lock:
            saved_methods["add_metric"](provider, *args, **kwargs)

    def clear_metrics(provider: Any) -> None:
        with lock:
            saved_methods["clear_metrics"](provider)

    def flush_metrics(provider: Any, raise_on_empty_metrics: bool = False) -> None:
        with lock:
            if provider.metric_set:
                sink.write(json.dumps(provider.serialize_metric_set(), separators=(",", ":")) + "\n")
                saved_methods["clear_metrics"](provider)

    for name, method in (
        ("add_metric", add_metric),
        ("clear_metrics", clear_metrics),
        ("flush_metrics", flush_metrics),
    ):
        setattr(Emf, name, method)
    logger.setLevel(logging.INFO)
    if isinstance(handler, logging.StreamHandler):
        handler.setStream(sink)
    try:
        yield sink
    finally:
        if isinstance(handler, logging.StreamHandler) and saved_stream is not None:
            handler.setStream(saved_stream)
        logger.setLevel(saved_level)
        for name, method in saved_methods.items():
            setattr(Emf, name, method)
        from hermes_gateway.observability import metrics

        metrics.clear_metrics()  # nothing counted in here is flushed later, outside


# --------------------------------------------------------------------------------------------------
# The platform and the load


class PlatformStub:
    """A Telegram Bot API on loopback that accepts every sendMessage and lets a caller wait for
    the n-th reply to a chat (and thread)."""

    def __init__(self) -> None:
        self.received: dict[tuple[str, str], list[tuple[float, str]]] = defaultdict(list)
        self.requests = 0
        self._changed = threading.Condition()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                with stub._changed:
                    stub.requests += 1
                    message_id = stub.requests
                    if self.path.endswith("/sendMessage"):
                        key = (str(body.get("chat_id")), str(body.get("message_thread_id") or ""))
                        stub.received[key].append((time.perf_counter(), str(body.get("text"))))
                    stub._changed.notify_all()
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

    def wait(self, chat_id: str, thread_id: str, count: int, timeout: float) -> list[tuple[float, str]]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.received[(chat_id, thread_id)]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no reply #{count} to chat {chat_id} thread {thread_id or '-'} in {timeout} s")
                self._changed.wait(left)
            return list(self.received[(chat_id, thread_id)])

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


def make_sessions(count: int) -> list[Session]:
    """Half DMs, a quarter group chats, a quarter forum topics (five topics per forum)."""
    sessions = []
    for n in range(count):
        kind = ("dm", "dm", "group", "topic")[n % 4]
        if kind == "dm":
            sessions.append(Session("dm", 10_000 + n, 10_000 + n))
        elif kind == "group":
            sessions.append(Session("group", -(4_000_000 + n), 20_000 + n))
        else:
            sessions.append(Session("topic", -(1_000_000_000 + n // 20), 30_000 + n, thread_id=100 + n))
    return sessions


def make_load(
    sessions: list[Session], messages: int, seed: int, retry_share: float, command_share: float
) -> dict[Session, list[Step]]:
    rng = random.Random(seed)
    plan: dict[Session, list[Step]] = {s: [] for s in sessions}
    retried = set(rng.sample(range(messages), round(messages * retry_share)))
    commands = set(rng.sample(sorted(set(range(messages)) - retried), round(messages * command_share)))
    for n in range(messages):
        session = sessions[n % len(sessions)]
        text = "/help" if n in commands else f"message {n}: " + " ".join(rng.choice(_WORDS) for _ in range(8))
        plan[session].append(Step(telegram_update(500_000 + n, text, session), n in retried, n in commands))
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


def wait_outbox(count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    rows = outbox()
    while len(rows) < count and time.monotonic() < deadline:
        time.sleep(0.5)
        rows = outbox()
    return rows


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
# Pricing


def price_run(meter: Meter, messages: int, webhook_requests: int, log_bytes: int) -> dict[str, Any]:
    """USD per million messages, by service, from what the meter saw for `messages` messages."""
    from hermes_gateway.resources import FUNCTIONS, QUEUES

    per = PRICES["per_request"]
    scale = 1_000_000 / messages
    memory = {spec.name: spec.memory_mb / 1024 for spec in FUNCTIONS}
    fifo = {q.name for q in QUEUES if q.fifo} | {f"{q.name}-dlq" for q in QUEUES if q.fifo}
    invocations = Counter(i.function for i in meter.invocations)
    gb_seconds = sum(math.ceil(i.seconds * 1000) / 1000 * memory[i.function] for i in meter.invocations)
    # The same invocations as AWS might time them: the handler's own CPU plus a round trip per call.
    modelled_gb_seconds = sum(
        math.ceil((i.cpu_seconds + i.aws_calls * AWS_CALL_SECONDS) * 1000) / 1000 * memory[i.function]
        for i in meter.invocations
    )
    sqs_requests = Counter()
    for (_, service, _, resource), count in meter.calls.items():
        if service == "sqs":
            sqs_requests["fifo" if resource in fifo else "standard"] += count
    executions = sum(
        count for (_, s, op, _), count in meter.calls.items() if s == "stepfunctions" and op == "StartExecution"
    )
    express_seconds = sum(math.ceil((end - start) * 10) / 10 for start, end in meter.executions.values())
    rru, wru = sum(meter.rru.values()), sum(meter.wru.values())
    log_total = log_bytes + LAMBDA_PLATFORM_LOG_BYTES * len(meter.invocations) + ACCESS_LOG_BYTES * webhook_requests
    by_service = {
        "apigateway": webhook_requests * per["apigateway_http_request"],
        "lambda": sum(invocations.values()) * per["lambda_request"] + gb_seconds * per["lambda_gb_second_arm"],
        "sqs": sqs_requests["fifo"] * per["sqs_fifo_request"] + sqs_requests["standard"] * per["sqs_request"],
        "dynamodb": rru * per["dynamodb_read_request_unit"] + wru * per["dynamodb_write_request_unit"],
        "stepfunctions": executions * per["stepfunctions_express_request"]
        + express_seconds * EXPRESS_MEMORY_GB * per["stepfunctions_express_gb_second"],
        "eventbridge": meter.bus_events * per["eventbridge_custom_event"],
        "cloudwatch_logs": log_total / 1e9 * per["cloudwatch_logs_ingested_gb"],
    }
    unpriced = Counter(
        f"{service}.{operation}" for (_, service, operation, _), n in meter.calls.items() for _ in range(n)
        if service not in PRICED_SERVICES
    )  # fmt: skip
    by_service = {name: round(usd * scale, 4) for name, usd in by_service.items()}
    traces = (len(meter.invocations) + executions) * XRAY_SAMPLED
    return {
        "cost_per_million_usd": round(sum(by_service.values()), 2),
        "cost_by_service": by_service,
        "per_message": {
            "webhook_requests": round(webhook_requests / messages, 3),
            "lambda_invocations": {k: round(v / messages, 3) for k, v in sorted(invocations.items())},
            "lambda_gb_seconds": round(gb_seconds / messages, 5),
            "lambda_gb_seconds_modelled": round(modelled_gb_seconds / messages, 5),
            "sqs_requests": {k: round(v / messages, 3) for k, v in sorted(sqs_requests.items())},
            "dynamodb_read_units": round(rru / messages, 3),
            "dynamodb_write_units": round(wru / messages, 3),
            "express_executions": round(executions / messages, 3),
            "express_billed_seconds": round(express_seconds / max(executions, 1), 3),
            "event_bus_events": round(meter.bus_events / messages, 3),
            "log_bytes": round(log_total / messages),
        },
        "unpriced_requests_per_message": {k: round(v / messages, 3) for k, v in sorted(unpriced.items())},
        "not_in_total": {
            "xray_usd_per_million_modelled": round(traces * per["xray_trace_recorded"] * scale, 4),
            "xray_assumption": f"every Lambda invocation and Express execution a trace, {XRAY_SAMPLED:.0%} sampled",
            "lambda_usd_per_million_modelled": round(
                (sum(invocations.values()) * per["lambda_request"] + modelled_gb_seconds * per["lambda_gb_second_arm"])
                * scale,
                4,
            ),
            "lambda_modelled_assumption": f"handler CPU time + {AWS_CALL_SECONDS * 1000:.0f} ms per AWS call",
            "model_wait_lambda_usd_per_million_per_second": round(
                memory["agent"] * per["lambda_gb_second_arm"] * 1_000_000, 2
            ),
        },
    }


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


# --------------------------------------------------------------------------------------------------


def run(
    messages: int = 1000,
    sessions: int = 100,
    concurrency: int = 10,
    think: float = 1.0,
    seed: int = 9,
    retry_share: float = 0.10,
    command_share: float = 0.05,
) -> dict[str, Any]:
    """Drive the load and return the report (not written anywhere)."""
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")  # before the handlers' logger is first imported
    plan = make_load(make_sessions(sessions), messages, seed, retry_share, command_share)
    webhook_requests = sum(2 if step.retried else 1 for steps in plan.values() for step in steps)
    meter = Meter()
    meter.install()
    try:
        with local_gateway() as (gateway, platform):
            meter.table_specs = table_specs()
            # One message first, outside the count: clients, imports and the first session are created.
            warm = Session("dm", 9_999, 9_999)
            run_session(gateway.url, platform, warm, [Step(telegram_update(1, "warm up", warm), False, False)], 0)
            time.sleep(1.5)
            meter.reset()
            started = time.perf_counter()
            with counted_logs() as logs:
                latencies = drive(gateway.url, platform, plan, concurrency, think)
                wait_outbox(messages + 1, timeout=60)
                seconds = time.perf_counter() - started
                time.sleep(1.5)  # let the last turns commit and release their leases
            rows = outbox()
    finally:
        meter.uninstall()
    replies = [r for r in rows if r["chat_id"] != str(warm.chat_id)]
    sent = sum(1 for r in replies if r["status"] == "sent")
    if len(replies) != messages or sent != messages:
        raise RuntimeError(f"expected {messages} replies sent, found {len(replies)} in the outbox ({sent} sent)")
    priced = price_run(meter, messages, webhook_requests, logs.bytes)
    busy = sum(
        n for (f, _, op, _), n in meter.calls.items() if f == "router" and op == "ChangeMessageVisibility"
    )  # a router retry of a busy session
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
        },
        **priced,
        "prices_recorded": PRICES["recorded"],
        "aws_requests_per_message": by_service_operation(meter, messages),
        "function_requests": calls_table(meter.calls, messages, CALL_KEYS),
        "lambda_poller_requests": calls_table(meter.pollers, messages, CALL_KEYS[1:]),
        "lambda_poller_batches_per_message": round(meter.poller_batches / messages, 3),
        "other_requests_not_counted": calls_table(meter.others, messages, CALL_KEYS[1:]),
        "lambda_duration_ms": {
            name: {
                "p50": round(statistics.median(d) * 1000, 1),
                "mean": round(statistics.fmean(d) * 1000, 1),
                "cpu_mean": round(statistics.fmean(c) * 1000, 1),
            }
            for name, d, c in _durations(meter)
        },
        "model_wait_seconds_per_message": round(sum(meter.model_seconds) / messages, 6),
        "dynamodb_units_per_message": _units(meter, messages),
        "busy_retries": busy,
        "failed_invocations": meter.failed_invocations,
        "webhook_connection_retries": sum(CONNECTION_RETRIES.values()),
        "reply_latency_seconds": {
            "p50": round(statistics.median(latencies), 3),
            "p99": round(_percentile(latencies, 99), 3),
        },
        "seconds": round(seconds, 1),
        "approximations": APPROXIMATIONS,
    }


APPROXIMATIONS = [
    "Lambda GB-seconds: in-process wall time (moto for AWS, this machine's CPU, other threads running) "
    "x configured memory; cpu_mean is the handler thread's own CPU time; lambda_usd_per_million_modelled "
    f"uses CPU time + {AWS_CALL_SECONDS * 1000:.0f} ms per AWS call instead",
    "DynamoDB units: item sizes from moto by DynamoDB's rules (1 KB writes, 4 KB reads, index writes, "
    "transactions x2); UpdateItem and PutItem use the larger of the before and after item",
    "Step Functions Express duration: StartExecution to the end of the last agent task, 100 ms steps, 64 MB",
    "CloudWatch Logs: bytes logged in-process at INFO plus EMF metric lines (concurrent flushes may drop a few), "
    f"{LAMBDA_PLATFORM_LOG_BYTES} B of platform lines per invocation, {ACCESS_LOG_BYTES} B per access log line; "
    "storage not counted",
    "Lambda's SQS pollers and Step Functions' own Lambda invokes are not in the total (reported apart)",
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
    # 600 over 60 keeps the whole `make bench` under 10 minutes on 2 cores (local mode is CPU-bound
    # at about 2.5 messages/s); `--messages 1000 --sessions 100` runs the larger mix.
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--sessions", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=10, help="sessions talking at once")
    parser.add_argument("--think", type=float, default=0.5, help="seconds between a reply and the next message")
    parser.add_argument("--seed", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="200 messages over 20 sessions")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.sessions = 200, 20
    report = run(args.messages, args.sessions, args.concurrency, args.think, args.seed)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "message-cost-latest.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"{report['messages_tested']} messages in {report['seconds']} s")
    print(f"cost per million messages: {report['cost_per_million_usd']} USD (model tokens excluded)")
    for service, usd in report["cost_by_service"].items():
        print(f"  {service:<16} {usd:8.4f}")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
