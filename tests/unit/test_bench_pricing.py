"""bench/pricing.py: the price model the cost benches share (Lambda time from CPU and round trips,
event source mappings per record, Express duration from its tasks, X-Ray's default sampling rule)."""

from __future__ import annotations

import math

import pytest

from bench.meter import Invocation, Meter
from bench.pricing import (
    PRICES,
    ROUND_TRIP_MS,
    billed,
    cpu_share,
    express_seconds,
    memory_mb,
    price,
    profile,
    trace_roots,
    units_of_work,
    xray_sampled_fraction,
)


def invocation(n: int, function: str, trigger: str, *, cpu: float = 0.01, wall: float = 0.05, step: str = "",
               records: int = 0, source: str = "", trips: int = 0, strings: frozenset[str] = frozenset(),
               started: float = 0.0) -> Invocation:  # fmt: skip
    return Invocation(
        n, function, step, trigger, wall, cpu, started, started + wall, records=records, source=source,
        aws_calls=trips, round_trips=[("dynamodb", "GetItem")] * trips, strings=strings,
    )  # fmt: skip


def test_billed_duration_is_cpu_at_the_memory_share_plus_a_round_trip_per_call() -> None:
    cost = billed(invocation(1, "ingress", "api", cpu=0.010, trips=3), 512)
    assert cpu_share(512) == pytest.approx(512 / 1769)
    assert cost.model_ms == math.ceil(10 / (512 / 1769) + 3 * ROUND_TRIP_MS["dynamodb"])
    assert cost.wall_ms == 50
    assert cpu_share(4096) == 1.0  # one thread cannot use more than a core


def test_an_event_source_batch_is_priced_as_one_invocation_per_record() -> None:
    batch = invocation(1, "router", "sqs", cpu=0.030, wall=0.3, records=3, trips=6)
    assert units_of_work([batch, invocation(2, "ingress", "api")]) == {"router/sqs": 3, "ingress/api": 1}
    assert billed(batch, 512).calls == 2
    assert billed(batch, 512).wall_ms == 100


def test_the_default_sampling_rule_traces_almost_everything_when_quiet_and_5_percent_when_busy() -> None:
    assert xray_sampled_fraction(0.001) == pytest.approx(1.0, abs=0.001)
    assert xray_sampled_fraction(1.0) == pytest.approx(1 - math.exp(-1) + 0.05 * math.exp(-1))
    assert xray_sampled_fraction(1000.0) == pytest.approx(0.05 + 0.95 / 1000, rel=0.01)
    rates = [0.1, 0.5, 1, 5, 50]
    shares = [xray_sampled_fraction(r) for r in rates]
    assert shares == sorted(shares, reverse=True)


def test_an_execution_is_billed_for_its_own_tasks_found_by_its_name_in_their_input() -> None:
    meter = Meter()
    meter.executions = {"turn-a": 0.0, "turn-b": 0.0}
    meter.invocations = [
        invocation(1, "agent", "stepfunctions", step="prepare", cpu=0.005, strings=frozenset({"turn-a"})),
        invocation(2, "agent", "stepfunctions", step="prepare", cpu=0.005, strings=frozenset({"turn-b"})),
        invocation(3, "agent", "stepfunctions", step="call_model", cpu=0.040, strings=frozenset({"turn-a"})),
    ]
    modelled, _ = express_seconds(meter, {})
    own = profile(meter.invocations)
    a = own["agent/prepare"]["model_ms"] + own["agent/call_model"]["model_ms"] + 2 * 20
    b = own["agent/prepare"]["model_ms"] + 20
    assert modelled == pytest.approx(math.ceil(a / 100) / 10 + math.ceil(b / 100) / 10)


def test_price_counts_the_pollers_the_traces_and_takes_lambda_time_from_the_solo_profile() -> None:
    meter = Meter()
    meter.fifo_queues = {"inbound"}
    meter.invocations = [
        invocation(1, "ingress", "api", trips=2),
        invocation(2, "router", "sqs", records=2, source="inbound", trips=4),
        invocation(3, "ingress", "api", trips=2),
    ]
    solo = {"router/sqs": {"n": 1, "wall_ms": 500.0, "model_ms": 100.0, "cpu_ms": 10.0, "round_trip_ms": 20.0,
                           "aws_calls": 2.0}}  # fmt: skip
    report = price(meter, messages=2, webhook_requests=2, log_bytes=0, solo=solo)
    per = PRICES["per_request"]
    assert report["per_message"]["sqs_requests"] == {"fifo": 2.0}  # a receive and a delete per record
    assert report["lambda_by_function"]["router/sqs"]["measured"] == "alone"
    assert report["lambda_by_function"]["router/sqs"]["invocations_per_message"] == 1.0
    assert trace_roots(meter) == 4  # two webhooks, two records
    memory = memory_mb()  # the deployed sizes (hermes_gateway/resources.py)
    router_gb_s = 2 * 0.1 * memory["router"] / 1024  # two records x 100 ms x the router's memory
    ingress_gb_s = sum(
        billed(i, memory["ingress"]).model_ms / 1000 * memory["ingress"] / 1024
        for i in meter.invocations
        if i.function == "ingress"
    )
    expected = (4 * per["lambda_request"] + (router_gb_s + ingress_gb_s) * per["lambda_gb_second_arm"]) / 2 * 1e6
    assert report["cost_by_service"]["lambda"] == pytest.approx(expected, abs=1e-3)
    assert report["cost_per_million_usd"] == pytest.approx(sum(report["cost_by_service"].values()), abs=0.01)


def test_only_the_functions_the_tier_traces_start_priced_traces() -> None:
    from bench.pricing import traced_by_default

    meter = Meter()
    meter.invocations = [invocation(1, "ingress", "api"), invocation(2, "router", "stream", records=3)]
    assert trace_roots(meter) == 4  # the webhook, and one per stream record
    assert trace_roots(meter, lambda function: function == "router") == 3
    # The default tier (minimal) traces nothing: X-Ray is not in a default deployment's bill
    assert trace_roots(meter, traced_by_default()) == 0


def test_a_function_url_endpoint_bills_no_api_request_and_no_access_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.pricing import ACCESS_LOG_BYTES, webhook_endpoint
    from hermes_gateway import wiring

    meter = Meter()
    meter.invocations = [invocation(1, "ingress", "api", trips=1), invocation(2, "ingress", "api", trips=1)]
    api = price(meter, messages=2, webhook_requests=3, log_bytes=1000, endpoint="http_api")
    url = price(meter, messages=2, webhook_requests=3, log_bytes=1000, endpoint="function_url")
    per = PRICES["per_request"]
    assert api["cost_by_service"]["apigateway"] == pytest.approx(3 * per["apigateway_http_request"] / 2 * 1e6)
    assert url["cost_by_service"]["apigateway"] == 0
    assert api["per_message"]["log_bytes"] - url["per_message"]["log_bytes"] == 3 * ACCESS_LOG_BYTES / 2
    assert url["cost_by_service"]["lambda"] == api["cost_by_service"]["lambda"]  # the same invocations
    assert (api["webhook_endpoint"], url["webhook_endpoint"]) == ("http_api", "function_url")
    # Unnamed, the deployment's own setting is priced
    monkeypatch.setenv("GATEWAY_WEBHOOK_ENDPOINT", "function_url")
    wiring.reset()
    try:
        assert webhook_endpoint() == "function_url"
        assert price(meter, messages=2, webhook_requests=3, log_bytes=1000)["cost_by_service"]["apigateway"] == 0
    finally:
        monkeypatch.delenv("GATEWAY_WEBHOOK_ENDPOINT")
        wiring.reset()


def test_an_invocation_is_billed_the_models_seconds_what_it_slept_and_its_cpu_outside_the_request() -> None:
    waiting = Invocation(
        1, "agent", "respond", "stepfunctions", 9.0, 0.060, 0.0, 9.0, round_trips=[("dynamodb", "Query")],
        model_seconds=8.0, model_cpu_seconds=0.040, slept=0.5,
    )  # fmt: skip
    cost = billed(waiting, 256)
    share = cpu_share(256)
    # the 40 ms of CPU reading the stream (276 ms at 256 MB's share) hide in the model's 8 s
    assert cost.model_ms == math.ceil(20 / share + ROUND_TRIP_MS["dynamodb.Query"] + 8000 + 500)
    assert (cost.model_wait_ms, cost.slept_ms) == (8000, 500)
    # a model that answered at once: the stream's CPU is billed as CPU
    instant = billed(
        Invocation(2, "agent", "respond", "stepfunctions", 0.1, 0.060, 0.0, 0.1, model_cpu_seconds=0.04), 128
    )
    assert instant.model_ms == math.ceil(60 / cpu_share(128))


def test_per_invocation_an_execution_is_billed_its_own_tasks_in_100_ms_steps() -> None:
    meter = Meter()
    meter.executions = {"turn-a": 0.0, "turn-b": 0.0}
    meter.invocations = [
        Invocation(1, "agent", "respond", "stepfunctions", 1.0, 0.0, 0.0, 1.0, strings=frozenset({"turn-a"}),
                   model_seconds=1.234),
        Invocation(2, "agent", "respond", "stepfunctions", 9.0, 0.0, 0.0, 9.0, strings=frozenset({"turn-b"}),
                   model_seconds=9.01),
    ]  # fmt: skip
    modelled, _ = express_seconds(meter, {}, per_invocation=True)
    assert modelled == pytest.approx(1.3 + 9.1)  # 1,234 + 20 ms -> 1.3 s; 9,010 + 20 -> 9.1 s
    by_mean, _ = express_seconds(meter, {})
    assert by_mean == pytest.approx(5.2 * 2)  # the key's mean for both: (1,234 + 9,010) / 2 + 20 -> 5.2 s
