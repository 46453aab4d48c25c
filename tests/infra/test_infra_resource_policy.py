"""A function's resource policy must fit Lambda's 20 KB, which moto does not enforce: every
`AWS::Lambda::Permission` on a function is a statement in it, and a deploy whose policy outgrows
the limit fails half-way. The largest valid configuration serves every platform in the deployment
and in as many named profiles as today's 4 KB function environments allow."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_gateway.settings import load_settings
from tests.infra.test_infra_stack import functions_by_name, ref

pytestmark = pytest.mark.infra

POLICY_LIMIT_BYTES = 20 * 1024
# The most named profiles that fit the functions' 4 KB environments with every platform on (six
# do not: tests/infra/test_infra_profiles.py checks that limit).
NAMED_PROFILES = 5
# What CloudFormation resolves at deploy time, at its longest.
LONGEST = {
    "AWS::Partition": "aws-us-gov",
    "AWS::Region": "ap-southeast-5",
    "AWS::AccountId": "123456789012",
    "AWS::StackName": "HermesGateway-dev",
}
API_ID = "a1b2c3d4e5"  # an HTTP API's id is 10 characters
FUNCTION_NAME_BYTES = 64  # a generated function name: the stack's, the logical id's, a suffix, cut at 64
STATEMENT_ID_BYTES = 100  # a permission's statement id: `<stack>-<logical id>-<suffix>`, at most 100


def resolve(value: Any, resources: dict[str, Any]) -> str:
    """A template value with every reference replaced by its longest plausible deploy-time value."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        name = value["Ref"]
        if name in LONGEST:
            return LONGEST[name]
        if resources[name]["Type"] == "AWS::ApiGatewayV2::Api":
            return API_ID
        raise AssertionError(f"no deploy-time value for Ref {name}")
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(resolve(part, resources) for part in parts)
    if "Fn::GetAtt" in value and resources[value["Fn::GetAtt"][0]]["Type"] == "AWS::Events::Rule":
        # an EventBridge rule's ARN (e-mail's bounces), its generated name at its longest (64)
        return (
            f"arn:{LONGEST['AWS::Partition']}:events:{LONGEST['AWS::Region']}:{LONGEST['AWS::AccountId']}"
            f":rule/{'r' * 64}"
        )
    raise AssertionError(f"unexpected template value {value}")


def function_arn() -> str:
    return (
        f"arn:{LONGEST['AWS::Partition']}:lambda:{LONGEST['AWS::Region']}:{LONGEST['AWS::AccountId']}"
        f":function:{'f' * FUNCTION_NAME_BYTES}"
    )


def resource_policy_bytes(resources: dict[str, Any], function_logical_id: str) -> tuple[int, int]:
    """The function's resource policy as Lambda stores it (compact JSON), and its statement count."""
    statements = []
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::Lambda::Permission":
            continue
        props = resource["Properties"]
        if ref(props["FunctionName"]) != function_logical_id:
            continue
        statement: dict[str, Any] = {
            "Sid": f"{LONGEST['AWS::StackName']}-{logical_id}-ABCDEFGHIJKL"[:STATEMENT_ID_BYTES],
            "Effect": "Allow",
            "Principal": {"Service": props["Principal"]},
            "Action": props["Action"],
            "Resource": function_arn(),
        }
        condition: dict[str, Any] = {}
        if "SourceArn" in props:
            condition["ArnLike"] = {"AWS:SourceArn": resolve(props["SourceArn"], resources)}
        if "SourceAccount" in props:  # (SES's receipt rule: its account and its rule's ARN)
            condition["StringEquals"] = {"AWS:SourceAccount": resolve(props["SourceAccount"], resources)}
        if condition:
            statement["Condition"] = condition
        statements.append(statement)
    policy = {"Version": "2012-10-17", "Id": "default", "Statement": statements}
    return len(json.dumps(policy, separators=(",", ":")).encode()), len(statements)


@pytest.fixture(scope="module")
def largest() -> dict[str, Any]:
    from aws_cdk.assertions import Template

    from infra.app import SKIP_BUNDLING, build_app
    from tests.infra.conftest import ENABLED, PROFILE_ENABLED

    config = {
        "platforms": ENABLED,
        "profiles": {f"bot{i}": {"platforms": PROFILE_ENABLED} for i in range(NAMED_PROFILES)},
    }
    _app, stack = build_app(load_settings(env={}, config=config), context=SKIP_BUNDLING)
    resources: dict[str, Any] = Template.from_stack(stack).to_json()["Resources"]
    return resources


def test_the_ingress_resource_policy_fits_with_every_platform_and_named_profiles(largest: dict[str, Any]) -> None:
    # Given every platform served by the deployment and by five named profiles
    routes = [r for r in largest.values() if r["Type"] == "AWS::ApiGatewayV2::Route"]
    assert len(routes) > 100
    ingress = next(
        logical_id
        for logical_id, r in largest.items()
        if r["Type"] == "AWS::Lambda::Function"
        and r["Properties"]["Environment"]["Variables"]["HERMES_FUNCTION"] == "ingress"
    )
    # When the ingress function's resource policy is measured
    size, statements = resource_policy_bytes(largest, ingress)
    # Then it fits Lambda's limit, whatever the number of routes
    assert statements >= 1
    assert size <= POLICY_LIMIT_BYTES, f"{statements} statements, {size} bytes"


def test_one_api_wide_permission_lets_api_gateway_invoke_the_ingress(largest: dict[str, Any]) -> None:
    permissions = [r["Properties"] for r in largest.values() if r["Type"] == "AWS::Lambda::Permission"]
    by_target: dict[str, list[str]] = {}
    for props in permissions:
        if props["Principal"] != "apigateway.amazonaws.com":  # (e-mail's: SES and EventBridge, their own tests)
            assert props["Principal"] in ("ses.amazonaws.com", "events.amazonaws.com")
            continue
        by_target.setdefault(ref(props["FunctionName"]), []).append(resolve(props["SourceArn"], largest))
    (ingress_arns,) = [arns for target, arns in by_target.items() if target.startswith("Functionsingress")]
    # this API only, any stage, method and route: the routes themselves decide what reaches ingress
    assert ingress_arns == [f"arn:aws-us-gov:execute-api:ap-southeast-5:123456789012:{API_ID}/*/*/*"]


def test_every_function_resource_policy_fits_in_the_default_stack(synthesized: Any) -> None:
    for name, (logical_id, _) in functions_by_name(synthesized).items():
        size, _ = resource_policy_bytes(synthesized.resources, logical_id)
        assert size <= POLICY_LIMIT_BYTES, name
