"""Every role's policies fit IAM's quotas in the largest valid configuration: ten named profiles
(the documented maximum, each with the longest name), every platform on in each, each with a model
of its own on Bedrock, the `full` observability tier, the longest stage name, deployed in the
longest region name.

IAM counts a policy's characters without whitespace, after CloudFormation has resolved it: the
template's `Fn::Join`s, `Ref`s and `Fn::GetAtt`s are resolved here at their longest (the longest
partition and region, generated names at their longest). The quotas: a role's inline policies
10,240 characters together, a managed policy 6,144, and 10 managed policies on one role. Synth,
cfn-lint and cdk-nag all passed a stack whose agent had one managed policy of 24,138 characters,
and its first deploy failed with `LimitExceeded`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.settings import MAX_PROFILES, load_settings
from tests.infra.conftest import Synthesized, synthesize

pytestmark = pytest.mark.infra

INLINE_QUOTA = 10_240  # a role's inline policies, together
MANAGED_QUOTA = 6_144  # one managed policy
MANAGED_PER_ROLE = 10  # managed policies attached to one role (the default quota)

STAGE = "s" * 20  # the longest stage the settings accept
PARTITION = "aws-us-gov"  # the longest partition name
REGION = "us-isof-south-1"  # the longest region name (15 characters; ap-southeast-* are 14)
ACCOUNT = "123456789012"
URL_SUFFIX = "amazonaws.com.cn"
STACK = f"HermesGateway-{STAGE}"
RANDOM_SUFFIX = 13  # CloudFormation's generated names end in "-" and 12-13 random characters
STREAM_LABEL = "2026-01-01T00:00:00.000"

EVERY_PLATFORM = {spec.name: {"enabled": True} for spec in CATALOG if not spec.local_only}
# e-mail at its longest address (its grants name it), for the deployment's own profile alone
LONGEST_ADDRESS = "a" * 64 + "@" + "b" * 63 + ".example.com"
EVERY_PLATFORM["email"] = {"enabled": True, "address": LONGEST_ADDRESS}
PROFILE_PLATFORMS = {name: value for name, value in EVERY_PLATFORM.items() if name != "email"}


def profile_name(n: int) -> str:
    return f"p{n}".ljust(30, "x")  # the longest name a profile may have: 30 characters


def largest_config() -> dict[str, Any]:
    def bedrock(n: int) -> dict[str, str]:
        return {"name": "bedrock", "model": f"global.anthropic.claude-sonnet-4-5-20250929-v{n}:0"}

    return {
        "stage": STAGE,
        "provider": bedrock(99),
        "platforms": EVERY_PLATFORM,
        "operations": {"observability": "full", "alarm_email": "ops@example.com"},
        "tts": {"provider": "polly"},  # Amazon Polly's grant on the functions that speak
        "profiles": {
            profile_name(n): {"provider": bedrock(n), "platforms": PROFILE_PLATFORMS} for n in range(MAX_PROFILES)
        },
    }


@pytest.fixture(scope="module")
def largest(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return synthesize(load_settings(env={}, config=largest_config()), tmp_path_factory.mktemp("cdk.out"))


# --- resolving the template as CloudFormation would, at the longest -----------------------------

PSEUDO = {"AWS::Partition": PARTITION, "AWS::Region": REGION, "AWS::AccountId": ACCOUNT, "AWS::URLSuffix": URL_SUFFIX}
# A resource type's name property, its longest generated name, and its ARN (`{name}` in it).
NAMES: dict[str, tuple[str, int, str]] = {
    "AWS::DynamoDB::Table": ("TableName", 255, "arn:{p}:dynamodb:{r}:{a}:table/{name}"),
    "AWS::SQS::Queue": ("QueueName", 80, "arn:{p}:sqs:{r}:{a}:{name}"),
    "AWS::Lambda::Function": ("FunctionName", 64, "arn:{p}:lambda:{r}:{a}:function:{name}"),
    "AWS::Logs::LogGroup": ("LogGroupName", 512, "arn:{p}:logs:{r}:{a}:log-group:{name}:*"),
    "AWS::S3::Bucket": ("BucketName", 63, "arn:{p}:s3:::{name}"),
    "AWS::Events::EventBus": ("Name", 256, "arn:{p}:events:{r}:{a}:event-bus/{name}"),
    "AWS::StepFunctions::StateMachine": ("StateMachineName", 80, "arn:{p}:states:{r}:{a}:stateMachine:{name}"),
    "AWS::SNS::Topic": ("TopicName", 256, "arn:{p}:sns:{r}:{a}:{name}"),
    "AWS::KMS::Key": ("", 36, "arn:{p}:kms:{r}:{a}:key/{name}"),
    "AWS::IAM::Role": ("RoleName", 64, "arn:{p}:iam::{a}:role/{name}"),
}


class Resolver:
    def __init__(self, resources: dict[str, Any]) -> None:
        self.resources = resources

    def name(self, logical_id: str) -> str:
        resource = self.resources[logical_id]
        kind = resource["Type"]
        if kind not in NAMES:
            raise AssertionError(f"a policy names a {kind} ({logical_id}): add its ARN to NAMES")
        prop, longest, _ = NAMES[kind]
        given = resource.get("Properties", {}).get(prop) if prop else None
        if given is not None:
            return str(self.resolve(given))
        return "x" * min(longest, len(STACK) + 1 + len(logical_id) + 1 + RANDOM_SUFFIX)

    def arn(self, logical_id: str) -> str:
        kind = self.resources[logical_id]["Type"]
        return NAMES[kind][2].format(p=PARTITION, r=REGION, a=ACCOUNT, name=self.name(logical_id))

    def attribute(self, logical_id: str, attribute: str) -> str:
        if attribute == "Arn":
            return self.arn(logical_id)
        if attribute == "StreamArn":
            return f"{self.arn(logical_id)}/stream/{STREAM_LABEL}"
        raise AssertionError(f"Fn::GetAtt {logical_id}.{attribute}: not resolved here")

    def ref(self, name: str) -> str:
        if name in PSEUDO:
            return PSEUDO[name]
        kind = self.resources[name]["Type"]
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.{URL_SUFFIX}/{ACCOUNT}/{self.name(name)}"
        if kind in ("AWS::StepFunctions::StateMachine", "AWS::SNS::Topic", "AWS::IAM::ManagedPolicy"):
            return self.arn(name) if kind in NAMES else f"arn:{PARTITION}:iam::{ACCOUNT}:policy/{'x' * 128}"
        return self.name(name)

    def sub(self, text: str, variables: dict[str, Any]) -> str:
        def one(found: re.Match[str]) -> str:
            key = found.group(1)
            if key in variables:
                return str(self.resolve(variables[key]))
            if "." in key and key.split(".", 1)[0] not in PSEUDO:
                logical_id, attribute = key.split(".", 1)
                return self.attribute(logical_id, attribute)
            return self.ref(key)

        return re.sub(r"\$\{([^}!]+)\}", one, text)

    def resolve(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.resolve(item) for item in node]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            ((key, value),) = node.items()
            if key == "Ref":
                return self.ref(value)
            if key == "Fn::GetAtt":
                logical_id, attribute = value if isinstance(value, list) else value.split(".", 1)
                return self.attribute(logical_id, attribute)
            if key == "Fn::Join":
                separator, parts = value
                return separator.join(str(self.resolve(part)) for part in parts)
            if key == "Fn::Sub":
                text, variables = (value, {}) if isinstance(value, str) else value
                return self.sub(text, variables)
            if key.startswith("Fn::"):
                raise AssertionError(f"{key} in a policy: not resolved here")
        return {key: self.resolve(value) for key, value in node.items()}


def size(document: Any) -> int:
    """A policy's characters as IAM counts them: its JSON without whitespace."""
    return len(json.dumps(document, separators=(",", ":"), ensure_ascii=False))


def role_policies(synth: Synthesized) -> dict[str, dict[str, list[int]]]:
    """Role -> {"inline": [sizes], "managed": [sizes]}, resolved at their longest."""
    resolver = Resolver(synth.resources)
    found: dict[str, dict[str, list[int]]] = {}
    for logical_id, role in synth.of_type("AWS::IAM::Role").items():
        own = [size(resolver.resolve(p["PolicyDocument"])) for p in role["Properties"].get("Policies", [])]
        found[logical_id] = {"inline": own, "managed": []}
    for kind, where in (("AWS::IAM::Policy", "inline"), ("AWS::IAM::ManagedPolicy", "managed")):
        for policy in synth.of_type(kind).values():
            props = policy["Properties"]
            for role in props.get("Roles", []):
                found[role["Ref"]][where].append(size(resolver.resolve(props["PolicyDocument"])))
    return found


def test_every_role_fits_iams_quotas_in_the_largest_configuration(largest: Synthesized) -> None:
    assert len(largest_config()["profiles"]) == MAX_PROFILES
    assert largest.nag_violations == []  # and cdk-nag passes it, every acknowledgment with its reason
    policies = role_policies(largest)
    assert policies, "the stack has roles"
    too_big = {
        role: sizes
        for role, sizes in policies.items()
        if sum(sizes["inline"]) > INLINE_QUOTA
        or any(s > MANAGED_QUOTA for s in sizes["managed"])
        or len(sizes["managed"]) > MANAGED_PER_ROLE
    }
    assert not too_big, json.dumps(too_big)


def test_the_resolver_counts_what_iam_counts(tmp_path: Path) -> None:
    # A Join of a pseudo parameter and a table's ARN, resolved at the longest and counted without spaces
    resources = {"T": {"Type": "AWS::DynamoDB::Table", "Properties": {}}}
    document = {
        "Resource": {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":x"]]},
        "T": {"Fn::GetAtt": ["T", "Arn"]},
    }
    resolved = Resolver(resources).resolve(document)
    assert resolved["Resource"] == "arn:aws-us-gov:x"
    assert resolved["T"] == f"arn:aws-us-gov:dynamodb:{REGION}:{ACCOUNT}:table/" + "x" * (
        len(STACK) + 3 + RANDOM_SUFFIX
    )
    assert size({"a": [1, 2]}) == len('{"a":[1,2]}')
