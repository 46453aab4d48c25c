"""One synthesis of the stack for every infra test (synth is slow), with asset bundling skipped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.settings import SETTINGS_FILE_ENV, Settings, load_settings, load_shipped_settings
from hermes_gateway.settings.shipped import LAYER_FILE


@dataclass(frozen=True)
class Synthesized:
    template: Any  # aws_cdk.assertions.Template
    resources: dict[str, dict[str, Any]]
    outputs: dict[str, Any]
    nag_violations: list[dict[str, Any]]
    outdir: Path

    def of_type(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.resources.items() if r["Type"] == cfn_type}

    def settings_file(self, function: dict[str, Any]) -> Path:
        """The settings file among a function's layers (`Properties` of its resource), as staged."""
        staged = [
            self.outdir / f"asset.{key.removesuffix('.zip')}" / LAYER_FILE
            for layer in function["Layers"]
            for key in [self.resources[layer["Ref"]]["Properties"]["Content"]["S3Key"]]
        ]
        (found,) = [path for path in staged if path.is_file()]
        return found

    def function_settings(self, function: dict[str, Any]) -> Settings:
        """The settings a deployed function builds: its settings file, overlaid by its environment
        (a value resolved at deploy time, a resource name, is no setting)."""
        env = {k: v for k, v in function["Environment"]["Variables"].items() if isinstance(v, str)}
        return load_shipped_settings({**env, SETTINGS_FILE_ENV: str(self.settings_file(function))})


def synthesize(settings: Settings, outdir: Path, context: dict[str, Any] | None = None) -> Synthesized:
    """The stack of `settings` synthesized into `outdir` (asset bundling skipped), with cdk-nag's findings."""
    from aws_cdk.assertions import Template

    from infra.app import SKIP_BUNDLING, build_app

    app, stack = build_app(settings, context={**SKIP_BUNDLING, **(context or {})}, outdir=str(outdir))
    try:
        app.synth()  # runs the cdk-nag checks; raises on an unacknowledged finding
        violations: list[dict[str, Any]] = []
    except RuntimeError:
        # The template is written before validation; the nag test reports the findings.
        report = json.loads((outdir / "validation-report.json").read_text())
        violations = [v for plugin in report["pluginReports"] for v in plugin["violations"]]
    raw = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    return Synthesized(
        template=Template.from_json(raw),
        resources=raw["Resources"],
        outputs=raw.get("Outputs", {}),
        nag_violations=violations,
        outdir=outdir,
    )


# What a platform needs besides `enabled` to be valid (the largest valid configuration enables all).
REQUIRED_OPTIONS = {"email": {"address": "hermes@example.com"}}
ENABLED = {
    spec.name: {"enabled": True, **REQUIRED_OPTIONS.get(spec.name, {})} for spec in CATALOG if not spec.local_only
}
# What a named profile may serve: every platform but e-mail (the deployment's own profile's alone).
PROFILE_ENABLED = {name: value for name, value in ENABLED.items() if name != "email"}
EVERY_PLATFORM = {"platforms": ENABLED}


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    # Defaults (the minimal observability tier), with every platform on (so every route is
    # checked); the environment of the test run must not change the stack.
    return synthesize(load_settings(env={}, config=EVERY_PLATFORM), tmp_path_factory.mktemp("cdk.out"))


@pytest.fixture(scope="session")
def synthesized_full(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """Every platform, in the `full` observability tier (every alarm, the topic's key, the dashboard,
    X-Ray everywhere), with an alarm e-mail."""
    config = {**EVERY_PLATFORM, "operations": {"observability": "full", "alarm_email": "ops@example.com"}}
    return synthesize(load_settings(env={}, config=config), tmp_path_factory.mktemp("cdk.out"))
