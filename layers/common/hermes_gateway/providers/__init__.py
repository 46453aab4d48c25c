"""Model providers, chosen by settings."""

from __future__ import annotations

from hermes_gateway.errors import ConfigError
from hermes_gateway.providers.base import Provider
from hermes_gateway.providers.bedrock import BedrockProvider
from hermes_gateway.providers.echo import EchoProvider
from hermes_gateway.providers.openai_compat import OpenAICompatProvider
from hermes_gateway.providers.retry import RetryPolicy
from hermes_gateway.secrets import Secrets
from hermes_gateway.settings import ProviderSettings


def make_provider(settings: ProviderSettings, secrets: Secrets) -> Provider:
    retry = RetryPolicy(max_attempts=settings.max_attempts, budget_seconds=settings.retry_budget_seconds)
    if settings.name == "echo":
        return EchoProvider()
    if settings.name == "openai":
        # No key is fine: local servers such as Ollama accept anonymous requests.
        api_key = secrets.get("OPENAI_API_KEY")
        return OpenAICompatProvider(settings.openai_base_url, api_key, settings.model, settings.timeout_seconds, retry)
    if settings.name == "bedrock":
        return BedrockProvider(settings.model, timeout=settings.timeout_seconds, retry=retry)
    raise ConfigError(f"unknown provider {settings.name!r}")
