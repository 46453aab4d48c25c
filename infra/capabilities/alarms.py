"""Operations alarms, as the observability tier asks (infra/capabilities/observability.py).

Minimal: two alarms in all. One on the ERROR lines the functions log (every log group has a
metric filter feeding one metric, with no default value: no data point, so no bill, while nothing
fails), one on every dead-letter queue's depth. Standard and full: an alarm per function (errors
and throttles), per dead-letter queue and on failed executions. Every alarm notifies the topic,
where there is one.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import ArnFormat, Aws, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as sns_subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from infra.capabilities.observability import ObservabilityPlan
from infra.nag import acknowledge

_CLOUDWATCH = iam.ServicePrincipal("cloudwatch.amazonaws.com")
LOGGED_ERRORS_METRIC = "LoggedErrors"
# Powertools' levels (logger.error, logger.exception) and the Python runtime's record of an
# unhandled exception; a timeout or an out-of-memory kill is only in Lambda's own REPORT line,
# which minimal does not keep: those surface as retries and, in the end, dead letters.
LOGGED_ERRORS_PATTERN = '{ ($.level = "ERROR") || ($.level = "CRITICAL") }'


def logged_errors_namespace(stage: str) -> str:
    """Per stage: two stages in one account must not share the metric their alarm watches."""
    return f"HermesGateway/{stage}"


class OperationsAlarms(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, plan: ObservabilityPlan, stage: str) -> None:
        super().__init__(scope, construct_id)
        self.plan = plan
        self.stage = stage
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        self.key: kms.Key | None = self._key() if plan.alarm_topic and plan.topic_key else None
        self.topic: sns.Topic | None = self._topic() if plan.alarm_topic else None
        if self.topic is not None and plan.alarm_email:
            # AWS e-mails the address a confirmation link first.
            self.topic.add_subscription(sns_subscriptions.EmailSubscription(plan.alarm_email))

    def watch(
        self,
        *,
        functions: Mapping[str, lambda_.IFunction],
        log_groups: Mapping[str, logs.ILogGroup],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        state_machines: Mapping[str, sfn.IStateMachine],
    ) -> None:
        """Alarm on everything that can fail: per resource, or (minimal) in two alarms."""
        if not self.plan.per_resource_alarms:
            self.on_logged_errors(log_groups)
            self.on_any_dead_letters(dead_letter_queues)
            return
        for name, function in functions.items():
            self.on_errors(name, function)
            self.on_throttles(name, function)
        for name, queue in dead_letter_queues.items():
            self.on_dead_letters(name, queue)
        for name, machine in state_machines.items():
            self.on_failed_executions(name, machine)

    def on_logged_errors(self, log_groups: Mapping[str, logs.ILogGroup]) -> cloudwatch.Alarm:
        """One metric for every function's ERROR lines: the filters of several log groups may feed
        one metric, and one metric is one alarm metric (a math expression over N is billed N)."""
        namespace = logged_errors_namespace(self.stage)
        for name, group in log_groups.items():
            logs.MetricFilter(
                self,
                f"{name}-logged-errors",
                log_group=group,
                filter_pattern=logs.FilterPattern.literal(LOGGED_ERRORS_PATTERN),
                metric_namespace=namespace,
                metric_name=LOGGED_ERRORS_METRIC,
                metric_value="1",
            )
        metric = cloudwatch.Metric(
            namespace=namespace,
            metric_name=LOGGED_ERRORS_METRIC,
            period=Duration.minutes(5),
            statistic=cloudwatch.Stats.SUM,
        )
        return self._alarm("logged-errors", metric, f"A gateway function logged an error ({', '.join(log_groups)})")

    def on_any_dead_letters(self, queues: Mapping[str, sqs.IQueue]) -> cloudwatch.Alarm:
        """One alarm for every dead-letter queue: on its metric when there is one queue; over
        several, a sum (billed one alarm metric per queue: one shared queue is the cheap shape)."""
        metrics = {
            name: queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(1), statistic=cloudwatch.Stats.MAXIMUM
            )
            for name, queue in queues.items()
        }
        metric: cloudwatch.IMetric
        if len(metrics) == 1:
            (metric,) = metrics.values()
        else:
            metric = cloudwatch.MathExpression(
                expression="SUM(METRICS())",
                using_metrics={f"q{i}": m for i, m in enumerate(metrics.values())},
                period=Duration.minutes(1),
                label="messages in the dead-letter queues",
            )
        return self._alarm(
            "dead-letters",
            metric,
            f"Messages in a dead-letter queue ({', '.join(queues)}): they were not processed and need a look",
        )

    def on_dead_letters(self, name: str, queue: sqs.IQueue) -> cloudwatch.Alarm:
        """Alarm as soon as any message sits in a dead-letter queue."""
        return self._alarm(
            f"{name}-dead-letters",
            queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(1), statistic=cloudwatch.Stats.MAXIMUM
            ),
            f"Messages in the {name} dead-letter queue: they were not processed and need a look",
        )

    def on_throttles(self, name: str, function: lambda_.IFunction) -> cloudwatch.Alarm:
        """Throttling means the account's (or the function's reserved) concurrency ran out."""
        return self._alarm(
            f"{name}-throttles",
            function.metric_throttles(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
            f"The {name} function was throttled: invocations were refused for lack of concurrency",
        )

    def on_errors(self, name: str, function: lambda_.IFunction) -> cloudwatch.Alarm:
        return self._alarm(
            f"{name}-errors",
            function.metric_errors(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
            f"The {name} function raised errors",
        )

    def on_failed_executions(self, name: str, state_machine: sfn.IStateMachine) -> cloudwatch.Alarm:
        return self._alarm(
            f"{name}-failed-executions",
            state_machine.metric_failed(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
            f"Executions of the {name} state machine failed (the user was sent an apology)",
        )

    def _alarm(self, alarm_id: str, metric: cloudwatch.IMetric, description: str) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            alarm_id,
            # Named under the stack's name, so the topic and key policies can admit exactly these alarms.
            alarm_name=f"{Stack.of(self).stack_name}-{alarm_id}",
            metric=metric,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        if self.topic is not None:
            alarm.add_alarm_action(cloudwatch_actions.SnsAction(self.topic))
        self.alarms[alarm_id] = alarm
        return alarm

    def _from_these_alarms(self) -> dict[str, dict[str, str]]:
        """The confused-deputy guard: CloudWatch acts for this account's alarms of this stack only."""
        stack = Stack.of(self)
        return {
            "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
            "ArnLike": {
                "aws:SourceArn": stack.format_arn(
                    service="cloudwatch",
                    resource="alarm",
                    resource_name=f"{stack.stack_name}-*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            },
        }

    def _key(self) -> kms.Key:
        # CloudWatch cannot publish to a topic encrypted with the AWS managed aws/sns key, so the topic
        # gets its own key whose policy lets CloudWatch use it.
        key = kms.Key(
            self,
            "TopicKey",
            description="Encrypts the Hermes Gateway alarm topic",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[_CLOUDWATCH],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],  # in a key policy, "*" means this key
                conditions=self._from_these_alarms(),
            )
        )
        return key

    def _topic(self) -> sns.Topic:
        topic = sns.Topic(self, "Topic", display_name="Hermes Gateway alarms", master_key=self.key, enforce_ssl=True)
        topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[_CLOUDWATCH],
                actions=["sns:Publish"],
                resources=[topic.topic_arn],
                conditions=self._from_these_alarms(),
            )
        )
        if self.key is None:
            acknowledge(
                topic,
                "SNS2",
                "The minimal observability tier: alarm notifications carry alarm names and states, no "
                "user data, and the customer-managed key CloudWatch needs to publish to an encrypted topic "
                "costs 1 USD a month; operations.observability: standard adds it.",
            )
        return topic
