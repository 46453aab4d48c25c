"""AWS adapters for the dead letters, deliveries, the workflow and the event bus (boto3, created lazily)."""

from __future__ import annotations

import contextvars
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import Any

from hermes_gateway.errors import TransientError

# Throttling and the services' own 5xx answers, as each service names them: worth a retry.
_THROTTLES = {
    "ThrottlingException",
    "Throttling",
    "RequestThrottled",
    "ServiceUnavailable",
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ServiceException",
}


def is_throttle(exc: Exception) -> bool:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
    return code in _THROTTLES or code.endswith("ThrottlingException")


@contextmanager
def throttling_is_transient(what: str) -> Iterator[None]:
    """A throttled AWS call in this block raises TransientError(`what`), so the caller's retry
    policy applies; any other error goes on as it was."""
    try:
        yield
    except Exception as exc:
        if is_throttle(exc):
            raise TransientError(what) from exc
        raise


def client_error(exc: Any) -> tuple[str, int, str]:
    """A botocore ClientError's code, HTTP status (0: none) and message."""
    error = exc.response.get("Error", {})
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return str(error.get("Code", "")), status, str(error.get("Message", ""))


def group_id_for(session_key: str) -> str:
    """The inbox partition of a session: its messages in order, sessions in parallel, no raw ids."""
    return hashlib.sha256(session_key.encode("utf-8")).hexdigest()[:40]


class SqsQueue:
    """One standard queue: the dead letters. JSON bodies in; an operator's tools read them back."""

    def __init__(self, queue_url: str, region: str | None = None) -> None:
        self.url = queue_url
        self._region = region

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("sqs", region_name=self._region)

    def send(self, body: dict[str, Any]) -> str:
        with throttling_is_transient("the queue is throttling"):
            response = self._client.send_message(QueueUrl=self.url, MessageBody=json.dumps(body, separators=(",", ":")))
        return str(response["MessageId"])

    def receive(
        self, max_messages: int = 10, wait_seconds: int = 0, visibility_seconds: int = 60
    ) -> list[dict[str, Any]]:
        response = self._client.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=max(1, min(max_messages, 10)),
            WaitTimeSeconds=wait_seconds,
            VisibilityTimeout=visibility_seconds,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
        )
        return list(response.get("Messages", []))

    def delete(self, receipt_handle: str) -> None:
        self._client.delete_message(QueueUrl=self.url, ReceiptHandle=receipt_handle)

    def release(self, receipt_handle: str) -> None:
        """Make a received message visible again at once."""
        self._client.change_message_visibility(QueueUrl=self.url, ReceiptHandle=receipt_handle, VisibilityTimeout=0)

    def depth(self) -> int:
        attributes = self._client.get_queue_attributes(
            QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes.get("ApproximateNumberOfMessages", 0))


class LambdaDeliveries:
    """Delivery jobs, each an asynchronous invoke of the delivery function (InvocationType=Event;
    the job is the event): Lambda keeps it, runs it, retries a failed run twice and then puts it on
    the dead letters. The job's delivery id makes a repeated job send nothing twice (the outbox)."""

    def __init__(self, function_arn: str, region: str | None = None) -> None:
        self.function_arn = function_arn
        self._region = region

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("lambda", region_name=self._region)

    def send(self, body: dict[str, Any]) -> str:
        response = self._invoke(body, "Event")
        return str(response.get("ResponseMetadata", {}).get("RequestId", ""))

    def _invoke(self, payload: dict[str, Any], invocation_type: str) -> dict[str, Any]:
        with throttling_is_transient("Lambda is throttling the delivery function's invokes"):
            response: dict[str, Any] = self._client.invoke(
                FunctionName=self.function_arn,
                InvocationType=invocation_type,
                Payload=json.dumps(payload, separators=(",", ":")).encode("utf-8"),
            )
        return response


class WaitingDeliveries(LambdaDeliveries):
    """A turn's deliveries, sent before the turn goes on: the delivery function is invoked and
    waited for (`{"deliveries": [job]}`), so a session's replies reach its chat in the order its
    turns answered (one turn at a time), whatever a platform's retries take. A failed run is tried
    again, backing off (a platform's hiccup, another instance still holding the chunk's claim), up
    to five times, while a try (as long as the last) still ends within `patience_seconds`: the turn
    task that waits has a time limit of its own (20 s), and a task that times out fails its turn. A platform down for
    longer gets the job handed to the asynchronous path (Lambda's retries, then the dead letters)
    rather than failing the turn; only then may a later reply overtake it."""

    PAUSES = (0.5, 1.0, 2.0, 2.0)  # before the second to the fifth try

    def __init__(
        self,
        function_arn: str,
        region: str | None = None,
        *,
        patience_seconds: float = 8.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(function_arn, region)
        self.patience_seconds = patience_seconds
        self._sleep = sleep
        self._clock = clock

    def send(self, body: dict[str, Any]) -> str:
        from hermes_gateway.observability import logger

        started = self._clock()
        failure = self._attempt(body)
        took = self._clock() - started
        for pause in self.PAUSES:
            # another try only if it can end (taking as long as the last) within the patience
            if failure is None or self._clock() + pause + took > started + self.patience_seconds:
                break
            self._sleep(pause)
            begun = self._clock()
            failure = self._attempt(body)
            took = self._clock() - begun
        if failure is None:
            return str(body.get("delivery_id", ""))
        logger.warning("delivery still failing; handed to the asynchronous retries", extra={"error": failure})
        return super().send(body)

    def _attempt(self, body: dict[str, Any]) -> str | None:
        """None when the job was delivered (or settled: gone, unknown, dead-lettered); else the error."""
        try:
            response = self._invoke({"deliveries": [body]}, "RequestResponse")
        except TransientError:
            return "TransientError"
        if not response.get("FunctionError"):
            return None
        try:
            error = json.loads(response["Payload"].read() or b"{}")
        except ValueError:
            error = {}
        return str(error.get("errorType") or response["FunctionError"])[:100]


class StepFunctionsStarter:
    """Starts the turn workflow with a deterministic execution name: a repeated start is a no-op."""

    def __init__(self, state_machine_arn: str, region: str | None = None) -> None:
        self.arn = state_machine_arn
        self._region = region

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("stepfunctions", region_name=self._region)

    def start(self, name: str, state: Mapping[str, Any]) -> bool:
        """True when this call started the execution, False when it already existed (Standard
        workflows say so; Express ones start every request, so their tasks are idempotent on the
        turn instead)."""
        try:
            with throttling_is_transient("Step Functions is throttling"):
                self._client.start_execution(stateMachineArn=self.arn, name=name, input=json.dumps(state))
        except self._client.exceptions.ExecutionAlreadyExists:
            return False
        return True

    # A stop this close to the lease's start is not "before" it (the two clocks are not one)
    CLOCK_MARGIN_SECONDS = 1.0

    def ended_before(self, name: str, at: float) -> bool:
        """DescribeExecution of the execution `name` (a Standard workflow's: an Express one never
        answers a start with False, so nothing asks). False when it is not found."""
        arn = self.arn.replace(":stateMachine:", ":execution:", 1) + ":" + name
        try:
            with throttling_is_transient("Step Functions is throttling"):
                described = self._client.describe_execution(executionArn=arn)
        except self._client.exceptions.ExecutionDoesNotExist:
            return False
        stopped = described.get("stopDate")
        if described.get("status") != "SUCCEEDED" or stopped is None:
            return False
        return bool(stopped.timestamp() + self.CLOCK_MARGIN_SECONDS < at)


class EventBridgeEvents:
    """Lifecycle events (BEHAVIOUR §8) on the deployment's EventBridge bus: `source` is the
    gateway's, `detail-type` the event name, `detail` the payload (bounded codes and hashed ids,
    never secrets or message text). Publishing never blocks a message: a failure is logged."""

    def __init__(
        self,
        bus_name: str,
        source: str,
        region: str | None = None,
        keep: int = 0,
        *,
        background: bool = False,
        only: tuple[str, ...] = ("*",),
    ) -> None:
        import collections

        self.bus_name = bus_name
        self.source = source
        self._region = region
        # Local mode shows what it published (GET /local/events); deployed functions keep nothing.
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep or None)
        self._keep = keep > 0
        # In a function, events are published beside the work (one thread) and the handler waits
        # for them before it returns (`flush`): they cost no time on the message's path.
        self._background = background
        # The events put on the bus (`hooks.bus_events`): each costs $1 per million; the others
        # still reach the in-process hooks.
        self._only = only
        self._pending: list[Any] = []
        self._pending_lock = threading.Lock()

    @cached_property
    def _publisher(self) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="events")

    def flush(self, timeout: float = 5.0) -> None:
        """Wait for the events emitted so far (a function calls this before it returns: Lambda
        freezes what is still running after that)."""
        from concurrent.futures import wait

        with self._pending_lock:
            pending, self._pending = self._pending, []
        if pending:
            wait(pending, timeout=timeout)

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("events", region_name=self._region)

    def emit(self, name: str, detail: dict[str, Any]) -> None:
        from hermes_gateway.domain.events import event_matches

        if not event_matches(name, self._only):
            return
        if not self._background:
            self._publish(name, detail)
            return
        # in a copy of this thread's context: its log lines carry the message's keys
        future = self._publisher.submit(contextvars.copy_context().run, self._publish, name, dict(detail))
        with self._pending_lock:
            self._pending = [f for f in self._pending if not f.done()] + [future]

    def _publish(self, name: str, detail: dict[str, Any]) -> None:
        from hermes_gateway.observability import logger

        entry = {"Source": self.source, "DetailType": name, "Detail": json.dumps(detail), "EventBusName": self.bus_name}
        try:
            response = self._client.put_events(Entries=[entry])
            failed = response.get("FailedEntryCount", 0)
        except Exception as exc:  # noqa: BLE001 - an event must never fail the message it describes
            logger.warning("lifecycle event not published", extra={"event": name, "error": type(exc).__name__})
            return
        if failed:
            logger.warning("lifecycle event refused by the bus", extra={"event": name})
            return
        logger.info("lifecycle event", extra={"event": name, "detail": detail})
        if self._keep:
            self.recent.append({"event": name, "detail": detail})
