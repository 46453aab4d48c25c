"""The observability tiers (`operations.observability`, infra/capabilities/observability.py): what
each one builds, counted in the synthesized template. Minimal (the default) must stay cheap idle:
two alarms, no key, no dashboard, no X-Ray, no metric while nothing happens."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_gateway.resources import FUNCTIONS, SCHEDULES
from hermes_gateway.settings import load_settings
from infra.capabilities.alarms import LOGGED_ERRORS_METRIC, logged_errors_namespace
from tests.infra.conftest import EVERY_PLATFORM, Synthesized, synthesize
from tests.infra.test_infra_stack import dead_letter_queue_ids, functions_by_name, ref

pytestmark = pytest.mark.infra

SCHEDULED = {schedule.function for schedule in SCHEDULES}


@pytest.fixture(scope="module")
def minimal_with_email(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    # the dashboard asked for explicitly: minimal leaves it out unless told
    operations = {"alarm_email": "ops@example.com", "dashboard": True}
    config = {**EVERY_PLATFORM, "operations": operations}
    return synthesize(load_settings(env={}, config=config), tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="module")
def standard() -> Any:
    from aws_cdk.assertions import Template

    from infra.app import SKIP_BUNDLING, build_app

    settings = load_settings(env={}, config={"operations": {"observability": "standard"}})
    _app, stack = build_app(settings, context=SKIP_BUNDLING)
    return Template.from_stack(stack).to_json()["Resources"]


def of_type(resources: dict[str, Any], cfn_type: str) -> dict[str, Any]:
    return {k: r for k, r in resources.items() if r["Type"] == cfn_type}


# --- minimal ---------------------------------------------------------------------------------------


def test_minimal_has_two_alarms_and_no_key_dashboard_or_topic(synthesized: Synthesized) -> None:
    counts = {
        cfn_type: len(synthesized.of_type(cfn_type))
        for cfn_type in ("AWS::CloudWatch::Alarm", "AWS::KMS::Key", "AWS::CloudWatch::Dashboard", "AWS::SNS::Topic")
    }
    assert counts == {
        "AWS::CloudWatch::Alarm": 2,
        "AWS::KMS::Key": 0,
        "AWS::CloudWatch::Dashboard": 0,
        "AWS::SNS::Topic": 0,  # no alarm e-mail, so nobody to notify: the alarms show their state
    }
    for alarm in synthesized.of_type("AWS::CloudWatch::Alarm").values():
        assert "AlarmActions" not in alarm["Properties"]


def test_minimal_alarms_on_every_functions_logged_errors_through_one_metric(synthesized: Synthesized) -> None:
    filters = synthesized.of_type("AWS::Logs::MetricFilter").values()
    logged = {ref(f["Properties"]["LogGroupName"]) for f in filters}
    function_groups = {ref(props["LoggingConfig"]["LogGroup"]) for _, props in functions_by_name(synthesized).values()}
    assert logged == function_groups and len(logged) == len(FUNCTIONS)
    for metric_filter in filters:
        (transformation,) = metric_filter["Properties"]["MetricTransformations"]
        # no DefaultValue: a data point (a billed metric hour) only when a line matches
        assert transformation == {
            "MetricName": LOGGED_ERRORS_METRIC,
            "MetricNamespace": logged_errors_namespace("dev"),
            "MetricValue": "1",
        }
        assert '$.level = "ERROR"' in metric_filter["Properties"]["FilterPattern"]
    (errors,) = [
        a["Properties"]
        for a in synthesized.of_type("AWS::CloudWatch::Alarm").values()
        if "MetricName" in a["Properties"]
    ]
    assert (errors["Namespace"], errors["MetricName"]) == (logged_errors_namespace("dev"), LOGGED_ERRORS_METRIC)
    assert errors["Statistic"] == "Sum" and errors["Threshold"] == 0
    assert errors["TreatMissingData"] == "notBreaching"


def test_minimal_alarms_on_every_dead_letter_queue_in_one_alarm(synthesized: Synthesized) -> None:
    (alarm,) = [
        a["Properties"] for a in synthesized.of_type("AWS::CloudWatch::Alarm").values() if "Metrics" in a["Properties"]
    ]
    watched = {ref(m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]) for m in alarm["Metrics"] if "MetricStat" in m}
    assert watched == dead_letter_queue_ids(synthesized)
    assert all(
        m["MetricStat"]["Metric"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
        for m in alarm["Metrics"]
        if "MetricStat" in m
    )
    (expression,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert expression["Expression"] == "SUM(METRICS())" and alarm["Threshold"] == 0


def test_minimal_traces_nothing_and_keeps_no_lambda_report_lines(synthesized: Synthesized) -> None:
    for name, (_, props) in functions_by_name(synthesized).items():
        assert "TracingConfig" not in props, name
        assert props["LoggingConfig"]["SystemLogLevel"] == "WARN", name
    (machine,) = synthesized.of_type("AWS::StepFunctions::StateMachine").values()
    assert machine["Properties"]["TracingConfiguration"] == {"Enabled": False}
    xray = [
        s
        for policy in synthesized.of_type("AWS::IAM::Policy").values()
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
        if "xray:PutTraceSegments" in json.dumps(s["Action"])
    ]
    assert xray == []


def environments(resources: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {
        props["Environment"]["Variables"]["HERMES_FUNCTION"]: props["Environment"]["Variables"]
        for props in (f["Properties"] for f in of_type(resources, "AWS::Lambda::Function").values())
        if "HERMES_FUNCTION" in props.get("Environment", {}).get("Variables", {})
    }


def test_minimal_publishes_no_custom_metrics(synthesized: Synthesized) -> None:
    # nothing in minimal reads them (its alarms watch ERROR lines and dead letters), and each one
    # would cost 0.30 USD a month and its EMF bytes on every message
    found = environments(synthesized.resources)
    assert set(found) == {spec.name for spec in FUNCTIONS}
    assert {name: env.get("POWERTOOLS_METRICS_DISABLED") for name, env in found.items()} == {
        spec.name: "true" for spec in FUNCTIONS
    }


def test_custom_metrics_are_published_where_something_charts_them(
    standard: Any, synthesized_full: Synthesized, minimal_with_email: Synthesized
) -> None:
    for resources in (standard, synthesized_full.resources, minimal_with_email.resources):  # the last: a dashboard
        found = environments(resources)
        assert found and all("POWERTOOLS_METRICS_DISABLED" not in env for env in found.values())


def test_minimal_with_an_email_has_an_unencrypted_topic_and_no_key(minimal_with_email: Synthesized) -> None:
    synth = minimal_with_email
    (topic_id,) = synth.of_type("AWS::SNS::Topic")
    assert "KmsMasterKeyId" not in synth.resources[topic_id]["Properties"]
    assert synth.of_type("AWS::KMS::Key") == {}
    synth.template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )
    alarms = synth.of_type("AWS::CloudWatch::Alarm").values()
    assert len(alarms) == 2
    assert all([ref(a) for a in alarm["Properties"]["AlarmActions"]] == [topic_id] for alarm in alarms)
    assert len(synth.of_type("AWS::CloudWatch::Dashboard")) == 1  # asked for with operations.dashboard
    assert "AlarmTopicArn" in synth.outputs
    assert synth.nag_violations == []


# --- standard and full -----------------------------------------------------------------------------


def test_standard_alarms_per_function_and_queue_and_traces_the_message_path_not_the_tick(standard: Any) -> None:
    alarms = of_type(standard, "AWS::CloudWatch::Alarm")
    dead_letter_queues = [
        q for q in of_type(standard, "AWS::SQS::Queue").values() if "RedrivePolicy" not in q["Properties"]
    ]
    assert len(alarms) == 2 * len(FUNCTIONS) + len(dead_letter_queues) + 1  # errors, throttles; + failed turns
    assert len(of_type(standard, "AWS::KMS::Key")) == 1
    assert of_type(standard, "AWS::CloudWatch::Dashboard") == {}
    assert of_type(standard, "AWS::Logs::MetricFilter") == {}
    for props in (f["Properties"] for f in of_type(standard, "AWS::Lambda::Function").values()):
        name = props["Environment"]["Variables"]["HERMES_FUNCTION"]
        traced = props.get("TracingConfig") == {"Mode": "Active"}
        assert traced == (name not in SCHEDULED), name
        assert props["LoggingConfig"]["SystemLogLevel"] == "WARN"
    (machine,) = of_type(standard, "AWS::StepFunctions::StateMachine").values()
    assert machine["Properties"]["TracingConfiguration"] == {"Enabled": True}


def test_full_traces_every_function_and_keeps_lambdas_report_lines(synthesized_full: Synthesized) -> None:
    for name, (_, props) in functions_by_name(synthesized_full).items():
        assert props["TracingConfig"] == {"Mode": "Active"}, name
        assert props["LoggingConfig"]["SystemLogLevel"] == "INFO", name
        assert props["LoggingConfig"]["ApplicationLogLevel"] == "INFO", name
    assert len(synthesized_full.of_type("AWS::CloudWatch::Dashboard")) == 1
    assert synthesized_full.nag_violations == []


def test_the_dashboard_name_carries_the_region(synthesized_full: Synthesized) -> None:
    # Dashboard names are global to an account: the same stage in a second region must not collide.
    (dashboard,) = synthesized_full.of_type("AWS::CloudWatch::Dashboard").values()
    name = dashboard["Properties"]["DashboardName"]
    assert name == {"Fn::Join": ["", ["hermes-gateway-dev-", {"Ref": "AWS::Region"}]]}


def cloudwatch_statement(document: dict[str, Any]) -> dict[str, Any]:
    (statement,) = [s for s in document["Statement"] if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}]
    return statement


def test_cloudwatch_may_use_the_key_and_the_topic_only_for_this_stacks_alarms(synthesized_full: Synthesized) -> None:
    (key,) = synthesized_full.of_type("AWS::KMS::Key").values()
    (topic_policy,) = synthesized_full.of_type("AWS::SNS::TopicPolicy").values()
    for statement in (
        cloudwatch_statement(key["Properties"]["KeyPolicy"]),
        cloudwatch_statement(topic_policy["Properties"]["PolicyDocument"]),
    ):
        condition = statement["Condition"]
        assert condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        source_arn = json.dumps(condition["ArnLike"]["aws:SourceArn"])
        assert ":cloudwatch:" in source_arn and ":alarm:HermesGateway-dev-*" in source_arn
    # and every alarm is named so that the condition admits it
    for alarm in synthesized_full.of_type("AWS::CloudWatch::Alarm").values():
        assert alarm["Properties"]["AlarmName"].startswith("HermesGateway-dev-")


def test_an_unknown_tier_is_refused_with_the_setting_and_the_choices() -> None:
    from hermes_gateway.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"operations.observability \(GATEWAY_OBSERVABILITY\).*minimal, standard, full"
    ):
        load_settings(env={"GATEWAY_OBSERVABILITY": "verbose"}, config={})
