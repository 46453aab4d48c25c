"""`hermes-gateway logs`: --since, filter patterns and queries (always escaped), the terminal format,
the follow loop and the query wait. No AWS here: clients are stubs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from hermes_cli import logs, main
from hermes_cli.logs import (
    Event,
    TraceTarget,
    filter_pattern,
    format_line,
    function_for,
    insights_events,
    json_line,
    parse_insights_time,
    parse_since,
    quote,
    render_trace,
    session_handle,
    trace_query,
)
from hermes_gateway.errors import ConfigError
from hermes_gateway.observability import hash_id

NOW = datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
T0 = int(datetime(2026, 11, 29, 9, 58, 1, 250000, tzinfo=UTC).timestamp() * 1000)
SESSION_KEY = "agent:main:telegram:dm:42"
SESSION = str(hash_id(SESSION_KEY))


def powertools(message: str, level: str = "INFO", **keys: Any) -> str:
    """A line as Powertools Logger writes it inside a handler decorated with inject_lambda_context."""
    record = {
        "level": level,
        "location": "record_handler:40",
        "message": message,
        "timestamp": "2026-11-29 09:58:01,250+0000",
        "service": "hermes-gateway",
        "cold_start": True,
        "function_name": "HermesGateway-qa-RouterFunction-AbC",
        "function_memory_size": "512",
        "function_arn": "arn:aws:lambda:us-east-1:123456789012:function:HermesGateway-qa-RouterFunction-AbC",
        "function_request_id": "0f5e3c1a-7d9e-4a55-9d61-2b8c0c3c5a11",
        "correlation_id": "telegram:default:1001",
        "session": SESSION,
        **keys,
        "xray_trace_id": "1-6749a1b2-3c4d5e6f7a8b9c0d1e2f3a4b",
        "sampling_rate": 0.0,
    }
    return json.dumps(record)


# ---------------------------------------------------------------- --since


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10m", NOW - timedelta(minutes=10)),
        ("2h", NOW - timedelta(hours=2)),
        ("1d", NOW - timedelta(days=1)),
        ("45s", NOW - timedelta(seconds=45)),
        ("1w", NOW - timedelta(weeks=1)),
        (" 15 m ", NOW - timedelta(minutes=15)),
        ("2026-11-29T09:30:00Z", datetime(2026, 11, 29, 9, 30, tzinfo=UTC)),
        ("2026-11-29T11:30:00+02:00", datetime(2026, 11, 29, 9, 30, tzinfo=UTC)),
    ],
)
def test_since_is_a_duration_or_an_iso_time(text: str, expected: datetime) -> None:
    assert parse_since(text, NOW) == expected


def test_a_naive_iso_time_is_local_time() -> None:
    assert parse_since("2026-11-28T12:00:00", NOW) == datetime(2026, 11, 28, 12, 0).astimezone()


@pytest.mark.parametrize("text", ["", "10", "m", "10 minutes", "3x", "yesterday", "2026-13-01"])
def test_a_bad_since_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_since(text, NOW)


def test_a_since_in_the_future_is_refused() -> None:
    with pytest.raises(ValueError, match="future"):
        parse_since("2026-11-29T11:00:00Z", NOW)


def test_the_cli_rejects_a_bad_since_with_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["logs", "tail", "--since", "3x"])
    assert exited.value.code == 2
    assert "not a duration (10m, 2h, 1d) or an ISO time: '3x'" in capsys.readouterr().err


# ---------------------------------------------------------------- escaping, patterns, queries


def test_quote_escapes_backslashes_and_double_quotes() -> None:
    assert quote("telegram:default:1001") == '"telegram:default:1001"'
    assert quote('a"b\\c') == '"a\\"b\\\\c"'
    assert quote('\\"') == '"\\\\\\""'


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "tab\there", "\x00", "\x7f"])
def test_control_characters_are_refused_not_searched(value: str) -> None:
    with pytest.raises(ConfigError, match="control characters"):
        quote(value)


def test_a_raw_session_key_is_hashed_and_a_hash_is_kept() -> None:
    assert session_handle(SESSION_KEY) == SESSION
    assert session_handle(SESSION) == SESSION
    assert session_handle("whatever") == hash_id("whatever")


def test_filter_patterns_match_the_logged_fields() -> None:
    assert filter_pattern() == ""
    assert filter_pattern(session=SESSION) == '{ $.session = "' + SESSION + '" }'
    assert filter_pattern(correlation="slack:T1:Ev1") == '{ $.correlation_id = "slack:T1:Ev1" }'
    assert filter_pattern(session="abc", correlation="x") == '{ ($.session = "abc") && ($.correlation_id = "x") }'


def test_a_filter_pattern_value_cannot_close_its_string() -> None:
    pattern = filter_pattern(correlation='x" } || { $.level = "ERROR')
    assert pattern == '{ $.correlation_id = "x\\" } || { $.level = \\"ERROR" }'


def test_trace_follows_an_event_id_by_correlation_id() -> None:
    wanted = TraceTarget.parse("telegram:default:1001")
    assert wanted == TraceTarget(correlation="telegram:default:1001", session=None)
    assert trace_query(wanted) == (
        'fields @timestamp, @log, @logStream, @message | filter correlation_id = "telegram:default:1001"'
        " | sort @timestamp asc | limit 500"
    )


def test_trace_of_a_session_key_filters_on_its_hash_only() -> None:
    wanted = TraceTarget.parse(SESSION_KEY)
    assert wanted == TraceTarget(correlation=None, session=SESSION)
    assert f'| filter session = "{SESSION}" |' in trace_query(wanted)
    assert SESSION_KEY not in trace_query(wanted)


def test_trace_of_a_hash_looks_for_either_field() -> None:
    wanted = TraceTarget.parse(SESSION)
    assert f'filter correlation_id = "{SESSION}" or session = "{SESSION}"' in trace_query(wanted)


def test_a_trace_value_cannot_inject_query_commands() -> None:
    query = trace_query(TraceTarget.parse('x" or level = "ERROR" | limit 1 | display "\\'))
    assert query == (
        "fields @timestamp, @log, @logStream, @message"
        ' | filter correlation_id = "x\\" or level = \\"ERROR\\" | limit 1 | display \\"\\\\"'
        " | sort @timestamp asc | limit 500"
    )


def test_trace_matches_exactly_on_this_side() -> None:
    wanted = TraceTarget.parse("telegram:default:1001")
    assert wanted.matches({"correlation_id": "telegram:default:1001"})
    assert not wanted.matches({"correlation_id": "telegram:default:10011"})
    assert not wanted.matches(None)
    assert TraceTarget.parse(SESSION_KEY).matches({"session": SESSION, "correlation_id": "other"})
    with pytest.raises(ConfigError):
        TraceTarget.parse("  ")


# ---------------------------------------------------------------- terminal format


def line(raw: str, function: str = "router", timestamp: int = T0) -> str | None:
    return format_line(Event(timestamp, function, raw), tz=UTC)


def test_a_powertools_line_is_one_readable_row_without_the_noise() -> None:
    row = line(powertools("turn started", turn_id="t-1", platform="telegram"))
    assert row == (
        f"09:58:01 router   INFO  turn started  correlation_id=telegram:default:1001 session={SESSION}"
        " turn_id=t-1 platform=telegram"
    )
    for noise in ("function_arn", "cold_start", "xray", "sampling_rate", "request_id", "location", "memory"):
        assert noise not in (row or "")


def test_long_values_are_cut_and_structures_are_compact() -> None:
    row = line(powertools("sent", error="x" * 200, chunks=[1, 2], ok=True, text="two words")) or ""
    assert "error=" + "x" * 79 + "…" in row
    assert "chunks=[1,2] ok=true" in row
    assert 'text="two words"' in row


def test_an_exception_is_kept_on_one_line() -> None:
    raw = powertools("send failed", "ERROR", exception="Traceback (most recent call last):\n  File x\nBoom")
    row = line(raw) or ""
    assert "\n" not in row and " ERROR send failed  " in row and 'exception="Traceback' in row


def test_start_and_end_are_skipped_and_report_is_compact() -> None:
    assert line("START RequestId: 0f5e Version: $LATEST\n") is None
    assert line("END RequestId: 0f5e\n") is None
    report = (
        "REPORT RequestId: 0f5e\tDuration: 12.34 ms\tBilled Duration: 13 ms\tMemory Size: 512 MB\t"
        "Max Memory Used: 81 MB\tInit Duration: 301.50 ms\t\n"
    )
    assert line(report) == "09:58:01 router   -     REPORT 12.34 ms, 81/512 MB, init 301.5 ms"


def test_lambda_json_format_platform_lines() -> None:
    start = {"time": "2026-11-29T09:58:01.250Z", "type": "platform.start", "record": {"requestId": "r"}}
    assert line(json.dumps(start)) is None
    report = {
        "time": "2026-11-29T09:58:01.250Z",
        "type": "platform.report",
        "record": {
            "requestId": "r",
            "metrics": {"durationMs": 8.2, "billedDurationMs": 9, "memorySizeMB": 512, "maxMemoryUsedMB": 90},
            "status": "timeout",
        },
    }
    assert line(json.dumps(report)) == "09:58:01 router   -     REPORT 8.2 ms, 90/512 MB, timeout"
    done = {"type": "platform.runtimeDone", "record": {"status": "error", "errorType": "Runtime.ExitError"}}
    assert line(json.dumps(done)) == "09:58:01 router   ERROR runtime error  errorType=Runtime.ExitError"


def test_a_crash_written_by_the_runtime_reads_as_its_error() -> None:
    crash = {
        "timestamp": "2026-11-29T09:58:01Z",
        "log_level": "ERROR",
        "errorMessage": "boom",
        "errorType": "KeyError",
        "requestId": "r",
        "stackTrace": ["  File x\n"],
    }
    assert line(json.dumps(crash)) == "09:58:01 router   ERROR KeyError: boom"


def test_a_metrics_line_shows_its_values() -> None:
    emf = {
        "_aws": {
            "Timestamp": T0,
            "CloudWatchMetrics": [
                {
                    "Namespace": "HermesGateway",
                    "Dimensions": [["service"]],
                    "Metrics": [{"Name": "MessagesDelivered", "Unit": "Count"}],
                }
            ],
        },
        "service": "hermes-gateway",
        "MessagesDelivered": [1.0],
    }
    assert line(json.dumps(emf), "delivery") == "09:58:01 delivery METRIC MessagesDelivered=[1.0]"


def test_a_plain_text_line_is_shown_as_it_is() -> None:
    assert line("[WARNING] something odd\twith a tab\n") == "09:58:01 router   -     [WARNING] something odd with a tab"


def test_times_are_local_unless_utc_is_asked_for() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert (format_line(Event(T0, "agent", powertools("x")), tz=plus_two) or "").startswith("11:58:01 agent ")


def test_json_output_is_the_line_as_logged_plus_time_and_function() -> None:
    raw = powertools("turn started", turn_id="t-1")
    out = json.loads(json_line(Event(T0, "agent", raw + "\n")))
    assert out == {"@timestamp": "2026-11-29T09:58:01.250+00:00", "@function": "agent", **json.loads(raw)}
    text = json.loads(json_line(Event(T0, "agent", "END RequestId: r\n")))
    assert text == {"@timestamp": "2026-11-29T09:58:01.250+00:00", "@function": "agent", "@message": "END RequestId: r"}


# ---------------------------------------------------------------- trace results

GROUPS = {"ingress": "/aws/lambda/HermesGateway-qa-Ingress", "router": "/aws/lambda/HermesGateway-qa-Router"}


def test_the_function_comes_from_the_log_group() -> None:
    assert function_for("123456789012:/aws/lambda/HermesGateway-qa-Router", GROUPS) == "router"
    assert function_for("/aws/lambda/HermesGateway-qa-Ingress", GROUPS) == "ingress"
    assert function_for("123456789012:/aws/lambda/SomethingElse", GROUPS) == "SomethingElse"


def test_insights_timestamps_are_utc() -> None:
    assert parse_insights_time("2026-11-29 09:58:01.250") == T0
    assert parse_insights_time(str(T0)) == T0


def test_a_trace_reads_as_a_journey() -> None:
    rows = [
        [
            {"field": "@timestamp", "value": "2026-11-29 09:58:01.640"},
            {"field": "@log", "value": "123456789012:" + GROUPS["router"]},
            {"field": "@message", "value": powertools("turn started", turn_id="t-1")},
            {"field": "@ptr", "value": "p2"},
        ],
        [
            {"field": "@timestamp", "value": "2026-11-29 09:58:01.250"},
            {"field": "@log", "value": "123456789012:" + GROUPS["ingress"]},
            {"field": "@message", "value": powertools("webhook accepted", platform="telegram")},
            {"field": "@ptr", "value": "p1"},
        ],
    ]
    events = insights_events(rows, GROUPS)
    assert [e.function for e in events] == ["ingress", "router"]
    wanted = TraceTarget.parse("telegram:default:1001")
    assert render_trace(events, wanted, UTC) == [
        "trace correlation id telegram:default:1001",
        f"09:58:01.250   +0.000s ingress  INFO  webhook accepted  session={SESSION} platform=telegram",
        f"09:58:01.640   +0.390s router   INFO  turn started  session={SESSION} turn_id=t-1",
        "2 line(s) across ingress → router in 0.390s",
    ]
    assert render_trace([], wanted, UTC) == []


# ---------------------------------------------------------------- polling


def test_follow_emits_each_new_event_once_and_stops_after_its_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(logs, "sleep", waits.append)
    batches = [
        [Event(T0, "router", "a", "1")],  # already shown before following
        [Event(T0, "router", "a", "1"), Event(T0, "agent", "b", "2")],
        [Event(T0 + 5, "delivery", "c", "3")],
        [],
    ]
    asked: list[int] = []

    def fetch(since: int) -> list[Event]:
        asked.append(since)
        # What CloudWatch returns from `since` on, including lines at that very millisecond.
        return [e for batch in batches[: len(asked)] for e in batch if e.timestamp >= since]

    shown: list[str] = []
    logs.follow(fetch, lambda e: shown.append(e.message), T0, {("router", "1")}, polls=4)
    assert shown == ["b", "c"]
    assert asked == [T0, T0, T0, T0 + 5]  # the cursor moves to the newest line shown
    assert waits == [logs.POLL_SECONDS] * 4


class StubLogs:
    """start_query / get_query_results / stop_query, answering with the given statuses in turn."""

    def __init__(self, *statuses: str) -> None:
        self.statuses = list(statuses)
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def start_query(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("start_query", kwargs))
        return {"queryId": "q-1"}

    def get_query_results(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("get_query_results", kwargs))
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        return {"status": status, "results": [[{"field": "@message", "value": "x"}]] if status == "Complete" else []}

    def stop_query(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(("stop_query", kwargs))
        return {"success": True}


def test_the_trace_query_is_polled_until_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []
    monkeypatch.setattr(logs, "sleep", waits.append)
    client = StubLogs("Scheduled", "Running", "Complete")
    start = NOW - timedelta(days=1)
    rows = logs.run_query(client, ["/g/a", "/g/b"], "fields @message", start, timeout=60)
    assert rows == [[{"field": "@message", "value": "x"}]]
    name, request = client.calls[0]
    assert name == "start_query" and request["logGroupNames"] == ["/g/a", "/g/b"]
    assert request["startTime"] == int(start.timestamp()) and request["queryString"] == "fields @message"
    assert [c[0] for c in client.calls[1:]] == ["get_query_results"] * 3
    assert waits == [logs.QUERY_POLL_SECONDS] * 2


def test_a_failed_query_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="ended Failed"):
        logs.run_query(StubLogs("Failed"), ["/g"], "q", NOW, timeout=60)


def test_a_slow_query_is_stopped_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr(logs, "clock", lambda: now[0])
    monkeypatch.setattr(logs, "sleep", lambda seconds: now.__setitem__(0, now[0] + seconds))
    client = StubLogs("Running")
    with pytest.raises(TimeoutError, match="within 5s"):
        logs.run_query(client, ["/g"], "q", NOW, timeout=5)
    assert client.calls[-1] == ("stop_query", {"queryId": "q-1"})


# ---------------------------------------------------------------- the commands


def test_local_mode_has_no_cloudwatch_and_says_where_the_logs_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["logs", "tail", "--local"]) == 2
    err = capsys.readouterr().err
    assert "local mode has no CloudWatch" in err and "make run" in err
    assert main(["logs", "trace", "telegram:default:1001", "--local"]) == 2


@pytest.mark.parametrize("argv", [["logs", "--help"], ["logs", "tail", "--help"], ["logs", "trace", "--help"]])
def test_every_command_has_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 0
    assert "usage: hermes-gateway logs" in capsys.readouterr().out


def test_an_unknown_function_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["logs", "tail", "--function", "nope"])
    assert "invalid choice: 'nope'" in capsys.readouterr().err
