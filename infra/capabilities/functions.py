"""Lambda functions, one per `FunctionSpec`, each with its own least-privilege role.

`GatewayFunction` gives every function the same defaults (arm64, Python 3.13, the common layer,
JSON logs into its own log group with retention, application lines from INFO, Lambda's own lines
and X-Ray tracing as the observability tier says, the shared environment), and turns the spec's
`grants` and `secrets` into IAM statements and environment variables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack, Token
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from hermes_gateway.platforms.catalog import PlatformSpec
from hermes_gateway.resources import (
    SECRET_NAMES,
    Access,
    BucketSpec,
    EventBusSpec,
    FunctionSpec,
    QueueSpec,
    StateMachineSpec,
    StreamSource,
    TableSpec,
)
from hermes_gateway.secrets import PLATFORM_SECRETS, profile_secret_name
from hermes_gateway.settings import ProviderSettings
from infra.capabilities.layer import ARCHITECTURE, RUNTIME
from infra.nag import acknowledge, arn_finding

LOG_RETENTION = logs.RetentionDays.ONE_MONTH
_CODE_EXCLUDES = ["__pycache__", "*.pyc"]
# The item actions each access level allows: no Scan unless the function names the table in its
# `scans`, no stream reads (the consumer's event source mapping reads its stream), no DescribeTable
# (pynamodb builds its tables from the models; nothing describes a table at run time).
_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
_WRITE_ACTIONS = (
    "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
)  # fmt: skip
_TABLE_ACTIONS: dict[Access, tuple[str, ...]] = {
    Access.READ: _READ_ACTIONS,
    Access.WRITE: _WRITE_ACTIONS,
    Access.READ_WRITE: tuple(dict.fromkeys(_READ_ACTIONS + _WRITE_ACTIONS)),
    Access.PUT: ("dynamodb:PutItem",),  # the ingress's one write to the inbox
    Access.MARK: ("dynamodb:GetItem", "dynamodb:UpdateItem"),
    Access.MAILBOX: ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:UpdateItem", "dynamodb:Query"),
    # The stream is read by the event source mapping (_consume_stream); the consumer counts a
    # message's failed attempts on its item.
    Access.CONSUME: ("dynamodb:UpdateItem",),
}
# the levels granted the indexes too
_QUERIES = frozenset({Access.READ, Access.WRITE, Access.READ_WRITE, Access.MAILBOX})


@dataclass(frozen=True)
class GrantTargets:
    """The built resources a function's `grants` may name, by logical name, with their specs."""

    tables: Mapping[str, tuple[TableSpec, dynamodb.Table]]
    queues: Mapping[str, tuple[QueueSpec, sqs.Queue]]
    state_machines: Mapping[str, tuple[StateMachineSpec, sfn.StateMachine]]
    event_buses: Mapping[str, tuple[EventBusSpec, events.EventBus]] = field(default_factory=dict)
    functions: Mapping[str, tuple[FunctionSpec, lambda_.IFunction]] = field(default_factory=dict)
    buckets: Mapping[str, tuple[BucketSpec, s3.IBucket]] = field(default_factory=dict)


MODEL_ACTIONS = ["bedrock:InvokeModel", "bedrock:InvokeModelWithResponseStream"]  # Converse, ConverseStream
_INFERENCE_PROFILE_PREFIXES = ("us", "eu", "apac", "global")
# A value CloudFormation resolves at deploy time (a table name, a queue URL, an ARN) is counted as
# this many bytes when the environment's size is checked at synth: a generated queue URL, the
# longest of them, is about 130 characters.
UNRESOLVED_VALUE_BYTES = 160


def secret_parameters(secrets: Iterable[str], named_profiles: Mapping[str, Iterable[PlatformSpec]]) -> tuple[str, ...]:
    """The parameters (names under the deployment's prefix) a function reading `secrets` may read:
    each secret, and `NAME__*` for a secret some named profile has its own value of
    (`NAME__<PROFILE>`): a platform's secret when a profile enables a platform using it (a
    profile's bot has its own credentials); the others (the model's API key, Honcho's) whenever
    there are named profiles, which may override them.

    One pattern per secret, not one name per secret and profile: ten profiles with every platform
    listed each name, 24,138 characters in the agent's policy, four times IAM's 6,144 for a managed
    policy, and the deploy failed. The pattern still names the secret: the ingress reads no bot
    token, the delivery no webhook secret; what it adds is the values of profiles that do not use
    that platform, which the operator does not store."""
    secrets = tuple(secrets)
    names = list(secrets)
    for platforms in named_profiles.values():
        used = {name for spec in platforms for name in spec.secrets}
        names += [profile_secret_name(name, "*") for name in secrets if name not in PLATFORM_SECRETS or name in used]
    return tuple(dict.fromkeys(names))


def environment_size(variables: Mapping[str, str]) -> int:
    """What Lambda counts against its 4 KB: the keys and values of every variable, a value resolved
    at deploy time counted at an upper bound."""
    return sum(
        len(key.encode()) + (UNRESOLVED_VALUE_BYTES if Token.is_unresolved(value) else len(value.encode()))
        for key, value in variables.items()
    )


class GatewayFunction(Construct):
    """One gateway function with the shared defaults; `connect` applies its spec's grants."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        spec: FunctionSpec,
        code_root: str,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        secrets_prefix: str,
        named_profiles: Mapping[str, Iterable[PlatformSpec]] | None = None,
        traced: bool = False,
        system_log_level: lambda_.SystemLogLevel = lambda_.SystemLogLevel.WARN,
    ) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        # Every variable the function gets, as `environment_size` measures it.
        self.environment: dict[str, str] = {**environment, "HERMES_FUNCTION": spec.name}
        self.log_group = logs.LogGroup(self, "Logs", retention=LOG_RETENTION, removal_policy=RemovalPolicy.DESTROY)
        # An explicit role instead of AWSLambdaBasicExecutionRole: it may write only to its own log group.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Hermes Gateway {spec.name} function",
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description=spec.description,
            code=lambda_.Code.from_asset(f"{code_root}/{spec.code_dir}", exclude=_CODE_EXCLUDES),
            handler=spec.handler,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            memory_size=spec.memory_mb,
            timeout=Duration.seconds(spec.timeout_seconds),
            layers=[layer],
            role=self.role,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            # INFO keeps the metrics' EMF lines, which carry no level (Lambda files them as INFO).
            application_log_level_v2=lambda_.ApplicationLogLevel.INFO,
            # WARN drops START, END and REPORT (about 900 bytes an invocation in JSON).
            system_log_level_v2=system_log_level,
            tracing=lambda_.Tracing.ACTIVE if traced else lambda_.Tracing.DISABLED,
            environment=dict(self.environment),
        )
        self.log_group.grant_write(self.role)
        self._grant_secrets(secrets_prefix, named_profiles or {})
        reasons = []
        if traced:
            reasons.append(
                "X-Ray tracing (Tracing.ACTIVE): xray:PutTraceSegments and xray:PutTelemetryRecords "
                "do not support resource-level permissions."
            )
        if spec.consumes:
            reasons.append(
                "The table stream's event source adds dynamodb:ListStreams, which has no resource-level "
                "permissions (the stream itself is read only through its own ARN)."
            )
        if reasons:
            acknowledge(self.role, "IAM5[Resource::*]", " ".join(reasons))
        acknowledge(
            self.function,
            "L1",
            "Pinned to python3.13 on purpose: the common layer is resolved and precompiled for CPython 3.13 "
            "(infra/capabilities/layer.py); moving the runtime is a deliberate change of both.",
        )

    def connect(self, targets: GrantTargets) -> None:
        """Grant what the spec's `grants` name and pass each resource's name, URL or ARN in the environment."""
        for name, access in self.spec.grants.items():
            if name in targets.tables:
                self._grant_table(*targets.tables[name], access)
            elif name in targets.queues:
                self._grant_queue(*targets.queues[name], access)
            elif name in targets.state_machines:
                self._grant_state_machine(*targets.state_machines[name], access)
            elif name in targets.event_buses:
                self._grant_event_bus(*targets.event_buses[name], access)
            elif name in targets.functions:
                self._grant_function(*targets.functions[name], access)
            elif name in targets.buckets:
                self._grant_bucket(*targets.buckets[name], access)
            else:
                raise ValueError(f"function {self.spec.name}: grant on unknown resource {name!r}")
        consumed = [name for name, access in self.spec.grants.items() if access is Access.CONSUME]
        if consumed != ([self.spec.consumes.table] if self.spec.consumes else []):
            raise ValueError(
                f"function {self.spec.name}: consumes={self.spec.consumes!r} but CONSUME grants on {consumed}"
            )
        if self.spec.consumes is not None:
            table_spec, table = targets.tables[self.spec.consumes.table]
            self._consume_stream(table_spec, table, self.spec.consumes, targets)
        self._configure_async_invokes(targets)

    def add_environment(self, key: str, value: str) -> None:
        self.environment[key] = value
        self.function.add_environment(key, value)

    def _grant_table(self, spec: TableSpec, table: dynamodb.Table, access: Access) -> None:
        if access not in _TABLE_ACTIONS:
            raise ValueError(f"function {self.spec.name}: table {spec.name} cannot be granted {access.value}")
        actions = _TABLE_ACTIONS[access] + (("dynamodb:Scan",) if spec.name in self.spec.scans else ())
        indexes = bool(spec.indexes) and access in _QUERIES
        resources = [table.table_arn] + ([f"{table.table_arn}/index/*"] if indexes else [])
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=list(actions), resources=resources))
        self.add_environment(spec.env_var, table.table_name)
        if indexes:
            acknowledge(
                self.role,
                arn_finding(table, "/index/*"),
                f"Queries on the {spec.name} table's global secondary indexes; the grant covers only "
                "that table's indexes.",
            )

    def _consume_stream(
        self, spec: TableSpec, table: dynamodb.Table, source: StreamSource, targets: GrantTargets
    ) -> None:
        """The table's stream as this function's event source, with `source`'s settings."""
        if spec.stream is None:
            raise ValueError(f"function {self.spec.name}: table {spec.name} has no stream to consume")
        filters = (
            [lambda_.FilterCriteria.filter({"eventName": lambda_.FilterRule.is_equal("INSERT")})]
            if source.inserts_only
            else None
        )
        self.function.add_event_source(
            event_sources.DynamoEventSource(
                table,
                # Everything written before the mapping was enabled is routed too.
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=source.batch_size,
                max_batching_window=Duration.seconds(0),
                parallelization_factor=source.parallelization_factor,
                report_batch_item_failures=True,
                bisect_batch_on_error=source.bisect_on_error,
                retry_attempts=source.max_retry_attempts,
                max_record_age=Duration.seconds(source.max_record_age_seconds),
                on_failure=event_sources.SqsDlq(targets.queues[source.on_failure][1]),
                filters=filters,
            )
        )

    def _configure_async_invokes(self, targets: GrantTargets) -> None:
        """Lambda's retries of an asynchronous invoke, the age after which an event is given up,
        and the dead-letter queue that then gets it (the function's DeadLetterConfig)."""
        if self.spec.async_retries is not None or self.spec.async_max_event_age_seconds is not None:
            self.function.configure_async_invoke(
                retry_attempts=self.spec.async_retries,
                max_event_age=Duration.seconds(self.spec.async_max_event_age_seconds)
                if self.spec.async_max_event_age_seconds
                else None,
            )
        if self.spec.dead_letters is None:
            return
        queue = targets.queues[self.spec.dead_letters][1]
        cfn = self.function.node.default_child
        assert isinstance(cfn, lambda_.CfnFunction)
        cfn.dead_letter_config = lambda_.CfnFunction.DeadLetterConfigProperty(target_arn=queue.queue_arn)
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[queue.queue_arn]))

    def _grant_queue(self, spec: QueueSpec, queue: sqs.Queue, access: Access) -> None:
        if access is not Access.SEND:
            raise ValueError(f"function {self.spec.name}: queue {spec.name} cannot be granted {access.value}")
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[queue.queue_arn]))
        self.add_environment(spec.env_var, queue.queue_url)

    def _grant_bucket(self, spec: BucketSpec, bucket: s3.IBucket, access: Access) -> None:
        """Objects (READ is GetObject, WRITE PutObject), never the bucket's settings; ERASE lists
        the bucket's keys and deletes objects (a person's files, on request); PRESIGN is GetObject
        and PutObject under `uploads/` (what a forwarder's signed URLs do)."""
        actions = {
            Access.READ: ["s3:GetObject"],
            Access.WRITE: ["s3:PutObject"],
            Access.READ_WRITE: ["s3:GetObject", "s3:PutObject"],
            Access.ERASE: ["s3:DeleteObject"],
            Access.PRESIGN: ["s3:GetObject"],
        }.get(access)
        if actions is None:
            raise ValueError(f"function {self.spec.name}: bucket {spec.name} cannot be granted {access.value}")
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=actions, resources=[bucket.arn_for_objects("*")]))
        if access is Access.PRESIGN:
            self.role.add_to_principal_policy(
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[bucket.arn_for_objects("uploads/*")])
            )
            acknowledge(
                self.role,
                arn_finding(bucket, "/uploads/*"),
                f"Uploads into the {spec.name} bucket under uploads/ only, through the URLs this function "
                "signs for a platform's forwarder (a message's files, one random key each).",
            )
        acknowledge(
            self.role,
            arn_finding(bucket, "/*"),
            f"The {spec.name} bucket's objects, each keyed by profile, session and message: the grant covers only "
            "that bucket's objects, never its settings.",
        )
        if access is Access.ERASE:
            # a session's files are found by their prefix (inbound, their records, outbound copies)
            self.role.add_to_principal_policy(
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn])
            )
        self.add_environment(spec.env_var, bucket.bucket_name)

    def _grant_function(self, spec: FunctionSpec, function: lambda_.IFunction, access: Access) -> None:
        if access is not Access.INVOKE:
            raise ValueError(f"function {self.spec.name}: function {spec.name} cannot be granted {access.value}")
        # The unqualified ARN only: grant_invoke would add the `:*` version wildcard.
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[function.function_arn])
        )
        self.add_environment(spec.env_var, function.function_arn)

    def _grant_event_bus(self, spec: EventBusSpec, bus: events.EventBus, access: Access) -> None:
        if access is not Access.PUT_EVENTS:
            raise ValueError(f"function {self.spec.name}: event bus {spec.name} cannot be granted {access.value}")
        bus.grant_put_events_to(self.role)
        self.add_environment(spec.env_var, bus.event_bus_name)

    def _grant_state_machine(self, spec: StateMachineSpec, machine: sfn.StateMachine, access: Access) -> None:
        if access not in (Access.START, Access.START_DESCRIBE):
            raise ValueError(f"function {self.spec.name}: state machine {spec.name} cannot be granted {access.value}")
        from infra.capabilities.workflow import state_machine_arn, state_machine_name

        # The ARN from the machine's fixed name, not a reference to it: the agent, which the
        # machine invokes, starts executions too, and a reference would make a cycle.
        arn = state_machine_arn(self, spec)
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=["states:StartExecution"], resources=[arn]))
        if access is Access.START_DESCRIBE:
            executions = Stack.of(self).format_arn(
                service="states",
                resource="execution",
                resource_name=f"{state_machine_name(self, spec)}:*",
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            )
            self.role.add_to_principal_policy(
                iam.PolicyStatement(actions=["states:DescribeExecution"], resources=[executions])
            )
            acknowledge(
                self.role,
                f"IAM5[Resource::arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:"
                f"{state_machine_name(self, spec)}:*]",
                "DescribeExecution on the executions of the one state machine (each named after its turn).",
            )
        self.add_environment(spec.env_var, arn)

    def grant_model(self, provider: ProviderSettings) -> None:
        """Amazon Bedrock: InvokeModel on the configured model only (Converse uses that action, and
        ConverseStream InvokeModelWithResponseStream: a streamed answer, BEHAVIOUR §6).

        A cross-region inference profile id (`us.`, `eu.`, `apac.`, `global.` + model) routes to
        the model in several regions, so the foundation-model ARN leaves the region open."""
        if provider.name != "bedrock":
            return
        prefix, _, rest = provider.model.partition(".")
        base_model = rest if prefix in _INFERENCE_PROFILE_PREFIXES and rest else provider.model
        stack = Stack.of(self)
        foundation = f"arn:{stack.partition}:bedrock:*::foundation-model/{base_model}"
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=MODEL_ACTIONS,
                resources=[
                    foundation,
                    stack.format_arn(
                        service="bedrock",
                        resource="inference-profile",
                        resource_name=provider.model,
                        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                    ),
                ],
            )
        )
        acknowledge(
            self.role,
            f"IAM5[Resource::arn:<AWS::Partition>:bedrock:*::foundation-model/{base_model}]",
            "The configured model only; the region is open because a cross-region inference profile "
            "serves the model from several regions.",
        )

    def grant_speech(self) -> None:
        """Amazon Polly (`tts.provider: polly`): SynthesizeSpeech, which names no resource of the
        account unless a lexicon is used (the gateway uses none), so its resource is "*"."""
        self.role.add_to_principal_policy(iam.PolicyStatement(actions=["polly:SynthesizeSpeech"], resources=["*"]))
        acknowledge(
            self.role,
            "IAM5[Resource::*]",
            "polly:SynthesizeSpeech only: the action has no resource of the account to name (no lexicons are used).",
        )

    def _grant_secrets(self, prefix: str, named_profiles: Mapping[str, Iterable[PlatformSpec]]) -> None:
        """GetParameter on exactly the function's own secrets, and the named profiles' values of them
        (`secret_parameters`); the parameters are written by the CLI."""
        unknown = sorted(set(self.spec.secrets) - set(SECRET_NAMES))
        if unknown:
            raise ValueError(f"function {self.spec.name}: unknown secrets {unknown}")
        if not self.spec.secrets:
            return
        stack = Stack.of(self)
        names = secret_parameters(self.spec.secrets, named_profiles)
        folder = prefix.strip("/")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["ssm:GetParameter"],
                resources=[
                    stack.format_arn(
                        service="ssm",
                        resource="parameter",
                        resource_name=f"{folder}/{name}",
                        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
                    )
                    for name in names
                ],
            )
        )
        for name in (n for n in names if n.endswith("*")):
            acknowledge(
                self.role,
                f"IAM5[Resource::arn:<AWS::Partition>:ssm:<AWS::Region>:<AWS::AccountId>:parameter/{folder}/{name}]",
                "One secret's values for the named profiles (NAME__<PROFILE>), which the CLI stores: one "
                "pattern per secret keeps the policy within IAM's size limit with ten profiles.",
            )


class GatewayFunctions(Construct):
    """All gateway functions by logical name."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        specs: Iterable[FunctionSpec],
        code_root: str,
        layer: lambda_.ILayerVersion,
        environment: Mapping[str, str],
        secrets_prefix: str,
        named_profiles: Mapping[str, Iterable[PlatformSpec]] | None = None,
        traced: Iterable[str] = (),
        system_log_level: lambda_.SystemLogLevel = lambda_.SystemLogLevel.WARN,
    ) -> None:
        """`named_profiles`: each named profile's deployed platforms (its secrets are granted too);
        `traced`: the functions X-Ray traces."""
        super().__init__(scope, construct_id)
        traced = frozenset(traced)
        self.by_name: dict[str, GatewayFunction] = {
            spec.name: GatewayFunction(
                self,
                spec.name,
                spec=spec,
                code_root=code_root,
                layer=layer,
                environment=environment,
                secrets_prefix=secrets_prefix,
                named_profiles=named_profiles,
                traced=spec.name in traced,
                system_log_level=system_log_level,
            )
            for spec in specs
        }

    def connect(self, targets: GrantTargets) -> None:
        for function in self.by_name.values():
            function.connect(targets)
