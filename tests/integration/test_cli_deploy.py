"""`hermes-gateway deploy --check` on moto: every prerequisite is checked and a failure names the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from hermes_cli import main
from hermes_cli.deploy import check_node, run_checks

pytestmark = pytest.mark.integration


def bootstrap_stack() -> None:
    template = '{"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}}'
    boto3.client("cloudformation").create_stack(StackName="CDKToolkit", TemplateBody=template)


def test_all_checks_pass_with_a_bootstrapped_account(
    aws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap_stack()
    monkeypatch.setenv("GATEWAY_CONFIG", str(tmp_path / "gateway.yaml"))
    checks, stage = run_checks(tmp_path / "gateway.yaml", run=lambda cmd: "v20.11.1\n")
    assert stage == "dev"
    assert [(c.name, c.ok) for c in checks] == [
        ("gateway.yaml", True),
        ("Node.js", True),
        ("AWS", True),
        ("CDK bootstrap", True),
    ]


def test_a_missing_bootstrap_says_how_to_bootstrap(aws: Any, tmp_path: Path) -> None:
    checks, _ = run_checks(tmp_path / "gateway.yaml", run=lambda cmd: "v22.1.0")
    bootstrap = checks[-1]
    assert not bootstrap.ok and "bootstrap aws://123456789012/us-east-1" in bootstrap.detail


def test_a_bad_config_names_the_key(
    aws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("stage: Not_Valid\n", encoding="utf-8")
    monkeypatch.setenv("GATEWAY_CONFIG", str(config))
    assert main(["deploy", "--check"]) == 1
    out = capsys.readouterr().out
    assert "FAIL gateway.yaml" in out and "stage" in out


def test_node_too_old_or_missing() -> None:
    assert not check_node(run=lambda cmd: "v16.20.0", which=lambda name: "/usr/bin/" + name).ok
    missing = check_node(which=lambda name: None)
    assert not missing.ok and "install Node.js" in missing.detail


def old_stack(stage: str = "dev") -> str:
    """A stack from before the inbox: its inbound queue named by the `InboundQueueUrl` output."""
    template = {
        "Resources": {"Inbound": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "old-inbound"}}},
        "Outputs": {"InboundQueueUrl": {"Value": {"Ref": "Inbound"}}},
    }
    boto3.client("cloudformation").create_stack(StackName=f"HermesGateway-{stage}", TemplateBody=json.dumps(template))
    return str(boto3.client("sqs").get_queue_url(QueueName="old-inbound")["QueueUrl"])


def test_an_old_stack_whose_queues_hold_messages_is_not_deployed_over(
    aws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap_stack()
    url = old_stack()
    boto3.client("sqs").send_message(QueueUrl=url, MessageBody="a message not routed yet")
    checks, _ = run_checks(tmp_path / "gateway.yaml", run=lambda cmd: "v20.11.1\n")
    old = checks[-1]
    assert (old.name, old.ok) == ("old queues", False) and "inbound 1" in old.detail and "Upgrading" in old.detail
    # and the deploy stops there, before the CDK CLI runs
    monkeypatch.setenv("GATEWAY_CONFIG", str(tmp_path / "gateway.yaml"))
    assert main(["deploy"]) == 1
    assert "FAIL old queues" in capsys.readouterr().out


def test_an_old_stack_with_empty_queues_may_be_upgraded(aws: Any, tmp_path: Path) -> None:
    bootstrap_stack()
    old_stack()
    checks, _ = run_checks(tmp_path / "gateway.yaml", run=lambda cmd: "v20.11.1\n")
    assert (checks[-1].name, checks[-1].ok) == ("old queues", True)


def test_aws_region_alone_is_enough(
    aws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given only AWS_REGION (the AWS CLI's and the CDK's variable; botocore reads AWS_DEFAULT_REGION)
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("GATEWAY_CONFIG", str(tmp_path / "gateway.yaml"))
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    # When `make deploy` checks the prerequisites
    main(["deploy", "--check"])
    # Then the region is found
    assert "ok   AWS            account 123456789012, region eu-west-1" in capsys.readouterr().out


def test_the_defaults_deploy_with_warnings_about_the_echo_agent(
    aws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given no gateway.yaml: the echo agent
    monkeypatch.setenv("GATEWAY_CONFIG", str(tmp_path / "gateway.yaml"))
    bootstrap_stack()
    monkeypatch.setattr("hermes_cli.deploy._run", lambda cmd: "v20.11.1\n")
    # When `make deploy` checks, Then it says so (and the checks still pass: a warning stops nothing)
    assert main(["deploy", "--check"]) == 0
    out = capsys.readouterr().out
    assert "WARN provider: the echo agent answers with the user's own words" in out
    assert "WARN access" not in out  # strangers get a pairing code: nobody is let in unasked


def test_a_bot_open_to_everyone_is_warned_of(
    aws: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "provider: {name: openai, model: gpt-4o-mini}\nplatforms:\n  telegram: {allowed_users: ['*']}\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("GATEWAY_CONFIG", str(config))
    assert main(["config", "check"]) == 0
    out = capsys.readouterr().out
    assert "WARN access: anyone who finds the bot may use it on telegram" in out
    assert "WARN provider" not in out
