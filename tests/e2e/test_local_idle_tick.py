"""The every-minute tick on an empty deployment (local mode, moto): it runs every minute of every
month, so what it does with nothing to do is the idle bill (bench/idle_cost.py prices it). It may
read; it must not write, publish, log at INFO or emit a metric (a metric written every minute,
even as 0, is billed as a whole custom metric a month)."""

from __future__ import annotations

import pytest

from bench.idle_cost import measure_idle_tick

pytestmark = pytest.mark.e2e


def test_an_idle_tick_only_queries_and_emits_no_metric_and_no_log_line() -> None:
    # Given an empty local deployment, When the scheduled function runs (after a warm-up run)
    tick = measure_idle_tick(runs=1)
    # Then it made DynamoDB queries and nothing else
    assert tick.requests and set(tick.requests) == {"dynamodb Query"}
    assert tick.write_units == 0
    assert tick.read_units == 0.5 * tick.requests["dynamodb Query"]  # each finds nothing: the minimum
    # And it added no metric and logged nothing at INFO
    assert tick.metrics == []
    assert tick.log_bytes == 0
