"""AWS adapters for the queue, workflow and idempotency ports (boto3, created lazily)."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from functools import cached_property
from typing import Any

from hermes_gateway.errors import TransientError

_THROTTLES = {"ThrottlingException", "Throttling", "RequestThrottled", "ServiceUnavailable", "InternalError"}


def _is_throttle(exc: Exception) -> bool:
    code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
    return code in _THROTTLES or code.endswith("ThrottlingException")


def group_id_for(session_key: str) -> str:
    """FIFO group per session: ordered within a session, parallel across sessions, no raw ids."""
    return hashlib.sha256(session_key.encode("utf-8")).hexdigest()[:40]


def delivery_group_id(body: dict[str, Any]) -> str | None:
    """FIFO group of a delivery job: its target chat (platform, chat, thread) as one bot reaches it,
    so one chat's replies go out in the order they were queued while other chats' go in parallel;
    no raw ids. The deployment's own bot keeps the group it always had; a named profile's bot is
    a chat of its own."""
    target = body.get("target")
    if not isinstance(target, dict) or not target.get("platform"):
        return None
    chat = [str(target.get(name) or "") for name in ("platform", "chat_id", "thread_id")]
    if target.get("profile"):
        chat.append(str(target["profile"]))
    return group_id_for("delivery|" + json.dumps(chat))


class SqsQueue:
    """Sends JSON bodies to one queue. FIFO queues get a group id and a de-duplication id; for a
    delivery job they default to its target chat's group and its delivery id, so every producer
    (replies, apologies, commands, pushes) is ordered per chat without saying so."""

    def __init__(self, queue_url: str, region: str | None = None) -> None:
        self.url = queue_url
        self.fifo = queue_url.endswith(".fifo")
        self._region = region

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("sqs", region_name=self._region)

    def send(self, body: dict[str, Any], *, group_id: str | None = None, dedup_id: str | None = None) -> str:
        kwargs: dict[str, Any] = {"QueueUrl": self.url, "MessageBody": json.dumps(body, separators=(",", ":"))}
        if self.fifo:
            group_id = group_id or delivery_group_id(body)
            dedup_id = dedup_id or (str(body["delivery_id"]) if body.get("delivery_id") else None)
            if not group_id or not dedup_id:
                raise ValueError("a FIFO queue needs a group id and a de-duplication id")
            kwargs["MessageGroupId"] = group_id
            kwargs["MessageDeduplicationId"] = hashlib.sha256(dedup_id.encode("utf-8")).hexdigest()
        try:
            response = self._client.send_message(**kwargs)
        except Exception as exc:
            if _is_throttle(exc):
                raise TransientError("the queue is throttling") from exc
            raise
        return str(response["MessageId"])

    def send_raw(self, body: str, *, reason: str | None = None, dedup_id: str | None = None) -> str:
        """Send a body as it is (a dead letter keeps the original job byte for byte), with the
        reason it failed as a message attribute. On a FIFO queue `dedup_id` (the failed message's
        id) keeps a redriven job that fails again from being dropped as a duplicate of its first."""
        kwargs: dict[str, Any] = {"QueueUrl": self.url, "MessageBody": body}
        if reason:
            kwargs["MessageAttributes"] = {"reason": {"DataType": "String", "StringValue": reason[:1000]}}
        if self.fifo:
            digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
            dedup = hashlib.sha256(dedup_id.encode("utf-8")).hexdigest() if dedup_id else digest
            kwargs.update(MessageGroupId=digest[:40], MessageDeduplicationId=dedup)
        return str(self._client.send_message(**kwargs)["MessageId"])

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

    def depth(self) -> int:
        attributes = self._client.get_queue_attributes(
            QueueUrl=self.url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes.get("ApproximateNumberOfMessages", 0))

    def delay_retry(self, receipt_handle: str, seconds: int) -> None:
        """Make a failed message visible again sooner (or later) than the queue's timeout."""
        self._client.change_message_visibility(
            QueueUrl=self.url, ReceiptHandle=receipt_handle, VisibilityTimeout=max(0, min(seconds, 43200))
        )


class StepFunctionsStarter:
    """Starts the turn workflow with a deterministic execution name: a repeated start is a no-op."""

    def __init__(self, state_machine_arn: str, region: str | None = None) -> None:
        self.arn = state_machine_arn
        self._region = region

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("stepfunctions", region_name=self._region)

    def is_running(self, name: str) -> bool:
        """Only asked after `start` answered False, which Standard workflows do (Express
        workflows start every request, so their tasks are idempotent on the turn id instead)."""
        execution_arn = self.arn.replace(":stateMachine:", ":execution:", 1) + ":" + name
        try:
            status = self._client.describe_execution(executionArn=execution_arn)["status"]
        except self._client.exceptions.ExecutionDoesNotExist:
            return False
        return bool(status == "RUNNING")

    def start(self, name: str, turn: dict[str, Any]) -> bool:
        """True when this call started the execution, False when it already existed."""
        try:
            self._client.start_execution(stateMachineArn=self.arn, name=name, input=json.dumps(turn))
        except self._client.exceptions.ExecutionAlreadyExists:
            return False
        except Exception as exc:
            if _is_throttle(exc):
                raise TransientError("Step Functions is throttling") from exc
            raise
        return True


class IdempotentEnqueue:
    """Sends an envelope once per `event_id`, behind a Powertools idempotency record.

    Calling it answers True the first time and False for a duplicate (the record exists and
    completed). A concurrent duplicate still in progress raises TransientError: the platform's
    retry will find the record completed, or gone if the first attempt failed.
    """

    def __init__(self, table_name: str, send: Callable[[dict[str, Any]], str], expires_after_seconds: int) -> None:
        from aws_lambda_powertools.utilities.idempotency import (
            DynamoDBPersistenceLayer,
            IdempotencyConfig,
            idempotent_function,
        )

        # The hook runs inside the decorated call on the caller's thread; local mode serves
        # webhooks from several threads, so the flag is per thread.
        self._seen = threading.local()
        self.config = IdempotencyConfig(
            event_key_jmespath="event_id",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=expires_after_seconds,
            hash_function="sha256",
            response_hook=self._on_duplicate,
        )

        @idempotent_function(  # type: ignore[untyped-decorator]
            data_keyword_argument="envelope",
            persistence_store=DynamoDBPersistenceLayer(table_name=table_name),
            config=self.config,
        )
        def send_once(envelope: dict[str, Any]) -> dict[str, str]:
            return {"message_id": send(envelope)}

        self._send_once = send_once

    def _on_duplicate(self, response: Any, idempotent_data: Any) -> Any:
        self._seen.duplicate = True
        return response

    def register_context(self, context: Any) -> None:
        """Lets an in-progress record expire with the invocation that wrote it."""
        self.config.register_lambda_context(context)

    def __call__(self, envelope: dict[str, Any]) -> bool:
        from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyAlreadyInProgressError

        self._seen.duplicate = False
        try:
            self._send_once(envelope=envelope)
        except IdempotencyAlreadyInProgressError:
            raise TransientError("the same event is being enqueued right now") from None
        return not self._seen.duplicate


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
        future = self._publisher.submit(self._publish, name, dict(detail))
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
