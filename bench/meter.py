"""The benches' meter: every AWS request made in this process, by the function invocation that made
it, with DynamoDB request units worked out from the items moto holds.

`Meter.install()` wraps botocore's `BaseClient._make_api_call` (every client and boto3 resource
call goes through it), local mode's `Functions._call` (whatever invokes a function: the HTTP
front, a poller, Step Functions, another function) and `ThreadPoolExecutor.submit` (work a
function hands to a thread of its own, such as its lifecycle events, stays its work). Nothing here
knows the gateway's queues, tables or functions by name: resources are named by
`hermes_gateway.resources`, and an invocation's trigger is read from its event.

A request made outside any invocation is not the gateway's: on SQS it is Lambda's event source
poller (a receive that found messages, a delete), on DynamoDB Streams the stream poller, a Lambda
Invoke is a service handing work on (Step Functions' tasks), anything else is the harness.

A model request is timed (its seconds and the CPU spent while it runs, per invocation): Lambda
bills an invocation for the model's seconds, which the CPU model cannot see. What a function asks
of AWS or a platform while a streamed model request runs (on the thread that reads the stream: a
streamed answer's post, edits and row) is counted but is no round trip of its own: the model keeps
writing into the connection meanwhile. `count_sleeps()` (called before the gateway's modules are
imported: their dataclasses keep `time.sleep` as a default) adds what an invocation sleeps to it.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import math
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_gateway.resources import TableSpec

_context = threading.local()  # .function, .invocation, .background, .in_model: whose work this thread is doing
_real_sleep = time.sleep
_sleep_meter: list[Meter] = []  # the installed meter that counts sleeps (count_sleeps)

SQS_CHUNK = 64 * 1024  # SQS bills each 64 KB of a payload as a request
EVENT_CHUNK = 64 * 1024  # EventBridge bills each 64 KB of an entry as an event
ESM_TRIGGERS = frozenset({"sqs", "stream"})  # invoked by a Lambda event source mapping's poller
TRACE_ROOTS = frozenset({"api", "sqs", "stream", "schedule"})  # start a new X-Ray trace (see pricing)


@dataclass
class Invocation:
    id: int
    function: str
    step: str  # the turn step, for a workflow task
    trigger: str  # api | sqs | stream | stepfunctions | schedule | invoke
    seconds: float
    cpu_seconds: float  # the handler's thread, plus work it handed to other threads
    started: float
    ended: float
    records: int = 0  # records in an event source mapping's batch
    source: str = ""  # the queue or table (stream) the batch came from
    aws_calls: int = 0
    round_trips: list[tuple[str, str]] = field(default_factory=list)  # (service, op) made on the handler's thread
    strings: frozenset[str] = frozenset()  # short strings of a workflow task's input (to find its execution)
    model_seconds: float = 0.0  # waiting on the model (its requests' elapsed time)
    model_cpu_seconds: float = 0.0  # of cpu_seconds, spent while a model request ran (reading its stream)
    slept: float = 0.0  # seconds the handler's thread slept (count_sleeps)
    overlapped: int = 0  # AWS and platform requests made while a model request ran (no round trip of their own)
    # before its first model request: the handler thread's CPU and round trips (the time to the model)
    cpu_to_model_seconds: float = 0.0
    trips_to_model: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> str:
        """What a solo measurement of the same work is looked up by."""
        return f"{self.function}/{self.step or self.trigger}"


@dataclass
class Meter:
    """Counts AWS requests in this process by who made them, and the functions' invocations.
    With `trace=True` every request a function makes is kept in order, with its units."""

    table_specs: dict[str, Any] = field(default_factory=dict)  # physical table name -> TableSpec
    trace: bool = False
    units: bool = True  # DynamoDB request units (reads each written item in moto before and after)
    calls: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)  # function, service, op, resource
    billed: Counter[tuple[str, str]] = field(default_factory=Counter)  # (service, resource) -> 64 KB chunks
    pollers: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # service, op, resource
    handoffs: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    others: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    external: Counter[tuple[str, str]] = field(default_factory=Counter)  # (function, host): platform, model
    empty_receives: int = 0  # a poller's receive that found nothing (idle polling, time-based)
    rru: defaultdict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))  # (function, table)
    wru: defaultdict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(float))
    invocations: list[Invocation] = field(default_factory=list)
    executions: dict[str, float] = field(default_factory=dict)  # execution name -> StartExecution time
    fifo_queues: set[str] = field(default_factory=set)
    bus_events: int = 0  # entries the functions put on the event bus (EventBridge bills each 64 KB)
    failed_invocations: int = 0  # invocations that raised (Lambda would retry their batch)
    model_seconds: list[float] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # the trace
    active: int = 0  # invocations running now
    reply_bytes: Callable[[str], int] | None = None  # the fake model's answer size (None: as the provider answers)
    streams: bool = False  # the providers stream where they can (False: every model request is a plain one)
    _calls_in: Counter[int] = field(default_factory=Counter)  # invocation -> AWS calls it made
    _trips_in: dict[int, list[tuple[str, str]]] = field(default_factory=lambda: defaultdict(list))
    # CPU on other threads, less the meter's own on the invocation's threads
    _cpu_in: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))
    _model_in: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))
    _model_cpu_in: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))
    _slept_in: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))
    _overlapped_in: Counter[int] = field(default_factory=Counter)
    _started_cpu: dict[int, float] = field(default_factory=dict)  # invocation -> its thread's CPU clock at start
    _own_cpu_in: defaultdict[int, float] = field(default_factory=lambda: defaultdict(float))  # the meter's, on it
    _to_model_in: dict[int, tuple[float, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=itertools.count)
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list)

    def reset(self) -> None:
        with self._lock:
            for counter in (self.calls, self.billed, self.pollers, self.handoffs, self.others, self.external):
                counter.clear()
            self.rru.clear()
            self.wru.clear()
            self.invocations.clear()
            self.executions.clear()
            self.model_seconds.clear()
            self.events.clear()
            self.bus_events = self.failed_invocations = self.empty_receives = 0
            self._calls_in.clear()
            self._trips_in.clear()
            for pending in (self._cpu_in, self._model_in, self._model_cpu_in, self._slept_in, self._overlapped_in,
                            self._started_cpu, self._to_model_in, self._own_cpu_in):  # fmt: skip
                pending.clear()

    def install(self) -> Meter:
        import urllib.request

        import botocore.client

        from hermes_local.aws import InProcessAws
        from hermes_local.runtime import Functions

        original_call = botocore.client.BaseClient._make_api_call
        original_invoke = Functions._call
        original_submit = ThreadPoolExecutor.submit
        original_open = urllib.request.OpenerDirector.open
        meter = self

        def _make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            return meter._metered(original_call, client, operation, params)

        def _call(functions: Any, name: str, event: dict[str, Any], context: Any) -> Any:
            with meter.within(name, event):
                return original_invoke(functions, name, event, context)

        def submit(executor: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
            return original_submit(executor, meter._on_behalf(fn), *args, **kwargs)

        self._patch(botocore.client.BaseClient, "_make_api_call", _make_api_call)
        self._patch(Functions, "_call", _call)

        def open_url(opener: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
            meter._external(request)
            return original_open(opener, request, *args, **kwargs)

        def over_http(handler: Any, request: Any, **_: Any) -> None:
            return None

        def signed(handler: Any, **_: Any) -> None:
            return None

        self._patch(ThreadPoolExecutor, "submit", submit)
        self._patch(urllib.request.OpenerDirector, "open", open_url)
        # A function's CPU is its thread's: moto answers on the server's threads while metered, as
        # AWS answers elsewhere (local mode otherwise answers this process's calls in the caller).
        self._patch(InProcessAws, "__call__", over_http)
        self._patch(InProcessAws, "unsigned", signed)  # and signs it: SigV4's CPU is the function's
        self._patch_pooled_http()
        self._patch_provider()
        _sleep_meter[:] = [self]
        return self

    def _patch_pooled_http(self) -> None:
        """The platforms', the transcriber's and the media fetches' requests go through the pooled
        client (hermes_gateway.http_pool, urllib3), not urllib's opener: each is an external round trip."""
        from hermes_gateway import http_pool

        meter = self
        original_send, original_download = http_pool.send, http_pool.download

        def send(method: str, url: str, **kwargs: Any) -> Any:
            meter._external(url)
            return original_send(method, url, **kwargs)

        def download(url: str, **kwargs: Any) -> Any:
            meter._external(url)
            return original_download(url, **kwargs)

        self._patch(http_pool, "send", send)
        self._patch(http_pool, "download", download)

    def uninstall(self) -> None:
        _sleep_meter.clear()
        while self._saved:
            owner, name, value = self._saved.pop()
            setattr(owner, name, value)

    def wait_idle(self, quiet: float = 0.3, timeout: float = 30.0) -> None:
        """Return once no invocation has run for `quiet` seconds (a message's last work is done)."""
        deadline = time.monotonic() + timeout
        last_end = time.perf_counter()
        while time.monotonic() < deadline:
            with self._lock:
                busy = self.active > 0
                if self.invocations:
                    last_end = max(last_end, self.invocations[-1].ended)
            if not busy and time.perf_counter() - last_end >= quiet:
                return
            time.sleep(0.05)

    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self._saved.append((owner, name, owner.__dict__[name]))
        setattr(owner, name, value)

    def _patch_provider(self) -> None:
        """Time every model request (the model's wait, which Lambda bills as agent duration) and,
        when `reply_bytes` is set, make its answer that long (a realistic reply size). With
        `streams`, a provider that streams keeps streaming (timed the same way); without, every
        request is a plain one (the benches that make the answer's size do)."""
        import dataclasses

        import hermes_gateway.providers as providers
        from hermes_gateway.providers.base import streaming_of

        original = providers.make_provider
        meter = self

        class Timed:
            def __init__(self, inner: Any) -> None:
                self.inner, self.name = inner, inner.name

            def complete(self, system: str, messages: list[Any], tools: list[Any] | None = None) -> Any:
                with meter.model_request():
                    reply = self.inner.complete(system, messages, tools)
                if meter.reply_bytes is None or reply.tool_calls or not reply.text:
                    return reply
                text = filler(reply.text, meter.reply_bytes(reply.text))
                return dataclasses.replace(reply, text=text, output_tokens=max(1, len(text) // 4))

        class TimedStreaming(Timed):
            def stream(self, system: str, messages: list[Any], tools: list[Any] | None, on_text: Any) -> Any:
                with meter.model_request():
                    return self.inner.stream(system, messages, tools, on_text)

        def make_provider(*args: Any, **kwargs: Any) -> Any:
            inner = original(*args, **kwargs)
            return TimedStreaming(inner) if meter.streams and streaming_of(inner) is not None else Timed(inner)

        self._patch(providers, "make_provider", make_provider)

    @contextmanager
    def model_request(self) -> Iterator[None]:
        """A model request on this thread: its elapsed time and the CPU spent meanwhile go to the
        invocation making it (and to `model_seconds`); requests made inside it overlap it."""
        invocation = getattr(_context, "invocation", None)
        outer = getattr(_context, "in_model", False)
        _context.in_model = True
        started, cpu = time.perf_counter(), time.thread_time()
        with self._lock:
            if invocation is not None and invocation not in self._to_model_in and invocation in self._started_cpu:
                trips = tuple(self._trips_in.get(invocation, ()))
                own = self._own_cpu_in.get(invocation, 0.0)
                self._to_model_in[invocation] = (cpu - self._started_cpu[invocation] - own, trips)
        try:
            yield
        finally:
            elapsed, cpu_used = time.perf_counter() - started, time.thread_time() - cpu
            _context.in_model = outer
            with self._lock:
                self.model_seconds.append(elapsed)
                if invocation is not None and not outer:
                    self._model_in[invocation] += elapsed
                    self._model_cpu_in[invocation] += cpu_used

    def _on_behalf(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` run on another thread as part of the invocation that submitted it (if any)."""
        function, invocation = getattr(_context, "function", None), getattr(_context, "invocation", None)
        if function is None or invocation is None:
            return fn
        meter = self

        def run(*args: Any, **kwargs: Any) -> Any:
            saved = (getattr(_context, "function", None), getattr(_context, "invocation", None))
            _context.function, _context.invocation, _context.background = function, invocation, True
            cpu = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                with meter._lock:
                    meter._cpu_in[invocation] += time.thread_time() - cpu
                (_context.function, _context.invocation), _context.background = saved, False

        return run

    @contextmanager
    def within(self, name: str, event: Any = None) -> Iterator[int]:
        """Count what runs inside as one invocation of the function `name` (on this thread)."""
        outer = (getattr(_context, "function", None), getattr(_context, "invocation", None))
        invocation = next(self._ids)
        _context.function, _context.invocation, _context.background = name, invocation, False
        started, cpu = time.perf_counter(), time.thread_time()
        with self._lock:
            self.active += 1
            self._started_cpu[invocation] = cpu
        try:
            yield invocation
        except BaseException:
            with self._lock:
                self.failed_invocations += 1
            raise
        finally:
            ended, cpu_used = time.perf_counter(), time.thread_time() - cpu
            _context.function, _context.invocation = outer
            self._started_cpu.pop(invocation, None)
            self._own_cpu_in.pop(invocation, None)
            event = event if isinstance(event, dict) else {}
            trigger = trigger_of(event)
            source, fifo = event_source(event)
            with self._lock:
                self.active -= 1
                if fifo:
                    self.fifo_queues.add(source)
                self.invocations.append(
                    Invocation(
                        invocation, name, str(event.get("step") or ""), trigger, ended - started,
                        cpu_used + self._cpu_in.pop(invocation, 0.0), started, ended,
                        records=len(event.get("Records") or ()), source=source,
                        aws_calls=self._calls_in.pop(invocation, 0),
                        round_trips=self._trips_in.pop(invocation, []),
                        strings=_short_strings(event) if trigger == "stepfunctions" else frozenset(),
                        model_seconds=self._model_in.pop(invocation, 0.0),
                        model_cpu_seconds=self._model_cpu_in.pop(invocation, 0.0),
                        slept=self._slept_in.pop(invocation, 0.0),
                        overlapped=self._overlapped_in.pop(invocation, 0),
                        cpu_to_model_seconds=self._to_model_in.get(invocation, (0.0, ()))[0],
                        trips_to_model=self._to_model_in.pop(invocation, (0.0, ()))[1],
                    )
                )  # fmt: skip

    def _metered(self, original: Callable[..., Any], client: Any, operation: str, params: dict[str, Any]) -> Any:
        function = getattr(_context, "function", None)
        service = client.meta.service_model.service_name
        resource = resource_name(service, params)
        metered = self.units and service == "dynamodb" and function is not None
        # The meter's own work on the function's thread (reading the items from moto to size them,
        # counting) is not the function's CPU: it is taken off the invocation's CPU time.
        own_cpu = time.thread_time()
        before = self._dynamo_items(operation, params) if metered else None
        own_cpu = time.thread_time() - own_cpu
        started = time.perf_counter()
        result: Any = None
        try:
            result = original(client, operation, params)
            return result
        finally:
            elapsed = time.perf_counter() - started
            mark = time.thread_time()
            units: dict[tuple[str, str], float] = {}
            if before is not None:
                units = self._request_units(operation, params, result, before, self._dynamo_items(operation, params))
            if function is None:
                self._outside(service, operation, resource, result)
            else:
                self._count(function, service, operation, resource, params, started, elapsed, units)
            invocation = getattr(_context, "invocation", None)
            if function is not None and invocation is not None:
                with self._lock:
                    spent = own_cpu + time.thread_time() - mark
                    self._cpu_in[invocation] -= spent
                    self._own_cpu_in[invocation] += spent

    def _count(
        self, function: str, service: str, operation: str, resource: str, params: dict[str, Any],
        started: float, elapsed: float, units: dict[tuple[str, str], float],
    ) -> None:  # fmt: skip
        invocation = _context.invocation
        chunks = billed_chunks(service, operation, params)
        with self._lock:
            self.calls[(function, service, operation, resource)] += 1
            self._calls_in[invocation] += 1
            if getattr(_context, "in_model", False):
                self._overlapped_in[invocation] += 1
            elif not getattr(_context, "background", False):
                self._trips_in[invocation].append((service, operation))
            if chunks:
                self.billed[(service, resource)] += chunks
            if service == "sqs" and str(params.get("QueueUrl", "")).endswith(".fifo"):
                self.fifo_queues.add(resource)
            if service == "events" and operation == "PutEvents":
                self.bus_events += chunks
            if service == "stepfunctions" and operation == "StartExecution":
                self.executions.setdefault(str(params.get("name")), started)
            for (table, kind), amount in units.items():
                (self.rru if kind == "read" else self.wru)[(function, table)] += amount
            if self.trace:
                self.events.append(
                    {"t": started, "ms": round(elapsed * 1000, 2), "function": function, "invocation": invocation,
                     "background": bool(getattr(_context, "background", False)),
                     "service": service, "operation": operation, "resource": resource, "chunks": chunks,
                     "read_units": sum(a for (_, k), a in units.items() if k == "read"),
                     "write_units": sum(a for (_, k), a in units.items() if k == "write")}
                )  # fmt: skip

    def _external(self, request: Any) -> None:
        """A function's HTTP request to something other than AWS (a platform's API, a model):
        botocore does not use urllib's opener, every platform client does."""
        function = getattr(_context, "function", None)
        if function is None:
            return  # the harness (a webhook post) or local mode's front
        import urllib.parse

        url = request if isinstance(request, str) else request.full_url
        host = urllib.parse.urlsplit(url).netloc
        with self._lock:
            self.external[(function, host)] += 1
            if getattr(_context, "in_model", False):
                self._overlapped_in[_context.invocation] += 1
            elif not getattr(_context, "background", False):
                self._trips_in[_context.invocation].append(("external", host))
            if self.trace:
                self.events.append(
                    {"t": time.perf_counter(), "ms": 0.0, "function": function, "invocation": _context.invocation,
                     "background": bool(getattr(_context, "background", False)), "service": "external",
                     "operation": "request", "resource": host, "chunks": 0, "read_units": 0, "write_units": 0}
                )  # fmt: skip

    def _outside(self, service: str, operation: str, resource: str, result: Any) -> None:
        """A request no function made: an event source's poller, a service's hand-off, the harness."""
        with self._lock:
            if service == "sqs" and operation == "ReceiveMessage" and not (result or {}).get("Messages"):
                self.empty_receives += 1
            elif service in ("sqs", "dynamodbstreams"):
                self.pollers[(service, operation, resource)] += 1
            elif service == "lambda":
                self.handoffs[(service, operation, resource)] += 1
            else:
                self.others[(service, operation, resource)] += 1

    # -- DynamoDB request units

    def _dynamo_items(self, operation: str, params: dict[str, Any]) -> list[tuple[str, Any]]:
        """(table, the item as moto holds it now, or None) for each item a write touches."""
        if operation not in _WRITES:
            return []
        return [(table, _moto_item(table, key)) for table, key in _written_keys(operation, params)]

    def _request_units(
        self, operation: str, params: dict[str, Any], result: Any, before: list[Any], after: list[Any]
    ) -> defaultdict[tuple[str, str], float]:
        """(table, "read" | "write") -> request units; a transaction's units go to each item's table."""
        units: defaultdict[tuple[str, str], float] = defaultdict(float)
        factor = 2.0 if operation.startswith("Transact") else 1.0
        if operation in _WRITES:
            for (table, old), (_, new) in zip(before, after, strict=True):
                base = max(1, math.ceil(max(_size(old), _size(new)) / 1024))
                # Index upkeep is an ordinary write, even for a transaction's item.
                units[(resource_name("dynamodb", {"TableName": table}), "write")] += base * factor
                units[(resource_name("dynamodb", {"TableName": table}), "write")] += self._index_writes(table, old, new)
            for item in params.get("TransactItems", []):
                if "ConditionCheck" in item:  # billed as a write; there is no item change to see
                    units[(resource_name("dynamodb", item["ConditionCheck"]), "write")] += factor
            return units
        table = resource_name("dynamodb", params)
        consistent = 1.0 if params.get("ConsistentRead") else 0.5
        if operation == "GetItem":
            item = (result or {}).get("Item")
            units[(table, "read")] += consistent * max(1, math.ceil(_json_size(item) / 4096))
        elif operation in ("Query", "Scan"):
            total = sum(_json_size(item) for item in (result or {}).get("Items", []))
            units[(table, "read")] += consistent * max(1, math.ceil(total / 4096))
        elif operation == "TransactGetItems":
            for item in params.get("TransactItems", []):
                units[(resource_name("dynamodb", item["Get"]), "read")] += factor
        elif operation == "BatchGetItem":
            for name, items in ((result or {}).get("Responses") or {}).items():
                for item in items:
                    units[(resource_name("dynamodb", {"TableName": name}), "read")] += consistent * max(
                        1, math.ceil(_json_size(item) / 4096)
                    )
        return units  # table management, TTL: not per message

    def _index_writes(self, table: str, old: Any, new: Any) -> int:
        spec = self.table_specs.get(table)
        return index_writes(spec, old, new) if spec is not None else 0


_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem")


def _metered_sleep(seconds: float) -> None:
    started = time.perf_counter()
    try:
        _real_sleep(seconds)
    finally:
        invocation = getattr(_context, "invocation", None)
        if _sleep_meter and invocation is not None and not getattr(_context, "background", False):
            meter = _sleep_meter[0]
            with meter._lock:
                meter._slept_in[invocation] += time.perf_counter() - started


def count_sleeps() -> None:
    """`time.sleep` counted: what a function's handler thread sleeps (a stream keeping its pace, a
    rate limit waited out) is added to its invocation while a meter is installed. Call it before
    the gateway's modules are imported (their dataclasses keep `time.sleep` as a default);
    `sleeps_counted()` says whether it came in time."""
    time.sleep = _metered_sleep


def sleeps_counted(sleep: Any) -> bool:
    """Whether `sleep` (a dataclass's default, say) is the counted one."""
    return sleep is _metered_sleep


def trigger_of(event: dict[str, Any]) -> str:
    """How a function was invoked, read from its event (the shapes Lambda's sources send)."""
    records = event.get("Records") or []
    if records:
        source = str(records[0].get("eventSource") or records[0].get("EventSource") or "")
        return {"aws:sqs": "sqs", "aws:dynamodb": "stream", "aws:kinesis": "stream"}.get(source, "invoke")
    if "requestContext" in event or "routeKey" in event:
        return "api"
    if event.get("source") in ("aws.scheduler", "aws.events"):
        return "schedule"
    if "step" in event:
        return "stepfunctions"
    return "invoke"


def event_source(event: dict[str, Any]) -> tuple[str, bool]:
    """The logical queue or table an event source mapping's batch came from ("" for other events),
    and whether it is a FIFO queue."""
    records = event.get("Records") or []
    arn = str(records[0].get("eventSourceARN") or records[0].get("EventSourceArn") or "") if records else ""
    if not arn:
        return "", False
    return resource_name("sqs" if ":sqs:" in arn else "dynamodb", {"QueueUrl": arn}), arn.endswith(".fifo")


def billed_chunks(service: str, operation: str, params: dict[str, Any]) -> int:
    """What SQS and EventBridge bill for one request: each 64 KB of a payload (0 for other services)."""
    if service == "sqs" and operation in ("SendMessage", "SendMessageBatch"):
        bodies = [params.get("MessageBody", "")] if operation == "SendMessage" else [
            e.get("MessageBody", "") for e in params.get("Entries", [])
        ]  # fmt: skip
        return max(1, math.ceil(sum(len(str(b).encode()) for b in bodies) / SQS_CHUNK))
    if service == "sqs":
        return 1
    if service == "events" and operation == "PutEvents":
        return sum(max(1, math.ceil(len(json.dumps(e).encode()) / EVENT_CHUNK)) for e in params.get("Entries", []))
    return 0


def resource_name(service: str, params: dict[str, Any]) -> str:
    """The logical name of the table, queue, state machine or function a request is about ("" when none)."""
    name = (
        params.get("TableName") or params.get("QueueUrl") or params.get("stateMachineArn")
        or params.get("FunctionName") or params.get("StreamArn") or params.get("Bucket") or ""
    )  # fmt: skip
    if not name and params.get("Entries"):
        name = params["Entries"][0].get("EventBusName", "")
    if not name and params.get("TransactItems"):
        first = params["TransactItems"][0]
        name = next(iter(first.values())).get("TableName", "")
    if not name and params.get("RequestItems"):
        name = next(iter(params["RequestItems"]), "")
    text = str(name)
    if "/stream/" in text:  # a table's stream ARN: arn:...:table/<name>/stream/<label>
        text = text.split("/stream/", 1)[0]
    text = text.rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".fifo")
    for known in logical_names():
        if text == known or text.endswith("-" + known):
            return known
    return text


@cache
def logical_names() -> tuple[str, ...]:
    """Every table, queue (and dead-letter queue), bucket, state machine, bus and function name, longest first."""
    from hermes_gateway import resources

    names = {t.name for t in resources.TABLES} | {resources.TURN_STATE_MACHINE.name}
    names |= {q.name for q in resources.QUEUES} | {b.name for b in resources.BUCKETS}
    names |= {f.name for f in resources.FUNCTIONS}
    bus = getattr(resources, "EVENT_BUS", None)
    if bus is not None:
        names.add(bus.name)
    return tuple(sorted(names, key=len, reverse=True))


def filler(seed: str, size: int) -> str:
    """A deterministic reply of `size` bytes (words, spaces and line breaks, as a model writes)."""
    words = ("the", "queue", "deploy", "lambda", "table", "is", "ready", "and", "cost", "check", "logs", "green")
    rng = random.Random(seed)
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words) + ("\n" if rng.random() < 0.05 else " ")
        parts.append(word)
        length += len(word)
    return "".join(parts)[:size]


def _short_strings(event: Any, depth: int = 0) -> frozenset[str]:
    """The short strings of an event (a workflow task's input names its execution somewhere)."""
    found: set[str] = set()
    if depth > 4:
        return frozenset()
    if isinstance(event, dict):
        for value in event.values():
            found |= _short_strings(value, depth + 1)
    elif isinstance(event, list):
        for value in event[:20]:
            found |= _short_strings(value, depth + 1)
    elif isinstance(event, str) and len(event) <= 128:
        found.add(event)
    return frozenset(found)


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


_DYNAMO_TYPES = frozenset({"S", "B", "N", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"})


def dynamo_json(value: Any) -> dict[str, Any]:
    """A key attribute in DynamoDB JSON. boto3's resource layer (`Table.update_item`, ...) hands
    `_make_api_call` plain Python values and serializes them later, inside the call; the client
    and pynamodb hand it DynamoDB JSON already. Both must find the same item in moto."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _DYNAMO_TYPES:
        return value
    from boto3.dynamodb.types import TypeSerializer

    serialized: dict[str, Any] = TypeSerializer().serialize(value)
    return serialized


def _moto_item(table_name: str, key: dict[str, Any]) -> Any:
    """The item as moto's backend (in this process) holds it, or None."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.dynamodb.models.dynamo_type import DynamoType

    from hermes_local.aws import ACCOUNT_ID

    try:
        table = dynamodb_backends[ACCOUNT_ID][os.environ.get("AWS_REGION", "us-east-1")].get_table(table_name)
        hash_key = DynamoType(dynamo_json(key[table.hash_key_attr]))
        range_key = DynamoType(dynamo_json(key[table.range_key_attr])) if table.range_key_attr else None
        item = table.get_item(hash_key, range_key)
    except Exception:  # noqa: BLE001 - a table or key moto does not know: nothing to measure
        return None
    return None if item is None else (item.size(), {k: v.value for k, v in item.attrs.items()})


def _size(item: Any) -> int:
    return int(item[0]) if item else 0


def index_writes(spec: TableSpec, old: Any, new: Any) -> int:
    """Writes to the table's global secondary indexes when an item goes from `old` to `new`
    ((key, attributes) or None): an index that projects every attribute is written whenever its
    item changes; a keys-only index only when its key does."""
    if old and new and old[1] == new[1]:
        return 0  # nothing changed (a failed condition): no index is written
    writes = 0
    for index in spec.indexes:
        names = [index.partition.name] + ([index.sort.name] if index.sort else [])
        old_key, new_key = _index_key(old, names), _index_key(new, names)
        if old_key is not None and new_key is not None and old_key != new_key:
            writes += 2  # the index entry moves: a delete and a put
        elif index.projection == "KEYS_ONLY" and old_key == new_key:
            continue  # the key is where it was: the index holds nothing else
        elif old_key is not None or new_key is not None:
            writes += 1
    return writes


def _index_key(item: Any, names: list[str]) -> tuple[Any, ...] | None:
    if not item or any(name not in item[1] for name in names):
        return None
    return tuple(str(item[1][name]) for name in names)


def _json_size(item: dict[str, Any] | None) -> int:
    """An item's size from its DynamoDB JSON: attribute names plus values (close to DynamoDB's rule)."""
    if not item:
        return 0
    return sum(len(name.encode()) + _value_size(value) for name, value in item.items())


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
# Log volume and custom metrics


class ByteSink(io.TextIOBase):
    """A text stream that only counts what is written to it, and the custom metrics in EMF lines."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.lines = 0
        self.metrics: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()  # namespace, name, dimensions
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.bytes += len(text.encode("utf-8", "replace"))
            self.lines += text.count("\n")
        return len(text)

    def writable(self) -> bool:
        return True

    def add_metrics(self, emf: dict[str, Any]) -> None:
        """Each (namespace, metric name, dimension values) an EMF document publishes is one custom metric."""
        found = set()
        for directive in emf.get("_aws", {}).get("CloudWatchMetrics", []):
            namespace = str(directive.get("Namespace", ""))
            for names in directive.get("Dimensions") or [[]]:
                dimensions = tuple(sorted((str(n), str(emf.get(n, ""))) for n in names))
                for metric in directive.get("Metrics", []):
                    found.add((namespace, str(metric.get("Name")), dimensions))
        with self._lock:
            self.metrics |= found


@contextmanager
def counted_logs(custom_metrics: bool | None = None) -> Iterator[ByteSink]:
    """The functions' log lines (at INFO, as deployed) and metric (EMF) lines, counted, not shown.

    Metrics are collected as the deployment's observability tier has them (`custom_metrics`;
    by default the default plan's: none in minimal): local mode keeps them off, so the switch is
    set for the duration. Each flush is serialized as Lambda would print it and counted instead.
    Every function shares one metric set in this process, so adding, flushing and clearing are
    serialized with a lock (a flush may carry another thread's metrics: the bytes are about
    right, the lines fewer)."""
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf.cloudwatch import AmazonCloudWatchEMFProvider as Emf

    from hermes_gateway.observability import METRICS_DISABLED_ENV, logger

    if custom_metrics is None:
        from bench.plan import default_plan

        custom_metrics = bool(default_plan().custom_metrics)
    saved_switch = os.environ.get(METRICS_DISABLED_ENV)
    os.environ[METRICS_DISABLED_ENV] = "false" if custom_metrics else "true"

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
                emf = provider.serialize_metric_set()
                sink.write(json.dumps(emf, separators=(",", ":")) + "\n")
                sink.add_metrics(emf)
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
        if saved_switch is None:
            os.environ.pop(METRICS_DISABLED_ENV, None)
        else:
            os.environ[METRICS_DISABLED_ENV] = saved_switch
        if isinstance(handler, logging.StreamHandler) and saved_stream is not None:
            handler.setStream(saved_stream)
        logger.setLevel(saved_level)
        for name, method in saved_methods.items():
            setattr(Emf, name, method)
        from hermes_gateway.observability import metrics

        metrics.clear_metrics()  # nothing counted in here is flushed later, outside
