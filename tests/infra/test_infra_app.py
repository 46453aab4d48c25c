"""`infra/app.py` as `cdk synth` runs it: config validation, stage naming, the real layer bundling."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra.app import REPO_ROOT
from infra.capabilities.layer import content_hash

pytestmark = pytest.mark.infra

APP = REPO_ROOT / "infra" / "app.py"


def run_app(tmp_path: Path, config: str, **env: str) -> subprocess.CompletedProcess[str]:
    config_file = tmp_path / "gateway.yaml"
    config_file.write_text(config, encoding="utf-8")
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("GATEWAY_", "CDK_", "HERMES_"))
    }
    environment.update(GATEWAY_CONFIG=str(config_file), CDK_OUTDIR=str(tmp_path / "cdk.out"), **env)
    return subprocess.run(
        [sys.executable, str(APP)], cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=300
    )


def test_an_invalid_setting_fails_synth_naming_the_key(tmp_path: Path) -> None:
    # Given a config with an unknown provider, when the app runs
    result = run_app(tmp_path, "provider:\n  name: nope\n", HERMES_SKIP_BUNDLING="1")
    # Then it fails with the key and the reason, and no traceback
    assert result.returncode != 0
    assert "provider.name" in result.stderr and "must be one of" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cdk.out").exists()


def test_synth_builds_the_stage_stack_and_the_layer_locally(tmp_path: Path) -> None:
    # Given a valid config naming a stage, when the app runs with bundling on (pip needs PyPI)
    result = run_app(tmp_path, "stage: qa\n")
    # Then the stage's stack is synthesized with cdk-nag passing
    assert result.returncode == 0, result.stderr[-3000:]
    out = tmp_path / "cdk.out"
    template = json.loads((out / "HermesGateway-qa.template.json").read_text())
    assert "/hermes-gateway/qa/" in json.dumps(template["Outputs"])
    # And the layer holds the shared package and its dependencies, but not boto3/botocore
    (layer,) = [path for path in out.glob("asset.*/python") if path.is_dir()]
    assert (layer / "hermes_gateway" / "__init__.py").is_file()
    assert (layer / "pynamodb").is_dir()
    assert (layer / "aws_lambda_powertools").is_dir()
    # urllib3, the pooled HTTP client, at the version the tests ran (botocore, from the runtime, shares it)
    assert (layer / "urllib3").is_dir()
    assert not (layer / "boto3").exists() and not (layer / "botocore").exists()
    assert not list((layer / "hermes_gateway").rglob("*.cpython-311.pyc"))


def test_layer_hash_follows_the_package_content(tmp_path: Path) -> None:
    requirements = tmp_path / "layer.txt"
    requirements.write_text("pynamodb==6.1.0\n")
    package = tmp_path / "hermes_gateway"
    package.mkdir()
    (package / "__init__.py").write_text("")
    before = content_hash(requirements, package, precompiled=False)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"ignored")
    assert content_hash(requirements, package, precompiled=False) == before
    (package / "module.py").write_text("X = 1\n")
    assert content_hash(requirements, package, precompiled=False) != before
