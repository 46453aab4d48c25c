"""Discord: the application's Interactions Endpoint URL and the slash command
(`hermes-gateway webhooks register|status discord`)."""

from __future__ import annotations

from typing import Any

from hermes_gateway.errors import ConfigError, PermanentError
from hermes_gateway.platforms.base import AdapterContext, HttpClient, optional_str
from hermes_gateway.platforms.discord import PROMPT_OPTION, USER_AGENT, _error_detail, _is_snowflake

# Application command types and option types.
CHAT_INPUT_COMMAND = 1
STRING_OPTION = 3


def _application_api(context: AdapterContext) -> tuple[HttpClient, dict[str, str]]:
    token = context.secret("DISCORD_BOT_TOKEN")
    if not token:
        raise ConfigError("DISCORD_BOT_TOKEN is needed to configure the Discord application")
    client = HttpClient(context.platform.api_base_url, platform="discord", scrub=(token,))
    return client, {"Authorization": f"Bot {token}", "User-Agent": USER_AGENT}


def command_definition(name: str) -> dict[str, Any]:
    """The global slash command: `/<name> prompt:<text>`."""
    return {
        "name": name,
        "type": CHAT_INPUT_COMMAND,
        "description": "Talk to the agent",
        "options": [
            {"type": STRING_OPTION, "name": PROMPT_OPTION, "description": "What to ask or tell", "required": True}
        ],
    }


def register_webhook(context: AdapterContext, url: str) -> str:
    """Point the application's Interactions Endpoint URL at `url` (Discord PINGs it first, so the
    gateway must already be deployed with the public key) and register the slash command."""
    client, headers = _application_api(context)
    answer = client.request("PATCH", "/applications/@me", json_body={"interactions_endpoint_url": url}, headers=headers)
    if answer.status != 200:
        raise client.failure(answer, gone=(), detail=_error_detail(answer))
    application_id = context.option("application_id") or answer.json_object().get("id")
    if not _is_snowflake(application_id):
        raise PermanentError("discord: no application id (set DISCORD_APPLICATION_ID)")
    command = context.option("command_name") or "ask"
    answer = client.request(
        "PUT", f"/applications/{application_id}/commands", json_body=[command_definition(command)], headers=headers
    )
    if answer.status != 200:
        raise client.failure(answer, gone=(), detail=_error_detail(answer))
    return f"interactions endpoint set to {url}; /{command} registered for application {application_id}"


def webhook_status(context: AdapterContext) -> dict[str, Any]:
    """The application's Interactions Endpoint URL as Discord has it, and whether the configured
    public key is the application's."""
    client, headers = _application_api(context)
    answer = client.request("GET", "/applications/@me", headers=headers)
    if answer.status != 200:
        raise client.failure(answer, gone=(), detail=_error_detail(answer))
    application = answer.json_object()
    verify_key = application.get("verify_key")
    configured = context.option("public_key") or ""
    return {
        "url": optional_str(application, "interactions_endpoint_url"),
        "application_id": optional_str(application, "id"),
        "public_key_matches": isinstance(verify_key, str) and verify_key.lower() == configured.lower(),
    }
