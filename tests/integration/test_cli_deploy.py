"""`hermes-gateway deploy --check` on moto: every prerequisite is checked and a failure names the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from hermes_gateway.cli import main
from hermes_gateway.cli.deploy import check_node, run_checks

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
