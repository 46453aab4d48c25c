"""cdk-nag acknowledgments: every one names the exact finding and says why it is acceptable."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations
from constructs import IConstruct

PACK = "AwsSolutions"


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge one AwsSolutions finding (e.g. "L1" or "IAM5[Resource::*]") on scope and its children."""
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{PACK}-{finding}", reason=reason))


def arn_finding(resource: IConstruct, suffix: str) -> str:
    """The IAM5 finding id cdk-nag reports for `<resource ARN><suffix>`, e.g. a table's `/index/*`."""
    cfn = resource.node.default_child
    if not isinstance(cfn, CfnElement):
        raise TypeError(f"{resource.node.path} has no CloudFormation resource")
    return f"IAM5[Resource::<{Stack.of(resource).get_logical_id(cfn)}.Arn>{suffix}]"
