"""The operations dashboard: one CloudWatch dashboard that follows a message through the gateway.

Rows, in the order a message travels: webhooks accepted and rejected (by reason), duplicates and
ignored events; the router (denied, busy, turns started); turns (executions, failures, latency);
delivery (sent, retried, gone, unknown, failed later, dead-lettered) and the dead-letter queues' depth; each
function's errors, throttles and duration. The gateway's own metrics are the Powertools EMF
metrics the functions emit (namespace HermesGateway, dimension `service`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

NAMESPACE = "HermesGateway"
SERVICE = "hermes-gateway"
PERIOD = Duration.minutes(5)
# The reasons ingress rejects a webhook, each its own metric (services/ingress.py `_reject`).
REJECTED_STATUSES = (401, 400, 404, 405, 413)


def gateway_metric(name: str, label: str | None = None) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE},
        statistic=cloudwatch.Stats.SUM,
        period=PERIOD,
        label=label or name,
    )


def _graph(title: str, metrics: Sequence[cloudwatch.IMetric], width: int = 8) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=metrics, width=width, height=6)


class OperationsDashboard(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dashboard_name: str,
        functions: Mapping[str, lambda_.IFunction],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        state_machine: sfn.IStateMachine,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dashboard = cloudwatch.Dashboard(
            self, "Dashboard", dashboard_name=dashboard_name, default_interval=Duration.hours(3)
        )
        inbound = _graph(
            "Webhooks",
            [
                gateway_metric("InboundAccepted", "accepted"),
                gateway_metric("InboundDuplicate", "duplicates dropped"),
                gateway_metric("InboundIgnored", "ignored (edits, statuses…)"),
            ],
        )
        rejected = _graph(
            "Webhooks rejected, by reason",
            [gateway_metric(f"InboundRejected{status}", f"HTTP {status}") for status in REJECTED_STATUSES],
        )
        router = _graph(
            "Router",
            [
                gateway_metric("TurnStarted", "turns started"),
                gateway_metric("SessionStarted", "sessions started"),
                gateway_metric("SessionBusy", "busy, retried"),
                gateway_metric("MessageDenied", "denied"),
            ],
        )
        turns = _graph(
            "Turns",
            [
                state_machine.metric_started(period=PERIOD, label="started"),
                state_machine.metric_succeeded(period=PERIOD, label="succeeded"),
                state_machine.metric_failed(period=PERIOD, label="failed"),
                state_machine.metric_timed_out(period=PERIOD, label="timed out"),
            ],
        )
        latency = _graph(
            "Turn latency (ms)",
            [
                state_machine.metric_time(period=PERIOD, statistic="p50", label="p50"),
                state_machine.metric_time(period=PERIOD, statistic="p99", label="p99"),
            ],
        )
        delivery = _graph(
            "Delivery",
            [
                gateway_metric("DeliverySent", "chunks sent"),
                gateway_metric("DeliveryRetried", "retried"),
                gateway_metric("DeliveryTargetGone", "target gone"),
                gateway_metric("DeliveryUnknown", "outcome unknown"),
                gateway_metric("DeliveryFailedLater", "failed later (platform report)"),
                gateway_metric("DeliveryDeadLettered", "dead-lettered"),
            ],
        )
        dead_letters = _graph(
            "Dead-letter queues (messages waiting)",
            [
                queue.metric_approximate_number_of_messages_visible(
                    period=Duration.minutes(1), statistic=cloudwatch.Stats.MAXIMUM, label=name
                )
                for name, queue in dead_letter_queues.items()
            ],
        )
        errors = _graph(
            "Function errors",
            [fn.metric_errors(period=PERIOD, label=name) for name, fn in functions.items()],
        )
        throttles = _graph(
            "Function throttles",
            [fn.metric_throttles(period=PERIOD, label=name) for name, fn in functions.items()],
        )
        durations = _graph(
            "Function duration p99 (ms)",
            [fn.metric_duration(period=PERIOD, statistic="p99", label=name) for name, fn in functions.items()],
        )
        self.dashboard.add_widgets(inbound, rejected, router)
        self.dashboard.add_widgets(turns, latency, delivery)
        self.dashboard.add_widgets(dead_letters, errors, throttles)
        self.dashboard.add_widgets(durations)
