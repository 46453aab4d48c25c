"""Operations alarms: one encrypted SNS topic that every alarm notifies."""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as sns_subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

_CLOUDWATCH = iam.ServicePrincipal("cloudwatch.amazonaws.com")


class OperationsAlarms(Construct):
    """The alarm topic, and the alarms on dead letters, function errors and failed executions."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        # CloudWatch cannot publish to a topic encrypted with the AWS managed aws/sns key, so the topic
        # gets its own key whose policy lets CloudWatch use it.
        self.key = kms.Key(
            self,
            "TopicKey",
            description="Encrypts the Hermes Gateway alarm topic",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[_CLOUDWATCH],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],  # in a key policy, "*" means this key
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Hermes Gateway alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[_CLOUDWATCH],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}},
            )
        )
        self._action = cloudwatch_actions.SnsAction(self.topic)

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

    def notify_email(self, address: str) -> None:
        """Subscribe an address to the alarm topic (AWS e-mails it a confirmation link first)."""
        self.topic.add_subscription(sns_subscriptions.EmailSubscription(address))

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
            metric=metric,
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        return alarm
