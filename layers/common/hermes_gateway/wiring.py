"""Builds settings and adapters from the environment, once per cold start.

Handlers ask this module for what they need; nothing is created before it is first used, so a
function pays only for the clients it touches. `reset()` forgets everything (tests, local mode).
"""

from __future__ import annotations

import hashlib
import os
import time
from functools import cache, lru_cache
from typing import TYPE_CHECKING

from hermes_gateway.resources import Bindings
from hermes_gateway.secrets import Secrets
from hermes_gateway.settings import Settings, load_settings

if TYPE_CHECKING:
    from hermes_gateway.adapters.aws import IdempotentEnqueue, SqsQueue, StepFunctionsStarter
    from hermes_gateway.adapters.dynamo_access import DynamoAccessStore
    from hermes_gateway.adapters.dynamo_directory import DynamoDirectory
    from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
    from hermes_gateway.adapters.dynamo_sessions import DynamoSessionStore
    from hermes_gateway.domain.events import LifecycleEvents
    from hermes_gateway.platforms.base import AdapterContext, Sender
    from hermes_gateway.services.delivery import DeliveryDeps
    from hermes_gateway.services.ingress import InboundAdapter
    from hermes_gateway.services.router import Access
    from hermes_gateway.services.turn import TurnDeps


def local_mode() -> bool:
    return os.environ.get("HERMES_LOCAL_MODE") == "1"


def region() -> str | None:
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


@cache
def settings() -> Settings:
    return load_settings(os.environ, source="environment")


@cache
def bindings() -> Bindings:
    return Bindings.from_env(os.environ)


@cache
def secrets() -> Secrets:
    return Secrets()


@cache
def session_store() -> DynamoSessionStore:
    from hermes_gateway.adapters.dynamo_sessions import DynamoSessionStore

    return DynamoSessionStore(bindings(), region())


@cache
def pairing_store() -> DynamoAccessStore:
    from hermes_gateway.adapters.dynamo_access import DynamoAccessStore

    return DynamoAccessStore(bindings(), region())


@cache
def access() -> Access:
    from hermes_gateway.services.router import Access

    return Access(pairing=pairing_store(), replies=queue("delivery"), events=events(), directory=directory())


@cache
def outbox() -> DynamoOutbox:
    from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox

    return DynamoOutbox(bindings(), region())


@cache
def queue(name: str) -> SqsQueue:
    from hermes_gateway.adapters.aws import SqsQueue

    return SqsQueue(bindings().queue(name), region())


@cache
def turn_starter() -> StepFunctionsStarter:
    from hermes_gateway.adapters.aws import StepFunctionsStarter

    return StepFunctionsStarter(bindings().state_machine("turn"), region())


@cache
def adapter_context(platform: str) -> AdapterContext:
    from hermes_gateway.platforms.base import AdapterContext

    return AdapterContext(platform=settings().platforms[platform], settings=settings(), secrets=secrets())


@cache
def inbound_adapter(platform: str) -> InboundAdapter | None:
    """The platform's inbound adapter; None for an unknown platform (and the web chat, deployed)."""
    from hermes_gateway.platforms import catalog

    spec = catalog.spec(platform)
    if spec is None or (spec.local_only and not local_mode()):
        return None
    adapter: InboundAdapter = catalog.load(spec.inbound)(adapter_context(platform))
    return adapter


@cache
def enqueue_once() -> IdempotentEnqueue:
    from hermes_gateway.adapters.aws import IdempotentEnqueue, group_id_for
    from hermes_gateway.services.ingress import IDEMPOTENCY_SECONDS

    inbound = queue("inbound")

    def send(envelope: dict[str, object]) -> str:
        key = str(envelope["session_key"])
        return inbound.send(envelope, group_id=group_id_for(key), dedup_id=str(envelope["event_id"]))

    return IdempotentEnqueue(bindings().table("idempotency"), send, IDEMPOTENCY_SECONDS)


@cache
def turn_deps() -> TurnDeps:
    from hermes_gateway.providers import make_provider
    from hermes_gateway.services.turn import TurnDeps

    store = session_store()
    return TurnDeps(
        settings=settings(),
        store=store,
        lease=store,
        provider=cache(lambda: make_provider(settings().provider, secrets())),
        delivery=queue("delivery"),
        now=time.time,
    )


def sender_for(platform: str, via: str = "") -> Sender | None:
    """The sender for a platform (or for the relay a message came through). None when it cannot
    send; local mode records instead what it cannot (or should not) really send.

    A sender is reused while its secrets stay the same (it may hold an OAuth token), and rebuilt
    when one was rotated: secrets are re-read with a 5-minute cache, so no redeploy is needed."""
    from hermes_gateway.platforms import catalog

    if platform == "local":  # the `local` target: stored in the outbox, never sent
        return _record_only()
    spec = catalog.spec(via or platform)
    sender: Sender | None = None
    if spec is not None and spec.sender is not None and spec.name in settings().platforms:
        fingerprint = hashlib.sha256("\0".join(secrets().get(n) or "" for n in spec.send_secrets).encode()).hexdigest()
        sender = _built_sender(spec.name, fingerprint)
    if sender is None and local_mode():
        return _record_only()
    return sender


@lru_cache(maxsize=32)
def _built_sender(platform: str, secrets_fingerprint: str) -> Sender | None:
    from hermes_gateway.platforms import catalog

    reference = catalog.BY_NAME[platform].sender
    assert reference is not None
    built: Sender | None = catalog.load(reference)(adapter_context(platform))
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
    if not bus:
        return LoggedEvents()
    from hermes_gateway.adapters.aws import EventBridgeEvents

    return EventBridgeEvents(bus, EVENT_BUS.source, region(), keep=200 if local_mode() else 0)


@cache
def directory() -> DynamoDirectory:
    from hermes_gateway.adapters.dynamo_directory import DynamoDirectory

    return DynamoDirectory(bindings(), region())


@cache
def delivery_deps() -> DeliveryDeps:
    from hermes_gateway.services.delivery import DeliveryDeps

    return DeliveryDeps(
        outbox=outbox(),
        sender_for=sender_for,
        now=time.time,
        events=events(),
        targets=directory(),
        sessions=session_store(),
        profile=settings().profile,
        store_sensitive=local_mode(),
    )


def reset() -> None:
    for built in (
        settings,
        bindings,
        secrets,
        session_store,
        pairing_store,
        access,
        outbox,
        queue,
        turn_starter,
        adapter_context,
        inbound_adapter,
        _built_sender,
        _record_only,
        enqueue_once,
        turn_deps,
        delivery_deps,
        events,
        directory,
    ):
        built.cache_clear()
