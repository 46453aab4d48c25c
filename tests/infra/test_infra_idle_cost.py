"""The idle monthly cost read from the synthesized template (bench/idle_cost.py): what is billed
with no traffic at all, per observability tier, so a change that adds a monthly charge shows in
review. The tick's own profile is measured in local mode (tests/e2e/test_local_idle_tick.py)."""

from __future__ import annotations

from bench.idle_cost import MINUTES_PER_MONTH, PRICES, TickProfile, alarm_metrics, idle_cost
from tests.infra.conftest import Synthesized

# An idle tick as local mode measures it (its DynamoDB queries find nothing).
IDLE_TICK = TickProfile(seconds=0.1, requests={"dynamodb Query": 10}, read_units=5.0)


def kinds(report: dict[str, object]) -> set[str]:
    lines = report["lines"]
    assert isinstance(lines, dict)
    return {item.split(" x")[0].split(" of the ")[0].split(":")[0] for item in lines}


def test_minimal_bills_two_alarms_and_the_tick_only(synthesized: Synthesized) -> None:
    report = idle_cost(synthesized.resources, IDLE_TICK)
    assert kinds(report) == {"CloudWatch alarms", "schedule rate(1 minute)"}
    assert not any("KMS" in item or "dashboard" in item or "SNS" in item for item in report["lines"])
    assert report["idle_cost_per_month_usd"] < 0.5
    # no metric is emitted, no log line written and no trace recorded while nothing happens
    assert not [item for item in report["lines"] if "metric" in item or "logs" in item or "X-Ray" in item]


def test_a_stream_event_source_bills_nothing_idle_and_a_queue_would(synthesized: Synthesized) -> None:
    from bench.idle_cost import _poller_line

    mappings = synthesized.of_type("AWS::Lambda::EventSourceMapping")
    assert mappings  # the router reads the inbox's stream
    for mapping in mappings.values():  # Lambda's polling of a DynamoDB stream is not billed
        line = _poller_line(mapping, synthesized.resources)
        assert "stream" in line.item and line.quantity == 0
    # An SQS event source is billed its pollers' empty receives (15 a minute)
    queue = {"Type": "AWS::SQS::Queue", "Properties": {"FifoQueue": True}}
    sqs_mapping = {"Properties": {"EventSourceArn": {"Fn::GetAtt": ["Q", "Arn"]}}}
    line = _poller_line(sqs_mapping, {"Q": queue})
    assert line.quantity == 15 * MINUTES_PER_MONTH and line.price == "sqs_fifo_request"


def test_an_alarm_over_a_metric_expression_is_billed_per_metric(synthesized: Synthesized) -> None:
    alarms = synthesized.of_type("AWS::CloudWatch::Alarm").values()
    billed = sorted(alarm_metrics(alarm) for alarm in alarms)
    dead_letter_queues = [
        q for q in synthesized.of_type("AWS::SQS::Queue").values() if "RedrivePolicy" not in q["Properties"]
    ]
    assert billed == [1, len(dead_letter_queues)]  # the logged-errors metric; every dead-letter queue


def test_full_adds_the_dashboard_the_key_the_tick_traces_and_its_report_lines(
    synthesized: Synthesized, synthesized_full: Synthesized
) -> None:
    minimal = idle_cost(synthesized.resources, IDLE_TICK)
    full = idle_cost(synthesized_full.resources, IDLE_TICK)
    assert kinds(full) - kinds(minimal) == {"dashboards", "customer-managed KMS keys", "SNS topics"}
    traces = full["lines"]["schedule rate(1 minute): X-Ray traces"]
    assert abs(traces - MINUTES_PER_MONTH * PRICES["per_request"]["xray_trace_recorded"]) < 1e-6
    assert any(item.startswith("schedule rate(1 minute): logs (900 bytes") for item in full["lines"])
    assert full["idle_cost_per_month_usd"] > minimal["idle_cost_per_month_usd"] + 4.0


def test_a_tick_that_emits_metrics_is_billed_for_them(synthesized: Synthesized) -> None:
    noisy = TickProfile(seconds=0.1, read_units=5.0, log_bytes=460, metrics=["LeasesExpired", "CronRunsStarted"])
    quiet = idle_cost(synthesized.resources, IDLE_TICK)["idle_cost_per_month_usd"]
    loud = idle_cost(synthesized.resources, noisy)["idle_cost_per_month_usd"]
    assert round(loud - quiet, 2) >= 2 * PRICES["monthly"]["cloudwatch_custom_metric"]
