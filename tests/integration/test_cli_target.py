"""The CLI finds a deployed stage's tables through the stack's outputs (moto CloudFormation)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from hermes_cli.target import use_deployed
from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import stack_name, table_output_key
from hermes_gateway.resources import ACCESS

pytestmark = pytest.mark.integration


def test_use_deployed_reads_the_table_names_from_the_stack_outputs(aws: Any) -> None:
    template = {
        "Resources": {"Topic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {table_output_key("access"): {"Value": "HermesGateway-prod-AccessTable-ABC"}},
    }
    boto3.client("cloudformation").create_stack(StackName=stack_name("prod"), TemplateBody=json.dumps(template))
    assert use_deployed("prod").table("access") == "HermesGateway-prod-AccessTable-ABC"
    assert table_output_key(ACCESS.name) == "AccessTableName"


def test_a_missing_stack_is_a_clear_error(aws: Any) -> None:
    with pytest.raises(ConfigError, match="HermesGateway-nope"):
        use_deployed("nope")
