"""Which model overrides a session may choose (`/model`, the session API's `model` op).

An override names a model, a provider and a base URL; the API key always comes from the
deployment's secrets. So a base URL is an address the deployment's `OPENAI_API_KEY` is sent to:
only the profile's own `openai_base_url` and those the operator listed in
`provider.allowed_base_urls` may be chosen. And a Bedrock model works only when the stack granted
`bedrock:InvokeModel` on it (infra's `grant_model`: every profile's configured Bedrock model), so
any other is refused when it is chosen, with the list, instead of failing every turn later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hermes_gateway.domain.sessions import InvalidSessionRequest, ModelOverride


class _ProviderChoice(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def openai_base_url(self) -> str: ...
    @property
    def allowed_base_urls(self) -> tuple[str, ...]: ...


class ModelChoices(Protocol):
    """What the policy reads of the settings (`hermes_gateway.settings.Settings` is one): the
    domain imports no settings, the settings import the domain."""

    @property
    def provider(self) -> _ProviderChoice: ...

    def for_profile(self, name: str | None) -> ModelChoices: ...

    def all_profiles(self) -> Sequence[ModelChoices]: ...


@dataclass(frozen=True)
class ModelPolicy:
    provider: str  # the profile's own provider (an override without one keeps it)
    base_urls: frozenset[str]  # where the deployment's OpenAI-compatible key may be sent
    bedrock_models: frozenset[str]  # the models the stack grants InvokeModel on

    @classmethod
    def of(cls, settings: ModelChoices, profile: str | None = None) -> ModelPolicy:
        """The policy of `profile` in `settings` (None: of `settings` themselves). Given the
        deployment's settings, the Bedrock grant covers every profile's model; a named profile's
        own settings know only its own."""
        chosen = settings if profile is None else settings.for_profile(profile)
        return cls(
            provider=chosen.provider.name,
            base_urls=frozenset(
                _normal(url) for url in (chosen.provider.openai_base_url, *chosen.provider.allowed_base_urls)
            ),
            bedrock_models=frozenset(p.provider.model for p in settings.all_profiles() if p.provider.name == "bedrock"),
        )

    def refusal(self, override: ModelOverride) -> str | None:
        """Why this deployment cannot use the override, or None when it can."""
        if override.base_url is not None and _normal(override.base_url) not in self.base_urls:
            return (
                "base_url must be this profile's own OpenAI-compatible endpoint or one listed in "
                "provider.allowed_base_urls (GATEWAY_ALLOWED_BASE_URLS): the deployment's API key is sent there"
            )
        if (override.provider or self.provider) == "bedrock" and override.model not in self.bedrock_models:
            granted = ", ".join(sorted(self.bedrock_models)) or "none"
            return f"the stack grants Bedrock access to the configured models only ({granted})"
        return None

    def check(self, override: ModelOverride) -> ModelOverride:
        """The override, or InvalidSessionRequest saying why it cannot be used."""
        reason = self.refusal(override)
        if reason is not None:
            raise InvalidSessionRequest(reason)
        return override


def _normal(url: str) -> str:
    return url.strip().rstrip("/")
