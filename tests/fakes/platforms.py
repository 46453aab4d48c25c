"""Platform adapters and senders built from the catalog, as the wiring builds them, for tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from hermes_gateway.platforms import catalog
from hermes_gateway.platforms.base import AdapterContext, Sender
from hermes_gateway.secrets import Secrets
from hermes_gateway.services.ingress import InboundAdapter
from hermes_gateway.settings import Settings


def context(
    platform: str, settings: Settings, secrets: Mapping[str, str], clock: Callable[[], float] = time.time
) -> AdapterContext:
    return AdapterContext(settings.platforms[platform], settings, Secrets(env=dict(secrets)), clock)


def adapter(
    platform: str, settings: Settings, secrets: Mapping[str, str], clock: Callable[[], float] = time.time
) -> InboundAdapter:
    spec = catalog.BY_NAME[platform]
    built: InboundAdapter = catalog.load(spec.inbound)(context(platform, settings, secrets, clock))
    return built


def adapters(
    settings: Settings, secrets: Mapping[str, str], clock: Callable[[], float] = time.time
) -> Callable[[str], InboundAdapter | None]:
    """What `handle_webhook` takes: the adapter of any catalog platform, None for an unknown one."""
    built: dict[str, InboundAdapter] = {}

    def lookup(platform: str) -> InboundAdapter | None:
        if platform not in catalog.BY_NAME:
            return None
        if platform not in built:
            built[platform] = adapter(platform, settings, secrets, clock)
        return built[platform]

    return lookup


def sender(platform: str, settings: Settings, secrets: Mapping[str, str]) -> Sender | None:
    spec = catalog.BY_NAME[platform]
    assert spec.sender is not None, f"{platform} has no sender"
    built: Sender | None = catalog.load(spec.sender)(context(platform, settings, secrets))
    return built
