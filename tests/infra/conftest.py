"""One synthesis of the stack for every infra test (synth is slow), with asset bundling skipped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.settings import Settings, load_settings


@dataclass(frozen=True)
class Synthesized:
    template: Any  # aws_cdk.assertions.Template
    resources: dict[str, dict[str, Any]]
    outputs: dict[str, Any]
    nag_violations: list[dict[str, Any]]

    def of_type(self, cfn_type: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.resources.items() if r["Type"] == cfn_type}


def synthesize(settings: Settings, outdir: Path) -> Synthesized:
    """The stack of `settings` synthesized into `outdir` (asset bundling skipped), with cdk-nag's findings."""
    from aws_cdk.assertions import Template

    from infra.app import SKIP_BUNDLING, build_app

    app, stack = build_app(settings, context=SKIP_BUNDLING, outdir=str(outdir))
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
    )


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    # Defaults, with every platform on (so every route is checked); the environment of the test
    # run must not change the stack.
    config = {"platforms": {spec.name: {"enabled": True} for spec in CATALOG if not spec.local_only}}
    return synthesize(load_settings(env={}, config=config), tmp_path_factory.mktemp("cdk.out"))
