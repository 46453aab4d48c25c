"""Model providers, chosen by settings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hermes_gateway.errors import ConfigError

if TYPE_CHECKING:  # the settings import the domain, whose turn state holds provider values
    from hermes_gateway.providers.base import Provider
    from hermes_gateway.secrets import Secrets
    from hermes_gateway.settings import ProviderSettings


def make_provider(settings: ProviderSettings, secrets: Secrets) -> Provider:
    # The providers are imported here, not above: every function imports this package for the
    # turn state's message types (providers.base), and only the agent calls a model; the HTTP and
    # Bedrock clients stay out of the other functions' cold starts.
    from hermes_gateway.providers.bedrock import BedrockProvider
    from hermes_gateway.providers.echo import STREAM_DELAY_ENV, EchoProvider
    from hermes_gateway.providers.openai_compat import OpenAICompatProvider
    from hermes_gateway.providers.retry import RetryPolicy

    retry = RetryPolicy(max_attempts=settings.max_attempts, budget_seconds=settings.retry_budget_seconds)
    if settings.name == "echo":
        import os

        # Tests only: a slow echo that streams (services/turn/stream.py), a word every this many seconds.
        return EchoProvider(chunk_delay=float(os.environ.get(STREAM_DELAY_ENV) or 0))
    if settings.name == "openai":
        # No key is fine: local servers such as Ollama accept anonymous requests.
        api_key = secrets.get("OPENAI_API_KEY")
        return OpenAICompatProvider(
            settings.openai_base_url,
            api_key,
            settings.model,
            settings.timeout_seconds,
            retry,
            max_tokens=settings.output_reserve,
        )
    if settings.name == "bedrock":
        return BedrockProvider(
            settings.model, timeout=settings.timeout_seconds, retry=retry, max_tokens=settings.output_reserve
        )
    raise ConfigError(f"unknown provider {settings.name!r}")
