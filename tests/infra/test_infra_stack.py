"""The synthesized stack matches the shared descriptions in `hermes_gateway.resources`."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from hermes_gateway.cli.target import webhook_output_key
from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.resources import (
    EVENT_BUS,
    FUNCTIONS,
    QUEUES,
    SCHEDULES,
    SECRET_NAMES,
    TABLES,
    TURN_STATE_MACHINE,
    Access,
    FunctionSpec,
    Key,
    repo_root,
)
from hermes_gateway.settings import load_settings
from tests.infra.conftest import Synthesized

pytestmark = pytest.mark.infra

ASL_FILE = repo_root() / TURN_STATE_MACHINE.definition_file
ALL_RESOURCE_ENV_VARS = (
    {t.env_var for t in TABLES} | {q.env_var for q in QUEUES} | {TURN_STATE_MACHINE.env_var, EVENT_BUS.env_var}
)


def ref(resource: dict[str, Any] | str) -> str:
    """The logical id in a {"Ref": id} or {"Fn::GetAtt": [id, attr]}."""
    assert isinstance(resource, dict), resource
    return str(resource["Ref"] if "Ref" in resource else resource["Fn::GetAtt"][0])


def functions_by_name(synth: Synthesized) -> dict[str, tuple[str, dict[str, Any]]]:
    return {
        r["Properties"]["Environment"]["Variables"]["HERMES_FUNCTION"]: (logical_id, r["Properties"])
        for logical_id, r in synth.of_type("AWS::Lambda::Function").items()
    }


def role_statements(synth: Synthesized, role_logical_id: str) -> list[dict[str, Any]]:
    return [
        statement
        for policy in synth.of_type("AWS::IAM::Policy").values()
        if any(ref(role) == role_logical_id for role in policy["Properties"]["Roles"])
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def table_logical_id(synth: Synthesized, name: str) -> str:
    (logical_id,) = [k for k in synth.of_type("AWS::DynamoDB::Table") if k.startswith(f"Data{name}")]
    return logical_id


def queue_logical_id(synth: Synthesized, name: str) -> str:
    """The logical id of a queue (`delivery`) or of a dead-letter queue (`delivery-dlq`)."""
    base, _, dlq = name.partition("-")
    (logical_id,) = [
        k
        for k in synth.of_type("AWS::SQS::Queue")
        if k.startswith(f"Queues{base}") and ("dlq" in k.removeprefix(f"Queues{base}")) == bool(dlq)
    ]
    return logical_id


# --- functions -------------------------------------------------------------------------------------


def test_every_function_spec_is_deployed_with_the_shared_defaults(synthesized: Synthesized) -> None:
    # Given the synthesized stack, when the functions are read, then each spec has one function
    synthesized.template.resource_count_is("AWS::Lambda::Function", len(FUNCTIONS))
    (layer_id,) = synthesized.of_type("AWS::Lambda::LayerVersion")
    layer = synthesized.resources[layer_id]["Properties"]
    assert layer["CompatibleRuntimes"] == ["python3.13"]
    assert layer["CompatibleArchitectures"] == ["arm64"]
    deployed = functions_by_name(synthesized)
    assert set(deployed) == {spec.name for spec in FUNCTIONS}
    for spec in FUNCTIONS:
        _, props = deployed[spec.name]
        assert props["Runtime"] == "python3.13"
        assert props["Architectures"] == ["arm64"]
        assert props["LoggingConfig"]["LogFormat"] == "JSON"
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert [ref(layer) for layer in props["Layers"]] == [layer_id]
        assert props["Handler"] == spec.handler
        assert props["MemorySize"] == spec.memory_mb
        assert props["Timeout"] == spec.timeout_seconds


def test_every_function_logs_to_its_own_log_group_with_retention(synthesized: Synthesized) -> None:
    log_groups = synthesized.of_type("AWS::Logs::LogGroup")
    used = [ref(props["LoggingConfig"]["LogGroup"]) for _, props in functions_by_name(synthesized).values()]
    assert len(set(used)) == len(FUNCTIONS)
    for logical_id in used:
        assert log_groups[logical_id]["Properties"]["RetentionInDays"] == 30
    assert all("RetentionInDays" in group["Properties"] for group in log_groups.values())


def test_functions_get_settings_and_exactly_their_granted_resources(synthesized: Synthesized) -> None:
    specs: dict[str, FunctionSpec] = {spec.name: spec for spec in FUNCTIONS}
    resource_env = {t.name: t.env_var for t in TABLES} | {q.name: q.env_var for q in QUEUES}
    resource_env[TURN_STATE_MACHINE.name] = TURN_STATE_MACHINE.env_var
    resource_env[EVENT_BUS.name] = EVENT_BUS.env_var
    for name, (_, props) in functions_by_name(synthesized).items():
        env = props["Environment"]["Variables"]
        assert env["HERMES_SECRETS_PREFIX"] == "/hermes-gateway/dev/"
        assert env["POWERTOOLS_SERVICE_NAME"] == "hermes-gateway"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "HermesGateway"
        assert env["GATEWAY_STAGE"] == "dev"
        # The settings a function builds from its environment are the ones synthesized.
        from_env = load_settings(env={k: v for k, v in env.items() if isinstance(v, str)}, config={})
        assert from_env.platform("slack") is not None and from_env.platform("webchat") is None
        expected = {resource_env[resource] for resource in specs[name].grants}
        assert set(env) & ALL_RESOURCE_ENV_VARS == expected, name


def test_no_function_environment_carries_a_secret(synthesized: Synthesized) -> None:
    for name, (_, props) in functions_by_name(synthesized).items():
        assert not set(props["Environment"]["Variables"]) & set(SECRET_NAMES), name


def test_functions_read_exactly_their_own_secrets(synthesized: Synthesized) -> None:
    deployed = functions_by_name(synthesized)
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        resources = [r for s in statements if s["Action"] == "ssm:GetParameter" for r in as_list(s["Resource"])]
        # arn:<partition>:ssm:<region>:<account>:parameter/hermes-gateway/<stage>/<NAME>, nothing broader
        assert sorted(r["Fn::Join"][1][-1] for r in resources) == sorted(
            f":parameter/hermes-gateway/dev/{name}" for name in spec.secrets
        ), spec.name


def test_queue_consumers_report_batch_item_failures(synthesized: Synthesized) -> None:
    mappings = synthesized.of_type("AWS::Lambda::EventSourceMapping").values()
    consumers = [spec for spec in FUNCTIONS if spec.consumes]
    assert len(mappings) == len(consumers)
    deployed = functions_by_name(synthesized)
    for spec in consumers:
        assert spec.consumes is not None
        (mapping,) = [m for m in mappings if ref(m["Properties"]["FunctionName"]) == deployed[spec.name][0]]
        assert ref(mapping["Properties"]["EventSourceArn"]) == queue_logical_id(synthesized, spec.consumes)
        assert mapping["Properties"]["BatchSize"] == spec.batch_size
        assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_a_queue_consumer_may_dead_letter_only_its_own_queue(synthesized: Synthesized) -> None:
    deployed = functions_by_name(synthesized)
    dead_letter_ids = {q.name: queue_logical_id(synthesized, q.dead_letter_name) for q in QUEUES}
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        sendable = {ref(r) for s in statements if s["Action"] == "sqs:SendMessage" for r in as_list(s["Resource"])}
        assert {q for q, dlq in dead_letter_ids.items() if dlq in sendable} == ({spec.consumes} - {None}), spec.name


def test_grants_follow_the_specs(synthesized: Synthesized) -> None:
    deployed = functions_by_name(synthesized)
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        for resource, access in spec.grants.items():
            if access is Access.SEND:
                target = queue_logical_id(synthesized, resource)
                assert any(
                    s["Action"] == "sqs:SendMessage" and target in {ref(r) for r in as_list(s["Resource"])}
                    for s in statements
                )
            elif access is Access.START:
                assert any(s["Action"] == "states:StartExecution" for s in statements)
            elif access in (Access.READ, Access.WRITE, Access.READ_WRITE):
                target = table_logical_id(synthesized, resource)
                assert any(
                    isinstance(r, dict) and "Fn::GetAtt" in r and ref(r) == target
                    for s in statements
                    for r in as_list(s["Resource"])
                ), (spec.name, resource)


# --- IAM -------------------------------------------------------------------------------------------


def all_allow_statements(synth: Synthesized) -> list[dict[str, Any]]:
    documents = [p["Properties"]["PolicyDocument"] for p in synth.of_type("AWS::IAM::Policy").values()]
    for role in synth.of_type("AWS::IAM::Role").values():
        documents += [p["PolicyDocument"] for p in role["Properties"].get("Policies", [])]
    return [s for doc in documents for s in doc["Statement"] if s["Effect"] == "Allow"]


def test_no_iam_statement_allows_a_wildcard_action(synthesized: Synthesized) -> None:
    actions = [a for s in all_allow_statements(synthesized) for a in as_list(s["Action"])]
    assert actions
    assert [a for a in actions if a == "*" or a.endswith(":*")] == []


def test_no_role_uses_a_managed_policy(synthesized: Synthesized) -> None:
    for logical_id, role in synthesized.of_type("AWS::IAM::Role").items():
        assert "ManagedPolicyArns" not in role["Properties"], logical_id


def test_cdk_nag_reports_no_unacknowledged_finding(synthesized: Synthesized) -> None:
    findings = [
        (v["ruleName"], [c["constructPath"] for c in v["violatingConstructs"]]) for v in synthesized.nag_violations
    ]
    assert findings == []


# --- data ------------------------------------------------------------------------------------------


def key_schema(partition: Key, sort: Key | None) -> list[dict[str, str]]:
    schema = [{"AttributeName": partition.name, "KeyType": "HASH"}]
    return schema + ([{"AttributeName": sort.name, "KeyType": "RANGE"}] if sort else [])


def test_tables_match_their_specs(synthesized: Synthesized) -> None:
    synthesized.template.resource_count_is("AWS::DynamoDB::Table", len(TABLES))
    for spec in TABLES:
        table = synthesized.resources[table_logical_id(synthesized, spec.name)]
        props = table["Properties"]
        assert table["DeletionPolicy"] == "Retain"
        assert props["BillingMode"] == "PAY_PER_REQUEST"
        assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
        assert props["KeySchema"] == key_schema(spec.partition, spec.sort)
        keys = [spec.partition, spec.sort, *(k for i in spec.indexes for k in (i.partition, i.sort))]
        assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == sorted(
            ({"AttributeName": k.name, "AttributeType": k.type} for k in {k for k in keys if k}),
            key=lambda a: a["AttributeName"],
        )
        indexes = {i["IndexName"]: i["KeySchema"] for i in props.get("GlobalSecondaryIndexes", [])}
        assert indexes == {i.name: key_schema(i.partition, i.sort) for i in spec.indexes}
        if spec.ttl_attribute:
            assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
        else:
            assert "TimeToLiveSpecification" not in props


# --- queues and alarms -----------------------------------------------------------------------------


def test_queues_have_their_own_dead_letter_queues(synthesized: Synthesized) -> None:
    queues = synthesized.of_type("AWS::SQS::Queue")
    for spec in QUEUES:
        props = queues[queue_logical_id(synthesized, spec.name)]["Properties"]
        dlq = queues[ref(props["RedrivePolicy"]["deadLetterTargetArn"])]["Properties"]
        assert props["RedrivePolicy"]["maxReceiveCount"] == spec.max_receive_count
        assert props["VisibilityTimeout"] == spec.visibility_timeout_seconds
        assert dlq["MessageRetentionPeriod"] == spec.dlq_retention_days * 86400
        if spec.fifo:
            assert props["FifoQueue"] is True and dlq["FifoQueue"] is True
            assert props["ContentBasedDeduplication"] is False
        else:
            assert "FifoQueue" not in props and "FifoQueue" not in dlq
    for props in (q["Properties"] for q in queues.values()):
        assert props["SqsManagedSseEnabled"] is True


def test_every_queue_denies_requests_without_tls(synthesized: Synthesized) -> None:
    policies = synthesized.of_type("AWS::SQS::QueuePolicy").values()
    covered = {
        ref(queue)
        for policy in policies
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for queue in policy["Properties"]["Queues"]
    }
    assert covered == set(synthesized.of_type("AWS::SQS::Queue"))


def test_every_dead_letter_queue_alarms_to_the_encrypted_topic(synthesized: Synthesized) -> None:
    (topic_id,) = synthesized.of_type("AWS::SNS::Topic")
    assert "KmsMasterKeyId" in synthesized.resources[topic_id]["Properties"]
    queues = synthesized.of_type("AWS::SQS::Queue")
    dead_letter_queues = {k for k, q in queues.items() if "RedrivePolicy" not in q["Properties"]}
    assert len(dead_letter_queues) == len(QUEUES) + 1  # + the schedules' dead-letter queue
    alarmed = set()
    for alarm in synthesized.of_type("AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        if props["MetricName"] == "ApproximateNumberOfMessagesVisible":
            assert props["Threshold"] == 0 and props["ComparisonOperator"] == "GreaterThanThreshold"
            assert [ref(a) for a in props["AlarmActions"]] == [topic_id]
            (dimension,) = props["Dimensions"]
            alarmed.add(ref(dimension["Value"]))
    assert alarmed == dead_letter_queues


# --- workflow --------------------------------------------------------------------------------------


def test_asl_placeholders_are_exactly_the_declared_substitutions() -> None:
    text = ASL_FILE.read_text(encoding="utf-8")
    json.loads(text)
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(TURN_STATE_MACHINE.substitutions)


def test_state_machine_runs_the_asl_file_against_the_agent_function(synthesized: Synthesized) -> None:
    (machine,) = synthesized.of_type("AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]
    assert props["StateMachineType"] == "EXPRESS"
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ERROR"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    # When the placeholders are substituted the way CloudFormation does it
    definition = props["DefinitionString"]
    for placeholder, value in props["DefinitionSubstitutions"].items():
        definition = definition.replace("${" + placeholder + "}", f"arn-of:{ref(value)}")
    # Then the states are the file's, and every task calls the agent function
    agent_id = functions_by_name(synthesized)[TURN_STATE_MACHINE.substitutions["AgentFunctionArn"]][0]
    states = json.loads(definition)["States"]
    file_states = json.loads(ASL_FILE.read_text(encoding="utf-8"))["States"]
    assert states.keys() == file_states.keys()
    tasks = [s for s in states.values() if s["Type"] == "Task"]
    assert tasks and all(s["Resource"] == f"arn-of:{agent_id}" for s in tasks)
    assert "${" not in definition


def test_state_machine_may_invoke_only_the_agent_function(synthesized: Synthesized) -> None:
    (machine,) = synthesized.of_type("AWS::StepFunctions::StateMachine").values()
    statements = role_statements(synthesized, ref(machine["Properties"]["RoleArn"]))
    invokes = [s for s in statements if "lambda:InvokeFunction" in as_list(s["Action"])]
    agent_id = functions_by_name(synthesized)["agent"][0]
    assert [ref(r) for s in invokes for r in as_list(s["Resource"])] == [agent_id]


# --- API, schedules, outputs -----------------------------------------------------------------------


def test_each_enabled_platform_has_its_routes_and_url_output(synthesized: Synthesized) -> None:
    deployed = [spec for spec in CATALOG if not spec.local_only]
    routes = {r["Properties"]["RouteKey"] for r in synthesized.of_type("AWS::ApiGatewayV2::Route").values()}
    webhooks = {f"{m} {path}" for spec in deployed for path in spec.webhook_paths() for m in spec.methods}
    assert routes == webhooks | {"POST /api/sessions"}  # + the IAM-signed session API
    assert "POST /webhooks/webchat" not in routes  # the local page is never deployed
    for spec in deployed:
        assert webhook_output_key(spec.name) in synthesized.outputs


def test_a_disabled_platform_has_no_route() -> None:
    from aws_cdk.assertions import Template

    from infra.app import SKIP_BUNDLING, build_app

    _app, stack = build_app(load_settings(env={}, config={}), context=SKIP_BUNDLING)
    routes = Template.from_stack(stack).find_resources("AWS::ApiGatewayV2::Route")
    assert {r["Properties"]["RouteKey"] for r in routes.values()} == {"POST /webhooks/telegram", "POST /api/sessions"}


def test_webhook_routes_invoke_the_ingress_function(synthesized: Synthesized) -> None:
    integrations = synthesized.of_type("AWS::ApiGatewayV2::Integration").values()
    functions = functions_by_name(synthesized)
    # the webhooks' integration, and the session API's (tests/infra/test_infra_session_api.py)
    targets = {ref(i["Properties"]["IntegrationUri"]) for i in integrations}
    assert targets == {functions["ingress"][0], functions["session_api"][0]}
    assert all(i["Properties"]["PayloadFormatVersion"] == "2.0" for i in integrations)
    (stage,) = synthesized.of_type("AWS::ApiGatewayV2::Stage").values()
    assert stage["Properties"]["StageName"] == "$default"
    assert "$context.requestId" in stage["Properties"]["AccessLogSettings"]["Format"]
    assert stage["Properties"]["DefaultRouteSettings"]["ThrottlingRateLimit"] > 0


def test_schedules_invoke_their_functions_with_retries_and_dead_letters(synthesized: Synthesized) -> None:
    schedules = list(synthesized.of_type("AWS::Scheduler::Schedule").values())
    assert len(schedules) == len(SCHEDULES)
    deployed = functions_by_name(synthesized)
    for spec, schedule in zip(SCHEDULES, schedules, strict=True):
        props = schedule["Properties"]
        unit = "minute" if spec.rate_minutes == 1 else "minutes"
        assert props["ScheduleExpression"] == f"rate({spec.rate_minutes} {unit})"
        assert ref(props["Target"]["Arn"]) == deployed[spec.function][0]
        assert props["Target"]["RetryPolicy"]["MaximumRetryAttempts"] > 0
        assert "DeadLetterConfig" in props["Target"]


def test_outputs_give_the_webhook_urls_secrets_prefix_and_alarm_topic(synthesized: Synthesized) -> None:
    outputs = synthesized.outputs
    assert json.dumps(outputs["WebhookUrl"]["Value"]).endswith('"/webhooks/"]]}')
    assert json.dumps(outputs["TelegramWebhookUrl"]["Value"]).endswith('"/webhooks/telegram"]]}')
    assert outputs["SecretsPrefix"]["Value"] == "/hermes-gateway/dev/"
    assert "AlarmTopicArn" in outputs


def test_every_table_name_is_a_stack_output_for_the_cli(synthesized: Any) -> None:
    from hermes_gateway.cli.target import table_output_key
    from hermes_gateway.resources import TABLES

    for table in TABLES:
        assert table_output_key(table.name) in synthesized.outputs
