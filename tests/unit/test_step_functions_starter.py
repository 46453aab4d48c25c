"""adapters/aws.py StepFunctionsStarter.succeeded: DescribeExecution of the execution a start found
already there, by the ARN the state machine's implies (botocore's Stubber: no network)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from hermes_gateway.adapters.aws import StepFunctionsStarter
from hermes_gateway.errors import TransientError

MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:Hermes-turn"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:Hermes-turn:turn-abc"


def stubbed() -> tuple[StepFunctionsStarter, Stubber]:
    starter = StepFunctionsStarter(MACHINE, region="us-east-1")
    client = boto3.client(
        "stepfunctions", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    starter.__dict__["_client"] = client  # the cached property, filled
    return starter, Stubber(client)


def described(status: str) -> dict[str, object]:
    return {"executionArn": EXECUTION, "stateMachineArn": MACHINE, "status": status, "startDate": 0}


@pytest.mark.parametrize(("status", "succeeded"), [("SUCCEEDED", True), ("RUNNING", False), ("FAILED", False)])
def test_only_an_execution_that_succeeded_counts_as_run(status: str, succeeded: bool) -> None:
    starter, stub = stubbed()
    stub.add_response("describe_execution", described(status), {"executionArn": EXECUTION})
    with stub:
        assert starter.succeeded("turn-abc") is succeeded
    stub.assert_no_pending_responses()


def test_an_execution_not_found_did_not_succeed() -> None:
    starter, stub = stubbed()
    stub.add_client_error("describe_execution", "ExecutionDoesNotExist", expected_params={"executionArn": EXECUTION})
    with stub:
        assert starter.succeeded("turn-abc") is False


def test_a_throttled_describe_is_retried_by_the_caller() -> None:
    starter, stub = stubbed()
    stub.add_client_error("describe_execution", "ThrottlingException", http_status_code=400)
    with stub, pytest.raises(TransientError):
        starter.succeeded("turn-abc")
