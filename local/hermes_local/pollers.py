"""Queue pollers that play Lambda's SQS event source mapping in local mode.

moto's own mapping runs the consumer inside SendMessage and never re-polls a failed message, so
local mode polls instead: a batch goes to the handler as an SQS event, the records it reports as
failed (`batchItemFailures`) stay in the queue and come back after their visibility timeout, and
moto moves a message to the DLQ after the queue's maxReceiveCount, as SQS does.

FIFO queues (inbound, delivery) are received by SQS's rule (`honour_fifo_groups`): while a message
of a group is in flight, nothing else of that group is handed out; the replies to a chat and the
messages of a session stay in order when one of them is retried.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Protocol

import boto3

from hermes_gateway.resources import FunctionSpec
from hermes_local.aws import honour_fifo_groups


class Invoker(Protocol):
    region: str

    def invoke(self, name: str, event: dict[str, Any]) -> Any: ...


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


def process_batch(
    functions: Invoker, spec: FunctionSpec, sqs: Any, queue_url: str, queue_arn: str, messages: list[dict[str, Any]]
) -> int:
    """Invoke the consumer with one batch; delete what succeeded. Returns how many succeeded."""
    try:
        result = functions.invoke(spec.name, sqs_event(messages, queue_arn, functions.region)) or {}
        failed = {item["itemIdentifier"] for item in result.get("batchItemFailures", [])}
    except Exception as exc:  # noqa: BLE001 - a crashed invocation fails the whole batch, as in Lambda
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        print(
            f"[local] {spec.name}: batch failed, will be retried: {type(exc).__name__}: {first_line}", file=sys.stderr
        )
        failed = {m["MessageId"] for m in messages}
    done = [m for m in messages if m["MessageId"] not in failed]
    if done:
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done)],
        )
    return len(done)


def poll_queue(
    functions: Invoker, spec: FunctionSpec, queue_url: str, stop: threading.Event, wait_seconds: int = 1
) -> None:
    if queue_url.endswith(".fifo"):
        honour_fifo_groups()
    sqs = boto3.client("sqs", region_name=functions.region)
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    while not stop.is_set():
        try:
            messages = sqs.receive_message(
                QueueUrl=queue_url,
                MaxNumberOfMessages=min(spec.batch_size, 10),
                WaitTimeSeconds=wait_seconds,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        except Exception as exc:  # noqa: BLE001 - the server is stopping, or a passing fault
            if stop.is_set():
                return
            print(f"[local] polling {spec.consumes} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            stop.wait(1)
            continue
        if messages:
            process_batch(functions, spec, sqs, queue_url, queue_arn, messages)
        elif wait_seconds == 0:
            stop.wait(0.05)  # short polling: do not spin
