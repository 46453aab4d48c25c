"""Discord Gateway → Hermes relay: forwards ordinary Discord messages to the serverless gateway.

Discord delivers channel and DM messages only over its Gateway websocket, which a Lambda cannot
hold. This small always-on process holds it (discord.py), turns each new message into the relay
payload and POSTs it to `<WebhookUrl>/relay`, signed the Standard Webhooks way. The gateway
answers through Discord's REST API with its own bot token ("reply_via": "platform"), so this
process never receives anything back.

Environment: DISCORD_BOT_TOKEN, RELAY_URL, RELAY_SIGNING_SECRET (whsec_...), and optionally
RELAY_FORWARD_BOTS=true to forward messages written by other bots.

Everything except `main()` is plain Python (no discord.py, no hermes_gateway) so it can be tested
and reused anywhere; `main()` alone imports discord.py.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import time
import urllib.error
import urllib.request
from typing import Any

logger = logging.getLogger("hermes.discord_relay")

THREAD_CHANNEL_TYPES = (10, 11, 12)  # announcement, public and private threads
RETRY_STATUSES = (408, 429, 500, 502, 503, 504)
MAX_ATTEMPTS = 5


def sign(secret: str, msg_id: str, timestamp: int | str, body: bytes) -> str:
    """The Standard Webhooks v1 signature: base64 HMAC-SHA256 over "id.timestamp.body" with the
    base64-decoded part of the secret after "whsec_".

    A copy of `hermes_gateway.platforms.standard_webhook.sign`: this forwarder ships and runs apart
    from the gateway (on any always-on host) and must not need the gateway's package. The gateway's
    tests verify this copy's output with the gateway's own `verify`.
    """
    key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def _id(value: Any) -> str | None:
    return None if value is None else str(value)


def _channel_type(channel: Any) -> int | None:
    kind = getattr(channel, "type", None)
    value = getattr(kind, "value", kind)  # discord.py's ChannelType enum, or a plain int
    return value if isinstance(value, int) else None


def relay_payload(message: Any, *, bot_user_id: str, forward_bots: bool = False) -> dict[str, Any] | None:
    """The relay payload for one discord.py `Message` (any object with the same attributes), or
    None when it is not for the gateway: the bot's own messages, other bots' (unless
    `forward_bots`), and messages without text."""
    author = message.author
    if str(author.id) == bot_user_id:
        return None
    is_bot = bool(getattr(author, "bot", False))
    if is_bot and not forward_bots:
        return None
    text = message.content or ""
    if not text.strip():
        return None
    channel = message.channel
    guild = getattr(message, "guild", None)
    channel_id = str(channel.id)
    source: dict[str, Any] = {
        "chat_id": channel_id,
        "user_id": str(author.id),
        "user_name": getattr(author, "global_name", None) or getattr(author, "name", None),
        "message_id": str(message.id),
        "is_bot": is_bot,
        "chat_name": getattr(channel, "name", None),
        "scope_id": _id(guild.id) if guild is not None else None,
    }
    if _channel_type(channel) in THREAD_CHANNEL_TYPES:
        # A thread is a channel of its own: it is the chat and the thread; it hangs off a parent.
        source.update(chat_type="thread", thread_id=channel_id, parent_chat_id=_id(getattr(channel, "parent_id", None)))
    elif guild is not None:
        source["chat_type"] = "group"
    else:
        source["chat_type"] = "dm"
    reference = getattr(message, "reference", None)
    payload: dict[str, Any] = {
        "platform": "discord",
        "event_id": str(message.id),
        "text": text,
        "source": {k: v for k, v in source.items() if v is not None},
        "mentions_bot": any(str(user.id) == bot_user_id for user in getattr(message, "mentions", ())),
        "reply_via": "platform",
    }
    if reference is not None and getattr(reference, "message_id", None) is not None:
        payload["reply_to_message_id"] = str(reference.message_id)
        # The answered message as Discord sent it along (`referenced_message`), when it did: the
        # gateway quotes it to the model (a deleted one has no content).
        replied = getattr(reference, "resolved", None)
        content = getattr(replied, "content", None)
        if isinstance(content, str) and content.strip():
            payload["reply_to_text"] = content[:2000]
    return payload


def signed_request(
    url: str, secret: str, payload: dict[str, Any], *, msg_id: str, now: float
) -> urllib.request.Request:
    """One POST of `payload` to the gateway's relay URL, with the Standard Webhooks headers."""
    body = json.dumps(payload).encode("utf-8")
    timestamp = str(int(now))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "hermes-discord-relay/1",
        "webhook-id": msg_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": sign(secret, msg_id, timestamp, body),
    }
    return urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - an http(s) URL


def deliver(
    url: str,
    secret: str,
    payload: dict[str, Any],
    *,
    attempts: int = MAX_ATTEMPTS,
    timeout: float = 15.0,
    sleep: Any = time.sleep,
) -> int:
    """POST one event, retrying throttling, 5xx and network failures with backoff. The webhook-id
    stays the same across retries; each retry is signed afresh (the timestamp must be recent).
    Returns the final HTTP status (0 when the gateway could not be reached)."""
    if not url.startswith(("https://", "http://")):
        raise ValueError("RELAY_URL must be an http(s) URL")
    msg_id = f"msg_discord_{payload['event_id']}"  # the same for every retry, even after a restart
    status = 0
    for attempt in range(1, attempts + 1):
        request = signed_request(url, secret, payload, msg_id=msg_id, now=time.time())
        retry_after = None
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - checked above
                return int(response.status)
        except urllib.error.HTTPError as exc:
            status = exc.code
            retry_after = exc.headers.get("Retry-After") if exc.headers else None
            exc.close()
            if status not in RETRY_STATUSES:
                logger.warning("gateway refused the event", extra={"status": status})
                return status
        except OSError as exc:  # URLError, timeouts, resets
            status = 0
            logger.warning("gateway unreachable", extra={"error": type(exc).__name__})
        if attempt < attempts:
            sleep(_backoff(attempt, retry_after))
    return status


def _backoff(attempt: int, retry_after: str | None) -> float:
    try:
        return min(max(float(retry_after or ""), 0.0), 60.0)
    except ValueError:
        return min(2.0 ** (attempt - 1), 30.0)


def main() -> None:  # pragma: no cover - needs a live Discord connection
    import asyncio

    import discord

    logging.basicConfig(level=logging.INFO)
    token = os.environ["DISCORD_BOT_TOKEN"]
    url = os.environ["RELAY_URL"]
    secret = os.environ["RELAY_SIGNING_SECRET"]
    forward_bots = os.environ.get("RELAY_FORWARD_BOTS", "").lower() in ("1", "true", "yes")
    sign(secret, "check", 0, b"")  # a malformed secret fails now, not on the first message

    intents = discord.Intents.default()
    intents.message_content = True  # privileged: enable "Message Content Intent" in the Developer Portal
    client = discord.Client(intents=intents)

    @client.event
    async def on_ready() -> None:
        logger.info("connected to the Discord gateway", extra={"bot": str(client.user.id) if client.user else "?"})

    @client.event
    async def on_message(message: Any) -> None:
        if client.user is None:
            return
        payload = relay_payload(message, bot_user_id=str(client.user.id), forward_bots=forward_bots)
        if payload is not None:
            await asyncio.to_thread(deliver, url, secret, payload)

    client.run(token, log_handler=None)


if __name__ == "__main__":
    main()
