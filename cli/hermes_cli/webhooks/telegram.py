"""Telegram: `setWebhook` with the webhook secret, and `getWebhookInfo`
(`hermes-gateway webhooks register|status telegram`)."""

from __future__ import annotations

from typing import Any

from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.base import AdapterContext, HttpClient

# Updates the gateway acts on; others (polls, reactions, member changes) are never sent to it.
ALLOWED_UPDATES = ["message", "channel_post", "edited_message", "edited_channel_post", "callback_query"]


def register_webhook(context: AdapterContext, url: str) -> str:
    """setWebhook with the TELEGRAM_WEBHOOK_SECRET as secret_token; returns a human line."""
    token, secret = context.secret("TELEGRAM_BOT_TOKEN"), context.secret("TELEGRAM_WEBHOOK_SECRET")
    if not token or not secret:
        raise PermanentError("set TELEGRAM_BOT_TOKEN and TELEGRAM_WEBHOOK_SECRET first")
    http = HttpClient(context.platform.api_base_url, platform="telegram", scrub=(token, secret))
    payload = {"url": url, "secret_token": secret, "allowed_updates": ALLOWED_UPDATES}
    answer = http.request("POST", f"/bot{token}/setWebhook", json_body=payload)
    if answer.status != 200 or answer.json_object().get("ok") is not True:
        raise http.failure(answer)
    return f"Telegram will send updates to {url}"


def webhook_status(context: AdapterContext) -> dict[str, Any]:
    """getWebhookInfo: the registered URL, pending updates and the last delivery error."""
    token = context.secret("TELEGRAM_BOT_TOKEN")
    if not token:
        raise PermanentError("set TELEGRAM_BOT_TOKEN first")
    http = HttpClient(context.platform.api_base_url, platform="telegram", scrub=(token,))
    answer = http.request("POST", f"/bot{token}/getWebhookInfo")
    result = answer.json_object().get("result")
    if answer.status != 200 or not isinstance(result, dict):
        raise http.failure(answer)
    keys = ("url", "pending_update_count", "last_error_date", "last_error_message", "allowed_updates")
    return {key: result[key] for key in keys if key in result}
