"""The one stack: it reads like the architecture picture, each capability built from `resources.py`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from aws_cdk import Aws, CfnOutput, Stack, Tags
from aws_cdk import aws_events as events
from constructs import Construct

from hermes_gateway.domain.retention import capped_days
from hermes_gateway.errors import ConfigError
from hermes_gateway.outputs import (
    SESSION_API_OUTPUT,
    bucket_output_key,
    function_output_key,
    log_group_output_key,
    queue_output_key,
    state_machine_output_key,
    table_output_key,
    webhook_output_key,
)
from hermes_gateway.platforms.catalog import CATALOG, PlatformSpec, webhook_path
from hermes_gateway.resources import (
    BUCKETS,
    EVENT_BUS,
    FUNCTIONS,
    MEDIA,
    QUEUES,
    SCHEDULES,
    TABLES,
    TURN_STATE_MACHINE,
    repo_root,
    secrets_prefix,
)
from hermes_gateway.settings import SETTINGS_FILE_ENV, Settings
from hermes_gateway.settings.shipped import SHIPPED_PATH
from infra.capabilities.alarms import OperationsAlarms
from infra.capabilities.api import WebhookApi
from infra.capabilities.dashboard import OperationsDashboard
from infra.capabilities.data import DataTables
from infra.capabilities.email import MailReceiving
from infra.capabilities.functions import GatewayFunction, GatewayFunctions, GrantTargets, environment_size
from infra.capabilities.layer import CommonLayer
from infra.capabilities.media import MediaBuckets
from infra.capabilities.observability import ObservabilityPlan
from infra.capabilities.queues import MessageQueues
from infra.capabilities.schedules import Schedules
from infra.capabilities.settings_layer import SettingsLayer
from infra.capabilities.workflow import TurnWorkflow

PROJECT = "hermes-gateway"
WEBHOOK_FUNCTION = "ingress"
SESSION_API_FUNCTION = "session_api"
MODEL_FUNCTION = "agent"  # the function that calls the model provider
ENVIRONMENT_LIMIT_BYTES = 4096  # Lambda: the keys and values of a function's variables, in all


def function_environment(settings: Settings, plan: ObservabilityPlan) -> dict[str, str]:
    """What every function gets: where its settings are (the settings layer) and the deployment's
    fixed names. The settings themselves are not here: 4 KB is all a function's environment holds.
    Below the standard tier (and with no dashboard) the functions publish no custom metrics."""
    environment = {
        SETTINGS_FILE_ENV: SHIPPED_PATH,
        "HERMES_SECRETS_PREFIX": secrets_prefix(settings.stage),
        "POWERTOOLS_SERVICE_NAME": PROJECT,
        "POWERTOOLS_METRICS_NAMESPACE": "HermesGateway",
    }
    if not plan.custom_metrics:
        environment["POWERTOOLS_METRICS_DISABLED"] = "true"
    return environment


def enabled_platforms(settings: Settings) -> tuple[PlatformSpec, ...]:
    """The platforms a profile serves in a deployment (the local web chat never is)."""
    return tuple(spec for spec in CATALOG if not spec.local_only and settings.platform(spec.name) is not None)


def served_platforms(settings: Settings) -> tuple[tuple[str | None, PlatformSpec], ...]:
    """Every profile's webhook platforms: (None, spec) for the deployment's own, (name, spec) for a
    named one (e-mail, which comes through SES, has no webhook)."""
    return tuple(
        (profile.served_profile, spec)
        for profile in settings.all_profiles()
        for spec in enabled_platforms(profile)
        if spec.webhook
    )


def check_environment_size(function: str, variables: Mapping[str, str]) -> None:
    """A function's environment must fit Lambda's 4 KB; it holds resource names, not settings."""
    size = environment_size(variables)
    if size > ENVIRONMENT_LIMIT_BYTES:
        raise ConfigError(
            f"the {function} function's environment would be about {size} bytes (names and URLs set at "
            f"deploy time counted at their longest), over Lambda's {ENVIRONMENT_LIMIT_BYTES}-byte limit: "
            f"it is granted too many resources ({', '.join(sorted(variables))})"
        )


def check_output_keys(keys: Sequence[str]) -> None:
    """Two named profiles whose names differ only in '_' (`a_1`, `a1`) would share an output id."""
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ConfigError(
            f"profiles: the names of two profiles differ only in '_' (stack outputs {', '.join(repeated)}); "
            "rename one of them"
        )


def grant_speech(settings: Settings, functions: Iterable[GatewayFunction]) -> None:
    """Amazon Polly speaks for the functions that deliver a spoken answer (those holding the speech
    API's key for the other provider), once any profile chooses it (`tts.provider: polly`)."""
    if any(p.tts.provider == "polly" for p in settings.all_profiles()):
        for gateway_function in functions:
            if "TTS_API_KEY" in gateway_function.spec.secrets:
                gateway_function.grant_speech()


class HermesGatewayStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: Settings,
        deploy_region: str | None = None,
        **kwargs: Any,
    ) -> None:
        """`deploy_region`: the region `cdk deploy` targets, when known at synth (the stack itself is
        region-agnostic); what only some regions offer (SES receiving) is checked against it."""
        super().__init__(scope, construct_id, description=f"Hermes Serverless Gateway ({settings.stage})", **kwargs)
        stage = settings.stage
        root = repo_root()
        served = served_platforms(settings)
        named_outputs = [webhook_output_key(spec.name, profile) for profile, spec in served if profile]
        check_output_keys(named_outputs)
        Tags.of(self).add("project", PROJECT)
        Tags.of(self).add("stage", stage)

        plan = ObservabilityPlan.of(settings, scheduled={schedule.function for schedule in SCHEDULES})
        alarms = OperationsAlarms(self, "Alarms", plan=plan, stage=stage)
        data = DataTables(self, "Data", specs=TABLES)
        queues = MessageQueues(self, "Queues", specs=QUEUES)
        # a file never outlives its message: the shorter of the two retentions (domain/retention.py)
        media_days = capped_days(settings.media.retention_days, settings.sessions.retention_days)
        media = MediaBuckets(self, "Media", specs=BUCKETS, retention_days=media_days)
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
            environment=function_environment(settings, plan),
            secrets_prefix=secrets_prefix(stage),
            named_profiles={named.profile: enabled_platforms(named) for named in settings.profiles.values()},
            traced=[spec.name for spec in FUNCTIONS if plan.traces(spec.name)],
            system_log_level=plan.system_log_level,
        )
        settings_layer = SettingsLayer(self, "SettingsLayer", settings=settings)
        for gateway_function in functions.by_name.values():
            gateway_function.function.add_layers(settings_layer.layer)
        # Each profile may use its own model; a model several profiles share is granted once.
        for provider in {(p.provider.name, p.provider.model): p.provider for p in settings.all_profiles()}.values():
            functions.by_name[MODEL_FUNCTION].grant_model(provider)
        grant_speech(settings, functions.by_name.values())
        lambdas = {name: f.function for name, f in functions.by_name.items()}
        workflow = TurnWorkflow(
            self,
            "Workflow",
            spec=TURN_STATE_MACHINE,
            definition_file=root / TURN_STATE_MACHINE.definition_file,
            functions=lambdas,
            log_group_name=f"/aws/vendedlogs/states/{PROJECT}-{stage}-{TURN_STATE_MACHINE.name}",
            express=settings.turns.workflow_type == "express",
            traced=plan.traces_workflow,
        )
        functions.connect(
            GrantTargets(
                tables={name: (data.specs[name], table) for name, table in data.tables.items()},
                queues={name: (queues.specs[name], queue) for name, queue in queues.queues.items()},
                state_machines={TURN_STATE_MACHINE.name: (TURN_STATE_MACHINE, workflow.state_machine)},
                event_buses={EVENT_BUS.name: (EVENT_BUS, bus)},
                functions={name: (f.spec, f.function) for name, f in functions.by_name.items()},
                buckets={name: (media.specs[name], bucket) for name, bucket in media.buckets.items()},
            )
        )
        if settings.platform("email") is not None:
            MailReceiving(
                self,
                "Email",
                settings=settings,
                bucket=media.buckets[MEDIA.name],
                functions=functions.by_name,
                deploy_region=deploy_region,
            )
        for name, gateway_function in functions.by_name.items():
            check_environment_size(name, gateway_function.environment)
        CfnOutput(
            self,
            state_machine_output_key(TURN_STATE_MACHINE.name),
            value=workflow.state_machine.state_machine_arn,
            description="The agent turn workflow (`hermes-gateway cron run` starts a job's turn here)",
        )

        if plan.dashboard:
            dashboard = OperationsDashboard(
                self,
                "Operations",
                # Dashboard names are global to the account: the region keeps two regions' stages apart.
                dashboard_name=f"{PROJECT}-{stage}-{Aws.REGION}",
                functions=lambdas,
                dead_letter_queues=queues.queues,
                state_machine=workflow.state_machine,
            )
            CfnOutput(
                self,
                "DashboardUrl",
                value=f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}"
                f"#dashboards:name={dashboard.dashboard.dashboard_name}",
                description="The gateway's CloudWatch dashboard",
            )
        api = WebhookApi(
            self,
            "Webhooks",
            handler=lambdas[WEBHOOK_FUNCTION],
            api_name=f"{PROJECT}-{stage}",
            platforms=served,
            endpoint=settings.ingress.endpoint,
        )
        schedules = Schedules(self, "Schedules", specs=SCHEDULES, functions=lambdas)
        alarms.watch(
            functions=lambdas,
            log_groups={name: f.log_group for name, f in functions.by_name.items()},
            dead_letter_queues={**queues.queues, "schedules": schedules.dead_letter_queue},
            state_machines={TURN_STATE_MACHINE.name: workflow.state_machine},
        )

        CfnOutput(self, "WebhookUrl", value=f"{api.webhook_url}webhooks/", description="Append the platform name")
        CfnOutput(
            self,
            SESSION_API_OUTPUT,
            value=api.add_session_api(lambdas[SESSION_API_FUNCTION], profiles=list(settings.profiles)),
            description="The session API (IAM-signed POST; `hermes-gateway sessions` uses it)",
        )
        for profile, spec in served:
            # The CLI's `webhooks` command reads these back (their keys: hermes_gateway.outputs).
            for_profile = f" for profile {profile}" if profile else ""
            CfnOutput(
                self,
                webhook_output_key(spec.name, profile),
                value=f"{api.webhook_url}{webhook_path(spec.name, profile).lstrip('/')}",
                description=f"Register this URL with {spec.title}{for_profile} (docs/platforms/{spec.name}.md)",
            )
        CfnOutput(
            self,
            "SecretsPrefix",
            value=secrets_prefix(stage),
            description="SSM SecureString parameters the functions read; set them with the CLI",
        )
        if alarms.topic is not None:
            CfnOutput(self, "AlarmTopicArn", value=alarms.topic.topic_arn, description="Subscribe to get alarms")
        for name, gateway_function in functions.by_name.items():
            # The CLI's `logs` commands read these log groups; `send` and `outbox redrive` invoke
            # the delivery function.
            CfnOutput(
                self,
                log_group_output_key(name),
                value=gateway_function.log_group.log_group_name,
                description=f"The {name} function's logs",
            )
            CfnOutput(
                self,
                function_output_key(name),
                value=gateway_function.function.function_arn,
                description=f"The {name} function",
            )
        for name, queue in queues.queues.items():
            # The CLI's `outbox dead-letters` and `outbox redrive` read these.
            CfnOutput(self, queue_output_key(name), value=queue.queue_url, description=f"The {name} queue")
        for name, table in data.tables.items():
            # The CLI finds the deployment's tables through these (hermes_cli.target.use_deployed).
            CfnOutput(self, table_output_key(name), value=table.table_name, description=f"The {name} table")
        for name, bucket in media.buckets.items():
            # `hermes-gateway users forget|export` deletes and reads a person's files there.
            CfnOutput(self, bucket_output_key(name), value=bucket.bucket_name, description=f"The {name} bucket")
