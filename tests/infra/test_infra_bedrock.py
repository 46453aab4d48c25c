"""With provider `bedrock`, the agent (and only the agent) may invoke the configured model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.settings import load_settings

pytestmark = pytest.mark.infra

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def test_bedrock_grants_invoke_model_on_the_configured_model_only(tmp_path: Path) -> None:
    from infra.app import SKIP_BUNDLING, build_app

    settings = load_settings(env={"GATEWAY_PROVIDER": "bedrock", "GATEWAY_MODEL": MODEL}, config={})
    app, stack = build_app(settings, context=SKIP_BUNDLING, outdir=str(tmp_path))
    app.synth()  # cdk-nag: the region-open foundation-model ARN is acknowledged with its reason
    resources: dict[str, Any] = json.loads((tmp_path / f"{stack.stack_name}.template.json").read_text())["Resources"]
    grants = {
        logical_id: statement
        for logical_id, resource in resources.items()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
        if "bedrock:InvokeModel" in json.dumps(statement["Action"])
    }
    assert len(grants) == 1 and "agent" in next(iter(grants)).lower()
    statement = next(iter(grants.values()))
    assert statement["Action"] == ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]
    text = json.dumps(statement["Resource"])
    assert "foundation-model/anthropic.claude-sonnet-4-5-20250929-v1:0" in text
    assert f"inference-profile/{MODEL}" in text
    assert "foundation-model/*" not in text


def test_no_model_permission_without_bedrock(synthesized: Any) -> None:
    assert "bedrock:" not in json.dumps(synthesized.resources)
