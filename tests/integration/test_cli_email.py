"""`hermes-gateway deploy` with e-mail on, and `hermes-gateway email activate|status`, on moto: the
region SES receives in and the domain's identity checked before a deploy, and the receipt rule
set never activated without saying which one is active now and asking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from hermes_cli import main
from hermes_cli.deploy import check_email, offer_activation, run_checks
from hermes_cli.mail import activate

pytestmark = pytest.mark.integration

EMAIL_CONFIG = "stage: dev\nplatforms:\n  email:\n    enabled: true\n    address: hermes@example.com\n"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(EMAIL_CONFIG, encoding="utf-8")
    monkeypatch.setenv("GATEWAY_CONFIG", str(path))
    return path


def test_an_unverified_domain_is_a_warning_and_a_verified_one_ok(aws: Any, config: Path) -> None:
    missing = check_email(config, "us-east-1")
    assert missing is not None and missing.ok and missing.warning
    assert "not an SES identity" in missing.detail and "example.com" in missing.detail
    boto3.client("sesv2").create_email_identity(EmailIdentity="example.com")
    found = check_email(config, "us-east-1")
    assert found is not None and found.ok and "example.com: verification" in found.detail


def test_a_region_ses_does_not_receive_in_fails_the_check(aws: Any, config: Path) -> None:
    found = check_email(config, "eu-north-1")
    assert found is not None and not found.ok and "us-east-1" in found.detail


def test_without_e_mail_there_is_no_check(aws: Any, tmp_path: Path) -> None:
    assert check_email(tmp_path / "absent.yaml", "us-east-1") is None


def test_deploy_check_lists_the_e_mail_line(aws: Any, config: Path) -> None:
    template = '{"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}'
    boto3.client("cloudformation").create_stack(StackName="CDKToolkit", TemplateBody=template)
    checks, _ = run_checks(config, run=lambda cmd: "v20.11.1\n")
    assert [c.name for c in checks][-1] == "SES e-mail"


def test_activation_says_which_set_is_active_and_asks_first(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    ses = boto3.client("ses")
    for name in ("their-set", "hermes-gateway-dev"):
        ses.create_receipt_rule_set(RuleSetName=name)
    ses.set_active_receipt_rule_set(RuleSetName="their-set")
    asked: list[str] = []
    # When the operator answers no, nothing changes
    assert activate("hermes-gateway-dev", ask=lambda q: asked.append(q) or "n") == 1
    out = capsys.readouterr().out
    assert "The active receipt rule set in this region is their-set" in out and "not activated" in out
    assert asked == ["Activate hermes-gateway-dev? [y/N] "]
    assert ses.describe_active_receipt_rule_set()["Metadata"]["Name"] == "their-set"
    # When yes, it is activated; then it says so and asks nothing
    assert activate("hermes-gateway-dev", ask=lambda q: "y") == 0
    assert ses.describe_active_receipt_rule_set()["Metadata"]["Name"] == "hermes-gateway-dev"
    assert activate("hermes-gateway-dev", ask=lambda q: pytest.fail("asked again")) == 0
    assert "already the active" in capsys.readouterr().out


def test_after_a_deploy_without_a_terminal_it_only_says_how(
    aws: Any, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    offer_activation(config, "dev", ask=None)
    assert "hermes-gateway email activate" in capsys.readouterr().out
    assert "Metadata" not in boto3.client("ses").describe_active_receipt_rule_set()
    # and with the operator's own rule set named there is nothing to activate
    config.write_text(EMAIL_CONFIG + "    rule_set: their-set\n", encoding="utf-8")
    offer_activation(config, "dev", ask=lambda q: pytest.fail("asked"))
    assert capsys.readouterr().out == ""


def test_status_reads_the_stack_s_outputs(aws: Any, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outputs = {"EmailRuleSetName": "hermes-gateway-dev", "EmailAddress": "hermes@example.com"}
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName="HermesGateway-dev", TemplateBody=json.dumps(template))
    boto3.client("sesv2").create_email_identity(EmailIdentity="example.com")
    boto3.client("ses").create_receipt_rule_set(RuleSetName="hermes-gateway-dev")  # as the stack creates it
    assert main(["email", "status", "--stage", "dev"]) == 1  # no active rule set yet
    out = capsys.readouterr().out
    assert "address    hermes@example.com" in out and "receiving  no: the active rule set is none" in out
    assert main(["email", "activate", "--stage", "dev", "--yes"]) == 0
    assert boto3.client("ses").describe_active_receipt_rule_set()["Metadata"]["Name"] == "hermes-gateway-dev"
