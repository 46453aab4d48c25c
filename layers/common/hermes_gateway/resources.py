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
    PUT = "put"  # table: dynamodb:PutItem only (the ingress's one write to the inbox)
    MARK = "mark"  # table: GetItem and UpdateItem only (read an item and change it; no put, delete, query)
    # table: GetItem, BatchGetItem, UpdateItem and Query of its indexes (a forwarder's mailbox in
    # the outbox: collect the letters waiting, settle the ones it sent; no put, delete, scan)
    MAILBOX = "mailbox"
    # bucket: pre-signed URLs for a forwarder: GetObject (a reply's files, to download), and
    # PutObject under `uploads/` only (a message's files, to upload); no listing
    PRESIGN = "presign"
    SEND = "send"  # queues: SendMessage
    # A table's stream: the function is its event source mapping's consumer, and may UpdateItem the
    # table's items (it counts a message's failed attempts on its item)
    CONSUME = "consume"
    START = "start"  # state machine: StartExecution
    # StartExecution, and DescribeExecution of its executions (the router: did the turn a repeated
    # start found already run to its end?)
    START_DESCRIBE = "start_describe"
    PUT_EVENTS = "put_events"  # event bus: events:PutEvents
    INVOKE = "invoke"  # function: lambda:InvokeFunction
    ERASE = "erase"  # bucket: list its keys and delete objects (forget: a person's files)


@dataclass(frozen=True)
class Key:
    name: str
    type: str = "S"  # S | N


@dataclass(frozen=True)
class IndexSpec:
    name: str
    partition: Key
    sort: Key | None = None
    # ALL: a query reads whole items from the index. KEYS_ONLY: the index holds the keys alone,
    # so a write that changes no key attribute writes nothing to it (the reader gets items by key).
    projection: str = "ALL"


@dataclass(frozen=True)
class TableSpec:
    name: str
    env_var: str
    partition: Key
    sort: Key | None = None
    indexes: tuple[IndexSpec, ...] = ()
    ttl_attribute: str | None = None
    stream: str | None = None  # the DynamoDB stream's view type (NEW_IMAGE), or None: no stream


@dataclass(frozen=True)
class QueueSpec:
    """A queue nothing consumes: dead letters wait there for an operator (an alarm watches its
    depth; `hermes-gateway outbox redrive` sends them back). With no consumer there is no poller,
    so an idle queue costs nothing."""

    name: str
    env_var: str
    retention_days: int = 14
    fifo: bool = False


@dataclass(frozen=True)
class StreamSource:
    """How a function consumes a table's stream, as Lambda's event source mapping does it (the CDK
    stack and local mode's poller both read this)."""

    table: str
    batch_size: int = 10  # with no batching window: a lone message is routed at once
    # Concurrent batches per stream shard (Lambda's maximum); order holds per partition key (one
    # session's messages). A session whose message keeps failing holds back only the sessions
    # hashed into its batch's lane, a tenth of its shard's; concurrency is at most 10 per shard.
    parallelization_factor: int = 10
    # Lambda's own limits, a backstop for what the consumer cannot count itself (a crash, a timeout,
    # a throttled attempts counter); the batch's metadata then goes to the on-failure destination
    # and its messages stay in the inbox for the redrive. The consumer pauses 1-5 s before each
    # retry, so 100 retries ride out several minutes of throttling or of a lease that keeps
    # changing hands; a function that crashes outright is given 100 tries, its batch bisected to
    # isolate the record. A message not routed within an hour is given up: an answer that late
    # would confuse more than the alarm does, and the stream (24 hours) still holds the batch, so
    # the redrive reads it back exactly.
    max_retry_attempts: int = 100
    max_record_age_seconds: int = 3600
    bisect_on_error: bool = True
    inserts_only: bool = True  # FilterCriteria: TTL deletions and attempt counts invoke nothing
    on_failure: str = "dead-letters"  # the queue that gets the metadata of a batch Lambda gave up on
    # The consumer dead-letters a message itself (with the reason and the message) after this many
    # failed attempts; a busy session or a throttled call is retried without counting.
    max_attempts: int = 5
    retry_pause_cap_seconds: int = 5  # the consumer waits at most this long before a retry


@dataclass(frozen=True)
class EventBusSpec:
    name: str
    env_var: str
    source: str  # the `source` of every event the gateway publishes


@dataclass(frozen=True)
class BucketSpec:
    """An S3 bucket: encrypted, public access blocked, TLS only; objects expire after the
    settings' retention (`media.retention_days`)."""

    name: str
    env_var: str


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
    # the table stream this function consumes (an event source mapping)
    consumes: StreamSource | None = None
    # Asynchronous invokes (InvocationType=Event): Lambda's retries, how long an event may wait,
    # and the queue that then gets the original event (the function's DeadLetterConfig).
    async_retries: int | None = None
    async_max_event_age_seconds: int | None = None
    dead_letters: str | None = None
    # secrets (SSM SecureString names under the deployment prefix) the function may read
    secrets: tuple[str, ...] = ()
    # tables the function may Scan (a read grant does not include it): small lists for people
    scans: tuple[str, ...] = ()

    @property
    def env_var(self) -> str:
        """Where a function granted INVOKE on this one finds its ARN."""
        return f"HERMES_{self.name.upper()}_FUNCTION_ARN"


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
    # Sparse indexes, so a plain message writes none: only a route with something waiting on its
    # lease (queued messages, an approval) carries `lease_shard`, and the tick recovers it from
    # `by_lease_expiry` when the lease outlives its turn; only a route whose reset policy can
    # expire it carries `policy_shard` (`by_policy_deadline`: the session sweep). Idle routes go
    # by their TTL (`expires_at`, pushed on by every message), which DynamoDB applies for free.
    indexes=(
        IndexSpec("by_lease_expiry", Key("lease_shard"), Key("lease_expires_at", "N")),
        IndexSpec("by_policy_deadline", Key("policy_shard"), Key("policy_deadline", "N")),
    ),
    ttl_attribute="expires_at",
)
SESSIONS = TableSpec(
    name="sessions",
    env_var="HERMES_SESSIONS_TABLE",
    partition=Key("session_id"),
    indexes=(
        IndexSpec("by_key", Key("session_key"), Key("started_at", "N")),
        # list and search are scoped by profile (the key namespace), newest first
        IndexSpec("by_profile", Key("profile"), Key("started_at", "N")),
        # what a turn may search (domain/reach.py): a DM's user, a group's chat; keys only, so
        # only a session's first write touches it
        IndexSpec("by_reach", Key("reach"), Key("started_at", "N"), projection="KEYS_ONLY"),
    ),
)
MESSAGES = TableSpec(
    name="messages",
    env_var="HERMES_MESSAGES_TABLE",
    partition=Key("session_id"),
    sort=Key("seq", "N"),
    # a row's expiry when `sessions.retention_days` is set (domain/retention.py): TTL deletes are free
    ttl_attribute="expires_at",
)
OUTBOX = TableSpec(
    name="outbox",
    env_var="HERMES_OUTBOX_TABLE",
    partition=Key("delivery_id"),
    # Sparse: only a chunk waiting in a forwarder's mailbox (Signal's: platforms/mailbox.py)
    # carries `mailbox`, so no other platform's chunk writes to it; the forwarder collects its
    # letters from it in the order they were posted. Keys only: a letter (a reply's text) is a
    # kilobyte or two, and an index that held it would bill those again on each of its writes;
    # the collection reads the few letters by key instead.
    indexes=(IndexSpec("by_mailbox", Key("mailbox"), Key("queued_at", "N"), projection="KEYS_ONLY"),),
    ttl_attribute="expires_at",
)
IDEMPOTENCY = TableSpec(
    name="idempotency",
    env_var="HERMES_IDEMPOTENCY_TABLE",
    partition=Key("id"),
    ttl_attribute="expiration",
)
# Authorization state (hermes_gateway.adapters.dynamo_access): approved users, pending pairing
# codes (hashed), request limits and lockouts, each kind under its own partition prefix; and per
# user and profile, the sessions their usage is summed over and the limit window they were told
# about (hermes_gateway.adapters.dynamo_usage, BEHAVIOUR §11).
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
# Every inbound message, as the ingress normalized it (hermes_gateway.adapters.dynamo_inbox): one
# conditional put per platform event is both the durable write before the webhook's 200 and the
# de-duplication of the platform's retries. Partitioned by the hashed session key, so the stream
# hands one session's messages to the router in order; an item expires after its platform's retry
# window, when no retry can arrive any more.
INBOX = TableSpec(
    name="inbox",
    env_var="HERMES_INBOX_TABLE",
    partition=Key("group"),
    sort=Key("event_id"),
    ttl_attribute="expires_at",
    stream="NEW_IMAGE",
)
TABLES: tuple[TableSpec, ...] = (
    ROUTES, SESSIONS, MESSAGES, OUTBOX, IDEMPOTENCY, ACCESS, DIRECTORY, JOBS, MEMORY, INBOX,
)  # fmt: skip

# The one dead-letter queue (SQS standard, no consumer): messages the router gave up on (with the
# reason and the message), batches the inbox stream's mapping gave up on (their metadata: the
# messages stay in the inbox), delivery jobs the platform refused (with the reason), and the
# delivery function's failed asynchronous invokes (Lambda's DeadLetterConfig: the job as sent, with
# the error in its attributes). hermes_cli.outbox reads all four.
DEAD_LETTERS = QueueSpec(name="dead-letters", env_var="HERMES_DEAD_LETTERS_QUEUE_URL")
QUEUES: tuple[QueueSpec, ...] = (DEAD_LETTERS,)

# The router consumes the inbox stream (StreamSource has the reasons for each number).
INBOX_SOURCE = StreamSource(table=INBOX.name, on_failure=DEAD_LETTERS.name)

TURN_STATE_MACHINE = StateMachineSpec(
    name="turn",
    env_var="HERMES_TURN_STATE_MACHINE_ARN",
    definition_file="infra/statemachines/turn.asl.json",
    # DeliveryFunctionArn: a Deliver task may invoke the delivery function directly; the
    # PrepareMedia task runs on the attachments function
    substitutions={
        "AgentFunctionArn": "agent",
        "AttachmentsFunctionArn": "attachments",
        "DeliveryFunctionArn": "delivery",
    },
)

# Inbound media fetched once by the turn, and outbound media a platform fetches by URL (BEHAVIOUR §6a).
MEDIA = BucketSpec(name="media", env_var="HERMES_MEDIA_BUCKET")
BUCKETS: tuple[BucketSpec, ...] = (MEDIA,)


@dataclass(frozen=True)
class MailSpec:
    """E-mail through Amazon SES (docs/platforms/email.md): where SES stores each received message
    (the media bucket, under `prefix`: encrypted, private and TLS-only like the rest of it, written
    by SES alone through the bucket policy), how long a stored message is kept, and the names of
    the receipt rule, its rule set and the configuration set whose bounces and complaints reach the
    ingress function. The stack (infra/capabilities/email.py), the functions and local mode all
    read them here."""

    prefix: str = "email/inbound/"
    # A stored message is read when it arrives and when its attachments are fetched for the first
    # turn: kept as long as the dead letters keep an event that names it (14 days), so a redriven
    # event still finds it; the media bucket's own retention applies when it is shorter.
    retention_days: int = 14
    # SES stores at most this much (its receiving limit); ingress reads a stored message whole.
    max_message_bytes: int = 40_000_000
    # The message tag that carries a sent chunk's outbox row to its bounce or complaint event.
    delivery_tag: str = "hermes-delivery"
    # Where SES receives e-mail: its "Email Receiving endpoints" (AWS General Reference, SES
    # endpoints and quotas), as listed in January 2024. A region added since belongs here.
    receiving_regions: frozenset[str] = frozenset({
        "us-east-1", "us-east-2", "us-west-2", "ca-central-1", "eu-central-1", "eu-west-1", "eu-west-2",
        "ap-southeast-1", "ap-southeast-2", "ap-southeast-3", "ap-northeast-1",
    })  # fmt: skip

    def name(self, stage: str) -> str:
        """The receipt rule's, the stack's own rule set's and the configuration set's name."""
        return f"hermes-gateway-{stage}"


MAIL = MailSpec()

# Lifecycle events (BEHAVIOUR §8) go to the deployment's own bus: subscribe with ordinary rules.
EVENT_BUS = EventBusSpec(name="events", env_var="HERMES_EVENT_BUS_NAME", source="hermes.gateway")

# Every platform's secrets come from the platform catalog; the ingress reads those that verify
# webhooks, the delivery function those that send.
INBOUND_SECRETS = tuple(dict.fromkeys(s for p in CATALOG if not p.local_only for s in p.inbound_secrets))
SEND_SECRETS = tuple(dict.fromkeys(s for p in CATALOG if not p.local_only for s in p.send_secrets))
SECRET_NAMES = tuple(
    dict.fromkeys(
        (
            *INBOUND_SECRETS,
            *SEND_SECRETS,
            *("OPENAI_API_KEY", "STT_API_KEY", "TTS_API_KEY", "HONCHO_API_KEY"),
            *(s for p in CATALOG for s in p.secrets),
        )
    )
)

FUNCTIONS: tuple[FunctionSpec, ...] = (
    FunctionSpec(
        name="ingress",
        code_dir="functions/ingress",
        handler="handler.lambda_handler",
        description="Webhooks: verify, normalize, write to the inbox once, acknowledge",
        # A platform waits on it: a cold start imports in ~0.2 s of CPU, 0.6 s at 512 MB's share
        # (1.2 s at 256, with Slack retrying at 3 s); its few ms a message cost little either way.
        memory_mb=512,
        # A webhook is answered in milliseconds; an e-mail of SES's largest (40 MB) takes about 4 s
        # of this memory's CPU share to read and parse, besides its download.
        timeout_seconds=30,
        grants={
            "inbox": Access.PUT,
            # a platform's report that a sent message failed later (WhatsApp `failed` statuses)
            # marks its outbox row and publishes delivery:failed; the Signal forwarder collects
            # the letters in its mailbox and settles those it sent (services/mailbox.py)
            "outbox": Access.MAILBOX,
            # the forwarder's URLs: to download a reply's files, to upload a message's
            "media": Access.PRESIGN,
            "events": Access.PUT_EVENTS,
        },
        # SES invokes it asynchronously with each received e-mail, and EventBridge with the sent
        # mails' bounces (MAIL): an invoke that fails (the inbox throttled) is tried twice more by
        # Lambda, then goes to the dead letters as sent (never dropped). A webhook's invoke waits
        # for its answer and has none of this.
        async_retries=2,
        async_max_event_age_seconds=6 * 3600,
        dead_letters=DEAD_LETTERS.name,
        secrets=INBOUND_SECRETS,
    ),
    FunctionSpec(
        name="router",
        code_dir="functions/router",
        handler="handler.lambda_handler",
        description="Inbox stream consumer: authorize, route to a session, start the turn",
        # About 12 ms of CPU and 40 ms of DynamoDB and Step Functions round trips a message, 65 MB
        # held (bench/cold_start.py): at 256 MB the waits cost half what they did at 512 and the
        # CPU the same (its share halves, the time doubles); no webhook waits on it.
        memory_mb=256,
        timeout_seconds=10,
        grants={
            "routes": Access.READ_WRITE,
            "sessions": Access.READ_WRITE,
            "messages": Access.READ_WRITE,
            "access": Access.READ_WRITE,
            "directory": Access.READ_WRITE,
            "idempotency": Access.READ_WRITE,  # receipts: a redelivered /undo or /new runs once
            "events": Access.PUT_EVENTS,
            "inbox": Access.CONSUME,
            "dead-letters": Access.SEND,  # a message it cannot route after its attempts
            "delivery": Access.INVOKE,  # replies, command answers, notices; waited for before a turn
            "turn": Access.START_DESCRIBE,
        },
        consumes=INBOX_SOURCE,
    ),
    FunctionSpec(
        name="agent",
        code_dir="functions/agent",
        handler="handler.lambda_handler",
        description="Turn tasks of the turn state machine: respond (model call, answer sent), tools, finish, fail",
        # It mostly waits, on the model and on the platform (the answer is sent from here), and
        # Lambda bills each second of waiting by the memory size: 128 MB, Lambda's smallest, makes
        # a model's second 1.67 USD per million messages (3.33 at 256; bench/real_profile.py). It
        # holds the interpreter (65 MB) and a request with the message's images (at most
        # media.MODEL_IMAGE_MAX_BYTES each, with their base64 and the request's copy); a message's
        # files are fetched and read by the attachments function, sized for them.
        memory_mb=128,
        timeout_seconds=120,
        grants={
            "routes": Access.READ_WRITE,
            "sessions": Access.READ_WRITE,
            "messages": Access.READ_WRITE,
            "delivery": Access.INVOKE,  # the turn's replies, the tools' pushes, cron notices
            # the agent's tools: memory notes, send_message's targets, cronjob
            "memory": Access.READ_WRITE,
            # send_message's targets; and a turn's answer sent by the agent itself (finish.py's
            # respond_and_end) marks a chat the platform says is gone, as the delivery function does
            "directory": Access.READ_WRITE,
            "jobs": Access.READ_WRITE,
            # continuations of long turns and the turns of queued messages; agent:* events
            "turn": Access.START,
            "events": Access.PUT_EVENTS,
            # a message's files: their records and images read (the attachments function fetched
            # them); one that joined the turn without its PrepareMedia task (a steered message) fetched here
            "media": Access.READ_WRITE,
            # a streamed answer's message: its row, read and written once; a turn's answer sent here
            "outbox": Access.READ_WRITE,
            "dead-letters": Access.SEND,  # an answer the platform refused for good, with the reason
        },
        # the platforms' send secrets too: a message's attachments are fetched with the bot's token,
        # a streamed answer is posted and edited with it, and a turn's answer sent with it
        secrets=("OPENAI_API_KEY", "STT_API_KEY", "TTS_API_KEY", "HONCHO_API_KEY", *SEND_SECRETS),
        scans=("jobs",),  # the cronjob tool lists a profile's jobs (a handful)
    ),
    FunctionSpec(
        name="attachments",
        code_dir="functions/agent",  # the turn tasks' handler: the workflow gives it its one task, `media`
        handler="handler.lambda_handler",
        description="The turn's PrepareMedia task: a message's files fetched and understood (transcribed, read)",
        # It holds a file up to media.max_bytes' bound of 40 MB beside the interpreter (65 MB), with
        # the copies its upload to the bucket and to speech to text make, and a PDF's reader: the
        # work the agent function, which waits on the model at 128 MB, hands it. It runs only for a
        # message with files (infra/statemachines/turn.asl.json, PrepareMedia).
        memory_mb=256,
        timeout_seconds=75,
        grants={
            "messages": Access.READ,  # the rows the turn reads, with their attachments
            "media": Access.READ_WRITE,  # each file and its record (<key>.json), once
            "delivery": Access.INVOKE,  # the chat is told what a voice note said, or what failed
        },
        # the platforms' send secrets fetch a file with the bot's token; speech to text's key
        secrets=("OPENAI_API_KEY", "STT_API_KEY", *SEND_SECRETS),
    ),
    FunctionSpec(
        name="delivery",
        code_dir="functions/delivery",
        handler="handler.lambda_handler",
        description="Delivery jobs (async invokes, or a list from a turn): platform send, outbox, mirror",
        memory_mb=256,
        timeout_seconds=30,
        grants={
            "outbox": Access.READ_WRITE,
            "dead-letters": Access.SEND,  # a job the platform refused, with the reason
            "directory": Access.READ_WRITE,
            "events": Access.PUT_EVENTS,
            # mirroring a pushed message into the target chat's transcript
            "routes": Access.READ,
            "sessions": Access.READ_WRITE,
            "messages": Access.READ_WRITE,
            # a cron run's delivery status (services.delivery records it on the job)
            "jobs": Access.READ_WRITE,
            "media": Access.READ_WRITE,  # outbound attachments: stored files, and a copy a platform fetches by URL
        },
        # A failed job is tried twice more by Lambda (after about 1 and 2 minutes), then goes to the
        # dead letters as sent. An event that could not even start within an hour (throttled) is
        # dead-lettered too: an answer hours late would confuse more than the alarm does.
        async_retries=2,
        async_max_event_age_seconds=3600,
        dead_letters=DEAD_LETTERS.name,
        # the platforms' send secrets, and the speech API's key for a spoken answer (TTS_API_KEY,
        # else OPENAI_API_KEY, as speech to text reads them)
        secrets=(*SEND_SECRETS, "TTS_API_KEY", "OPENAI_API_KEY"),
    ),
    FunctionSpec(
        name="expiry",
        code_dir="functions/expiry",
        handler="handler.lambda_handler",
        description="Scheduled: expired leases, due cron jobs, expired sessions (flush, end), forget, retention",
        memory_mb=256,
        timeout_seconds=60,
        grants={
            "routes": Access.READ_WRITE,
            # the session sweep ends expired sessions; the retention sweep deletes idle ones
            "sessions": Access.READ_WRITE,
            # a lease lost with messages queued behind it: they join the transcript, their turn starts
            "messages": Access.READ_WRITE,
            # cron: claim due jobs (the due index), start their turns, publish cron:ran
            "jobs": Access.READ_WRITE,
            "turn": Access.START,
            "events": Access.PUT_EVENTS,
            # a chat's confirmed /forget (BEHAVIOUR §11): the request and the person's pairing
            # (access), their memory notes, their files, and the chat's notice when it is done
            "access": Access.READ_WRITE,
            "memory": Access.READ_WRITE,
            "media": Access.ERASE,
            "delivery": Access.INVOKE,
            # a forwarder that stopped collecting its mailbox (the oldest letter in the index)
            "outbox": Access.READ,
        },
        # forget: the person's rows in group sessions, a bounded-rate Scan of the messages table
        # (a rare request), and the jobs made in their DM (a handful)
        scans=("messages", "jobs"),
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
    buckets: dict[str, str] = field(default_factory=dict)
    functions: dict[str, str] = field(default_factory=dict)  # functions this one may invoke: their ARNs

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Bindings:
        return cls(
            tables={t.name: env[t.env_var] for t in TABLES if t.env_var in env},
            queues={q.name: env[q.env_var] for q in QUEUES if q.env_var in env},
            state_machines={m.name: env[m.env_var] for m in (TURN_STATE_MACHINE,) if m.env_var in env},
            event_bus=env.get(EVENT_BUS.env_var),
            buckets={b.name: env[b.env_var] for b in BUCKETS if b.env_var in env},
            functions={f.name: env[f.env_var] for f in FUNCTIONS if f.env_var in env},
        )

    def table(self, name: str) -> str:
        try:
            return self.tables[name]
        except KeyError:
            spec = next(t for t in TABLES if t.name == name)
            raise ConfigError(f"environment variable {spec.env_var} is not set (table {name})") from None

    def bucket(self, name: str) -> str:
        try:
            return self.buckets[name]
        except KeyError:
            spec = next(b for b in BUCKETS if b.name == name)
            raise ConfigError(f"environment variable {spec.env_var} is not set (bucket {name})") from None

    def queue(self, name: str) -> str:
        try:
            return self.queues[name]
        except KeyError:
            spec = next(q for q in QUEUES if q.name == name)
            raise ConfigError(f"environment variable {spec.env_var} is not set (queue {name})") from None

    def function(self, name: str) -> str:
        try:
            return self.functions[name]
        except KeyError:
            raise ConfigError(f"environment variable {function(name).env_var} is not set (function {name})") from None

    def state_machine(self, name: str) -> str:
        try:
            return self.state_machines[name]
        except KeyError:
            raise ConfigError(
                f"environment variable {TURN_STATE_MACHINE.env_var} is not set (state machine {name})"
            ) from None
