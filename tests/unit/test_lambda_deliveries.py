"""The delivery adapters (adapters.aws): an asynchronous invoke per job; a turn's delivery waited
for, tried again while it fails, and handed to the asynchronous path when the platform stays down."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from hermes_gateway.adapters.aws import LambdaDeliveries, WaitingDeliveries
from hermes_gateway.errors import TransientError

ARN = "arn:aws:lambda:us-east-1:123456789012:function:hermes-dev-delivery"
JOB = {"delivery_id": "turn-1", "target": {"platform": "telegram", "chat_id": "99"}, "text": "hi"}


class StubLambda:
    """boto3's Lambda client as the adapters use it: each answer in turn (an error to raise, or a
    function error's type), then successes."""

    def __init__(self, *answers: Any) -> None:
        self.calls: list[dict[str, Any]] = []
        self.answers = list(answers)

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append({**kwargs, "Payload": json.loads(kwargs["Payload"])})
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, str):
            error = json.dumps({"errorType": answer, "errorMessage": "it failed"}).encode()
            return {"StatusCode": 200, "FunctionError": "Unhandled", "Payload": io.BytesIO(error)}
        return {"StatusCode": 202, "ResponseMetadata": {"RequestId": "req-1"}, "Payload": io.BytesIO(b"{}")}


def throttled() -> ClientError:
    return ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}}, "Invoke")


def with_client(adapter: LambdaDeliveries, client: StubLambda) -> LambdaDeliveries:
    adapter.__dict__["_client"] = client  # the cached boto3 client
    return adapter


def test_a_job_is_one_asynchronous_invoke_with_the_job_as_the_event() -> None:
    client = StubLambda()
    assert with_client(LambdaDeliveries(ARN), client).send(JOB) == "req-1"
    (call,) = client.calls
    assert (call["FunctionName"], call["InvocationType"], call["Payload"]) == (ARN, "Event", JOB)


def test_a_throttled_invoke_is_a_transient_error_and_any_other_error_is_raised() -> None:
    with pytest.raises(TransientError):
        with_client(LambdaDeliveries(ARN), StubLambda(throttled())).send(JOB)
    denied = ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "Invoke")
    with pytest.raises(ClientError):
        with_client(LambdaDeliveries(ARN), StubLambda(denied)).send(JOB)


def waiting(client: StubLambda, attempt_seconds: float = 0.0) -> tuple[WaitingDeliveries, list[float]]:
    """The adapter on a clock that moves with its pauses and `attempt_seconds` per try."""
    clock, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    def invoke(**kwargs: Any) -> dict[str, Any]:
        clock[0] += attempt_seconds
        return real(**kwargs)

    real = client.invoke
    client.invoke = invoke  # type: ignore[method-assign]
    adapter = WaitingDeliveries(ARN, sleep=sleep, clock=lambda: clock[0])
    with_client(adapter, client)
    return adapter, slept


def test_a_turns_delivery_is_invoked_and_waited_for_as_a_list() -> None:
    client = StubLambda()
    adapter, slept = waiting(client)
    assert adapter.send(JOB) == "turn-1"
    (call,) = client.calls
    assert (call["InvocationType"], call["Payload"]) == ("RequestResponse", {"deliveries": [JOB]})
    assert slept == []


def test_a_failed_delivery_is_tried_again_with_backoff_until_it_goes_out() -> None:
    client = StubLambda("TransientError", throttled(), "RateLimited")
    adapter, slept = waiting(client)
    adapter.send(JOB)
    assert [c["InvocationType"] for c in client.calls] == ["RequestResponse"] * 4
    assert slept == [0.5, 1.0, 2.0]


def test_after_its_tries_the_job_is_handed_to_lambdas_asynchronous_retries() -> None:
    client = StubLambda(*(["TransientError"] * 10))
    adapter, slept = waiting(client)
    adapter.send(JOB)  # the turn goes on; Lambda retries the job, then dead-letters it
    kinds = [c["InvocationType"] for c in client.calls]
    assert kinds == ["RequestResponse"] * 5 + ["Event"]
    assert client.calls[-1]["Payload"] == JOB and slept == [0.5, 1.0, 2.0, 2.0]


def test_slow_tries_stop_before_the_turn_tasks_time_limit() -> None:
    # Each try takes 3 s (a platform timing out): no new try starts past the patience (8 s)
    client = StubLambda(*(["TransientError"] * 10))
    adapter, slept = waiting(client, attempt_seconds=3.0)
    adapter.send(JOB)
    kinds = [c["InvocationType"] for c in client.calls]
    assert kinds == ["RequestResponse"] * 2 + ["Event"] and slept == [0.5]
