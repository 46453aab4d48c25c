"""Operations in the stack (the full tier; each tier's alarms: test_infra_observability.py): the
dashboard follows a message through every part, every function has error and throttle alarms on
the alarm topic, and an alarm e-mail is subscribed when set."""

from __future__ import annotations

import json

from hermes_gateway.resources import FUNCTIONS, QUEUES
from infra.capabilities.dashboard import REJECTED_STATUSES
from tests.infra.conftest import Synthesized


def dashboard_body(synthesized: Synthesized) -> str:
    (dashboard,) = synthesized.of_type("AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    # The body is an Fn::Join of literal text and resource references; the text is what we read.
    return json.dumps(body)


def test_the_dashboard_shows_each_stage_of_a_message(synthesized_full: Synthesized) -> None:
    synthesized = synthesized_full
    body = dashboard_body(synthesized)
    for metric in (
        "InboundAccepted",
        "InboundDuplicate",
        "TurnStarted",
        "DeliverySent",
        "DeliveryFailedLater",
        "DeliveryDeadLettered",
    ):
        assert metric in body, metric
    for status in REJECTED_STATUSES:
        assert f"InboundRejected{status}" in body
    for name in ("ExecutionsFailed", "ExecutionTime", "Errors", "Throttles", "ApproximateNumberOfMessagesVisible"):
        assert name in body, name
    assert "DashboardUrl" in synthesized.outputs


def test_every_function_has_error_and_throttle_alarms_on_the_topic(synthesized_full: Synthesized) -> None:
    alarms = list(synthesized_full.of_type("AWS::CloudWatch::Alarm").values())
    by_metric: dict[str, int] = {}
    for alarm in alarms:
        props = alarm["Properties"]
        assert props["AlarmActions"], "every alarm notifies the topic"
        by_metric[props.get("MetricName", "")] = by_metric.get(props.get("MetricName", ""), 0) + 1
    assert by_metric["Errors"] == len(FUNCTIONS)
    assert by_metric["Throttles"] == len(FUNCTIONS)
    assert by_metric["ApproximateNumberOfMessagesVisible"] >= len(QUEUES)  # and the schedules' dead letters


def test_an_alarm_email_is_subscribed(synthesized_full: Synthesized) -> None:
    synthesized_full.template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )


def test_stream_consumers_have_a_concurrency_ceiling(synthesized: Synthesized) -> None:
    # A stream's concurrency is its shards times the parallelization factor (at most 10 per shard):
    # a flood cannot run away with the bill, and no account concurrency is reserved
    mappings = list(synthesized.of_type("AWS::Lambda::EventSourceMapping").values())
    assert len(mappings) == len([f for f in FUNCTIONS if f.consumes])
    for mapping in mappings:
        assert 2 <= mapping["Properties"]["ParallelizationFactor"] <= 10


def test_one_alarm_watches_the_shared_dead_letters(synthesized_full: Synthesized) -> None:
    from tests.infra.test_infra_stack import queue_logical_id, ref

    synthesized = synthesized_full
    alarmed = [
        ref(alarm["Properties"]["Dimensions"][0]["Value"])
        for alarm in synthesized.of_type("AWS::CloudWatch::Alarm").values()
        if alarm["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
    ]
    assert alarmed.count(queue_logical_id(synthesized, "dead-letters")) == 1


def test_the_event_bus_takes_events_from_the_functions_that_publish(synthesized: Synthesized) -> None:
    from tests.infra.test_infra_stack import functions_by_name, ref, role_statements

    (bus_id,) = synthesized.of_type("AWS::Events::EventBus")
    assert "EventBusName" in synthesized.outputs
    deployed = functions_by_name(synthesized)
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        puts = [s for s in statements if s["Action"] == "events:PutEvents"]
        publishes = "events" in spec.grants
        assert bool(puts) == publishes, spec.name
        assert all(ref(s["Resource"]) == bus_id for s in puts)
        env = deployed[spec.name][1]["Environment"]["Variables"]
        assert ("HERMES_EVENT_BUS_NAME" in env) == publishes
