"""cfn-lint on the synthesized template (every platform enabled): no error, and no warning but the
one CDK itself produces (W3005, a DependsOn beside a GetAtt that CDK adds on purpose)."""

from __future__ import annotations

import json

from tests.infra.conftest import Synthesized

IGNORED = {"W3005"}


def test_cfn_lint_finds_nothing(synthesized: Synthesized) -> None:
    assert lint_findings(synthesized) == []


def lint_findings(synthesized: Synthesized) -> list[str]:
    from cfnlint.api import lint

    template = json.dumps({"Resources": synthesized.resources, "Outputs": synthesized.outputs})
    matches = lint(template, regions=["us-east-1"])  # every region is minutes; the rules are the same
    # Errors and warnings; the informational rules (I...) are suggestions, not findings.
    return [
        f"{m.rule.id} {m.message} ({'/'.join(map(str, m.path))})"
        for m in matches
        if m.rule.id[0] in "EW" and m.rule.id not in IGNORED
    ]


def test_every_function_environment_fits_in_4_kb(synthesized: Synthesized) -> None:
    for logical_id, function in synthesized.of_type("AWS::Lambda::Function").items():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        size = sum(len(k) + len(json.dumps(v) if not isinstance(v, str) else v) for k, v in variables.items())
        assert size < 4096, (logical_id, size)
