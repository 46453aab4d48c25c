"""SQS queues, one per `QueueSpec`, each with its own dead-letter queue and an alarm on it."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from hermes_gateway.resources import QueueSpec
from infra.capabilities.alarms import OperationsAlarms


def encrypted_queue(
    scope: Construct,
    construct_id: str,
    *,
    fifo: bool = False,
    retention_period: Duration | None = None,
    visibility_timeout: Duration | None = None,
    dead_letter_queue: sqs.DeadLetterQueue | None = None,
) -> sqs.Queue:
    """A queue with the defaults every gateway queue shares: SQS-managed encryption, TLS only.

    FIFO queues never use content-based deduplication: the producer sets MessageDeduplicationId
    (the platform event id).
    """
    return sqs.Queue(
        scope,
        construct_id,
        fifo=True if fifo else None,
        content_based_deduplication=False if fifo else None,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=retention_period,
        visibility_timeout=visibility_timeout,
        dead_letter_queue=dead_letter_queue,
    )


class MessageQueues(Construct):
    """The gateway's queues by logical name, and their dead-letter queues."""

    def __init__(
        self, scope: Construct, construct_id: str, *, specs: Iterable[QueueSpec], alarms: OperationsAlarms
    ) -> None:
        super().__init__(scope, construct_id)
        self.specs: dict[str, QueueSpec] = {}
        self.queues: dict[str, sqs.Queue] = {}
        self.dead_letter_queues: dict[str, sqs.Queue] = {}
        for spec in specs:
            dead_letters = encrypted_queue(
                self,
                f"{spec.name}-dlq",
                fifo=spec.fifo,
                retention_period=Duration.days(spec.dlq_retention_days),
            )
            queue = encrypted_queue(
                self,
                spec.name,
                fifo=spec.fifo,
                visibility_timeout=Duration.seconds(spec.visibility_timeout_seconds),
                dead_letter_queue=sqs.DeadLetterQueue(queue=dead_letters, max_receive_count=spec.max_receive_count),
            )
            alarms.on_dead_letters(spec.name, dead_letters)
            self.specs[spec.name] = spec
            self.queues[spec.name] = queue
            self.dead_letter_queues[spec.name] = dead_letters
