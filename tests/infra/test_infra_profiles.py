"""Named profiles in the stack: each profile's platforms get routes under `/p/<profile>`, URL outputs,
and read access to the profiles' own secrets (`NAME__*` for a secret some profile has its own value
of); every function reads every profile's settings."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import webhook_output_key
from hermes_gateway.platforms.catalog import CATALOG, PlatformSpec
from hermes_gateway.resources import FUNCTIONS
from hermes_gateway.settings import Settings, load_settings
from tests.infra.conftest import Synthesized, synthesize
from tests.infra.test_infra_stack import as_list, functions_by_name, ref, role_statements

pytestmark = pytest.mark.infra

SPECS = {spec.name: spec for spec in CATALOG}
# The deployment serves telegram; `coder` telegram and slack; `my_bot` whatsapp (GET and POST).
CONFIG: dict[str, Any] = {
    "platforms": {"telegram": {"enabled": True}},
    "profiles": {
        "coder": {
            "provider": {"name": "openai", "model": "gpt-4o-mini"},
            "platforms": {"telegram": {"enabled": True, "allowed_users": ["123"]}, "slack": {"enabled": True}},
        },
        "my_bot": {"platforms": {"whatsapp": {"enabled": True}}},
    },
}
SERVED: dict[str | None, tuple[str, ...]] = {
    None: ("telegram",),
    "coder": ("telegram", "slack"),
    "my_bot": ("whatsapp",),
}


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(load_settings(env={}, config=CONFIG), tmp_path_factory.mktemp("cdk.out"))


def route_keys(synth: Synthesized) -> set[str]:
    return {r["Properties"]["RouteKey"] for r in synth.of_type("AWS::ApiGatewayV2::Route").values()}


def readable_secrets(synth: Synthesized, function: str) -> set[str]:
    """The parameter names (after the stage's prefix) a function may GetParameter."""
    _, props = functions_by_name(synth)[function]
    statements = role_statements(synth, ref(props["Role"]))
    arns = [r for s in statements if s["Action"] == "ssm:GetParameter" for r in as_list(s["Resource"])]
    tails = [arn["Fn::Join"][1][-1] for arn in arns]
    assert all(tail.startswith(":parameter/hermes-gateway/dev/") for tail in tails), tails
    return {tail.removeprefix(":parameter/hermes-gateway/dev/") for tail in tails}


def output_text(synth: Synthesized, key: str) -> str:
    return json.dumps(synth.outputs[key]["Value"])


# --- output keys -----------------------------------------------------------------------------------


def test_webhook_output_keys_name_the_profile_in_camel_case() -> None:
    assert webhook_output_key("google_chat") == "GoogleChatWebhookUrl"
    assert webhook_output_key("google_chat", None) == "GoogleChatWebhookUrl"
    assert webhook_output_key("telegram", "my_bot") == "TelegramWebhookUrlForMyBot"
    assert webhook_output_key("google_chat", "coder") == "GoogleChatWebhookUrlForCoder"
    assert webhook_output_key("telegram", "bot2").isalnum()


# --- routes and outputs ----------------------------------------------------------------------------


def test_each_profile_gets_routes_for_exactly_its_platforms(profiled: Synthesized) -> None:
    expected = {
        f"{method} {path}"
        for profile, platforms in SERVED.items()
        for spec in (SPECS[name] for name in platforms)
        for path in spec.webhook_paths(profile)
        for method in spec.methods
    }
    routes = route_keys(profiled)
    assert routes == expected | {"POST /api/sessions", "POST /p/coder/api/sessions", "POST /p/my_bot/api/sessions"}
    assert {"POST /p/coder/webhooks/telegram", "POST /p/coder/webhooks/slack"} <= routes
    assert {"GET /p/my_bot/webhooks/whatsapp", "POST /p/my_bot/webhooks/whatsapp"} <= routes
    # a platform only another profile serves has no route under coder's path, nor the deployment's
    assert not [r for r in routes if r.endswith(("/p/coder/webhooks/whatsapp", " /webhooks/slack"))]


def test_profile_routes_invoke_the_ingress_function_like_the_deployments(profiled: Synthesized) -> None:
    integrations = profiled.of_type("AWS::ApiGatewayV2::Integration")
    ingress_id = functions_by_name(profiled)["ingress"][0]
    for route in profiled.of_type("AWS::ApiGatewayV2::Route").values():
        props = route["Properties"]
        if "/webhooks/" not in props["RouteKey"]:
            continue
        integration_id = props["Target"]["Fn::Join"][1][1]["Ref"]
        assert ref(integrations[integration_id]["Properties"]["IntegrationUri"]) == ingress_id
        assert props.get("AuthorizationType", "NONE") == "NONE"


def test_each_profile_has_its_own_iam_authorized_session_api_route(profiled: Synthesized) -> None:
    # Each route is its own IAM resource (`…/POST/p/coder/api/sessions`): a grant on one profile's
    # route lets a caller at that profile's sessions only
    integrations = profiled.of_type("AWS::ApiGatewayV2::Integration")
    session_api = functions_by_name(profiled)["session_api"][0]
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in profiled.of_type("AWS::ApiGatewayV2::Route").values()
        if r["Properties"]["RouteKey"].endswith("/api/sessions")
    }
    assert set(routes) == {"POST /api/sessions", "POST /p/coder/api/sessions", "POST /p/my_bot/api/sessions"}
    for props in routes.values():
        assert props["AuthorizationType"] == "AWS_IAM"
        integration_id = props["Target"]["Fn::Join"][1][1]["Ref"]
        assert ref(integrations[integration_id]["Properties"]["IntegrationUri"]) == session_api


def test_each_profile_platform_has_its_url_output(profiled: Synthesized) -> None:
    for profile, platforms in SERVED.items():
        for name in platforms:
            path = f"/p/{profile}/webhooks/{name}" if profile else f"/webhooks/{name}"
            assert output_text(profiled, webhook_output_key(name, profile)).endswith(f'"{path}"]]}}'), (profile, name)
            if profile:
                assert profile in profiled.outputs[webhook_output_key(name, profile)]["Description"]
    assert "TelegramWebhookUrlForCoder" in profiled.outputs
    assert "SlackWebhookUrlForCoder" in profiled.outputs
    assert "WhatsappWebhookUrlForMyBot" in profiled.outputs
    assert "SlackWebhookUrl" not in profiled.outputs  # the deployment's own profile does not serve slack
    assert "WhatsappWebhookUrlForCoder" not in profiled.outputs


# --- secrets ---------------------------------------------------------------------------------------


def profile_secrets(spec: PlatformSpec, side: str) -> set[str]:
    """The patterns a function may read a platform's secrets of the named profiles by (`NAME__*`:
    one per secret, whatever the number of profiles, so ten profiles fit IAM's policy size)."""
    names = spec.inbound_secrets if side == "inbound" else spec.send_secrets
    return {f"{name}__*" for name in names}


def may_read(readable: set[str], parameter: str) -> bool:
    return any(fnmatch.fnmatchcase(parameter, pattern) for pattern in readable)


def test_the_ingress_verifies_with_each_profiles_own_inbound_secrets(profiled: Synthesized) -> None:
    (ingress,) = [spec for spec in FUNCTIONS if spec.name == "ingress"]
    readable = readable_secrets(profiled, "ingress")
    assert may_read(readable, "TELEGRAM_WEBHOOK_SECRET__CODER")
    assert may_read(readable, "WHATSAPP_APP_SECRET__MY_BOT")
    assert readable == (
        set(ingress.secrets)
        | profile_secrets(SPECS["telegram"], "inbound")
        | profile_secrets(SPECS["slack"], "inbound")
        | profile_secrets(SPECS["whatsapp"], "inbound")
    )
    # a platform no named profile serves: the deployment's own secret only
    assert not may_read(readable, "LINE_CHANNEL_SECRET__CODER") and may_read(readable, "LINE_CHANNEL_SECRET")
    assert not may_read(readable, "TELEGRAM_BOT_TOKEN__CODER")  # and never a bot token


def test_delivery_sends_with_each_profiles_own_bot_token(profiled: Synthesized) -> None:
    (delivery,) = [spec for spec in FUNCTIONS if spec.name == "delivery"]
    readable = readable_secrets(profiled, "delivery")
    assert may_read(readable, "TELEGRAM_BOT_TOKEN__CODER") and may_read(readable, "SLACK_BOT_TOKEN__CODER")
    assert readable == (
        set(delivery.secrets)
        | profile_secrets(SPECS["telegram"], "send")
        | profile_secrets(SPECS["slack"], "send")
        | profile_secrets(SPECS["whatsapp"], "send")
        # a spoken answer is synthesized with the sending profile's speech key, as the agent's model keys are read
        | {f"{name}__*" for name in ("TTS_API_KEY", "OPENAI_API_KEY")}
    )
    assert not may_read(readable, "DISCORD_BOT_TOKEN__CODER")
    assert not may_read(readable, "TELEGRAM_WEBHOOK_SECRET__CODER")  # and never a webhook secret


def test_the_agent_may_read_every_profiles_model_and_memory_keys(profiled: Synthesized) -> None:
    # and the bot tokens the delivery function reads: a message's attachments are fetched with them
    keys = ("OPENAI_API_KEY", "STT_API_KEY", "HONCHO_API_KEY")
    assert readable_secrets(profiled, "agent") == {
        f"{name}{suffix}" for name in keys for suffix in ("", "__*")
    } | readable_secrets(profiled, "delivery")


def test_functions_without_secrets_still_read_none(profiled: Synthesized) -> None:
    for spec in FUNCTIONS:
        if not spec.secrets:
            assert readable_secrets(profiled, spec.name) == set(), spec.name


# --- checks ----------------------------------------------------------------------------------------


def test_cdk_nag_reports_no_unacknowledged_finding_with_profiles(profiled: Synthesized) -> None:
    findings = [
        (v["ruleName"], [c["constructPath"] for c in v["violatingConstructs"]]) for v in profiled.nag_violations
    ]
    assert findings == []


def test_every_function_carries_the_profiles(profiled: Synthesized) -> None:
    for name, (_, props) in functions_by_name(profiled).items():
        settings = profiled.function_settings(props)
        assert set(settings.profiles) == {"coder", "my_bot"}, name
        assert settings.for_profile("coder").platform("slack") is not None
        assert settings.platform("slack") is None
        assert settings == load_settings(env={}, config=CONFIG)


def build(settings: Settings) -> None:
    from infra.app import SKIP_BUNDLING, build_app

    build_app(settings, context=SKIP_BUNDLING)


def test_profile_names_that_share_an_output_id_are_refused() -> None:
    profiles = {name: {"platforms": {"telegram": {"enabled": True}}} for name in ("a_1", "a1")}
    with pytest.raises(ConfigError, match="differ only in '_'"):
        build(load_settings(env={}, config={"profiles": profiles}))


def test_a_profile_with_its_own_bedrock_model_may_invoke_it(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Given the deployment on one Bedrock model and a profile on another
    config = {
        "provider": {"name": "bedrock", "model": "anthropic.claude-3-haiku-20240307-v1:0"},
        "profiles": {"coder": {"provider": {"model": "us.anthropic.claude-sonnet-4-5-20250929-v1:0"}}},
    }
    synth = synthesize(load_settings(env={}, config=config), tmp_path_factory.mktemp("cdk.out"))
    # Then the agent may invoke both, and cdk-nag accepts both acknowledged ARNs
    _, props = functions_by_name(synth)["agent"]
    statements = role_statements(synth, ref(props["Role"]))
    text = json.dumps([s["Resource"] for s in statements if "bedrock:InvokeModel" in s["Action"]])
    assert "foundation-model/anthropic.claude-3-haiku-20240307-v1:0" in text
    assert "foundation-model/anthropic.claude-sonnet-4-5-20250929-v1:0" in text
    assert synth.nag_violations == []


def test_cfn_lint_finds_nothing_in_a_stack_with_named_profiles(profiled: Synthesized) -> None:
    from tests.infra.test_infra_cfn_lint import lint_findings

    assert lint_findings(profiled) == []
