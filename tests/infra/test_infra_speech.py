"""With `tts.provider: polly`, the functions that deliver a spoken answer (the agent's own send
and the delivery function) may call polly:SynthesizeSpeech, and no other function may; without
it, no role names Polly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.settings import load_settings
from tests.infra.conftest import synthesize

pytestmark = pytest.mark.infra


def polly_grants(resources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        logical_id: statement
        for logical_id, resource in resources.items()
        if resource["Type"] == "AWS::IAM::Policy"
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
        if "polly:" in json.dumps(statement["Action"])
    }


@pytest.mark.parametrize("tier", ["minimal", "full"])
def test_a_profile_on_polly_lets_the_speaking_functions_synthesize(tier: str, tmp_path: Path) -> None:
    # Given the deployment without speech and one profile on Polly; in the full tier its functions
    # are traced, and X-Ray's "*" is acknowledged on the same roles
    config = {
        "operations": {"observability": tier},
        "profiles": {"voice": {"tts": {"provider": "polly", "polly_voice": "Matthew"}}},
    }
    synth = synthesize(load_settings(env={}, config=config), tmp_path)
    grants = polly_grants(synth.resources)
    # Then exactly the agent's and the delivery function's policies allow SynthesizeSpeech, nothing
    # more of Polly (CDK merges it with X-Ray's actions, which take "*" too)
    assert sorted(name.lower().split("role")[0] for name in grants) == ["functionsagent", "functionsdelivery"], grants
    for statement in grants.values():
        actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
        assert [a for a in actions if not a.startswith("xray:")] == ["polly:SynthesizeSpeech"]
        assert (statement["Resource"], statement["Effect"]) == ("*", "Allow")
    # and cdk-nag finds its "*" acknowledged, with the reason
    assert synth.nag_violations == []


def test_no_role_names_polly_without_it(synthesized: Any) -> None:
    assert "polly:" not in json.dumps(synthesized.resources)
