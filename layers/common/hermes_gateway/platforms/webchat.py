"""The local web chat page as a platform (local mode only).

The page posts `{"chat_id", "user_id", "user_name", "message_id", "text"}` with the header
`x-hermes-local-token`; local mode generates that token at start-up and embeds it in the page it
serves, so another page in the browser cannot talk to the gateway. Replies are read from the outbox.
"""

from __future__ import annotations

import hmac
import re

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, Unauthorized
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.services.ingress import HttpRequest, Ignored, Parsed, json_payload

TOKEN_HEADER = "x-hermes-local-token"  # noqa: S105 - a header name, not a secret
TEXT_LIMIT = 8000
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class WebchatInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        expected = self._context.secret("WEBCHAT_TOKEN")
        if not expected:
            raise Unauthorized("web chat is not configured (no WEBCHAT_TOKEN)")
        given = request.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
            raise Unauthorized("wrong or missing web chat token")

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        payload = json_payload(request)
        if not isinstance(payload, dict):
            raise BadRequest("web chat payload must be a JSON object")
        ids = {}
        for name in ("chat_id", "user_id", "message_id"):
            value = payload.get(name)
            if not isinstance(value, str) or not _ID.match(value):
                raise BadRequest(f"web chat field {name} must be 1-64 letters, digits, '_' or '-'")
            ids[name] = value
        text = payload.get("text")
        if not isinstance(text, str):
            raise BadRequest("web chat field text must be a string")
        if not text.strip():
            return Ignored("empty_text")
        if len(text) > TEXT_LIMIT:
            raise BadRequest(f"web chat text over {TEXT_LIMIT} characters")
        user_name = payload.get("user_name")
        source = SessionSource(
            platform="webchat",
            chat_id=ids["chat_id"],
            chat_type="dm",
            user_id=ids["user_id"],
            user_name=user_name if isinstance(user_name, str) and user_name else "You",
            message_id=ids["message_id"],
        )
        return InboundMessage(
            source=source,
            text=text,
            event_id=f"webchat:{ids['chat_id']}:{ids['message_id']}",
            received_at=received_at,
        )
