"""The one stack: it reads like the architecture picture, each capability built from `resources.py`."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Stack, Tags
from aws_cdk import aws_events as events
from constructs import Construct

from hermes_gateway.cli.target import (
    SESSION_API_OUTPUT,
    log_group_output_key,
    queue_output_key,
    table_output_key,
    webhook_output_key,
)
from hermes_gateway.platforms.catalog import CATALOG
from hermes_gateway.resources import (
    EVENT_BUS,
    FUNCTIONS,
    QUEUES,
    SCHEDULES,
    TABLES,
    TURN_STATE_MACHINE,
    repo_root,
    secrets_prefix,
)
from hermes_gateway.settings import Settings
from infra.capabilities.alarms import OperationsAlarms
from infra.capabilities.api import WebhookApi
from infra.capabilities.dashboard import OperationsDashboard
from infra.capabilities.data import DataTables
from infra.capabilities.functions import GatewayFunctions, GrantTargets
from infra.capabilities.layer import CommonLayer
from infra.capabilities.queues import MessageQueues
from infra.capabilities.schedules import Schedules
from infra.capabilities.workflow import TurnWorkflow

PROJECT = "hermes-gateway"
WEBHOOK_FUNCTION = "ingress"
SESSION_API_FUNCTION = "session_api"
MODEL_FUNCTION = "agent"  # the function that calls the model provider


def stack_name(stage: str) -> str:
    return f"HermesGateway-{stage}"


def function_environment(settings: Settings) -> dict[str, str]:
    """What every function gets: the validated settings and the deployment's fixed names."""
    return {
        "GATEWAY_STAGE": settings.stage,
        **settings.to_env(changed_only=True),  # defaults are left out: 4 KB is all a function's environment holds
        "HERMES_SECRETS_PREFIX": secrets_prefix(settings.stage),
        "POWERTOOLS_SERVICE_NAME": PROJECT,
        "POWERTOOLS_METRICS_NAMESPACE": "HermesGateway",
    }


class HermesGatewayStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, description=f"Hermes Serverless Gateway ({settings.stage})", **kwargs)
        stage = settings.stage
        root = repo_root()
        Tags.of(self).add("project", PROJECT)
        Tags.of(self).add("stage", stage)

        alarms = OperationsAlarms(self, "Alarms")
        data = DataTables(self, "Data", specs=TABLES)
        queues = MessageQueues(self, "Queues", specs=QUEUES, alarms=alarms)
        layer = CommonLayer(
            self,
            "CommonLayer",
            requirements=root / "requirements" / "layer.txt",
            package=root / "layers" / "common" / "hermes_gateway",
        )
        # Lifecycle events; subscribe with ordinary EventBridge rules (source "hermes.gateway").
        bus = events.EventBus(self, "EventBus", event_bus_name=f"{PROJECT}-{stage}")
        CfnOutput(self, "EventBusName", value=bus.event_bus_name, description="Lifecycle events (BEHAVIOUR §8)")
        functions = GatewayFunctions(
            self,
            "Functions",
            specs=FUNCTIONS,
            code_root=str(root),
            layer=layer.layer,
            environment=function_environment(settings),
            secrets_prefix=secrets_prefix(stage),
        )
        functions.by_name[MODEL_FUNCTION].grant_model(settings.provider)
        lambdas = {name: f.function for name, f in functions.by_name.items()}
        workflow = TurnWorkflow(
            self,
            "Workflow",
            spec=TURN_STATE_MACHINE,
            definition_file=root / TURN_STATE_MACHINE.definition_file,
            functions=lambdas,
            log_group_name=f"/aws/vendedlogs/states/{PROJECT}-{stage}-{TURN_STATE_MACHINE.name}",
            express=settings.turns.workflow_type == "express",
        )
        functions.connect(
            GrantTargets(
                tables={name: (data.specs[name], table) for name, table in data.tables.items()},
                queues={name: (queues.specs[name], queue) for name, queue in queues.queues.items()},
                dead_letter_queues=queues.dead_letter_queues,
                state_machines={TURN_STATE_MACHINE.name: (TURN_STATE_MACHINE, workflow.state_machine)},
                event_buses={EVENT_BUS.name: (EVENT_BUS, bus)},
            )
        )
        for name, function in lambdas.items():
            alarms.on_errors(name, function)
        alarms.on_failed_executions(TURN_STATE_MACHINE.name, workflow.state_machine)
        CfnOutput(
            self,
            "TurnStateMachineArn",
            value=workflow.state_machine.state_machine_arn,
            description="The agent turn workflow (`hermes-gateway cron run` starts a job's turn here)",
        )

        enabled = [spec for spec in CATALOG if not spec.local_only and settings.platform(spec.name) is not None]
        if settings.operations.dashboard:
            dashboard = OperationsDashboard(
                self,
                "Operations",
                dashboard_name=f"{PROJECT}-{stage}",
                functions=lambdas,
                dead_letter_queues=queues.dead_letter_queues,
                state_machine=workflow.state_machine,
            )
            CfnOutput(
                self,
                "DashboardUrl",
                value=f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
                f"#dashboards:name={dashboard.dashboard.dashboard_name}",
                description="The gateway's CloudWatch dashboard",
            )
        for name, function in lambdas.items():
            alarms.on_throttles(name, function)
        if settings.operations.alarm_email:
            alarms.notify_email(settings.operations.alarm_email)

        api = WebhookApi(
            self, "Webhooks", handler=lambdas[WEBHOOK_FUNCTION], api_name=f"{PROJECT}-{stage}", platforms=enabled
        )
        Schedules(self, "Schedules", specs=SCHEDULES, functions=lambdas, alarms=alarms)

        CfnOutput(self, "WebhookUrl", value=f"{api.url}webhooks/", description="Append the platform name")
        CfnOutput(
            self,
            SESSION_API_OUTPUT,
            value=api.add_session_api(lambdas[SESSION_API_FUNCTION]),
            description="The session API (IAM-signed POST; `hermes-gateway sessions` uses it)",
        )
        for spec in enabled:
            # The CLI's `webhooks` command reads these (hermes_gateway.cli.target.webhook_output_key).
            CfnOutput(
                self,
                webhook_output_key(spec.name),
                value=f"{api.url}webhooks/{spec.name}",
                description=f"Register this URL with {spec.title} (docs/platforms/{spec.name}.md)",
            )
        CfnOutput(
            self,
            "SecretsPrefix",
            value=secrets_prefix(stage),
            description="SSM SecureString parameters the functions read; set them with the CLI",
        )
        CfnOutput(self, "AlarmTopicArn", value=alarms.topic.topic_arn, description="Subscribe to get alarms")
        for name, gateway_function in functions.by_name.items():
            # The CLI's `logs` commands read these log groups.
            CfnOutput(
                self,
                log_group_output_key(name),
                value=gateway_function.log_group.log_group_name,
                description=f"The {name} function's logs",
            )
        for name, queue in queues.queues.items():
            # The CLI's `outbox redrive` moves dead letters back through these.
            CfnOutput(self, queue_output_key(name), value=queue.queue_url, description=f"The {name} queue")
            CfnOutput(
                self,
                queue_output_key(queues.specs[name].dead_letter_name),
                value=queues.dead_letter_queues[name].queue_url,
                description=f"The {name} dead-letter queue",
            )
        for name, table in data.tables.items():
            # The CLI finds the deployment's tables through these (hermes_gateway.cli.target).
            CfnOutput(self, table_output_key(name), value=table.table_name, description=f"The {name} table")
