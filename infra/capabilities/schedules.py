"""EventBridge Scheduler schedules, one per `ScheduleSpec`, invoking the named function."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aws_cdk import Aws, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct

from hermes_gateway.resources import ScheduleSpec
from infra.capabilities.queues import encrypted_queue
from infra.nag import acknowledge, arn_finding

RETRY_ATTEMPTS = 2
DEAD_LETTER_RETENTION = Duration.days(14)


class Schedules(Construct):
    """The schedules, sharing one dead-letter queue for invocations Scheduler could not deliver."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        specs: Iterable[ScheduleSpec],
        functions: Mapping[str, lambda_.IFunction],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = encrypted_queue(self, "dead-letters", retention_period=DEAD_LETTER_RETENTION)
        acknowledge(
            self.dead_letter_queue,
            "SQS3",
            "This queue is itself a dead-letter queue: the one of the Scheduler schedules below "
            "(set on the schedule target, which cdk-nag does not follow).",
        )
        self.role = self._scheduler_role()
        self.schedules: dict[str, scheduler.Schedule] = {}
        for spec in specs:
            if spec.function not in functions:
                raise ValueError(f"schedule {spec.name}: unknown function {spec.function!r}")
            function = functions[spec.function]
            self.schedules[spec.name] = scheduler.Schedule(
                self,
                spec.name,
                description=spec.description,
                schedule=scheduler.ScheduleExpression.rate(Duration.minutes(spec.rate_minutes)),
                target=targets.LambdaInvoke(
                    function,
                    retry_attempts=RETRY_ATTEMPTS,
                    # A tick older than its interval is superseded by the next one.
                    max_event_age=Duration.seconds(max(60, spec.rate_minutes * 60)),
                    dead_letter_queue=self.dead_letter_queue,
                    role=self.role,
                ),
            )
            acknowledge(
                self.role,
                arn_finding(function, ":*"),
                f"Added by the LambdaInvoke target's grant: invoke of the {spec.function} function and its "
                "versions/aliases only.",
            )

    def _scheduler_role(self) -> iam.Role:
        """The role Scheduler assumes, trusted only for this account's default schedule group."""
        return iam.Role(
            self,
            "InvokeRole",
            description="EventBridge Scheduler: invoke the scheduled Hermes Gateway functions",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com",
                conditions={
                    "StringEquals": {
                        "aws:SourceAccount": Aws.ACCOUNT_ID,
                        "aws:SourceArn": Stack.of(self).format_arn(
                            service="scheduler", resource="schedule-group", resource_name="default"
                        ),
                    }
                },
            ),
        )
