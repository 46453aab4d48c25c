"""Platform adapters and senders built from the catalog, as the wiring builds them, for tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from hermes_gateway.errors import UnknownProfile
from hermes_gateway.platforms import catalog
from hermes_gateway.platforms.base import AdapterContext, Sender
from hermes_gateway.secrets import Secrets
from hermes_gateway.services.ingress import AdapterLookup, InboundAdapter
from hermes_gateway.settings import Settings


def context(
    platform: str, settings: Settings, secrets: Mapping[str, str], clock: Callable[[], float] = time.time
) -> AdapterContext:
    """As `wiring.adapter_context`: the settings' own profile reads its own secrets."""
    scoped = Secrets(env=dict(secrets)).for_profile(settings.served_profile)
    return AdapterContext(settings.platforms[platform], settings, scoped, clock)


def adapter(
    platform: str, settings: Settings, secrets: Mapping[str, str], clock: Callable[[], float] = time.time
) -> InboundAdapter:
    spec = catalog.BY_NAME[platform]
    built: InboundAdapter = catalog.load(spec.inbound)(context(platform, settings, secrets, clock))
    return built


def adapters(settings: Settings, secrets: Mapping[str, str], clock: Callable[[], float] = time.time) -> AdapterLookup:
    """What `handle_webhook` takes, as `wiring.inbound_adapter`: the adapter of any catalog
    platform for a profile (its settings and secrets), None for an unknown platform or profile."""
    built: dict[tuple[str, str | None], InboundAdapter] = {}

    def lookup(platform: str, profile: str | None = None) -> InboundAdapter | None:
        if platform not in catalog.BY_NAME:
            return None
        if (platform, profile) not in built:
            try:
                chosen = settings.for_profile(profile)
            except UnknownProfile:
                return None
            built[(platform, profile)] = adapter(platform, chosen, secrets, clock)
        return built[(platform, profile)]

    return lookup


def sender(platform: str, settings: Settings, secrets: Mapping[str, str]) -> Sender | None:
    spec = catalog.BY_NAME[platform]
    assert spec.sender is not None, f"{platform} has no sender"
    built: Sender | None = catalog.load(spec.sender)(context(platform, settings, secrets))
    return built
