"""The deployment's resources, described once.

The CDK stack (`infra/`) and local mode (`local/`) both build the tables, queues, state machine,
functions and schedules from these descriptions, so the two cannot drift. Pure data: no boto3,
no CDK imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from hermes_gateway.errors import ConfigError
from hermes_gateway.platforms.catalog import CATALOG

if TYPE_CHECKING:
    from collections.abc import Mapping


class Access(StrEnum):
    READ = "read"
    WRITE = "write"
    READ_WRITE = "read_write"
    SEND = "send"  # queues: SendMessage
    CONSUME = "consume"  # queues: the function is the event source consumer
    START = "start"  # state machine: StartExecution
    PUT_EVENTS = "put_events"  # event bus: events:PutEvents
    INVOKE = "invoke"  # function: lambda:InvokeFunction (by the state machine)


@dataclass(frozen=True)
class Key:
    name: str
    type: str = "S"  # S | N


@dataclass(frozen=True)
class IndexSpec:
    name: str
    partition: Key
    sort: Key | None = None


@dataclass(frozen=True)
class TableSpec:
    name: str
    env_var: str
    partition: Key
    sort: Key | None = None
    indexes: tuple[IndexSpec, ...] = ()
    ttl_attribute: str | None = None


@dataclass(frozen=True)
class QueueSpec:
    name: str
    env_var: str
    fifo: bool
    visibility_timeout_seconds: int
    max_receive_count: int
    dlq_retention_days: int = 14

    @property
    def dead_letter_name(self) -> str:
        """The dead-letter queue's logical name; its consumer may send to it (a job that can never
        succeed is dead-lettered at once instead of being retried `max_receive_count` times)."""
        return f"{self.name}-dlq"

    @property
    def dead_letter_env_var(self) -> str:
        return self.env_var.removesuffix("_URL") + "_DLQ_URL"


@dataclass(frozen=True)
class EventBusSpec:
    name: str
    env_var: str
    source: str  # the `source` of every event the gateway publishes


@dataclass(frozen=True)
class StateMachineSpec:
    name: str
    env_var: str
    definition_file: str  # relative to the repository root
    # placeholder in the ASL file -> logical name of the function whose ARN replaces it
    substitutions: dict[str, str] = field(default_factory=dict)
    express: bool = True


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    code_dir: str  # relative to the repository root; deployed as the function's code asset
    handler: str  # "module.attribute" inside code_dir
    description: str
    memory_mb: int
    timeout_seconds: int
    # logical resource name -> what the function may do with it
    grants: dict[str, Access] = field(default_factory=dict)
    # SQS queue this function consumes (event source mapping), with its batch size
    consumes: str | None = None
    batch_size: int = 10
    # At most this many concurrent invocations from the queue (the event source's maximum
    # concurrency): a flood cannot run away with the bill, and no account concurrency is reserved
    # (reserving it fails on new accounts whose limit is 10).
    max_concurrency: int | None = None
    # secrets (SSM SecureString names under the deployment prefix) the function may read
    secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    function: str
    rate_minutes: int
    description: str


ROUTES = TableSpec(
    name="routes",
    env_var="HERMES_ROUTES_TABLE",
    partition=Key("session_key"),
    # Sparse index: only routes holding a turn lease carry `lease_shard`, so the expiry sweep
    # finds expired leases with a Query on `lease_expires_at`, never a Scan.
    # `by_policy_deadline` is sparse the same way (routes whose reset policy can expire them: the
    # session sweep); `by_activity` holds every route (idle routes are pruned). Both are sharded.
    indexes=(
        IndexSpec("by_lease_expiry", Key("lease_shard"), Key("lease_expires_at", "N")),
        IndexSpec("by_policy_deadline", Key("policy_shard"), Key("policy_deadline", "N")),
        IndexSpec("by_activity", Key("activity_shard"), Key("last_activity_at", "N")),
    ),
)
SESSIONS = TableSpec(
    name="sessions",
    env_var="HERMES_SESSIONS_TABLE",
    partition=Key("session_id"),
    indexes=(
        IndexSpec("by_key", Key("session_key"), Key("started_at", "N")),
        # list and search are scoped by profile (the key namespace), newest first
        IndexSpec("by_profile", Key("profile"), Key("started_at", "N")),
    ),
)
MESSAGES = TableSpec(
    name="messages",
    env_var="HERMES_MESSAGES_TABLE",
    partition=Key("session_id"),
    sort=Key("seq", "N"),
)
OUTBOX = TableSpec(
    name="outbox",
    env_var="HERMES_OUTBOX_TABLE",
    partition=Key("delivery_id"),
    ttl_attribute="expires_at",
)
IDEMPOTENCY = TableSpec(
    name="idempotency",
    env_var="HERMES_IDEMPOTENCY_TABLE",
    partition=Key("id"),
    ttl_attribute="expiration",
)
# Authorization state (hermes_gateway.adapters.dynamo_access): approved users, pending pairing
# codes (hashed), request limits and lockouts, each kind under its own partition prefix.
ACCESS = TableSpec(
    name="access",
    env_var="HERMES_ACCESS_TABLE",
    partition=Key("pk"),
    sort=Key("sk"),
    ttl_attribute="expires_at",
)
# Where messages can go (hermes_gateway.adapters.dynamo_directory): home channels set by /sethome,
# chats seen by name (for `#name` targets), and targets found gone (blocked, removed).
DIRECTORY = TableSpec(
    name="directory",
    env_var="HERMES_DIRECTORY_TABLE",
    partition=Key("pk"),
    sort=Key("sk"),
    ttl_attribute="expires_at",
)
# Cron jobs (hermes_gateway.adapters.dynamo_jobs). Sparse index: only a job that can fire carries
# `due_shard`, so the tick finds due jobs with a Query on `next_run_at`, never a Scan, and a
# paused or finished job is not in the index at all.
JOBS = TableSpec(
    name="jobs",
    env_var="HERMES_JOBS_TABLE",
    partition=Key("job_id"),
    indexes=(IndexSpec("by_next_run", Key("due_shard"), Key("next_run_at", "N")),),
)
# Durable memory notes (hermes_gateway.adapters.dynamo_memory): per scope (`profile#user-hash`)
# one counter item and one item per note, so the note limit holds under concurrent turns.
MEMORY = TableSpec(
    name="memory",
    env_var="HERMES_MEMORY_TABLE",
    partition=Key("scope"),
    sort=Key("entry"),
)
TABLES: tuple[TableSpec, ...] = (ROUTES, SESSIONS, MESSAGES, OUTBOX, IDEMPOTENCY, ACCESS, DIRECTORY, JOBS, MEMORY)

INBOUND_QUEUE = QueueSpec(
    name="inbound",
    env_var="HERMES_INBOUND_QUEUE_URL",
    fifo=True,
    visibility_timeout_seconds=60,  # >= 6 x the router timeout is AWS's advice for SQS sources
    # A message for a busy session is retried with a delay that grows with the running turn's age;
    # the receives must cover the longest turn before the message is dead-lettered (settings check it).
    max_receive_count=30,
)
DELIVERY_QUEUE = QueueSpec(
    name="delivery",
    env_var="HERMES_DELIVERY_QUEUE_URL",
    # FIFO, one group per target chat (adapters.aws.delivery_group_id): a reply retried after a 429
    # holds back the chat's later replies instead of being overtaken by them. De-duplicated on the
    # delivery id.
    fifo=True,
    visibility_timeout_seconds=180,
    # Transient failures back off exponentially (services.delivery.retry_delay_seconds): eight
    # receives ride out about ten minutes of a platform outage before the job is dead-lettered
    # (the chat's later jobs received in the same batches, held back behind it, count theirs too).
    max_receive_count=8,
)
QUEUES: tuple[QueueSpec, ...] = (INBOUND_QUEUE, DELIVERY_QUEUE)

TURN_STATE_MACHINE = StateMachineSpec(
    name="turn",
    env_var="HERMES_TURN_STATE_MACHINE_ARN",
    definition_file="infra/statemachines/turn.asl.json",
    substitutions={"AgentFunctionArn": "agent"},
)

# Lifecycle events (BEHAVIOUR §8) go to the deployment's own bus: subscribe with ordinary rules.
EVENT_BUS = EventBusSpec(name="events", env_var="HERMES_EVENT_BUS_NAME", source="hermes.gateway")

# Every platform's secrets come from the platform catalog; the ingress reads those that verify
# webhooks, the delivery function those that send.
INBOUND_SECRETS = tuple(dict.fromkeys(s for p in CATALOG if not p.local_only for s in p.inbound_secrets))
SEND_SECRETS = tuple(dict.fromkeys(s for p in CATALOG if not p.local_only for s in p.send_secrets))
SECRET_NAMES = tuple(
    dict.fromkeys(
        (*INBOUND_SECRETS, *SEND_SECRETS, "OPENAI_API_KEY", "HONCHO_API_KEY", *(s for p in CATALOG for s in p.secrets))
    )
)

FUNCTIONS: tuple[FunctionSpec, ...] = (
    FunctionSpec(
        name="ingress",
        code_dir="functions/ingress",
        handler="handler.lambda_handler",
        description="Webhooks: verify, normalize, de-duplicate, enqueue, acknowledge",
        memory_mb=512,
        timeout_seconds=10,
        grants={"idempotency": Access.READ_WRITE, "inbound": Access.SEND},
        secrets=INBOUND_SECRETS,
    ),
    FunctionSpec(
        name="router",
        code_dir="functions/router",
        handler="handler.lambda_handler",
        description="Inbound queue consumer: authorize, route to a session, start the turn",
        memory_mb=512,
        timeout_seconds=10,
        grants={
            "routes": Access.READ_WRITE,
            "sessions": Access.READ_WRITE,
            "messages": Access.READ_WRITE,
            "access": Access.READ_WRITE,
            "directory": Access.READ_WRITE,
            "idempotency": Access.READ_WRITE,  # receipts: a redelivered /undo or /new runs once
            "events": Access.PUT_EVENTS,
            "inbound": Access.CONSUME,
            "delivery": Access.SEND,
            "turn": Access.START,
        },
        consumes="inbound",
        max_concurrency=20,
    ),
    FunctionSpec(
        name="agent",
        code_dir="functions/agent",
        handler="handler.lambda_handler",
        description="Turn tasks run by the turn state machine: prepare, model call, deliver, commit",
        memory_mb=512,
        timeout_seconds=120,
        grants={
            "routes": Access.READ_WRITE,
            "sessions": Access.READ_WRITE,
            "messages": Access.READ_WRITE,
            "delivery": Access.SEND,
            # the agent's tools: memory notes, send_message's targets, cronjob
            "memory": Access.READ_WRITE,
            "directory": Access.READ,
            "jobs": Access.READ_WRITE,
            # continuations of long turns and the turns of queued messages; agent:* events
            "turn": Access.START,
            "events": Access.PUT_EVENTS,
        },
        secrets=("OPENAI_API_KEY", "HONCHO_API_KEY"),
    ),
    FunctionSpec(
        name="delivery",
        code_dir="functions/delivery",
        handler="handler.lambda_handler",
        description="Delivery queue consumer: platform send with chunking, outbox, retries, mirror",
        memory_mb=256,
        timeout_seconds=30,
        grants={
            "outbox": Access.READ_WRITE,
            "delivery": Access.CONSUME,
            "directory": Access.READ_WRITE,
            "events": Access.PUT_EVENTS,
            # mirroring a pushed message into the target chat's transcript
            "routes": Access.READ,
            "sessions": Access.READ_WRITE,
            "messages": Access.READ_WRITE,
            # a cron run's delivery status (services.delivery records it on the job)
            "jobs": Access.READ_WRITE,
        },
        consumes="delivery",
        batch_size=5,
        max_concurrency=10,
        secrets=SEND_SECRETS,
    ),
    FunctionSpec(
        name="expiry",
        code_dir="functions/expiry",
        handler="handler.lambda_handler",
        description="Scheduled: expired leases, due cron jobs, expired sessions (flush, end), idle routes",
        memory_mb=256,
        timeout_seconds=60,
        grants={
            "routes": Access.READ_WRITE,
            "sessions": Access.READ_WRITE,  # the session sweep ends expired sessions
            # a lease lost with messages queued behind it: they join the transcript, their turn starts
            "messages": Access.READ_WRITE,
            # cron: claim due jobs (the due index), start their turns, publish cron:ran
            "jobs": Access.READ_WRITE,
            "turn": Access.START,
            "events": Access.PUT_EVENTS,
        },
    ),
    FunctionSpec(
        name="session_api",
        code_dir="functions/session_api",
        handler="handler.lambda_handler",
        description="Session API (IAM-signed): create, resume, mutate, detach, list and search sessions",
        memory_mb=256,
        timeout_seconds=10,
        grants={
            "routes": Access.READ_WRITE,
            "sessions": Access.READ_WRITE,
            "messages": Access.READ_WRITE,
            # request receipts (`session-api#…` items) beside the ingress's idempotency records
            "idempotency": Access.READ_WRITE,
            "events": Access.PUT_EVENTS,
            "turn": Access.START,  # a `reset` starts the replaced session's memory flush
        },
    ),
)

SCHEDULES: tuple[ScheduleSpec, ...] = (
    ScheduleSpec(
        name="tick",
        function="expiry",
        rate_minutes=1,
        description="Every minute: expired leases, cron jobs, the session expiry sweep, idle route pruning",
    ),
)


def secrets_prefix(stage: str) -> str:
    """Where the CLI writes the SSM SecureString secrets of a stage (never created by the stack)."""
    return f"/hermes-gateway/{stage}/"


def function(name: str) -> FunctionSpec:
    for spec in FUNCTIONS:
        if spec.name == name:
            return spec
    raise KeyError(name)


def repo_root() -> Path:
    """The repository root, for reading shared files such as the ASL definition."""
    return Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Bindings:
    """The physical names each function is given through its environment."""

    tables: dict[str, str]
    queues: dict[str, str]
    state_machines: dict[str, str]
    event_bus: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Bindings:
        return cls(
            tables={t.name: env[t.env_var] for t in TABLES if t.env_var in env},
            queues={
                **{q.name: env[q.env_var] for q in QUEUES if q.env_var in env},
                **{q.dead_letter_name: env[q.dead_letter_env_var] for q in QUEUES if q.dead_letter_env_var in env},
            },
            state_machines={m.name: env[m.env_var] for m in (TURN_STATE_MACHINE,) if m.env_var in env},
            event_bus=env.get(EVENT_BUS.env_var),
        )

    def table(self, name: str) -> str:
        try:
            return self.tables[name]
        except KeyError:
            spec = next(t for t in TABLES if t.name == name)
            raise ConfigError(f"environment variable {spec.env_var} is not set (table {name})") from None

    def queue(self, name: str) -> str:
        try:
            return self.queues[name]
        except KeyError:
            spec = next(q for q in QUEUES if name in (q.name, q.dead_letter_name))
            var = spec.env_var if name == spec.name else spec.dead_letter_env_var
            raise ConfigError(f"environment variable {var} is not set (queue {name})") from None

    def state_machine(self, name: str) -> str:
        try:
            return self.state_machines[name]
        except KeyError:
            raise ConfigError(
                f"environment variable {TURN_STATE_MACHINE.env_var} is not set (state machine {name})"
            ) from None
