"""SQS queues, one per `QueueSpec`: dead letters nothing consumes (the stack alarms on their depth)."""

from __future__ import annotations

from collections.abc import Iterable

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from hermes_gateway.resources import QueueSpec
from infra.nag import acknowledge


def encrypted_queue(
    scope: Construct,
    construct_id: str,
    *,
    retention_period: Duration | None = None,
) -> sqs.Queue:
    """A queue with the defaults every gateway queue shares: SQS-managed encryption, TLS only."""
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=retention_period,
    )


class MessageQueues(Construct):
    """The gateway's queues by logical name. Each is a dead-letter queue with no consumer (so no
    poller and no idle cost) and an alarm as soon as anything waits in it."""

    def __init__(self, scope: Construct, construct_id: str, *, specs: Iterable[QueueSpec]) -> None:
        super().__init__(scope, construct_id)
        self.specs: dict[str, QueueSpec] = {}
        self.queues: dict[str, sqs.Queue] = {}
        for spec in specs:
            queue = encrypted_queue(self, spec.name, retention_period=Duration.days(spec.retention_days))
            acknowledge(
                queue,
                "SQS3",
                f"The {spec.name} queue is itself a dead-letter queue (resources.QueueSpec): nothing "
                "consumes it, an alarm watches its depth.",
            )
            self.specs[spec.name] = spec
            self.queues[spec.name] = queue
