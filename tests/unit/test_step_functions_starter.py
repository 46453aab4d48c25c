"""adapters/aws.py StepFunctionsStarter.ended_before: DescribeExecution of the execution a start
found already there, by the ARN the state machine's implies (botocore's Stubber: no network)."""

from __future__ import annotations

from datetime import UTC, datetime

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


STOPPED = 1_700_000_000.0
LEASE = STOPPED + 600  # the lease it is found under was taken ten minutes after it stopped


def described(status: str, stopped: float | None = STOPPED) -> dict[str, object]:
    found: dict[str, object] = {"executionArn": EXECUTION, "stateMachineArn": MACHINE, "status": status}
    found["startDate"] = datetime.fromtimestamp(STOPPED - 5, UTC)
    if stopped is not None:
        found["stopDate"] = datetime.fromtimestamp(stopped, UTC)
    return found


@pytest.mark.parametrize(
    ("found", "ended"),
    [
        (described("SUCCEEDED"), True),
        (described("RUNNING", stopped=None), False),
        (described("FAILED"), False),
        # it stopped after the lease was taken (the turn goes on in a continuation), or so close
        # to it that two clocks cannot tell
        (described("SUCCEEDED", stopped=LEASE + 1), False),
        (described("SUCCEEDED", stopped=LEASE - 0.5), False),
    ],
)
def test_only_an_execution_that_succeeded_before_the_lease_counts_as_run(found: dict[str, object], ended: bool) -> None:
    starter, stub = stubbed()
    stub.add_response("describe_execution", found, {"executionArn": EXECUTION})
    with stub:
        assert starter.ended_before("turn-abc", LEASE) is ended
    stub.assert_no_pending_responses()


def test_an_execution_not_found_did_not_succeed() -> None:
    starter, stub = stubbed()
    stub.add_client_error("describe_execution", "ExecutionDoesNotExist", expected_params={"executionArn": EXECUTION})
    with stub:
        assert starter.ended_before("turn-abc", LEASE) is False


def test_a_throttled_describe_is_retried_by_the_caller() -> None:
    starter, stub = stubbed()
    stub.add_client_error("describe_execution", "ThrottlingException", http_status_code=400)
    with stub, pytest.raises(TransientError):
        starter.ended_before("turn-abc", LEASE)
