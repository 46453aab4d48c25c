"""Builds settings and adapters, once per cold start: the settings from the file the deployment
ships with the functions (`GATEWAY_SETTINGS_FILE`) and the environment, the adapters from the
resource names in the environment.

Handlers ask this module for what they need; nothing is created before it is first used, so a
function pays only for the clients it touches. `reset()` forgets everything (tests, local mode).
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Any

from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import TURN_STATE_MACHINE, Bindings
from hermes_gateway.secrets import Secrets
from hermes_gateway.settings import Settings, load_shipped_settings

if TYPE_CHECKING:
    from hermes_gateway.adapters.aws import LambdaDeliveries, SqsQueue, StepFunctionsStarter
    from hermes_gateway.adapters.dynamo_access import DynamoAccessStore
    from hermes_gateway.adapters.dynamo_directory import DynamoDirectory
    from hermes_gateway.adapters.dynamo_erasures import DynamoErasureRequests
    from hermes_gateway.adapters.dynamo_inbox import DynamoInbox
    from hermes_gateway.adapters.dynamo_jobs import DynamoJobStore
    from hermes_gateway.adapters.dynamo_memory import DynamoNoteStore
    from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
    from hermes_gateway.adapters.dynamo_receipts import DynamoReceipts
    from hermes_gateway.adapters.dynamo_usage import DynamoUsage
    from hermes_gateway.adapters.session_tables import SessionTables
    from hermes_gateway.domain.events import LifecycleEvents
    from hermes_gateway.domain.media import Attachment
    from hermes_gateway.domain.pacing import PaceRule
    from hermes_gateway.domain.pairing import PairingStore
    from hermes_gateway.domain.ports import MailStore, MediaStore, PersonalData, SessionStores
    from hermes_gateway.domain.privacy import ProfileScope
    from hermes_gateway.domain.profiles import ProfileDirectory
    from hermes_gateway.domain.sessions import ModelOverride
    from hermes_gateway.memory.manager import MemoryManager
    from hermes_gateway.platforms.base import AdapterContext, Sender
    from hermes_gateway.platforms.media import Fetched
    from hermes_gateway.providers.base import Provider
    from hermes_gateway.providers.stt import Transcriber
    from hermes_gateway.providers.tts import Synthesizer
    from hermes_gateway.services.cron import CronDeps
    from hermes_gateway.services.delivery import DeliveryDeps, Mirror, Pacing
    from hermes_gateway.services.forget import PersonalStores
    from hermes_gateway.services.ingress import DeliveryReport, HttpResponse, InboundAdapter, MailboxCall
    from hermes_gateway.services.mail_ingress import MailAdapter
    from hermes_gateway.services.mailbox import MailboxDeps
    from hermes_gateway.services.outbound_media import Fetching
    from hermes_gateway.services.router import Access
    from hermes_gateway.services.speech import Speaking
    from hermes_gateway.services.turn import TurnDeps


def local_mode() -> bool:
    return os.environ.get("HERMES_LOCAL_MODE") == "1"


# Local mode: how the user runs the CLI from where they started it (`.venv/bin/hermes-gateway`)
LOCAL_CLI_ENV = "HERMES_LOCAL_CLI"


def region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


@cache
def settings() -> Settings:
    return load_shipped_settings(os.environ)


def profile_settings(profile: str | None = None) -> Settings:
    """A profile's settings (None: the deployment's own); UnknownProfile for one not served."""
    return settings().for_profile(profile)


@cache
def bindings() -> Bindings:
    return Bindings.from_env(os.environ)


@cache
def secrets(profile: str | None = None) -> Secrets:
    """The secrets as a profile reads them: a named profile's bots have their own."""
    return Secrets(profile=profile)


@cache
def session_stores() -> SessionStores:
    """Every session storage port, on the deployment's tables (each table bound when first used)."""
    from hermes_gateway.adapters.session_tables import SessionTables
    from hermes_gateway.settings import rules_from_settings

    return stores_on(SessionTables(bindings(), region(), rules=rules_from_settings(settings())))


def stores_on(tables: SessionTables) -> SessionStores:
    """Every session storage port on `tables` (the deployment's, or a test's in-memory ones)."""
    from hermes_gateway.adapters.dynamo_catalogue import DynamoCatalogue
    from hermes_gateway.adapters.dynamo_edits import DynamoSessionEdits
    from hermes_gateway.adapters.dynamo_leases import DynamoLeases
    from hermes_gateway.adapters.dynamo_personal import DynamoPersonalData
    from hermes_gateway.adapters.dynamo_routes import DynamoRoutes
    from hermes_gateway.adapters.dynamo_sweep import DynamoSweep
    from hermes_gateway.adapters.dynamo_transcript import DynamoTranscript
    from hermes_gateway.adapters.dynamo_turns import DynamoTurnControl
    from hermes_gateway.domain.ports import SessionStores

    personal = DynamoPersonalData(tables)  # a person's data (forget, export) and the retention sweep
    return SessionStores(
        routes=DynamoRoutes(tables),
        leases=DynamoLeases(tables),
        control=DynamoTurnControl(tables),
        transcript=DynamoTranscript(tables),
        catalogue=DynamoCatalogue(tables),
        edits=DynamoSessionEdits(tables),
        sweep=DynamoSweep(tables),
        personal=personal,
        retention=personal,
    )


@cache
def _access_store() -> DynamoAccessStore:
    from hermes_gateway.adapters.dynamo_access import DynamoAccessStore

    return DynamoAccessStore(bindings(), region())


@cache
def pairing_store(profile: str | None = None) -> PairingStore:
    """A profile's pairing codes and approvals: a user paired with one bot is not paired with another."""
    from hermes_gateway.domain.profiles import pairing_for

    return pairing_for(_access_store(), profile)


@cache
def access(profile: str | None = None) -> Access:
    from hermes_gateway.services.router import Access

    return Access(
        pairing=pairing_store(profile),
        replies=deliveries(),
        events=events(),
        directory=directory(profile),
        receipts=receipts(),
        replies_ahead=router_deliveries_ahead(),
        operator_cli=(os.environ.get(LOCAL_CLI_ENV) if local_mode() else None) or "hermes-gateway",
        local=local_mode(),
        usage=usage_book(),
        erasures=erasure_requests(),
    )


@cache
def usage_book() -> DynamoUsage:
    """Per user and profile: the sessions their usage is summed over, the limit window they were
    told about (the access table); their counters are on the routes."""
    from hermes_gateway.adapters.dynamo_table import Table, dynamodb_client
    from hermes_gateway.adapters.dynamo_usage import DynamoUsage
    from hermes_gateway.adapters.models import dynamodb_endpoint

    client = dynamodb_client(region(), dynamodb_endpoint())
    return DynamoUsage(Table(client, bindings().table("routes")), Table(client, bindings().table("access")))


@cache
def receipts() -> DynamoReceipts:
    """Once-per-request records: session API receipts, and session commands once per event."""
    from hermes_gateway.adapters.dynamo_receipts import DynamoReceipts

    return DynamoReceipts(bindings(), region())


@cache
def outbox() -> DynamoOutbox:
    """The outbox, its rows kept 30 days or `sessions.retention_days` when that is shorter (a row
    holds a reply's text: it goes no later than the transcript row it answers)."""
    from hermes_gateway.adapters.dynamo_outbox import RETENTION_SECONDS, DynamoOutbox
    from hermes_gateway.domain.retention import DAY_SECONDS, capped_days

    keep = capped_days(RETENTION_SECONDS // DAY_SECONDS, settings().sessions.retention_days) * DAY_SECONDS
    return DynamoOutbox(bindings(), region(), keep_seconds=keep)


@cache
def media_store() -> MediaStore | None:
    """The media bucket; None where the deployment has none bound (a function not granted it)."""
    from hermes_gateway.adapters.s3_media import S3MediaStore
    from hermes_gateway.resources import MEDIA

    name = bindings().buckets.get(MEDIA.name)
    return S3MediaStore(name, region()) if name else None


@cache
def raw_mail_store() -> MailStore | None:
    """The e-mail SES stored (resources.MAIL, in the media bucket); None where it is not bound."""
    from hermes_gateway.adapters.s3_mail import S3MailStore
    from hermes_gateway.resources import MEDIA

    name = bindings().buckets.get(MEDIA.name)
    return S3MailStore(name, region()) if name else None


def mail_adapter() -> MailAdapter | None:
    """E-mail's inbound adapter (the deployment's own profile serves e-mail); None when disabled."""
    adapter = inbound_adapter("email") if settings().platform("email") is not None else None
    return adapter  # type: ignore[return-value]


@cache
def queue(name: str) -> SqsQueue:
    from hermes_gateway.adapters.aws import SqsQueue

    return SqsQueue(bindings().queue(name), region())


def dead_letters() -> SqsQueue:
    from hermes_gateway.resources import DEAD_LETTERS

    return queue(DEAD_LETTERS.name)


@cache
def deliveries() -> LambdaDeliveries:
    """Delivery jobs as asynchronous invokes of the delivery function (router replies, pushes)."""
    from hermes_gateway.adapters.aws import LambdaDeliveries

    return LambdaDeliveries(bindings().function("delivery"), region())


@cache
def router_deliveries_ahead() -> LambdaDeliveries:
    """The router's replies that go before a turn (a /retry's notice, a reset notice), waited for so
    the turn's answer cannot overtake them. A platform that fails for longer than 3 s gets the job
    the asynchronous way: the router's own time limit is 10 s, for the whole batch."""
    from hermes_gateway.adapters.aws import WaitingDeliveries

    return WaitingDeliveries(bindings().function("delivery"), region(), patience_seconds=3.0)


@cache
def turn_deliveries() -> LambdaDeliveries:
    """A turn's deliveries, waited for before the turn goes on: its chat gets a session's replies
    in the order the turns answered (adapters.aws.WaitingDeliveries)."""
    from hermes_gateway.adapters.aws import WaitingDeliveries

    return WaitingDeliveries(bindings().function("delivery"), region())


@cache
def inbox() -> DynamoInbox:
    from hermes_gateway.adapters.dynamo_inbox import DynamoInbox
    from hermes_gateway.services.ingress import dedup_window_seconds

    return DynamoInbox(bindings().table("inbox"), region(), retention_seconds=dedup_window_seconds)


@cache
def turn_starter() -> StepFunctionsStarter:
    from hermes_gateway.adapters.aws import StepFunctionsStarter

    return StepFunctionsStarter(bindings().state_machine("turn"), region())


@cache
def adapter_context(platform: str, profile: str | None = None) -> AdapterContext:
    """A platform's settings and secrets, as one profile's bot on it has them."""
    from hermes_gateway.platforms.base import AdapterContext

    chosen = profile_settings(profile)
    return AdapterContext(
        platform=chosen.platforms[platform],
        settings=chosen,
        secrets=secrets(profile),
        raw_mail=raw_mail_store() if platform == "email" else None,  # its attachments are read there
    )


@cache
def inbound_adapter(platform: str, profile: str | None = None) -> InboundAdapter | None:
    """The platform's inbound adapter for a profile; None for an unknown platform or profile (and
    the web chat, deployed)."""
    from hermes_gateway.errors import UnknownProfile
    from hermes_gateway.platforms import catalog

    spec = catalog.spec(platform)
    if spec is None or (spec.local_only and not local_mode()):
        return None
    try:
        context = adapter_context(platform, profile)
    except UnknownProfile:
        return None
    adapter: InboundAdapter = catalog.load(spec.inbound)(context)
    return adapter


@cache
def turn_deps(profile: str | None = None) -> TurnDeps:
    """A profile's turn: its settings, model, tools, memory and home channels."""
    from hermes_gateway.platforms.base import presence_of
    from hermes_gateway.services.delivery import send_slot
    from hermes_gateway.services.turn import TurnDeps
    from hermes_gateway.tools.registry import tools_for

    chosen = profile_settings(profile)
    stores = session_stores()
    # what the function was granted (the attachments function, which runs the PrepareMedia task
    # only, has neither the directory nor the workflow)
    found = bindings()
    ports: dict[str, object] = {"directory": directory(profile)} if "directory" in found.tables else {}
    if "jobs" in found.tables:
        ports["jobs"] = job_store()

    def provider_for(override: ModelOverride | None) -> Provider:
        return _provider(override, profile)

    return TurnDeps(
        settings=chosen,
        leases=stores.leases,
        control=stores.control,
        transcript=stores.transcript,
        catalogue=stores.catalogue,
        edits=stores.edits,
        provider=cache(lambda: provider_for(None)),
        deliveries=deliveries(),
        replies=turn_deliveries(),
        starter=turn_starter() if TURN_STATE_MACHINE.name in found.state_machines else _NO_TURNS,
        now=time.time,
        events=events(),
        tools=lambda kind: tools_for(kind.value, chosen),  # type: ignore[arg-type]
        provider_for=provider_for,
        tool_ports=ports,
        jobs=job_store() if "jobs" in bindings().tables else None,
        home_channels=lambda: _home_channels(profile),
        memory=(lambda: memory_manager(profile)) if "memory" in bindings().tables else None,
        media=media_store(),
        fetch_media=fetch_media,
        transcriber=cache(lambda: transcriber(profile)),
        presence=lambda platform, via: presence_of(sender_for(platform, via, profile)),
        # a streamed answer: posted and edited by the agent, its message's row in the outbox
        senders=lambda platform, via: sender_for(platform, via, profile),
        outbox=outbox() if "outbox" in bindings().tables else None,
        send_slot=lambda platform, chat_id: send_slot(delivery_deps(profile), platform, chat_id),
        deliver=_deliver_here if _sends_here() else None,
    )


class _NoTurns:
    """The turn starter of a function not granted the workflow: it starts no turn."""

    def start(self, name: str, state: Mapping[str, Any]) -> bool:
        raise ConfigError("this function is not granted the turn workflow: it starts no turns")

    def ended_before(self, name: str, at: float) -> bool:
        return False


_NO_TURNS = _NoTurns()


def _sends_here() -> bool:
    """The agent sends its turns' answers itself when it is bound to what the delivery function
    uses for a reply: the outbox, the directory (a chat that is gone) and the dead letters."""
    from hermes_gateway.resources import DEAD_LETTERS

    found = bindings()
    return "outbox" in found.tables and "directory" in found.tables and DEAD_LETTERS.name in found.queues


def _deliver_here(job: Mapping[str, Any]) -> str:
    """A turn's delivery job sent by the agent itself (the Respond task that ends its turn), as
    the delivery function would send it, under the job's profile; its outcome."""
    from hermes_gateway.services.delivery import TURN_MEDIA_SECONDS, TURN_WAIT_BUDGET_SECONDS, run_job

    deadline = time.monotonic() + TURN_MEDIA_SECONDS
    return run_job(dict(job), _quiet_delivery_deps, dead_letters(), events(), TURN_WAIT_BUDGET_SECONDS, deadline)


@cache
def _quiet_delivery_deps(profile: str | None = None) -> DeliveryDeps:
    """delivery_deps without the `delivered` line: the agent's `agent:end` line says it."""
    return replace(delivery_deps(profile), logs_delivered=False)


def fetch_media(attachment: Attachment, platform: str, profile: str | None, limit: int) -> Fetched:
    """An inbound attachment's bytes, fetched with the bot's credentials (platforms/media.py)."""
    from hermes_gateway.platforms import catalog
    from hermes_gateway.platforms.media import MediaUnavailable

    spec = catalog.spec(platform)
    if spec is None or spec.media is None:
        raise MediaUnavailable(f"{platform} does not hand over files to the gateway")
    fetcher = catalog.load(spec.media)
    return fetcher(adapter_context(platform, profile), attachment, limit)  # type: ignore[no-any-return]


def transcriber(profile: str | None = None) -> Transcriber | None:
    """The profile's speech to text, or None when it has none (stt.provider none)."""
    from hermes_gateway.providers.stt import OpenAITranscriber

    chosen = profile_settings(profile)
    if chosen.stt_provider != "openai":
        return None
    keys = secrets(profile)
    base = chosen.stt.base_url or chosen.provider.openai_base_url
    api_key = keys.get("STT_API_KEY") or keys.get("OPENAI_API_KEY")  # the operator set both URLs
    return OpenAITranscriber(base, api_key, chosen.stt.model)


def synthesizer(profile: str | None = None) -> Synthesizer | None:
    """The profile's text to speech, or None when it has none (tts.provider none)."""
    from hermes_gateway.providers.tts import OpenAISpeech

    chosen = profile_settings(profile)
    if chosen.tts.provider == "polly":
        from hermes_gateway.adapters.polly_speech import PollySpeech

        return PollySpeech(chosen.tts.polly_voice, chosen.tts.polly_engine)
    if chosen.tts.provider != "openai":
        return None
    keys = secrets(profile)
    base = chosen.tts.base_url or chosen.provider.openai_base_url
    api_key = keys.get("TTS_API_KEY") or keys.get("OPENAI_API_KEY")  # the operator set both URLs
    return OpenAISpeech(base, api_key, chosen.tts.model, chosen.tts.voice)


def _speaking(profile: str | None) -> Speaking | None:
    """How a profile's answers are spoken (services/speech.py); None when speech is not set up."""
    from hermes_gateway.services.speech import Speaking

    chosen = profile_settings(profile)
    if chosen.tts.provider == "none":
        return None
    return Speaking(cache(lambda: synthesizer(profile)), chosen.tts.max_chars)


def _provider(override: ModelOverride | None, profile: str | None = None) -> Provider:
    """The profile's provider, or the session's override of model, provider and base URL (the
    key always comes from the deployment's secrets, never from the session)."""
    from hermes_gateway.domain.model_policy import ModelPolicy
    from hermes_gateway.errors import PermanentError
    from hermes_gateway.providers import make_provider

    chosen = profile_settings(profile).provider
    if override:
        # An override stored before its endpoint or model was allowed (or since the settings
        # changed) never gets the deployment's key sent elsewhere: the turn fails with the reason.
        reason = ModelPolicy.of(settings(), profile).refusal(override)
        if reason is not None:
            raise PermanentError(f"this session's model override cannot be used ({reason}); /model default clears it")
        chosen = replace(
            chosen,
            name=override.provider or chosen.name,
            model=override.model or chosen.model,
            openai_base_url=override.base_url or chosen.openai_base_url,
        )
    return make_provider(chosen, secrets(profile))


_HOMES_TTL_SECONDS = 60.0
_homes_cache: dict[str | None, tuple[float, dict[str, str]]] = {}


def _home_channels(profile: str | None = None) -> dict[str, str]:
    """Each enabled platform's home channel (`/sethome` first, else the configured one), read
    once a minute per container and profile: every turn's context names them, and they rarely
    change."""
    now = time.monotonic()
    cached = _homes_cache.get(profile)
    if cached is not None and now - cached[0] < _HOMES_TTL_SECONDS:
        return dict(cached[1])
    homes = _read_home_channels(profile)
    _homes_cache[profile] = (now, homes)
    return dict(homes)


def flush_events() -> None:
    """Wait for the lifecycle events this invocation emitted (every handler, before it returns)."""
    from hermes_gateway.domain.events import flush_events as flush

    flush(events())


def publishes_events(handler: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """For a Lambda handler that emits lifecycle events: they are published beside its work, and
    the handler returns (or raises) only once they are out."""

    @functools.wraps(handler)
    def wrapped(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        finally:
            flush_events()

    return wrapped


def _read_home_channels(profile: str | None) -> dict[str, str]:
    homes: dict[str, str] = {}
    for name, platform in profile_settings(profile).platforms.items():
        if not platform.enabled:
            continue
        found = directory(profile).home(name)
        if found is not None:
            homes[name] = found[0] + (f":{found[1]}" if found[1] else "")
        elif platform.home_channel:
            homes[name] = platform.home_channel
    return homes


def sender_for(platform: str, via: str = "", profile: str | None = None) -> Sender | None:
    """The sender for a platform (or for the relay a message came through), as a profile's bot.
    None when it cannot send; local mode records instead what it cannot (or should not) really send.

    A sender is reused while its secrets stay the same (it may hold an OAuth token), and rebuilt
    when one was rotated: secrets are re-read with a 5-minute cache, so no redeploy is needed."""
    from hermes_gateway.platforms import catalog

    if platform == "local":  # the `local` target: stored in the outbox, never sent
        return _record_only()
    spec = catalog.spec(via or platform)
    sender: Sender | None = None
    if spec is not None and spec.sender is not None and spec.name in settings().platforms:
        values = "\0".join(secrets(profile).get(n) or "" for n in spec.send_secrets)
        sender = _built_sender(spec.name, profile, hashlib.sha256(values.encode()).hexdigest())
    if sender is None and local_mode():
        return _record_only()
    return sender


@lru_cache(maxsize=32)
def _built_sender(platform: str, profile: str | None, secrets_fingerprint: str) -> Sender | None:
    from hermes_gateway.platforms import catalog

    reference = catalog.BY_NAME[platform].sender
    assert reference is not None
    built: Sender | None = catalog.load(reference)(adapter_context(platform, profile))
    return built


@cache
def _record_only() -> Sender:
    from hermes_gateway.services.delivery import RecordOnly

    return RecordOnly()


@cache
def events() -> LifecycleEvents:
    """The deployment's event bus when the function was granted it; log lines otherwise."""
    from hermes_gateway.domain.events import LoggedEvents
    from hermes_gateway.resources import EVENT_BUS

    bus = bindings().event_bus
    published: LifecycleEvents = LoggedEvents()
    if bus:
        from hermes_gateway.adapters.aws import EventBridgeEvents

        published = EventBridgeEvents(
            bus,
            EVENT_BUS.source,
            region(),
            keep=200 if local_mode() else 0,
            background=True,
            only=settings().hooks.bus_events,
        )
    return _with_hooks(published)


def _with_hooks(published: LifecycleEvents) -> LifecycleEvents:
    """The deployment's in-process hooks observe every event too (none enabled: no wrapper)."""
    from hermes_gateway.domain.events import HookedEvents
    from hermes_gateway.hooks import load_hooks

    hooks = load_hooks(settings().hooks.enabled)
    if not hooks:
        return published
    context = {
        "stage": settings().stage,
        "profile": settings().profile,
        "function": os.environ.get("AWS_LAMBDA_FUNCTION_NAME", ""),
    }
    return HookedEvents(published, hooks, context)


@cache
def job_store() -> DynamoJobStore:
    from hermes_gateway.adapters.dynamo_jobs import DynamoJobStore

    return DynamoJobStore(bindings(), region())


@cache
def cron_deps() -> CronDeps:
    from hermes_gateway.services.cron import CronDeps

    return CronDeps(
        jobs=job_store(),
        starter=turn_starter(),
        events=events(),
        time_zone=settings().time_zone,
        grace_seconds=settings().cron.grace_seconds,
        max_jobs_per_tick=settings().cron.max_jobs_per_tick,
    )


@cache
def note_store() -> DynamoNoteStore:
    from hermes_gateway.adapters.dynamo_memory import DynamoNoteStore

    return DynamoNoteStore(bindings(), region())


def memory_manager(profile: str | None = None) -> MemoryManager:
    """A new manager for each turn step (it holds the turn's session); the note store is shared
    (notes are kept per profile and user)."""
    from hermes_gateway.memory.registry import build_memory_manager

    chosen = profile_settings(profile)
    honcho_key = secrets(profile).get("HONCHO_API_KEY") if chosen.memory.external == "honcho" else None
    return build_memory_manager(chosen, note_store(), honcho_key)


@cache
def erasure_requests() -> DynamoErasureRequests:
    """The chats' `/forget` requests (the access table): asked by the router, erased by the tick."""
    from hermes_gateway.adapters.dynamo_erasures import DynamoErasureRequests

    return DynamoErasureRequests(bindings(), region())


@cache
def personal_stores() -> PersonalStores:
    """Where a person's data is, in every profile (the tick's erasures)."""
    return personal_stores_on(bindings(), settings(), region(), data=session_stores().personal)


def personal_stores_on(
    on: Bindings,
    chosen: Settings,
    where: str | None,
    *,
    data: PersonalData | None = None,
    scopes: tuple[ProfileScope, ...] | None = None,
) -> PersonalStores:
    """A person's data on a deployment's resources (the tick's, or the CLI's from a stack's
    outputs or a running local mode), for the profiles `scopes` names (default: `chosen`'s)."""
    from hermes_gateway.adapters.dynamo_access import DynamoAccessStore
    from hermes_gateway.adapters.dynamo_jobs import DynamoJobStore
    from hermes_gateway.adapters.dynamo_memory import DynamoNoteStore
    from hermes_gateway.adapters.dynamo_personal import DynamoPersonalData
    from hermes_gateway.adapters.dynamo_table import Table, dynamodb_client
    from hermes_gateway.adapters.dynamo_usage import DynamoUsage
    from hermes_gateway.adapters.models import dynamodb_endpoint
    from hermes_gateway.adapters.s3_media import S3MediaStore
    from hermes_gateway.adapters.session_tables import SessionTables
    from hermes_gateway.resources import MEDIA
    from hermes_gateway.services.forget import PersonalStores, profile_scopes
    from hermes_gateway.settings import rules_from_settings

    bucket = on.buckets.get(MEDIA.name)
    client = dynamodb_client(where, dynamodb_endpoint())
    return PersonalStores(
        scopes=scopes or profile_scopes(chosen),
        data=data or DynamoPersonalData(SessionTables(on, where, rules=rules_from_settings(chosen))),
        notes=DynamoNoteStore(on, where),
        pairing=DynamoAccessStore(on, where),
        jobs=DynamoJobStore(on, where),
        media=S3MediaStore(bucket, where) if bucket else None,
        usage=DynamoUsage(Table(client, on.table("routes")), Table(client, on.table("access"))),
        external_memory=chosen.memory.external,
        honcho_workspace=chosen.memory.honcho_workspace,
    )


@cache
def _directory_store() -> DynamoDirectory:
    from hermes_gateway.adapters.dynamo_directory import DynamoDirectory

    return DynamoDirectory(bindings(), region())


@cache
def directory(profile: str | None = None) -> ProfileDirectory:
    """A profile's home channels, named chats and gone targets (each bot has its own)."""
    from hermes_gateway.domain.profiles import directory_for

    return directory_for(_directory_store(), profile)


def report_delivery(platform: str, report: DeliveryReport) -> None:
    """The ingress records a platform's report that a sent message failed later, before it
    acknowledges the request (its event is out by then too)."""
    from hermes_gateway.services.delivery import record_failed_later

    record_failed_later(
        platform,
        report.delivery_id,
        report.platform_message_id,
        report.error,
        outbox=outbox(),
        events=events(),
        now=time.time(),
    )
    flush_events()


def serve_mailbox(platform: str, profile: str | None, call: MailboxCall, now: float) -> HttpResponse:
    """The ingress answers a forwarder's call on its mailbox (Signal's: services/mailbox.py)."""
    from hermes_gateway.services.mailbox import serve

    try:
        return serve(platform, profile, call, _mailbox_deps(profile), now)
    finally:
        flush_events()


@cache
def _mailbox_deps(profile: str | None) -> MailboxDeps:
    from hermes_gateway.adapters.s3_media import S3MediaStore
    from hermes_gateway.resources import MEDIA
    from hermes_gateway.services.mailbox import MailboxDeps

    return MailboxDeps(
        letters=outbox(),
        files=S3MediaStore(bindings().bucket(MEDIA.name), region()),
        max_bytes=profile_settings(profile).media.max_bytes,
        events=events(),
    )


@cache
def delivery_deps(profile: str | None = None) -> DeliveryDeps:
    """Delivery as a profile's bots send: their senders, their gone targets, their session keys."""
    from hermes_gateway.services.delivery import OUTBOX_PREVIEW_CHARS, DeliveryDeps

    def profile_sender(platform: str, via: str) -> Sender | None:
        return sender_for(platform, via, profile)

    return DeliveryDeps(
        outbox=outbox(),
        sender_for=profile_sender,
        now=time.time,
        events=events(),
        targets=directory(profile),
        sessions=_mirror(),
        profile=profile_settings(profile).profile,
        store_sensitive=local_mode(),
        # Deployed, a long chunk's row keeps a preview (a row under 1 KB is one write unit); local
        # mode's outbox page shows every reply in full (the benches ask for the deployed rows).
        outbox_text_chars=None if local_mode() and not _deployed_outbox_rows() else OUTBOX_PREVIEW_CHARS,
        jobs=job_store() if "jobs" in bindings().tables else None,
        reply_to_mode=lambda platform: _reply_to_mode(platform, profile),
        media=_outbound_fetching(profile),
        speaking=_speaking(profile),
        heard=_heard(profile),
        pacing=_pacing() if "directory" in bindings().tables else None,
        pace_for=lambda platform, chat_id: _pace_for(platform, chat_id, profile),
    )


def _heard(profile: str | None) -> Callable[[str, str], float | None] | None:
    """When a person last wrote to a profile's bot, read from their chat's route (a function
    granted the routes table; a push to a WhatsApp user asks, domain/service_window.py)."""
    if "routes" not in bindings().tables:
        return None
    from hermes_gateway.services.delivery import last_heard

    own = profile_settings(profile).profile
    return lambda platform, chat_id: last_heard(session_stores().routes, platform, chat_id, own)


@cache
def _pacing() -> Pacing:
    from hermes_gateway.adapters.dynamo_pacing import DynamoPacing

    return DynamoPacing(bindings(), region())


def _pace_for(platform: str, chat_id: str, profile: str | None) -> PaceRule | None:
    """How a profile's bot paces its sends to one chat (None: not paced): Telegram's groups."""
    if platform != "telegram":  # (every send asks: the others are answered without a lookup)
        return None
    found = profile_settings(profile).platforms.get(platform)
    if found is None:
        return None
    from hermes_gateway.platforms.telegram import group_pace

    return group_pace(chat_id, int(found.options.get("group_sends_per_minute", 0) or 0))


def _outbound_fetching(profile: str | None) -> Fetching | None:
    """How a reply's MEDIA references are fetched: into the media bucket, `media.max_bytes` each;
    local mode also fetches http(s) on loopback (a laptop's or a test's file server)."""
    from hermes_gateway.services.outbound_media import Fetching

    store = media_store()
    if store is None:
        return None
    limits = profile_settings(profile).media
    return Fetching(store, limits.max_bytes, local=local_mode(), max_files=limits.max_attachments)


def _reply_to_mode(platform: str, profile: str | None) -> str:
    """A platform's `reply_to_mode` as a profile's bot has it ("off" for one with no settings)."""
    found = profile_settings(profile).platforms.get(platform)
    return found.reply_to_mode if found is not None else "off"


LOCAL_OUTBOX_PREVIEW_ENV = "HERMES_LOCAL_OUTBOX_PREVIEW"


def _deployed_outbox_rows() -> bool:
    """Local mode writes outbox rows as deployed (previews, not whole replies): the benches' item sizes."""
    return os.environ.get(LOCAL_OUTBOX_PREVIEW_ENV) == "1"


def _mirror() -> Mirror | None:
    """Mirroring pushes into chats' transcripts, for a function granted the session tables."""
    from hermes_gateway.services.delivery import Mirror

    if "routes" not in bindings().tables:
        return None
    stores = session_stores()
    return Mirror(stores.routes, stores.leases, stores.transcript)


def reset() -> None:
    _homes_cache.clear()
    for built in (
        settings,
        bindings,
        secrets,
        session_stores,
        _access_store,
        _directory_store,
        pairing_store,
        access,
        usage_book,
        outbox,
        queue,
        deliveries,
        router_deliveries_ahead,
        turn_deliveries,
        media_store,
        raw_mail_store,
        inbox,
        turn_starter,
        adapter_context,
        inbound_adapter,
        _built_sender,
        _record_only,
        turn_deps,
        delivery_deps,
        _quiet_delivery_deps,
        _mailbox_deps,
        events,
        directory,
        job_store,
        note_store,
        cron_deps,
        receipts,
        _pacing,
        erasure_requests,
        personal_stores,
    ):
        built.cache_clear()
