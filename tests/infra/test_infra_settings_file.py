"""The settings ship with the deployment (a settings layer), not in the functions' environment: the
largest valid configuration synthesizes, every function's environment stays far under Lambda's
4 KB, every function reads the whole configuration back, and the file holds no secret."""

from __future__ import annotations

import json
import secrets as random_secrets
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import SECRET_NAMES
from hermes_gateway.secrets import profile_secret_name
from hermes_gateway.settings import MAX_PROFILES, Settings, load_settings
from infra.capabilities.functions import UNRESOLVED_VALUE_BYTES
from infra.stack import ENVIRONMENT_LIMIT_BYTES, check_environment_size
from tests.infra.conftest import ENABLED, PROFILE_ENABLED, Synthesized, synthesize
from tests.infra.test_infra_stack import functions_by_name, ref, role_statements

pytestmark = pytest.mark.infra

EVERY_PLATFORM = ENABLED
USERS = [str(100_000_000 + i) for i in range(12)]


def largest_config() -> dict[str, Any]:
    """Every platform on, and the most named profiles, each on every platform with its own model
    and allowlists: before the settings file, its profiles alone were over 4 KB of environment."""
    profiles = {
        f"bot{i}": {
            "provider": {"name": "bedrock", "model": f"us.anthropic.claude-sonnet-4-5-2025092{i}-v1:0"},
            "platforms": {**PROFILE_ENABLED, "telegram": {"enabled": True, "allowed_users": USERS, "admins": USERS}},
        }
        for i in range(MAX_PROFILES)
    }
    return {
        "provider": {"name": "bedrock", "model": "anthropic.claude-3-haiku-20240307-v1:0"},
        "platforms": EVERY_PLATFORM,
        "profiles": profiles,
    }


def secret_environment() -> dict[str, str]:
    """Every secret, and every profile's own, set in the environment as local mode reads them."""
    names = [profile_secret_name(name, profile) for name in SECRET_NAMES for profile in (None, "bot0", "bot9")]
    return {name: "s3cr3t-" + random_secrets.token_hex(8) for name in names}


@pytest.fixture(scope="module")
def largest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, str], Synthesized]:
    secrets = secret_environment()
    settings = load_settings(env=secrets, config=largest_config())
    # One Lambda permission per webhook route takes this stack over CloudFormation's 500 resources
    # (see test_the_largest_configuration_fits_cloudformations_resource_limit); CDK's own check of
    # that count is lifted here so the environment and the settings file can be measured.
    synth = synthesize(settings, tmp_path_factory.mktemp("cdk.out"), {"@aws-cdk/core:stackResourceLimit": 0})
    return settings, secrets, synth


def environment_bytes(variables: dict[str, Any]) -> int:
    """What Lambda counts against its 4 KB, a value CloudFormation resolves counted at its upper bound."""
    return sum(
        len(key.encode()) + (len(value.encode()) if isinstance(value, str) else UNRESOLVED_VALUE_BYTES)
        for key, value in variables.items()
    )


def test_every_function_environment_of_the_largest_configuration_fits_in_4_kb(
    largest: tuple[Settings, dict[str, str], Synthesized],
) -> None:
    _, _, synth = largest
    deployed = functions_by_name(synth)
    sizes = {name: environment_bytes(props["Environment"]["Variables"]) for name, (_, props) in deployed.items()}
    assert sizes and max(sizes.values()) < ENVIRONMENT_LIMIT_BYTES, sizes
    # and it holds no setting: names, ARNs, the settings file's place and what differs per function
    for _, props in deployed.values():
        variables = props["Environment"]["Variables"]
        literal = {k for k, v in variables.items() if isinstance(v, str)}
        assert literal == {
            "GATEWAY_SETTINGS_FILE",
            "HERMES_SECRETS_PREFIX",
            "POWERTOOLS_SERVICE_NAME",
            "POWERTOOLS_METRICS_NAMESPACE",
            "POWERTOOLS_METRICS_DISABLED",  # the observability tier's (minimal: no custom metrics)
            "HERMES_FUNCTION",
        }


def test_every_function_reads_the_whole_largest_configuration_back(
    largest: tuple[Settings, dict[str, str], Synthesized],
) -> None:
    settings, _, synth = largest
    for name, (_, props) in functions_by_name(synth).items():
        shipped = synth.function_settings(props)
        assert shipped == settings, name
        assert len(shipped.profiles) == MAX_PROFILES
        assert shipped.for_profile("bot9").provider.model == "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
        assert shipped.for_profile("bot3").platforms["telegram"].admins == tuple(USERS)


def test_the_shipped_settings_hold_no_secret(largest: tuple[Settings, dict[str, str], Synthesized]) -> None:
    _, secrets, synth = largest
    (_, props), *_ = functions_by_name(synth).values()
    text = synth.settings_file(props).read_text(encoding="utf-8")
    assert not [name for name, value in secrets.items() if value in text or f'"{name}"' in text]
    template = json.dumps(synth.resources)
    assert not [name for name, value in secrets.items() if value in template]


def test_the_agent_may_invoke_every_model_of_the_largest_configuration(
    largest: tuple[Settings, dict[str, str], Synthesized],
) -> None:
    settings, _, synth = largest
    _, props = functions_by_name(synth)["agent"]
    statements = role_statements(synth, ref(props["Role"]))
    text = json.dumps([s["Resource"] for s in statements if "bedrock:InvokeModel" in s["Action"]])
    for profile in settings.all_profiles():
        assert f"foundation-model/{profile.provider.model.removeprefix('us.')}" in text, profile.profile


def test_the_largest_configuration_fits_cloudformations_resource_limit(
    largest: tuple[Settings, dict[str, str], Synthesized],
) -> None:
    # The API's webhook routes share one AWS::Lambda::Permission (one per route made 11 bots on
    # every platform 503 resources).
    _, _, synth = largest
    assert len(synth.resources) <= 500, len(synth.resources)


def test_an_environment_over_4_kb_still_fails_synth_with_the_size() -> None:
    variables = {f"HERMES_TABLE_{i}": "x" * 200 for i in range(20)}
    with pytest.raises(ConfigError) as raised:
        check_environment_size("router", variables)
    message = str(raised.value)
    assert "router" in message and "4096" in message and "granted too many resources" in message
    assert int(message.split("about ")[1].split(" bytes")[0]) > ENVIRONMENT_LIMIT_BYTES
