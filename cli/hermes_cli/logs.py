"""`hermes-gateway logs tail|trace`: the deployed functions' CloudWatch logs, readable in a terminal.

Every line in the message path carries `correlation_id` (the inbound platform event id, e.g.
`telegram:default:1001`) and `session` (the hashed session key). `tail` reads recent lines from
one function or all of them, interleaved by time, optionally for one session or one correlation id,
and can keep following. `trace` runs a Logs Insights query over every function's log group and
prints one message's journey from webhook to delivery. `--json` prints the lines as logged.

The log groups are the stack's `<Function>LogGroupName` outputs. Values never reach a filter
pattern or a query unescaped, and what comes back is checked again on this side (a filter
pattern's `*` is a wildcard; the CLI wants exact matches). Local mode has no CloudWatch: its
functions log to the terminal that runs `make run` (`POWERTOOLS_LOG_LEVEL=INFO` for every line).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from functools import cached_property
from pathlib import Path
from typing import Any

from hermes_cli import target
from hermes_gateway.errors import ConfigError
from hermes_gateway.observability import hash_id
from hermes_gateway.outputs import log_group_output_key, stack_name
from hermes_gateway.resources import FUNCTIONS

FUNCTION_NAMES = tuple(spec.name for spec in FUNCTIONS)
POLL_SECONDS = 2.0  # `tail --follow`
QUERY_POLL_SECONDS = 1.0  # `trace` waiting for Logs Insights
TRACE_LIMIT = 500
MAX_VALUE = 80  # longer values are cut in the terminal format
MAX_EVENTS_PER_GROUP = 10_000  # one fetch never pages further than this

# Powertools and Lambda context fields that say nothing about the message.
NOISY_FIELDS = frozenset(
    {
        "level",
        "message",
        "timestamp",
        "location",
        "service",
        "cold_start",
        "function_name",
        "function_memory_size",
        "function_arn",
        "function_request_id",
        "xray_trace_id",
        "sampling_rate",
        "requestId",
        "log_level",
        "stackTrace",
    }
)

# Injectable for tests: the `--follow` and query polling waits.
sleep: Callable[[float], None] = time.sleep
clock: Callable[[], float] = time.monotonic

_RELATIVE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_SESSION_HASH = re.compile(r"^[0-9a-f]{12}$")
_REPORT_FIELDS = re.compile(r"(Duration|Billed Duration|Max Memory Used|Memory Size|Init Duration): ([\d.]+)")

LOCAL_MODE_HELP = (
    "local mode has no CloudWatch (nothing is written to its embedded AWS): its functions log JSON lines, "
    "with correlation_id and session, to the terminal that runs `make run`; warnings and errors by default, "
    "every line with `POWERTOOLS_LOG_LEVEL=INFO make run`"
)


def add_commands(commands: Any) -> None:
    logs = commands.add_parser("logs", help="tail the functions' logs; trace one message across functions")
    actions = logs.add_subparsers(dest="action", required=True)

    tail = actions.add_parser(
        "tail",
        help="recent log lines of one function or all of them, interleaved by time",
        description="Recent log lines from CloudWatch, oldest first; --follow keeps polling every 2 s.",
    )
    tail.add_argument(
        "--function",
        action="append",
        choices=FUNCTION_NAMES,
        default=None,
        help="only this function (repeatable; default: all)",
    )
    tail.add_argument("--since", type=since_argument, default="10m", help="10m, 2h, 1d or an ISO time (default 10m)")
    tail.add_argument("--session", default=None, metavar="KEY", help="only this session (the raw key or its hash)")
    tail.add_argument("--correlation", default=None, metavar="ID", help="only this correlation (inbound event) id")
    tail.add_argument("--lines", type=int, default=200, help="at most this many of the newest lines (default 200)")
    tail.add_argument("--follow", "-f", action="store_true", help="keep polling for new lines until Ctrl+C")
    _add_output_arguments(tail)
    target.add_target_arguments(tail)
    tail.set_defaults(run=_tail)

    trace = actions.add_parser(
        "trace",
        help="one message's journey from webhook to delivery (Logs Insights)",
        description=(
            "Follow one inbound event through ingress, router, agent and delivery by its correlation id, "
            "or every line of a session (a raw session key such as agent:main:telegram:dm:42, or its hash)."
        ),
    )
    trace.add_argument("id", metavar="EVENT_ID|SESSION", help="e.g. telegram:default:1001, or a session key or hash")
    trace.add_argument("--since", type=since_argument, default="1d", help="how far back to search (default 1d)")
    trace.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the query (default 60)")
    _add_output_arguments(trace)
    target.add_target_arguments(trace)
    trace.set_defaults(run=_trace)


def _add_output_arguments(parser: Any) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per line, as logged")
    parser.add_argument("--utc", action="store_true", help="times in UTC (default: local time)")


# ---------------------------------------------------------------- arguments


def parse_since(text: str, now: datetime) -> datetime:
    """`10m`, `2h`, `1d`, `30s`, `1w` before `now`, or an ISO time (without an offset: local time)."""
    relative = _RELATIVE.match(text)
    if relative:
        return now - timedelta(**{_UNITS[relative.group(2)]: int(relative.group(1))})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not a duration (10m, 2h, 1d) or an ISO time: {text!r}") from None
    moment = moment.astimezone() if moment.tzinfo is None else moment
    if moment > now:
        raise ValueError(f"{text!r} is in the future")
    return moment


def since_argument(text: str) -> datetime:
    try:
        return parse_since(text, datetime.now(UTC))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def quote(value: str) -> str:
    """A double-quoted string literal for a filter pattern or a Logs Insights query."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ConfigError(f"{value!r}: control characters cannot be searched for")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def is_session_key(value: str) -> bool:
    return value.startswith("agent:") and ":" in value


def session_handle(value: str) -> str:
    """The `session` field as logged: a raw session key is hashed; a 12-hex hash is kept."""
    return value if _SESSION_HASH.match(value) else str(hash_id(value))


def filter_pattern(session: str | None = None, correlation: str | None = None) -> str:
    """A CloudWatch JSON filter pattern on the hashed session and/or the correlation id ("" = all)."""
    terms = []
    if session is not None:
        terms.append(f"$.session = {quote(session)}")
    if correlation is not None:
        terms.append(f"$.correlation_id = {quote(correlation)}")
    if not terms:
        return ""
    if len(terms) == 1:
        return "{ " + terms[0] + " }"
    return "{ " + " && ".join(f"({term})" for term in terms) + " }"


@dataclass(frozen=True)
class TraceTarget:
    """What `trace` looks for: a correlation id or a session hash (either matches when unsure)."""

    correlation: str | None
    session: str | None

    @classmethod
    def parse(cls, value: str) -> TraceTarget:
        value = value.strip()
        if not value:
            raise ConfigError("give an event id (e.g. telegram:default:1001) or a session key")
        if is_session_key(value):
            return cls(correlation=None, session=session_handle(value))
        return cls(correlation=value, session=value if _SESSION_HASH.match(value) else None)

    def matches(self, record: Mapping[str, Any] | None) -> bool:
        if record is None:
            return False
        by_correlation = self.correlation is not None and record.get("correlation_id") == self.correlation
        by_session = self.session is not None and record.get("session") == self.session
        return by_correlation or by_session

    def describe(self) -> str:
        if self.correlation is None:
            return f"session {self.session}"
        return f"correlation id {self.correlation}"


def trace_query(wanted: TraceTarget, limit: int = TRACE_LIMIT) -> str:
    """The Logs Insights query for a trace; the whole line (@message) comes back, parsed on this side."""
    conditions = []
    if wanted.correlation is not None:
        conditions.append(f"correlation_id = {quote(wanted.correlation)}")
    if wanted.session is not None:
        conditions.append(f"session = {quote(wanted.session)}")
    return (
        "fields @timestamp, @log, @logStream, @message"
        f" | filter {' or '.join(conditions)}"
        f" | sort @timestamp asc | limit {int(limit)}"
    )


# ---------------------------------------------------------------- rendering


@dataclass(frozen=True)
class Event:
    timestamp: int  # epoch milliseconds
    function: str
    message: str  # the raw line
    event_id: str = ""

    @cached_property
    def record(self) -> dict[str, Any] | None:
        """The line as a JSON object (Powertools, Lambda's JSON format), or None for a text line."""
        return parse_record(self.message)


def parse_record(message: str) -> dict[str, Any] | None:
    text = message.strip()
    if not text.startswith("{"):
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def clock_time(timestamp_ms: int, tz: tzinfo | None, millis: bool = False) -> str:
    moment = datetime.fromtimestamp(timestamp_ms / 1000, UTC).astimezone(tz)
    return moment.strftime("%H:%M:%S.%f")[:12] if millis else moment.strftime("%H:%M:%S")


def short(value: Any, limit: int = MAX_VALUE) -> str:
    """One line, at most `limit` characters; strings with spaces quoted, structures as compact JSON."""
    if isinstance(value, str):
        text = value.replace("\r", " ").replace("\n", " ⏎ ")
        text = json.dumps(text, ensure_ascii=False) if (not text or " " in text or "=" in text) else text
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _report(metrics: Mapping[str, Any], status: str | None) -> str:
    def number(key: str) -> str:
        value = metrics.get(key)
        return f"{float(value):g}" if isinstance(value, int | float | str) and str(value) else "?"

    parts = [f"{number('durationMs')} ms"]
    if metrics.get("maxMemoryUsedMB") is not None:
        parts.append(f"{number('maxMemoryUsedMB')}/{number('memorySizeMB')} MB")
    if metrics.get("initDurationMs") is not None:
        parts.append(f"init {number('initDurationMs')} ms")
    if status and status != "success":
        parts.append(status)
    return "REPORT " + ", ".join(parts)


def _text_report(line: str) -> str:
    found = {name: value for name, value in _REPORT_FIELDS.findall(line)}
    metrics = {
        "durationMs": found.get("Duration"),
        "maxMemoryUsedMB": found.get("Max Memory Used"),
        "memorySizeMB": found.get("Memory Size"),
        "initDurationMs": found.get("Init Duration"),
    }
    status = "timeout" if "Status: timeout" in line else None
    return _report(metrics, status)


def _message_text(value: Any) -> str:
    if isinstance(value, Mapping) and "errorMessage" in value:  # the runtime's own JSON for a crash
        return f"{value.get('errorType', 'Error')}: {value['errorMessage']}"
    if isinstance(value, str):
        return value.replace("\r", " ").replace("\n", " ⏎ ")
    return short(value, 400)


def _describe_text(text: str) -> tuple[str, str, str] | None:
    if text.startswith(("START RequestId:", "END RequestId:", "INIT_START")):
        return None
    if text.startswith("REPORT RequestId:"):
        return "-", _text_report(text), ""
    return "-", text.replace("\t", " ").replace("\n", " ⏎ "), ""


def _describe_platform(kind: str, record: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """Lambda's own lines in its JSON log format (`platform.start`, `platform.report`, …)."""
    body: Mapping[str, Any] = record["record"] if isinstance(record.get("record"), Mapping) else {}
    if kind == "platform.report":
        return "-", _report(body.get("metrics") or {}, body.get("status")), ""
    if kind == "platform.runtimeDone" and body.get("status") not in (None, "success"):
        error = body.get("errorType")
        return "ERROR", f"runtime {body.get('status')}", f"errorType={short(error)}" if error else ""
    return None


def _describe_metrics(record: Mapping[str, Any]) -> tuple[str, str, str]:
    """A metrics line (embedded metric format): its metric names and values."""
    definitions = record["_aws"].get("CloudWatchMetrics", []) if isinstance(record["_aws"], Mapping) else []
    names = [m.get("Name") for d in definitions for m in d.get("Metrics", [])]
    return "METRIC", " ".join(f"{name}={short(record.get(name))}" for name in names if isinstance(name, str)), ""


def describe(event: Event, omit: Iterable[str] = ()) -> tuple[str, str, str] | None:
    """(level, message, key=value …) for the terminal; None for a line not worth a row (START, END)."""
    record = event.record
    if record is None:
        return _describe_text(event.message.strip())
    kind = record.get("type")
    if isinstance(kind, str) and kind.startswith("platform."):
        return _describe_platform(kind, record)
    if "_aws" in record:
        return _describe_metrics(record)
    level = str(record.get("level") or record.get("log_level") or "-").upper()
    dropped = NOISY_FIELDS | set(omit)
    if "message" not in record and "errorMessage" in record:  # the runtime's own line for a crash
        message = _message_text(record)
        dropped |= {"errorMessage", "errorType"}
    else:
        message = _message_text(record.get("message", ""))
    pairs = " ".join(f"{key}={short(value)}" for key, value in record.items() if key not in dropped)
    return level, message, pairs


def format_line(event: Event, tz: tzinfo | None = None, omit: Iterable[str] = ()) -> str | None:
    """`HH:MM:SS function LEVEL message key=value …`, or None for a line that is skipped."""
    described = describe(event, omit)
    if described is None:
        return None
    level, message, pairs = described
    line = f"{clock_time(event.timestamp, tz)} {event.function:<8} {level:<5} {message}"
    return (line + "  " + pairs if pairs else line).rstrip()


def json_line(event: Event) -> str:
    """The line as logged, plus `@timestamp` (ISO, UTC) and `@function`; a text line as `@message`."""
    stamp = datetime.fromtimestamp(event.timestamp / 1000, UTC).isoformat(timespec="milliseconds")
    record = event.record
    body: dict[str, Any] = record if record is not None else {"@message": event.message.rstrip("\n")}
    return json.dumps({"@timestamp": stamp, "@function": event.function, **body}, ensure_ascii=False, default=str)


def function_for(log_field: str, groups: Mapping[str, str]) -> str:
    """The function whose log group is `log_field` (Logs Insights writes `account:group`)."""
    by_group = {group: name for name, group in groups.items()}
    if log_field in by_group:
        return by_group[log_field]
    account, _, group = log_field.partition(":")
    if group and account.isdigit() and group in by_group:
        return by_group[group]
    return log_field.rsplit("/", 1)[-1] or log_field


def parse_insights_time(value: str) -> int:
    """Logs Insights' `@timestamp` ("2026-11-29 10:52:04.954", UTC) in epoch milliseconds."""
    if value.isdigit():
        return int(value)
    moment = datetime.fromisoformat(value.strip().replace(" ", "T"))
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment
    return int(moment.timestamp() * 1000)


def insights_events(rows: Iterable[Iterable[Mapping[str, str]]], groups: Mapping[str, str]) -> list[Event]:
    """GetQueryResults rows (lists of {field, value}) as events, oldest first."""
    events = []
    for row in rows:
        fields = {cell["field"]: cell.get("value", "") for cell in row}
        events.append(
            Event(
                timestamp=parse_insights_time(fields.get("@timestamp", "0")),
                function=function_for(fields.get("@log", ""), groups),
                message=fields.get("@message", ""),
                event_id=fields.get("@ptr", ""),
            )
        )
    return sorted(events, key=lambda e: e.timestamp)


def render_trace(events: list[Event], wanted: TraceTarget, tz: tzinfo | None) -> list[str]:
    """The journey: one row per line with the time since the first, then a one-line summary."""
    if not events:
        return []
    first = events[0].timestamp
    omit = {"correlation_id"} if wanted.correlation is not None else {"session"}
    lines = [f"trace {wanted.describe()}"]
    for event in events:
        described = describe(event, omit)
        if described is None:
            continue
        level, message, pairs = described
        offset = f"+{(event.timestamp - first) / 1000:.3f}s"
        row = f"{clock_time(event.timestamp, tz, millis=True)} {offset:>9} {event.function:<8} {level:<5} {message}"
        lines.append((row + "  " + pairs if pairs else row).rstrip())
    path = list(dict.fromkeys(event.function for event in events))
    took = (events[-1].timestamp - first) / 1000
    lines.append(f"{len(events)} line(s) across {' → '.join(path)} in {took:.3f}s")
    return lines


# ---------------------------------------------------------------- AWS


def _logs_client() -> Any:
    import boto3

    return boto3.client("logs")


def log_groups(args: argparse.Namespace) -> dict[str, str]:
    """Function name -> log group name, from the deployed stack's outputs."""
    if args.local:
        raise ConfigError(LOCAL_MODE_HELP)
    stage = args.stage
    if stage is None:
        from hermes_gateway.settings import load_settings_file

        stage = load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml"))).stage
    outputs = target.stack_outputs(stage)
    groups = {name: outputs[key] for name in FUNCTION_NAMES if (key := log_group_output_key(name)) in outputs}
    if not groups:
        raise ConfigError(
            f"stack {stack_name(stage)} has no log group outputs (e.g. {log_group_output_key('router')});"
            " deploy the current version"
        )
    return groups


def fetch_events(client: Any, groups: Mapping[str, str], start_ms: int, pattern: str) -> list[Event]:
    """Every event since `start_ms` in the given groups that matches `pattern`, oldest first."""
    events: list[Event] = []
    for function, group in groups.items():
        request: dict[str, Any] = {"logGroupName": group, "startTime": start_ms}
        if pattern:
            request["filterPattern"] = pattern
        fetched = 0
        while fetched < MAX_EVENTS_PER_GROUP:
            page = client.filter_log_events(**request)
            for item in page.get("events", []):
                events.append(Event(item["timestamp"], function, item.get("message", ""), item.get("eventId", "")))
            fetched += len(page.get("events", []))
            token = page.get("nextToken")
            if not token or token == request.get("nextToken"):
                break
            request["nextToken"] = token
    return sorted(events, key=lambda e: (e.timestamp, e.function))


def follow(
    fetch: Callable[[int], list[Event]],
    emit: Callable[[Event], None],
    start_ms: int,
    seen: set[tuple[str, str]],
    polls: int | None = None,
) -> None:
    """Poll `fetch(since_ms)` every POLL_SECONDS, emitting each new event once; stops after `polls`."""
    cursor = start_ms
    done = 0
    while polls is None or done < polls:
        sleep(POLL_SECONDS)
        done += 1
        fresh = [e for e in fetch(cursor) if (e.function, e.event_id) not in seen]
        for event in fresh:
            emit(event)
        if fresh:
            newest = max(e.timestamp for e in fresh)
            kept = seen if newest == cursor else set()
            seen = kept | {(e.function, e.event_id) for e in fresh if e.timestamp == newest}
            cursor = newest


def _timezone(args: argparse.Namespace) -> tzinfo | None:
    return UTC if args.utc else None


def _since_text(args: argparse.Namespace) -> str:
    return f"{args.since.astimezone(_timezone(args)):%Y-%m-%d %H:%M:%S %Z}"


def _failure(what: str, exc: Exception) -> int:
    print(f"error: {what}: {exc}", file=sys.stderr)
    return 1


def _selected_groups(args: argparse.Namespace) -> dict[str, str]:
    groups = log_groups(args)
    if not args.function:
        return groups
    missing = [name for name in args.function if name not in groups]
    if missing:
        raise ConfigError(f"the stack has no log group output for {', '.join(missing)}")
    return {name: groups[name] for name in dict.fromkeys(args.function)}


def record_filter(session: str | None, correlation: str | None) -> Callable[[Event], bool]:
    """The exact check, on this side, of what the filter pattern asked the service for."""

    def wanted(event: Event) -> bool:
        if session is None and correlation is None:
            return True
        record = event.record
        return (
            record is not None
            and (session is None or record.get("session") == session)
            and (correlation is None or record.get("correlation_id") == correlation)
        )

    return wanted


def _tail(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    groups = _selected_groups(args)
    session = session_handle(args.session) if args.session else None
    pattern = filter_pattern(session=session, correlation=args.correlation)
    wanted = record_filter(session, args.correlation)
    tz = _timezone(args)
    client = _logs_client()

    def fetch(since_ms: int) -> list[Event]:
        return [e for e in fetch_events(client, groups, since_ms, pattern) if wanted(e)]

    def emit(event: Event) -> None:
        line = json_line(event) if args.json else format_line(event, tz)
        if line is not None:
            print(line, flush=True)

    start_ms = int(args.since.timestamp() * 1000)
    try:
        events = fetch(start_ms)
        for event in events[-max(1, args.lines) :]:
            emit(event)
        if not events and not args.follow:
            print(f"no log lines in {', '.join(groups)} since {_since_text(args)}", file=sys.stderr)
        if args.follow:
            newest = max((e.timestamp for e in events), default=start_ms)
            follow(fetch, emit, newest, {(e.function, e.event_id) for e in events if e.timestamp == newest})
    except KeyboardInterrupt:
        return 0
    except (BotoCoreError, ClientError) as exc:
        return _failure("cannot read the logs", exc)
    return 0


def run_query(client: Any, groups: Iterable[str], query: str, start: datetime, timeout: float) -> list[Any]:
    """Start a Logs Insights query and wait for its rows (a TimeoutError after `timeout` seconds)."""
    end = datetime.now(UTC)
    query_id = client.start_query(
        logGroupNames=list(groups),
        startTime=int(start.timestamp()),
        endTime=int(end.timestamp()) + 1,
        queryString=query,
    )["queryId"]
    deadline = clock() + timeout
    while True:
        response = client.get_query_results(queryId=query_id)
        status = response.get("status")
        if status == "Complete":
            rows: list[Any] = response.get("results", [])
            return rows
        if status in ("Failed", "Cancelled", "Timeout", "Unknown"):
            raise RuntimeError(f"the Logs Insights query ended {status}")
        if clock() >= deadline:
            with contextlib.suppress(Exception):  # best effort; the timeout is what gets reported
                client.stop_query(queryId=query_id)
            raise TimeoutError(f"the Logs Insights query did not finish within {timeout:g}s (try a shorter --since)")
        sleep(QUERY_POLL_SECONDS)


def _trace(args: argparse.Namespace) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    wanted = TraceTarget.parse(args.id)
    query = trace_query(wanted)
    groups = log_groups(args)
    try:
        rows = run_query(_logs_client(), groups.values(), query, args.since, args.timeout)
    except (BotoCoreError, ClientError, RuntimeError, TimeoutError) as exc:
        return _failure("trace failed", exc)
    # Checked again here: a filter that the service did not apply must not widen the trace.
    events = [e for e in insights_events(rows, groups) if wanted.matches(e.record)]
    if not events:
        print(f"no log lines for {wanted.describe()} since {_since_text(args)}", file=sys.stderr)
        return 1
    if args.json:
        for event in events:
            print(json_line(event))
    else:
        for line in render_trace(events, wanted, _timezone(args)):
            print(line)
    if len(rows) >= TRACE_LIMIT:
        print(f"(the first {TRACE_LIMIT} lines only: narrow --since)", file=sys.stderr)
    return 0
