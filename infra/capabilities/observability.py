"""What each observability tier (`operations.observability`) builds; docs/cost.md prices them.

- minimal (the default): one alarm on the ERROR lines of every function's log, one on every
  dead-letter queue; an alarm topic only when `operations.alarm_email` is set, and then without a
  customer-managed key; no dashboard, no X-Ray. Lambda's own START/END/REPORT lines are not kept,
  and the gateway publishes no custom metrics (unless `operations.dashboard` asks for the
  dashboard that shows them): nothing reads them, and they cost 0.30 USD each a month and about
  900 bytes of EMF lines per message. The per-message log lines say the same for Logs Insights.
- standard: an alarm per function (errors, throttles), per dead-letter queue and on failed turn
  executions, to a topic under its own KMS key; the gateway's custom metrics (EMF); the message
  path is traced with X-Ray, the scheduled tick is not (it would be 43,200 traces a month with
  nothing in them).
- full: standard, plus the dashboard, X-Ray on every function, and Lambda's own lines (START,
  END, REPORT: durations, memory, cold starts) kept.

Why minimal traces nothing: at low traffic X-Ray's default rule (the first request each second,
then 5%) records nearly every invocation, and each function on the message path starts its own
trace, so tracing would add about 4 traces, 20 USD, per million messages, half again what the
rest of a message costs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aws_cdk import aws_lambda as lambda_

from hermes_gateway.settings import Settings

MINIMAL, STANDARD, FULL = "minimal", "standard", "full"


@dataclass(frozen=True)
class ObservabilityPlan:
    tier: str
    alarm_email: str = ""
    extra_dashboard: bool = False  # `operations.dashboard`: a dashboard below full too
    scheduled: frozenset[str] = frozenset()  # the functions only a schedule invokes (the tick)

    @classmethod
    def of(cls, settings: Settings, scheduled: Iterable[str]) -> ObservabilityPlan:
        operations = settings.operations
        return cls(operations.observability, operations.alarm_email, operations.dashboard, frozenset(scheduled))

    @property
    def per_resource_alarms(self) -> bool:
        return self.tier != MINIMAL

    @property
    def alarm_topic(self) -> bool:
        """Minimal has a topic only when someone is to be told; the alarms still show their state."""
        return self.tier != MINIMAL or bool(self.alarm_email)

    @property
    def topic_key(self) -> bool:
        """A customer-managed key (1 USD a month) for the topic: CloudWatch cannot publish to one
        under the AWS-managed aws/sns key, so below standard the topic is not encrypted at rest."""
        return self.tier != MINIMAL

    @property
    def dashboard(self) -> bool:
        return self.tier == FULL or self.extra_dashboard

    def traces(self, function: str) -> bool:
        if self.tier == FULL:
            return True
        return self.tier == STANDARD and function not in self.scheduled

    @property
    def traces_workflow(self) -> bool:
        return self.tier != MINIMAL

    @property
    def custom_metrics(self) -> bool:
        """The gateway's own metrics (TurnLatency, DeliverySent, ...) as EMF lines: standard and full,
        or wherever the dashboard that charts them is built."""
        return self.tier != MINIMAL or self.dashboard

    @property
    def platform_log_lines(self) -> bool:
        """Lambda's own START, END and REPORT lines are kept (ingested and billed): full only."""
        return self.tier == FULL

    @property
    def system_log_level(self) -> lambda_.SystemLogLevel:
        return lambda_.SystemLogLevel.INFO if self.platform_log_lines else lambda_.SystemLogLevel.WARN
