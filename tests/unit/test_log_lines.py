"""The functions' log lines: what each one carries (every byte is billed at ingestion)."""

from __future__ import annotations

import io
import json
import logging
from types import SimpleNamespace

import pytest

from hermes_gateway.observability import logger


def test_a_line_keeps_the_request_id_and_drops_what_the_log_group_says() -> None:
    # Given the gateway's logger inside a Lambda invocation (Powertools adds the context's keys)
    context = SimpleNamespace(
        function_name="hermes-dev-router", memory_limit_in_mb=512, aws_request_id="req-1",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:hermes-dev-router",
    )  # fmt: skip
    raw = io.StringIO()
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(raw)

    @logger.inject_lambda_context
    def handle(event: dict[str, str], context: object) -> None:
        logger.info("turn started", extra={"session": "abc123"})

    try:
        handle({}, context)
    finally:
        handler.setStream(previous)
        context_keys = ["function_name", "function_memory_size", "function_arn", "function_request_id", "cold_start"]
        logger.remove_keys(context_keys)
    line = json.loads(raw.getvalue().strip().splitlines()[-1])
    # Then the line says what happened and to which invocation, not which function (its log group does)
    assert line["message"] == "turn started" and line["session"] == "abc123"
    assert line["function_request_id"] == "req-1"
    assert not {"function_name", "function_arn", "function_memory_size"} & set(line)


def test_switched_off_metrics_are_neither_printed_nor_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a deployment that keeps no custom metrics (the minimal tier sets the switch)
    from hermes_gateway.observability import METRICS_DISABLED_ENV, MetricUnit, metrics

    metrics.clear_metrics()
    monkeypatch.setenv(METRICS_DISABLED_ENV, "true")
    # When a warm function counts more values than one EMF document holds (Powertools prints a
    # metric's values when it reaches 100, whatever its own switch says)
    for _ in range(150):
        metrics.add_metric(name="DeliverySent", unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()
    # Then nothing was printed and nothing is kept for a later invocation
    assert "DeliverySent" not in capsys.readouterr().out
    assert metrics.metric_set == {}
    # And with the switch off, the same call is published as before
    monkeypatch.setenv(METRICS_DISABLED_ENV, "false")
    metrics.add_metric(name="DeliverySent", unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()
    emf = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert emf["DeliverySent"] == [1.0]
    assert metrics.metric_set == {}


def test_an_info_line_drops_what_says_nothing_and_a_warning_keeps_its_place() -> None:
    from hermes_gateway.observability import log_json

    base = {"timestamp": "2026-12-02 18:39:54,892+0000", "service": "hermes-gateway", "location": "_begin:291",
            "function_request_id": "req-1", "correlation_id": "telegram:default:1"}  # fmt: skip
    info = json.loads(log_json({"level": "INFO", "message": "turn started", "cold_start": False, **base}))
    assert set(info) == {"level", "message", "timestamp", "function_request_id", "correlation_id"}
    warm_warning = json.loads(log_json({"level": "WARNING", "message": "slow", "cold_start": False, **base}))
    assert warm_warning["location"] == "_begin:291" and "cold_start" not in warm_warning
    cold = json.loads(log_json({"level": "INFO", "message": "event accepted", "cold_start": True, **base}))
    assert cold["cold_start"] is True and "service" not in cold


def test_invocations_in_flight_together_each_keep_their_own_correlation_keys() -> None:
    # Given two invocations running at once in one process (local mode runs every function as
    # threads), each logging before and after the other set its keys, and a thread one of them
    # starts in a copy of its context (as the typing indicator and the event publisher do)
    import contextvars
    import threading

    from hermes_gateway.observability import correlate

    raw = io.StringIO()
    handler = logger.registered_handler
    assert isinstance(handler, logging.StreamHandler)
    previous = handler.setStream(raw)
    first_set, second_set = threading.Event(), threading.Event()

    def invocation(event_id: str, mine: threading.Event, other: threading.Event) -> None:
        logger.thread_safe_clear_keys()
        correlate(event_id, f"session-of-{event_id}")
        mine.set()
        other.wait(5)  # the other invocation has set its keys too
        logger.info("routed")
        helper = threading.Thread(target=contextvars.copy_context().run, args=(logger.info, "helper"))
        helper.start()
        helper.join()

    threads = [
        threading.Thread(target=invocation, args=("e1", first_set, second_set)),
        threading.Thread(target=invocation, args=("e2", second_set, first_set)),
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
    finally:
        handler.setStream(previous)
    lines = [json.loads(text) for text in raw.getvalue().strip().splitlines()]
    # Then every line names its own invocation's event and session, the helper's lines too
    assert len(lines) == 4
    for line in lines:
        assert line["session"] == f"session-of-{line['correlation_id']}", line
    assert sorted(line["correlation_id"] for line in lines) == ["e1", "e1", "e2", "e2"]
