"""LINE: the channel's webhook endpoint (`hermes-gateway webhooks register|status line`)."""

from __future__ import annotations

from typing import Any

from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.base import AdapterContext, HttpClient
from hermes_gateway.platforms.line import _failure


def _client(context: AdapterContext) -> tuple[HttpClient, dict[str, str]]:
    token = context.secret("LINE_CHANNEL_ACCESS_TOKEN")
    if not token:
        raise PermanentError("line is not configured: set LINE_CHANNEL_ACCESS_TOKEN")
    http = HttpClient(context.platform.api_base_url, platform="line", scrub=(token,))
    return http, {"Authorization": f"Bearer {token}"}


def register_webhook(context: AdapterContext, url: str) -> str:
    """Set the channel's webhook URL (LINE accepts only https)."""
    if not url.startswith("https://"):
        raise PermanentError("line: the webhook URL must be an https URL")
    http, auth = _client(context)
    answer = http.request("PUT", "/v2/bot/channel/webhook/endpoint", json_body={"endpoint": url}, headers=auth)
    if answer.status != 200:
        raise _failure(http, answer)
    return f"LINE webhook URL set to {url}; turn on 'Use webhook' in the console if it is off"


def webhook_status(context: AdapterContext) -> dict[str, Any]:
    """The channel's webhook URL and whether LINE uses it (`endpoint`, `active`)."""
    http, auth = _client(context)
    answer = http.request("GET", "/v2/bot/channel/webhook/endpoint", headers=auth)
    if answer.status != 200:
        raise _failure(http, answer)
    body = answer.json_object()
    return {"endpoint": body.get("endpoint"), "active": body.get("active")}
