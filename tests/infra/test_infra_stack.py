"""The synthesized stack matches the shared descriptions in `hermes_gateway.resources`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.outputs import webhook_output_key
from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.resources import (
    BUCKETS,
    EVENT_BUS,
    FUNCTIONS,
    INBOX_SOURCE,
    MAIL,
    QUEUES,
    SCHEDULES,
    SECRET_NAMES,
    TABLES,
    TURN_STATE_MACHINE,
    Access,
    FunctionSpec,
    Key,
    function,
    repo_root,
)
from hermes_gateway.settings import load_settings
from tests.infra.conftest import EVERY_PLATFORM, Synthesized, synthesize

pytestmark = pytest.mark.infra

ASL_FILE = repo_root() / TURN_STATE_MACHINE.definition_file
ALL_RESOURCE_ENV_VARS = (
    {t.env_var for t in TABLES}
    | {q.env_var for q in QUEUES}
    | {f.env_var for f in FUNCTIONS}
    | {b.env_var for b in BUCKETS}
    | {TURN_STATE_MACHINE.env_var, EVENT_BUS.env_var}
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
    """The logical id of a queue of `resources.QUEUES` (`dead-letters`)."""
    (logical_id,) = [k for k in synth.of_type("AWS::SQS::Queue") if k.startswith("Queues" + name.replace("-", ""))]
    return logical_id


# --- functions -------------------------------------------------------------------------------------


def test_every_function_spec_is_deployed_with_the_shared_defaults(synthesized: Synthesized) -> None:
    # Given the synthesized stack, when the functions are read, then each spec has one function
    synthesized.template.resource_count_is("AWS::Lambda::Function", len(FUNCTIONS))
    # with the common layer (the package) and then the settings layer
    (layer_id,) = [k for k in synthesized.of_type("AWS::Lambda::LayerVersion") if k.startswith("CommonLayer")]
    (settings_layer_id,) = [k for k in synthesized.of_type("AWS::Lambda::LayerVersion") if k.startswith("Settings")]
    layers = synthesized.of_type("AWS::Lambda::LayerVersion")
    assert set(layers) == {layer_id, settings_layer_id} and len(layers) == 2
    for layer in layers.values():
        assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    deployed = functions_by_name(synthesized)
    assert set(deployed) == {spec.name for spec in FUNCTIONS}
    for spec in FUNCTIONS:
        _, props = deployed[spec.name]
        assert props["Runtime"] == "python3.13"
        assert props["Architectures"] == ["arm64"]
        assert props["LoggingConfig"]["LogFormat"] == "JSON"
        assert props["LoggingConfig"]["ApplicationLogLevel"] == "INFO"
        assert props["LoggingConfig"]["SystemLogLevel"] == "WARN"  # no START/END/REPORT lines
        assert "TracingConfig" not in props  # minimal: no X-Ray (tests/infra/test_infra_observability.py)
        assert [ref(layer) for layer in props["Layers"]] == [layer_id, settings_layer_id]
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
    resource_env |= {f.name: f.env_var for f in FUNCTIONS} | {b.name: b.env_var for b in BUCKETS}
    resource_env[TURN_STATE_MACHINE.name] = TURN_STATE_MACHINE.env_var
    resource_env[EVENT_BUS.name] = EVENT_BUS.env_var
    for name, (_, props) in functions_by_name(synthesized).items():
        env = props["Environment"]["Variables"]
        assert env["HERMES_SECRETS_PREFIX"] == "/hermes-gateway/dev/"
        assert env["POWERTOOLS_SERVICE_NAME"] == "hermes-gateway"
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "HermesGateway"
        assert env["GATEWAY_SETTINGS_FILE"] == "/opt/hermes-gateway/settings.json"
        # The settings a function builds from its settings file and environment are the ones synthesized.
        shipped = synthesized.function_settings(props)
        assert shipped == load_settings(env={}, config=EVERY_PLATFORM)
        assert shipped.platform("slack") is not None and shipped.platform("webchat") is None
        expected = {resource_env[resource] for resource in specs[name].grants}
        if name == "ingress":  # e-mail is on: the ingress reads the mail SES stored in the media bucket
            expected |= {resource_env["media"]}
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


def test_the_router_consumes_the_inbox_stream_as_its_source_says(synthesized: Synthesized) -> None:
    (mapping,) = synthesized.of_type("AWS::Lambda::EventSourceMapping").values()
    consumers = [spec for spec in FUNCTIONS if spec.consumes]
    assert [spec.name for spec in consumers] == ["router"] and consumers[0].consumes == INBOX_SOURCE
    props = mapping["Properties"]
    assert ref(props["FunctionName"]) == functions_by_name(synthesized)["router"][0]
    assert props["EventSourceArn"] == {"Fn::GetAtt": [table_logical_id(synthesized, "inbox"), "StreamArn"]}
    # New items only: a TTL deletion or an attempt counted on an item invokes nothing
    (pattern,) = props["FilterCriteria"]["Filters"]
    assert json.loads(pattern["Pattern"]) == {"eventName": ["INSERT"]}
    assert props["StartingPosition"] == "TRIM_HORIZON"
    assert (props["BatchSize"], props["MaximumBatchingWindowInSeconds"]) == (INBOX_SOURCE.batch_size, 0)
    assert props["ParallelizationFactor"] == INBOX_SOURCE.parallelization_factor
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BisectBatchOnFunctionError"] is True
    assert props["MaximumRetryAttempts"] == INBOX_SOURCE.max_retry_attempts > INBOX_SOURCE.max_attempts
    assert props["MaximumRecordAgeInSeconds"] == INBOX_SOURCE.max_record_age_seconds < 24 * 3600  # the stream's
    assert ref(props["DestinationConfig"]["OnFailure"]["Destination"]) == queue_logical_id(synthesized, "dead-letters")


def test_the_inbox_has_a_new_image_stream_and_a_ttl(synthesized: Synthesized) -> None:
    props = synthesized.resources[table_logical_id(synthesized, "inbox")]["Properties"]
    assert props["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    others = [t for t in TABLES if t.name != "inbox"]
    for spec in others:
        assert (
            "StreamSpecification" not in synthesized.resources[table_logical_id(synthesized, spec.name)]["Properties"]
        )


def test_the_ingress_may_only_put_items_in_the_inbox_and_mark_and_collect_outbox_rows(
    synthesized: Synthesized,
) -> None:
    deployed = functions_by_name(synthesized)
    statements = role_statements(synthesized, ref(deployed["ingress"][1]["Role"]))
    data = [s for s in statements if any(a.startswith(("dynamodb:", "sqs:")) for a in as_list(s["Action"]))]
    outbox = table_logical_id(synthesized, "outbox")
    assert sorted(
        (tuple(sorted(as_list(s["Action"]))), json.dumps(s["Resource"], sort_keys=True)) for s in data
    ) == sorted(
        [
            (("dynamodb:PutItem",), json.dumps({"Fn::GetAtt": [table_logical_id(synthesized, "inbox"), "Arn"]})),
            # a WhatsApp `failed` status (an e-mail's bounce) marks the row of the message it reports
            # on; the Signal forwarder collects its mailbox's letters (the outbox's index) and settles them
            (
                ("dynamodb:BatchGetItem", "dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"),
                json.dumps(
                    [
                        {"Fn::GetAtt": [outbox, "Arn"]},
                        {"Fn::Join": ["", [{"Fn::GetAtt": [outbox, "Arn"]}, "/index/*"]]},
                    ],
                    sort_keys=True,
                ),
            ),
            # an asynchronous invoke (SES's receipt of an e-mail, a bounce) that failed after Lambda's retries
            (("sqs:SendMessage",), json.dumps({"Fn::GetAtt": [queue_logical_id(synthesized, "dead-letters"), "Arn"]})),
        ]
    )


def test_the_ingress_signs_uploads_only_under_uploads(synthesized: Synthesized) -> None:
    deployed = functions_by_name(synthesized)
    statements = role_statements(synthesized, ref(deployed["ingress"][1]["Role"]))
    puts = [json.dumps(s["Resource"]) for s in statements if "s3:PutObject" in as_list(s["Action"])]
    gets = [json.dumps(s["Resource"]) for s in statements if as_list(s["Action"]) == ["s3:GetObject"]]
    assert len(puts) == 1 and '"/uploads/*"' in puts[0] and "Mediamedia" in puts[0]
    assert len(gets) == 1 and '"/*"' in gets[0] and "Mediamedia" in gets[0]


def test_only_the_router_delivery_agent_and_ingress_send_to_the_dead_letters(synthesized: Synthesized) -> None:
    # the agent: a turn's answer it sends itself that the platform refused for good; the ingress:
    # Lambda hands it an asynchronous invoke (an e-mail SES received) that failed after its retries
    deployed = functions_by_name(synthesized)
    dead_letters = queue_logical_id(synthesized, "dead-letters")
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        sendable = {
            ref(r) for s in statements if "sqs:SendMessage" in as_list(s["Action"]) for r in as_list(s["Resource"])
        }
        senders = ("router", "delivery", "agent", "ingress")
        assert sendable == ({dead_letters} if spec.name in senders else set()), spec.name


def test_deliveries_invoke_the_delivery_function_asynchronously_with_retries_and_dead_letters(
    synthesized: Synthesized,
) -> None:
    deployed = functions_by_name(synthesized)
    delivery_id, delivery = deployed["delivery"]
    (config,) = [
        c for c in synthesized.of_type("AWS::Lambda::EventInvokeConfig").values()
        if ref(c["Properties"]["FunctionName"]) == delivery_id
    ]  # fmt: skip
    spec = function("delivery")
    assert ref(config["Properties"]["FunctionName"]) == delivery_id
    assert config["Properties"]["MaximumRetryAttempts"] == spec.async_retries == 2
    assert config["Properties"]["MaximumEventAgeInSeconds"] == spec.async_max_event_age_seconds
    assert ref(delivery["DeadLetterConfig"]["TargetArn"]) == queue_logical_id(synthesized, "dead-letters")
    # Every function that sends deliveries may invoke exactly the delivery function, nothing else
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        invokes = [
            ref(r)
            for s in statements
            if "lambda:InvokeFunction" in as_list(s["Action"])
            for r in as_list(s["Resource"])
        ]
        assert invokes == ([delivery_id] if spec.grants.get("delivery") is Access.INVOKE else []), spec.name
    # (the tick: the notice that a chat's /forget is done)
    invokers = {s.name for s in FUNCTIONS if s.grants.get("delivery") is Access.INVOKE}
    assert invokers == {"router", "agent", "attachments", "expiry"}


def test_grants_follow_the_specs(synthesized: Synthesized) -> None:
    deployed = functions_by_name(synthesized)
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        for resource, access in spec.grants.items():
            if access is Access.SEND:
                target = queue_logical_id(synthesized, resource)
                assert any(
                    "sqs:SendMessage" in as_list(s["Action"]) and target in {ref(r) for r in as_list(s["Resource"])}
                    for s in statements
                )
            elif access in (Access.START, Access.START_DESCRIBE):
                assert any(s["Action"] == "states:StartExecution" for s in statements)
                described = [s for s in statements if s["Action"] == "states:DescribeExecution"]
                assert bool(described) is (access is Access.START_DESCRIBE), spec.name
                for statement in described:
                    assert ":execution:" in json.dumps(statement["Resource"]), statement
            elif access in (Access.PUT, Access.CONSUME, Access.MARK, Access.MAILBOX):
                action = {
                    Access.PUT: "dynamodb:PutItem",
                    Access.CONSUME: "dynamodb:UpdateItem",
                    Access.MARK: ["dynamodb:GetItem", "dynamodb:UpdateItem"],
                    Access.MAILBOX: [
                        "dynamodb:GetItem",
                        "dynamodb:BatchGetItem",
                        "dynamodb:UpdateItem",
                        "dynamodb:Query",
                    ],
                }[access]
                target = table_logical_id(synthesized, resource)
                assert any(
                    sorted(as_list(s["Action"])) == sorted(as_list(action)) and target in json.dumps(s["Resource"])
                    for s in statements
                ), spec.name
            elif resource in {b.name for b in BUCKETS}:
                (bucket,) = [k for k in synthesized.of_type("AWS::S3::Bucket") if k.startswith(f"Media{resource}")]
                granted = [
                    a
                    for s in statements
                    for r in as_list(s["Resource"])
                    # (the stored mail's own grant, when e-mail is on: tests/infra/test_infra_email.py)
                    if isinstance(r, dict) and bucket in json.dumps(r) and MAIL.prefix not in json.dumps(r)
                    for a in as_list(s["Action"])
                ]
                assert sorted(granted) == sorted(
                    {
                        Access.READ: ["s3:GetObject"],
                        Access.WRITE: ["s3:PutObject"],
                        Access.ERASE: ["s3:DeleteObject", "s3:ListBucket"],  # objects; the listing on the bucket
                    }.get(access, ["s3:GetObject", "s3:PutObject"])
                ), spec.name
            elif access in (Access.READ, Access.WRITE, Access.READ_WRITE):
                target = table_logical_id(synthesized, resource)
                assert any(
                    isinstance(r, dict) and "Fn::GetAtt" in r and ref(r) == target
                    for s in statements
                    for r in as_list(s["Resource"])
                ), (spec.name, resource)


def test_the_media_bucket_is_private_encrypted_tls_only_and_expires_its_objects(synthesized: Synthesized) -> None:
    ((logical_id, bucket),) = synthesized.of_type("AWS::S3::Bucket").items()
    props = bucket["Properties"]
    # (e-mail is on: SES's stored mail under its prefix, written by SES, read by the ingress; its
    # own lifecycle rule and bucket policy statement: tests/infra/test_infra_email.py)
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True,
    }  # fmt: skip
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
        "SSEAlgorithm": "AES256"
    }
    (rule,) = [r for r in props["LifecycleConfiguration"]["Rules"] if r["Id"] == "expire-media"]
    assert rule["ExpirationInDays"] == 30 and rule["Status"] == "Enabled" and "Prefix" not in rule
    (policy,) = synthesized.of_type("AWS::S3::BucketPolicy").values()
    (deny,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    # only the attachments function and the agent (inbound media), delivery (outbound) and the
    # tick (a person's files, on request: list and delete, never read) may touch its objects; the
    # ingress the stored mail's (tests/infra/test_infra_email.py) and what it signs URLs of for the
    # Signal forwarder (a reply's files; uploads under uploads/)
    readers = {
        name
        for name, (_, props) in functions_by_name(synthesized).items()
        if "HERMES_MEDIA_BUCKET" in props["Environment"]["Variables"]
    }
    assert readers == {"attachments", "agent", "delivery", "ingress", "expiry"} and logical_id.startswith("Mediamedia")
    assert synthesized.outputs["MediaBucketName"]["Value"] == {"Ref": logical_id}  # `users forget|export`


def test_a_file_never_outlives_its_message_under_a_shorter_session_retention(tmp_path: Path) -> None:
    settings = load_settings(env={}, config={"sessions": {"retention_days": 7}, "media": {"retention_days": 30}})
    (bucket,) = synthesize(settings, tmp_path / "cdk.out").of_type("AWS::S3::Bucket").values()
    (rule,) = [r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"] if r["Id"] == "expire-media"]
    assert rule["ExpirationInDays"] == 7


def test_a_forwarders_uploads_go_after_two_days(synthesized: Synthesized) -> None:
    # (read once by their message's turn, which keeps them under the session a /forget reaches)
    buckets = synthesized.of_type("AWS::S3::Bucket")
    (media,) = [b for logical_id, b in buckets.items() if logical_id.startswith("Mediamedia")]
    rules = {r["Id"]: r for r in media["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-uploads"]["Prefix"] == "uploads/" and rules["expire-uploads"]["ExpirationInDays"] == 2
    assert rules["expire-uploads"]["Status"] == "Enabled"


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
        indexes = {
            i["IndexName"]: (i["KeySchema"], i["Projection"]["ProjectionType"])
            for i in props.get("GlobalSecondaryIndexes", [])
        }
        assert indexes == {i.name: (key_schema(i.partition, i.sort), i.projection) for i in spec.indexes}
        if spec.ttl_attribute:
            assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
        else:
            assert "TimeToLiveSpecification" not in props


# --- queues and alarms -----------------------------------------------------------------------------


def test_the_only_queues_are_dead_letter_queues_nothing_polls(synthesized: Synthesized) -> None:
    queues = synthesized.of_type("AWS::SQS::Queue")
    # The shared dead letters and the schedules' own: standard queues, no FIFO, no redrive, no consumer
    assert len(queues) == len(QUEUES) + 1
    for props in (q["Properties"] for q in queues.values()):
        assert "FifoQueue" not in props and "RedrivePolicy" not in props
        assert props["SqsManagedSseEnabled"] is True
    shared = queues[queue_logical_id(synthesized, "dead-letters")]["Properties"]
    assert shared["MessageRetentionPeriod"] == QUEUES[0].retention_days * 86400 == 14 * 86400
    sources = [
        m["Properties"]["EventSourceArn"] for m in synthesized.of_type("AWS::Lambda::EventSourceMapping").values()
    ]
    assert not any(ref(source) in queues for source in sources)


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


def dead_letter_queue_ids(synth: Synthesized) -> set[str]:
    queues = synth.of_type("AWS::SQS::Queue")
    dead_letter_queues = {k for k, q in queues.items() if "RedrivePolicy" not in q["Properties"]}
    assert len(dead_letter_queues) == len(QUEUES) + 1  # + the schedules' dead-letter queue
    return dead_letter_queues


def test_every_dead_letter_queue_alarms_to_the_encrypted_topic(synthesized_full: Synthesized) -> None:
    # (the standard and full tiers; minimal's one alarm: tests/infra/test_infra_observability.py)
    synthesized = synthesized_full
    (topic_id,) = synthesized.of_type("AWS::SNS::Topic")
    assert "KmsMasterKeyId" in synthesized.resources[topic_id]["Properties"]
    dead_letter_queues = dead_letter_queue_ids(synthesized)
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


def test_asl_placeholders_are_declared_substitutions() -> None:
    # DeliveryFunctionArn is declared for a Deliver task that invokes the delivery function directly
    text = ASL_FILE.read_text(encoding="utf-8")
    json.loads(text)
    assert set(re.findall(r"\$\{(\w+)\}", text)) <= set(TURN_STATE_MACHINE.substitutions)
    assert TURN_STATE_MACHINE.substitutions["DeliveryFunctionArn"] == "delivery"


def test_state_machine_runs_the_asl_file_against_the_agent_function(synthesized: Synthesized) -> None:
    (machine,) = synthesized.of_type("AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]
    assert props["StateMachineType"] == "EXPRESS"
    assert props["LoggingConfiguration"]["Level"] == "ERROR"
    assert props["LoggingConfiguration"]["IncludeExecutionData"] is False
    # When the placeholders are substituted the way CloudFormation does it
    definition = props["DefinitionString"]
    for placeholder, value in props["DefinitionSubstitutions"].items():
        definition = definition.replace("${" + placeholder + "}", f"arn-of:{ref(value)}")
    # Then the states are the file's: the Deliver task calls the delivery function, PrepareMedia the
    # attachments function, the rest the agent
    by_name = functions_by_name(synthesized)
    agent_id = by_name[TURN_STATE_MACHINE.substitutions["AgentFunctionArn"]][0]
    delivery_id = by_name[TURN_STATE_MACHINE.substitutions["DeliveryFunctionArn"]][0]
    attachments_id = by_name[TURN_STATE_MACHINE.substitutions["AttachmentsFunctionArn"]][0]
    states = json.loads(definition)["States"]
    file_states = json.loads(ASL_FILE.read_text(encoding="utf-8"))["States"]
    assert states.keys() == file_states.keys()
    tasks = {name: s for name, s in states.items() if s["Type"] == "Task"}
    assert tasks.pop("Deliver")["Resource"] == f"arn-of:{delivery_id}"
    assert tasks.pop("PrepareMedia")["Resource"] == f"arn-of:{attachments_id}"
    assert tasks and all(s["Resource"] == f"arn-of:{agent_id}" for s in tasks.values())
    assert "${" not in definition


def test_state_machine_may_invoke_only_the_agent_attachments_and_delivery_functions(synthesized: Synthesized) -> None:
    (machine,) = synthesized.of_type("AWS::StepFunctions::StateMachine").values()
    statements = role_statements(synthesized, ref(machine["Properties"]["RoleArn"]))
    invokes = [s for s in statements if "lambda:InvokeFunction" in as_list(s["Action"])]
    deployed = functions_by_name(synthesized)
    assert sorted(ref(r) for s in invokes for r in as_list(s["Resource"])) == sorted(
        [deployed["agent"][0], deployed["attachments"][0], deployed["delivery"][0]]
    )
    substitutions = machine["Properties"]["DefinitionSubstitutions"]
    assert ref(substitutions["DeliveryFunctionArn"]) == deployed["delivery"][0]


# --- API, schedules, outputs -----------------------------------------------------------------------


def test_each_enabled_platform_has_its_routes_and_url_output(synthesized: Synthesized) -> None:
    deployed = [spec for spec in CATALOG if not spec.local_only and spec.webhook]  # (e-mail: SES, no route)
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


def test_outputs_give_the_webhook_urls_secrets_prefix_and_alarm_topic(
    synthesized: Synthesized, synthesized_full: Synthesized
) -> None:
    outputs = synthesized.outputs
    assert json.dumps(outputs["WebhookUrl"]["Value"]).endswith('"/webhooks/"]]}')
    assert json.dumps(outputs["TelegramWebhookUrl"]["Value"]).endswith('"/webhooks/telegram"]]}')
    assert outputs["SecretsPrefix"]["Value"] == "/hermes-gateway/dev/"
    assert "AlarmTopicArn" not in outputs  # minimal without an alarm e-mail has no topic
    assert "AlarmTopicArn" in synthesized_full.outputs


def test_every_table_name_queue_and_function_is_a_stack_output_for_the_cli(synthesized: Any) -> None:
    from hermes_gateway.outputs import function_output_key, queue_output_key, table_output_key

    for table in TABLES:
        assert table_output_key(table.name) in synthesized.outputs
    for queue in QUEUES:
        assert queue_output_key(queue.name) in synthesized.outputs
    for spec in FUNCTIONS:
        assert function_output_key(spec.name) in synthesized.outputs


def test_no_function_scans_a_table_or_reads_a_stream_it_was_not_given(synthesized: Synthesized) -> None:
    # A read grant is item reads and queries: Scan only on the tables a spec names in `scans`,
    # stream reads only for the stream's consumer (its event source mapping), no DescribeTable
    deployed = functions_by_name(synthesized)
    tables = {table_logical_id(synthesized, t.name): t.name for t in TABLES}
    for spec in FUNCTIONS:
        statements = role_statements(synthesized, ref(deployed[spec.name][1]["Role"]))
        for statement in statements:
            actions = as_list(statement["Action"])
            targets = {tables.get(ref(r)) for r in as_list(statement["Resource"]) if isinstance(r, dict) and (
                "Fn::GetAtt" in r or "Ref" in r)}  # fmt: skip
            if "dynamodb:Scan" in actions:
                assert targets <= set(spec.scans), (spec.name, targets)
            if any(a in actions for a in ("dynamodb:GetRecords", "dynamodb:GetShardIterator")):
                assert spec.consumes is not None and targets <= {spec.consumes.table}, (spec.name, targets)
            assert "dynamodb:DescribeTable" not in actions, spec.name
    # the tick's Scan of the messages table is forget's (a person's rows in groups: a rare request)
    assert {s.name: s.scans for s in FUNCTIONS if s.scans} == {"agent": ("jobs",), "expiry": ("messages", "jobs")}


# The actions AWS gives no resource-level permissions for, and so the only ones a statement may
# grant on "*" (cdk-nag's IAM5[Resource::*] is acknowledged per role, so this is what keeps a new
# wildcard from hiding behind it)
WILDCARD_ONLY_ACTIONS = {
    "xray:PutTraceSegments", "xray:PutTelemetryRecords", "xray:GetSamplingRules", "xray:GetSamplingTargets",
    "dynamodb:ListStreams",  # a stream's event source mapping
    "logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery", "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries", "logs:PutResourcePolicy", "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",  # the workflow's vended log delivery
}  # fmt: skip


@pytest.mark.parametrize("tier", ["synthesized", "synthesized_full"])
def test_only_actions_without_resource_permissions_are_granted_on_every_resource(
    tier: str, request: pytest.FixtureRequest
) -> None:
    synthesized: Synthesized = request.getfixturevalue(tier)
    for logical_id, policy in synthesized.of_type("AWS::IAM::Policy").items():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if "*" in as_list(statement["Resource"]):
                assert set(as_list(statement["Action"])) <= WILDCARD_ONLY_ACTIONS, (logical_id, statement["Action"])
