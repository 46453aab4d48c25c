"""LINE Messaging API: `x-line-signature`, event normalization, reply-or-push sending and webhook
registration (PLATFORMS §8).

Standard library only; urllib is imported only when a client is built.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, Unauthorized
from hermes_gateway.platforms.base import AdapterContext, Answer, HttpClient, Target
from hermes_gateway.services.ingress import (
    Accepted,
    Handshake,
    HttpRequest,
    HttpResponse,
    Ignored,
    Parsed,
    json_payload,
)

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-line-signature"
# LINE: "use the reply token within one minute of receiving the webhook"; a margin for our own latency.
REPLY_TOKEN_SECONDS = 50.0
_CHAT_KINDS = {"user": ("dm", "userId"), "group": ("group", "groupId"), "room": ("group", "roomId")}
_REMEMBERED_TOKENS = 1024


def line_signature(channel_secret: str, body: bytes) -> str:
    """Base64(HMAC-SHA256(channel secret, raw body)), as LINE sends it in `x-line-signature`."""
    digest = hmac.new(channel_secret.encode("utf-8"), body, hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def verify_signature(headers: Mapping[str, str], body: bytes, channel_secret: str | None) -> None:
    if not channel_secret:
        raise Unauthorized("line channel secret is not configured (LINE_CHANNEL_SECRET); refusing every request")
    presented = headers.get(SIGNATURE_HEADER)
    if not presented:
        raise Unauthorized("line x-line-signature header is missing")
    expected = line_signature(channel_secret, body)
    if not hmac.compare_digest(presented.strip().encode("utf-8"), expected.encode("ascii")):
        raise Unauthorized("line signature does not match")


class LineInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        verify_signature(request.headers, request.body, self._context.secret("LINE_CHANNEL_SECRET"))

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        return parse_webhook(json_payload(request), received_at=received_at)


def parse_webhook(payload: Any, *, received_at: float) -> Accepted | Handshake:
    """Every event of one webhook request. An empty `events` list is the console's "Verify"."""
    if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
        raise BadRequest("line webhook is not an object with an events list")
    if not payload["events"]:
        return Handshake(HttpResponse(200, {"ok": True}))
    destination = payload.get("destination")
    bot = destination if isinstance(destination, str) and destination else None
    return Accepted(items=tuple(parse_event(event, bot=bot, received_at=received_at) for event in payload["events"]))


def parse_event(event: Any, *, bot: str | None, received_at: float) -> InboundMessage | Ignored:
    if not isinstance(event, dict):
        raise BadRequest("line event is not an object")
    if event.get("type") != "message":
        return Ignored("unsupported_event")
    if event.get("mode") == "standby":
        return Ignored("standby")  # another module owns the chat; the bot must not answer
    message = event.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("id"), str) or not message["id"]:
        raise BadRequest("line message event has no message with a string id")
    if message.get("type") != "text":
        return Ignored("no_text")
    text = message.get("text")
    if not isinstance(text, str):
        raise BadRequest("line text message has no string text")
    if not text.strip():
        return Ignored("no_text")
    source = _source(event.get("source"), message, bot)
    if source is None:
        return Ignored("unsupported_source")
    event_key = event.get("webhookEventId")
    delivery = event.get("deliveryContext")
    redelivery = isinstance(delivery, dict) and delivery.get("isRedelivery") is True
    reply_token = event.get("replyToken")
    quoted = message.get("quotedMessageId")
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"line:{event_key}" if isinstance(event_key, str) and event_key else f"line:message:{message['id']}",
        received_at=received_at,
        reply_to_message_id=quoted if isinstance(quoted, str) and quoted else None,
        extra={"redelivery": True} if redelivery else {},
        facts=("mentions_bot",) if source.chat_type == "group" and _mentions_bot(message) else (),
        reply_context=(
            {"reply_token": reply_token, "received_at": repr(received_at)}
            if isinstance(reply_token, str) and reply_token
            else {}
        ),
    )


def _source(source: Any, message: dict[str, Any], bot: str | None) -> SessionSource | None:
    if not isinstance(source, dict):
        raise BadRequest("line event has no source object")
    kind = _CHAT_KINDS.get(str(source.get("type")))
    if kind is None:
        return None
    chat_type, id_field = kind
    chat_id = source.get(id_field)
    if not isinstance(chat_id, str) or not chat_id:
        raise BadRequest(f"line {source.get('type')} source has no {id_field}")
    user_id = source.get("userId")
    return SessionSource(
        platform="line",
        chat_id=chat_id,
        chat_type=chat_type,
        user_id=user_id if isinstance(user_id, str) and user_id else None,
        scope_id=bot,
        message_id=message["id"],
    )


def _mentions_bot(message: dict[str, Any]) -> bool:
    mention = message.get("mention")
    mentionees = mention.get("mentionees") if isinstance(mention, dict) else None
    return isinstance(mentionees, list) and any(isinstance(m, dict) and m.get("isSelf") is True for m in mentionees)


# --- sending ------------------------------------------------------------------------------------


class LineSender:
    """Replies with the event's reply token while it is fresh, otherwise pushes.

    A reply token works once and for about a minute; replies do not count against the monthly
    message quota, pushes do. Tokens this sender has used are remembered (per cold start), so the
    second chunk of a long answer goes straight to push; a token LINE refuses ("Invalid reply
    token": used elsewhere or expired) falls back to push once.

    Returns `sentMessages[0].id`, the id LINE gives the sent message in both answers.
    """

    def __init__(
        self, api_base_url: str, token: str, clock: Callable[[], float] = time.time, timeout: float = 10.0
    ) -> None:
        self._http = HttpClient(api_base_url, platform="line", timeout=timeout, scrub=(token,))
        self._auth = {"Authorization": f"Bearer {token}"}
        self._clock = clock
        self._used: OrderedDict[str, None] = OrderedDict()

    def __repr__(self) -> str:
        return f"LineSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        messages = [{"type": "text", "text": text}]
        token = target.context.get("reply_token")
        if token and self._can_reply(token, target.context.get("received_at")):
            self._remember(token)
            answer = self._post("/v2/bot/message/reply", {"replyToken": token, "messages": messages})
            if answer.status == 200:
                return _message_id(answer)
            if not _invalid_reply_token(answer):
                raise _failure(self._http, answer)
            logger.info("line refused the reply token; pushing instead")
        answer = self._post("/v2/bot/message/push", {"to": target.chat_id, "messages": messages})
        if answer.status == 200:
            return _message_id(answer)
        raise _failure(self._http, answer, gone=(403, 404))

    def _post(self, path: str, payload: dict[str, Any]) -> Answer:
        return self._http.request("POST", path, json_body=payload, headers=self._auth)

    def _can_reply(self, token: str, received_at: str | None) -> bool:
        """Unused here and younger than REPLY_TOKEN_SECONDS."""
        if token in self._used:
            return False
        try:
            age = self._clock() - float(received_at or "")
        except ValueError:
            return False
        return 0 <= age < REPLY_TOKEN_SECONDS

    def _remember(self, token: str) -> None:
        self._used[token] = None
        while len(self._used) > _REMEMBERED_TOKENS:
            self._used.popitem(last=False)


def _message_id(answer: Answer) -> str:
    sent = answer.json_object().get("sentMessages")
    first = sent[0] if isinstance(sent, list) and sent else None
    if isinstance(first, dict) and isinstance(first.get("id"), str) and first["id"]:
        return str(first["id"])
    raise OutcomeUnknown("line answered 200 without sentMessages[0].id; the message may have been sent")


def _invalid_reply_token(answer: Answer) -> bool:
    message = answer.json_object().get("message")
    return answer.status == 400 and isinstance(message, str) and "reply token" in message.lower()


def _failure(http: HttpClient, answer: Answer, gone: tuple[int, ...] = ()) -> Exception:
    message = answer.json_object().get("message")
    if answer.status == 429 and isinstance(message, str) and "monthly limit" in message.lower():
        # The plan's monthly message quota: waiting seconds will not help.
        return PermanentError(f"line: the channel's monthly message limit is reached: {http.scrub(message)}")
    return http.failure(answer, gone=gone)


def build_sender(context: AdapterContext) -> LineSender | None:
    token = context.secret("LINE_CHANNEL_ACCESS_TOKEN")
    return LineSender(context.platform.api_base_url, token, context.clock) if token else None


# --- webhook registration (`hermes-gateway webhooks register|status line`) ----------------------


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
