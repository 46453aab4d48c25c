"""The stack with e-mail on (the session's synthesis: every platform, e-mail included, cdk-nag
checked): the receipt rule and what SES may do for it, the ingress's narrow read of the stored
mail, the senders' narrow SendEmail, the bounces' way back, the regions SES receives in; and with
a rule set of the operator's, and with e-mail off."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import FUNCTIONS, MAIL
from hermes_gateway.settings import load_settings
from tests.infra.conftest import ENABLED, Synthesized
from tests.infra.test_infra_stack import functions_by_name, ref, role_statements

pytestmark = pytest.mark.infra

ADDRESS = "hermes@example.com"  # tests/infra/conftest.py
RULE_ARN_TAIL = ":receipt-rule-set/hermes-gateway-dev:receipt-rule/hermes-gateway-dev"


def one(synth: Synthesized, cfn_type: str) -> tuple[str, dict[str, Any]]:
    ((logical_id, resource),) = synth.of_type(cfn_type).items()
    return logical_id, resource


def test_the_receipt_rule_stores_then_invokes_the_ingress_for_the_address(synthesized: Synthesized) -> None:
    _, rule = one(synthesized, "AWS::SES::ReceiptRule")
    deployed = functions_by_name(synthesized)
    properties = rule["Properties"]["Rule"]
    assert properties["Recipients"] == [ADDRESS] and properties["Enabled"] is True
    assert properties["ScanEnabled"] is True  # the spam and virus verdicts
    store, invoke = properties["Actions"]  # in this order: stored before the ingress reads it
    assert store["S3Action"]["ObjectKeyPrefix"] == MAIL.prefix
    assert ref(store["S3Action"]["BucketName"]).startswith("Mediamedia")
    assert invoke["LambdaAction"]["InvocationType"] == "Event"  # Lambda's retries and dead letters
    assert ref(invoke["LambdaAction"]["FunctionArn"]) == deployed["ingress"][0]
    rule_set_id, rule_set = one(synthesized, "AWS::SES::ReceiptRuleSet")
    assert rule_set["Properties"]["RuleSetName"] == rule["Properties"]["RuleSetName"] == MAIL.name("dev")
    # created after what SES checks on creation: its write to the bucket, its invoke
    assert rule_set_id in rule["DependsOn"]
    assert any(d.startswith("MediamediaPolicy") for d in rule["DependsOn"])
    assert any("SesReceipt" in d for d in rule["DependsOn"])


def test_ses_may_write_the_prefix_and_invoke_the_ingress_for_this_rule_of_this_account_only(
    synthesized: Synthesized,
) -> None:
    _, policy = one(synthesized, "AWS::S3::BucketPolicy")
    (statement,) = [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s.get("Sid") == "SesStoresReceivedMail"
    ]
    assert statement["Principal"] == {"Service": "ses.amazonaws.com"} and statement["Action"] == "s3:PutObject"
    assert json.dumps(statement["Resource"]).endswith(f'"/{MAIL.prefix}*"]]}}')
    conditions = statement["Condition"]["StringEquals"]
    assert conditions["aws:SourceAccount"] == {"Ref": "AWS::AccountId"}
    assert json.dumps(conditions["aws:SourceArn"]).count(RULE_ARN_TAIL) == 1
    permissions = [
        p["Properties"] for p in synthesized.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "ses.amazonaws.com"
    ]  # fmt: skip
    (permission,) = permissions
    assert permission["SourceAccount"] == {"Ref": "AWS::AccountId"}
    assert RULE_ARN_TAIL in json.dumps(permission["SourceArn"])
    assert ref(permission["FunctionName"]) == functions_by_name(synthesized)["ingress"][0]


def test_stored_mail_expires_sooner_than_the_bucket_s_other_objects(synthesized: Synthesized) -> None:
    (bucket,) = [r for k, r in synthesized.of_type("AWS::S3::Bucket").items() if k.startswith("Mediamedia")]
    rules = {r["Id"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-received-mail"]["Prefix"] == MAIL.prefix
    assert rules["expire-received-mail"]["ExpirationInDays"] == MAIL.retention_days


def test_the_ingress_reads_and_deletes_stored_mail_only_and_dead_letters_a_failed_invoke(
    synthesized: Synthesized,
) -> None:
    deployed = functions_by_name(synthesized)
    statements = role_statements(synthesized, ref(deployed["ingress"][1]["Role"]))
    s3 = [s for s in statements if any(str(a).startswith("s3:") for a in _list(s["Action"]))]
    # (the others are the Signal forwarder's signed URLs: tests/infra/test_infra_stack.py)
    (read,) = [s for s in s3 if MAIL.prefix in json.dumps(s["Resource"])]
    assert sorted(_list(read["Action"])) == ["s3:DeleteObject", "s3:GetObject"]
    assert json.dumps(read["Resource"]).endswith(f'"/{MAIL.prefix}*"]]}}')
    assert [s for s in s3 if "s3:DeleteObject" in _list(s["Action"])] == [read]  # deletes stored mail only
    properties = deployed["ingress"][1]
    assert "DeadLetterConfig" in properties
    assert "HERMES_MEDIA_BUCKET" in properties["Environment"]["Variables"]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("function", ["agent", "delivery"])
def test_the_senders_send_from_the_address_only(synthesized: Synthesized, function: str) -> None:
    deployed = functions_by_name(synthesized)
    statements = role_statements(synthesized, ref(deployed[function][1]["Role"]))
    (send,) = [s for s in statements if "ses:SendEmail" in _list(s["Action"])]
    assert sorted(_list(send["Action"])) == ["ses:SendEmail", "ses:SendRawEmail"]
    assert send["Condition"] == {"StringEquals": {"ses:FromAddress": ADDRESS}}
    text = json.dumps(send["Resource"])
    assert ":identity/example.com" in text and f":identity/{ADDRESS}" in text
    assert f":configuration-set/{MAIL.name('dev')}" in text and "*" not in text
    others = {f.name for f in FUNCTIONS} - {"agent", "delivery"}
    for other in others:
        granted = role_statements(synthesized, ref(deployed[other][1]["Role"]))
        assert not any(str(a).startswith("ses:") for s in granted for a in _list(s["Action"]))


def test_bounces_complaints_and_rejections_reach_the_ingress(synthesized: Synthesized) -> None:
    _, destination = one(synthesized, "AWS::SES::ConfigurationSetEventDestination")
    event_destination = destination["Properties"]["EventDestination"]
    assert sorted(event_destination["MatchingEventTypes"]) == ["bounce", "complaint", "reject"]
    assert json.dumps(event_destination["EventBridgeDestination"]["EventBusArn"]).endswith(':event-bus/default"]]}')
    _, configuration_set = one(synthesized, "AWS::SES::ConfigurationSet")
    assert configuration_set["Properties"]["Name"] == MAIL.name("dev")
    (rule,) = [r for r in synthesized.of_type("AWS::Events::Rule").values() if "aws.ses" in json.dumps(r)]
    pattern = rule["Properties"]["EventPattern"]
    assert pattern["source"] == ["aws.ses"]
    assert pattern["detail"]["eventType"] == ["Bounce", "Complaint", "Reject"]
    assert pattern["detail"]["mail"]["tags"]["ses:configuration-set"] == [MAIL.name("dev")]
    (target,) = rule["Properties"]["Targets"]
    assert ref(target["Arn"]) == functions_by_name(synthesized)["ingress"][0]


def test_the_template_refuses_a_region_ses_does_not_receive_in(synthesized: Synthesized) -> None:
    raw = json.loads((synthesized.outdir / "HermesGateway-dev.template.json").read_text())
    (rule,) = [r for name, r in raw["Rules"].items() if name.startswith("EmailReceivingRegion")]
    (assertion,) = rule["Assertions"]
    regions, region = assertion["Assert"]["Fn::Contains"]
    assert set(regions) == MAIL.receiving_regions and region == {"Ref": "AWS::Region"}


def test_e_mail_has_outputs_for_the_cli_and_no_webhook(synthesized: Synthesized) -> None:
    assert synthesized.outputs["EmailRuleSetName"]["Value"] == MAIL.name("dev")
    assert synthesized.outputs["EmailAddress"]["Value"] == ADDRESS
    assert "EmailWebhookUrl" not in synthesized.outputs
    routes = [r["Properties"]["RouteKey"] for r in synthesized.of_type("AWS::ApiGatewayV2::Route").values()]
    assert not any("email" in route for route in routes)


def test_cdk_nag_finds_nothing_unexplained_with_e_mail_on(synthesized: Synthesized) -> None:
    assert synthesized.nag_violations == []


# --- other configurations (a quicker synthesis of the stack alone, cdk-nag's too) ------------------


def template(config: dict[str, Any], region: str | None = None) -> dict[str, Any]:
    from aws_cdk.assertions import Template

    from infra.app import SKIP_BUNDLING, build_app

    _app, stack = build_app(load_settings(env={}, config=config), context=SKIP_BUNDLING, deploy_region=region)
    found: dict[str, Any] = Template.from_stack(stack).to_json()
    return found


def test_a_rule_set_of_the_operator_s_is_joined_not_created() -> None:
    email = {**ENABLED["email"], "rule_set": "my-active-set"}
    found = template({"platforms": {"email": email}}, region="eu-west-1")
    types = [r["Type"] for r in found["Resources"].values()]
    assert "AWS::SES::ReceiptRuleSet" not in types
    (rule,) = [r for r in found["Resources"].values() if r["Type"] == "AWS::SES::ReceiptRule"]
    assert rule["Properties"]["RuleSetName"] == "my-active-set"
    assert ":receipt-rule-set/my-active-set:receipt-rule/hermes-gateway-dev" in json.dumps(found["Resources"])


def test_a_stored_mail_goes_no_later_than_the_session_retention() -> None:
    # a received message is the user's: sessions.retention_days bounds it like any of their files
    found = template({"platforms": {"email": ENABLED["email"]}, "sessions": {"retention_days": 3}}, region="eu-west-1")
    (bucket,) = [r for r in found["Resources"].values() if r["Type"] == "AWS::S3::Bucket"]
    rules = {r["Id"]: r for r in bucket["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert rules["expire-received-mail"]["ExpirationInDays"] == 3 and rules["expire-media"]["ExpirationInDays"] == 3


def test_without_e_mail_nothing_of_it_is_built() -> None:
    found = template({})
    assert not [r for r in found["Resources"].values() if r["Type"].startswith("AWS::SES::")]
    assert "SesStoresReceivedMail" not in json.dumps(found["Resources"])
    assert "Email" not in "".join(found.get("Outputs", {}))


def test_a_region_ses_does_not_receive_in_stops_the_synth() -> None:
    with pytest.raises(ConfigError, match="does not receive e-mail in eu-north-1"):
        template({"platforms": {"email": ENABLED["email"]}}, region="eu-north-1")
