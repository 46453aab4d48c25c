"""Relays: always-on forwarders (a Discord gateway client, signal-cli, a Matrix sync loop) that
hold a connection a Lambda cannot, and POST each normalized event here, signed the Standard
Webhooks way with `RELAY_SIGNING_SECRET`.

Inbound payload (JSON object):
    {"platform": str (one of the `platforms` option), "event_id": str (the origin platform's id),
     "text": str,
     "source": {"chat_id": str, "chat_type"?: "dm"|"group"|"channel"|"thread", "user_id"?, "user_name"?,
                "thread_id"?, "chat_name"?, "chat_topic"?, "user_id_alt"?, "chat_id_alt"?, "scope_id"?,
                "parent_chat_id"?, "message_id"?, "prospective_thread_id"?: str, "is_bot"?: bool},
     "reply_to_message_id"?: str, "reply_to_text"?: str, "mentions_bot"?: bool,
     "reply_via"?: "relay" | "platform"}

`reply_to_text` is the answered message's text where the forwarder has it (Discord's
`referenced_message`, a Signal quote): it reaches the model as a quote (domain/quotes.py).

The relay is authenticated, so its word is trusted: every message carries the `trusted` fact,
which passes authorization before any allowlist (BEHAVIOUR §4 layer 1). Replies go back through
the relay's `callback_url` (`{"platform", "chat_id", "thread_id", "text"}`, signed the same way),
except for Discord with `"reply_via": "platform"`: the gateway then answers through Discord's REST
API with its own bot token.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hermes_gateway.domain.quotes import quote_of
from hermes_gateway.domain.source import CHAT_TYPES, InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, Unauthorized
from hermes_gateway.platforms import standard_webhook
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.platforms.standard_webhook import MAX_ID_LENGTH, CallbackSender
from hermes_gateway.services.ingress import HttpRequest, Ignored, Parsed, json_payload

# The platforms whose own REST API can carry a reply to a relay-delivered message.
REPLY_VIA_PLATFORM = ("discord",)
_PLATFORM_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_SOURCE_STRINGS = (
    "chat_id",
    "user_id",
    "user_name",
    "thread_id",
    "chat_name",
    "chat_topic",
    "user_id_alt",
    "chat_id_alt",
    "scope_id",
    "parent_chat_id",
    "message_id",
    "prospective_thread_id",
)


class RelayInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context
        self._platforms = frozenset(context.option("platforms") or ())

    def verify(self, request: HttpRequest) -> None:
        secret = self._context.secret("RELAY_SIGNING_SECRET")
        if not secret:
            raise Unauthorized("relay signing secret is not configured; refusing every request")
        standard_webhook.verify(secret, request.headers, request.body, self._context.clock())

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        payload = json_payload(request)
        if not isinstance(payload, dict):
            raise BadRequest("relay payload must be a JSON object")
        platform = payload.get("platform")
        if not isinstance(platform, str) or not _PLATFORM_NAME.match(platform):
            raise BadRequest("relay field platform must be a platform name")
        if platform not in self._platforms:
            raise BadRequest(f"relay platform {platform!r} is not in RELAY_PLATFORMS")
        event_id = _string(payload, "event_id", required=True)
        text = payload.get("text")
        if not isinstance(text, str):
            raise BadRequest("relay field text must be a string")
        reply_to = _string(payload, "reply_to_message_id")
        quoted = payload.get("reply_to_text")
        if quoted is not None and not isinstance(quoted, str):
            raise BadRequest("relay field reply_to_text must be a string")
        mentions_bot = payload.get("mentions_bot", False)
        if not isinstance(mentions_bot, bool):
            raise BadRequest("relay field mentions_bot must be a boolean")
        source = _source(platform, payload.get("source"))
        reply_context = _reply_context(platform, payload.get("reply_via"))
        if not text.strip():
            return Ignored("no_text")
        return InboundMessage(
            source=source,
            text=text,
            event_id=f"relay:{platform}:{event_id}",
            received_at=received_at,
            reply_to_message_id=reply_to,
            reply_to_text=quote_of(quoted),
            facts=("trusted", "mentions_bot") if mentions_bot else ("trusted",),
            reply_context=reply_context,
        )


def _string(payload: Mapping[str, Any], name: str, *, required: bool = False, what: str = "relay field") -> str | None:
    value = payload.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value):
        raise BadRequest(f"{what} {name} must be a {'non-empty ' if required else ''}string")
    if len(value) > MAX_ID_LENGTH:
        raise BadRequest(f"{what} {name} is longer than {MAX_ID_LENGTH} characters")
    return value or None


def _source(platform: str, raw: Any) -> SessionSource:
    if not isinstance(raw, dict):
        raise BadRequest("relay field source must be an object")
    values = {name: _string(raw, name, required=name == "chat_id", what="relay source") for name in _SOURCE_STRINGS}
    chat_type = raw.get("chat_type") or "dm"
    if chat_type not in CHAT_TYPES:
        raise BadRequest(f"relay source chat_type must be one of {', '.join(CHAT_TYPES)}")
    is_bot = raw.get("is_bot", False)
    if not isinstance(is_bot, bool):
        raise BadRequest("relay source is_bot must be a boolean")
    # `platform` and `profile` are the gateway's to decide, never the relay's.
    return SessionSource(platform=platform, chat_type=chat_type, is_bot=is_bot, **values)


def _reply_context(platform: str, reply_via: Any) -> dict[str, str]:
    if reply_via in (None, "relay"):
        return {"via": "relay"}
    if reply_via != "platform":
        raise BadRequest("relay field reply_via must be 'relay' or 'platform'")
    if platform not in REPLY_VIA_PLATFORM:
        raise BadRequest(f"relay reply_via 'platform' is only possible for {', '.join(REPLY_VIA_PLATFORM)}")
    return {}  # no `via`: the delivery service uses the platform's own sender


def build_sender(context: AdapterContext) -> CallbackSender | None:
    url = context.option("callback_url")
    secret = context.secret("RELAY_SIGNING_SECRET")
    if not url or not secret:
        return None
    return CallbackSender(url, secret, platform="relay", include_platform=True, clock=context.clock)
