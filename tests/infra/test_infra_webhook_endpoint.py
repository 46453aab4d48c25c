"""`ingress.endpoint: function_url`: the platforms post to the ingress function's own URL (no API
Gateway request price), with every permission a public URL needs since October 2025, and the
webhook outputs the CLI reads name it; the IAM-signed session API stays on the HTTP API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import webhook_output_key
from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.settings import load_settings
from tests.infra.conftest import EVERY_PLATFORM, Synthesized, synthesize
from tests.infra.test_infra_stack import functions_by_name, ref

pytestmark = pytest.mark.infra

CONFIG: dict[str, Any] = {
    **EVERY_PLATFORM,
    "ingress": {"endpoint": "function_url"},
    "profiles": {"coder": {"platforms": {"telegram": {"enabled": True}}}},
}


@pytest.fixture(scope="module")
def via_url(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(load_settings(env={}, config=CONFIG), tmp_path_factory.mktemp("cdk.out"))


def test_the_ingress_function_has_a_public_url_and_both_permissions_it_needs(via_url: Synthesized) -> None:
    ingress = functions_by_name(via_url)["ingress"][0]
    (url,) = via_url.of_type("AWS::Lambda::Url").values()
    assert url["Properties"]["AuthType"] == "NONE"
    assert ref(url["Properties"]["TargetFunctionArn"]) == ingress
    public = [
        p["Properties"]
        for p in via_url.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "*"
    ]
    assert all(ref(p["FunctionName"]) == ingress for p in public)
    by_action = {p["Action"]: p for p in public}
    assert set(by_action) == {"lambda:InvokeFunctionUrl", "lambda:InvokeFunction"}
    assert by_action["lambda:InvokeFunctionUrl"]["FunctionUrlAuthType"] == "NONE"
    # without this one, a URL created since October 2025 answers 403; with it, only the URL invokes
    assert by_action["lambda:InvokeFunction"]["InvokedViaFunctionUrl"] is True


def test_the_webhook_outputs_name_the_function_url(via_url: Synthesized) -> None:
    (url_id,) = via_url.of_type("AWS::Lambda::Url")
    base = {"Fn::GetAtt": [url_id, "FunctionUrl"]}
    assert via_url.outputs["WebhookUrl"]["Value"] == {"Fn::Join": ["", [base, "webhooks/"]]}
    for spec in CATALOG:
        if not spec.local_only and spec.webhook:  # (e-mail comes through SES: no webhook URL)
            value = via_url.outputs[webhook_output_key(spec.name)]["Value"]
            assert value == {"Fn::Join": ["", [base, f"webhooks/{spec.name}"]]}
    named = via_url.outputs[webhook_output_key("telegram", "coder")]["Value"]
    assert named == {"Fn::Join": ["", [base, "p/coder/webhooks/telegram"]]}


def test_only_the_session_api_is_left_on_the_http_api(via_url: Synthesized) -> None:
    routes = {r["Properties"]["RouteKey"] for r in via_url.of_type("AWS::ApiGatewayV2::Route").values()}
    assert routes == {"POST /api/sessions", "POST /p/coder/api/sessions"}
    functions = functions_by_name(via_url)
    targets = {
        ref(i["Properties"]["IntegrationUri"]) for i in via_url.of_type("AWS::ApiGatewayV2::Integration").values()
    }
    assert targets == {functions["session_api"][0]}
    assert "execute-api" in json.dumps(via_url.outputs["SessionApiUrl"]["Value"])


def test_cdk_nag_accepts_the_public_url(via_url: Synthesized) -> None:
    assert via_url.nag_violations == []


def test_the_default_endpoint_has_no_function_url(synthesized: Synthesized) -> None:
    assert synthesized.of_type("AWS::Lambda::Url") == {}
    assert not [
        p for p in synthesized.of_type("AWS::Lambda::Permission").values() if p["Properties"]["Principal"] == "*"
    ]


def test_an_unknown_endpoint_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigError, match="function_url"):
        load_settings(env={}, config={"ingress": {"endpoint": "alb"}})


@pytest.mark.parametrize(("region", "warned"), [("eu-central-2", True), ("eu-central-1", False)])
def test_a_region_without_function_urls_is_warned_of_at_synth(region: str, warned: bool) -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk.assertions import Annotations, Match

    from infra.capabilities.api import WebhookApi

    app = cdk.App()
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(account="123456789012", region=region))
    handler = lambda_.Function(
        stack,
        "Ingress",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="h.h",
        code=lambda_.Code.from_inline("def h(e, c): pass"),
    )
    WebhookApi(stack, "Webhooks", handler=handler, api_name="probe", platforms=(), endpoint="function_url")
    found = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("function URLs were not offered"))
    assert bool(found) is warned
