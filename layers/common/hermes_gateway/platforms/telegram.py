"""Telegram Bot API: webhook verification, update normalization and sending (PLATFORMS §1).

Standard library only; urllib is imported only when a sender is built: the ingress imports this
module on its cold-start path and never sends.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeGuard

from hermes_gateway import errors
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, RateLimited, TransientError, Unauthorized
from hermes_gateway.platforms.base import (
    AdapterContext,
    Answer,
    Button,
    HttpClient,
    Target,
    header,
    retry_after_seconds,
)

logger = logging.getLogger(__name__)

TELEGRAM_TEXT_LIMIT = 4096
SECRET_HEADER = "x-telegram-bot-api-secret-token"  # noqa: S105 - a header name, not a secret
CALLBACK_DATA_LIMIT = 64  # bytes of an inline button's callback_data

_CHAT_TYPES = {"private": "dm", "group": "group", "supergroup": "group", "channel": "channel"}
_MESSAGE_KINDS = ("message", "channel_post")
_EDIT_KINDS = ("edited_message", "edited_channel_post", "edited_business_message")
# Descriptions with which Telegram says the chat is out of reach for this bot (HTTP 400; a 403 always is).
_GONE_MARKERS = (
    "chat not found",
    "user not found",
    "message thread not found",
    "group chat was upgraded",
    "chat_write_forbidden",
)

IgnoreReason = Literal["edited", "unsupported_update", "unsupported_chat_type", "no_text", "button_unusable"]


def verify_secret_header(headers: Mapping[str, str], expected: str | None) -> None:
    """Accept the request only when it carries the webhook secret set with setWebhook."""
    if not expected:
        raise Unauthorized("telegram webhook secret is not configured; refusing every update")
    presented = headers.get(SECRET_HEADER)
    if not presented:
        raise Unauthorized("telegram secret header is missing")
    if not hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8")):
        raise Unauthorized("telegram secret header does not match")


@dataclass(frozen=True)
class Ignored:
    """An update the gateway deliberately does not act on; `reason` is a bounded code, safe to log."""

    reason: IgnoreReason


def parse_update(update: Any, *, bot: str = "default", received_at: float) -> InboundMessage | Ignored:
    """One Telegram Update as an InboundMessage, or the reason it is ignored.

    Raises BadRequest when the update is malformed.

    Edits are ignored: an edit repeats a message id the gateway already answered, and treating it
    as new input would make the agent answer the same message twice.
    """
    if not isinstance(update, dict):
        raise BadRequest("telegram update is not a JSON object")
    update_id = update.get("update_id")
    if not _is_int(update_id):
        raise BadRequest("telegram update has no integer update_id")
    if any(kind in update for kind in _EDIT_KINDS):
        return Ignored("edited")
    if "callback_query" in update:
        return parse_button_press(update, bot=bot, received_at=received_at)
    kind = next((k for k in _MESSAGE_KINDS if k in update), None)
    if kind is None:
        return Ignored("unsupported_update")
    message = update[kind]
    if not isinstance(message, dict):
        raise BadRequest("telegram update carries a message that is not an object")
    chat = _object(message, "chat", required=True)
    chat_type = _CHAT_TYPES.get(str(chat.get("type")))
    if chat_type is None:
        return Ignored("unsupported_chat_type")
    if not _is_int(chat.get("id")):
        raise BadRequest("telegram chat has no integer id")
    if not _is_int(message.get("message_id")):
        raise BadRequest("telegram message has no integer message_id")
    text = message.get("text", message.get("caption"))
    if text is not None and not isinstance(text, str):
        raise BadRequest("telegram message text is not a string")
    if not text:
        return Ignored("no_text")
    return InboundMessage(
        source=_source(message, chat, chat_type),
        text=text,
        event_id=f"telegram:{bot}:{update_id}",
        received_at=received_at,
        reply_to_message_id=_reply_to(message),
    )


def parse_button_press(update: dict[str, Any], *, bot: str = "default", received_at: float) -> InboundMessage | Ignored:
    """A press on one of the gateway's inline buttons (`callback_query`) as the presser's message
    with the button's reply as text: an approval answered by a button goes the same way as a
    typed `/approve`, through the same authorization. Raises BadRequest when malformed."""
    press = update.get("callback_query")
    if not isinstance(press, dict):
        raise BadRequest("telegram callback_query is not an object")
    data = press.get("data")
    message = press.get("message")
    # Without the message (too old, or an inline-mode message) there is no chat to answer in.
    if not isinstance(data, str) or not data.strip() or not isinstance(message, dict) or not message.get("date"):
        return Ignored("button_unusable")
    chat = _object(message, "chat", required=True)
    chat_type = _CHAT_TYPES.get(str(chat.get("type")))
    if chat_type is None or chat_type == "channel":
        return Ignored("unsupported_chat_type")
    if not _is_int(chat.get("id")):
        raise BadRequest("telegram chat has no integer id")
    presser = _object(press, "from", required=True)
    # The presser, not the bot that wrote the message with the buttons, is the sender.
    source = _source(
        {"from": presser, "message_id": message.get("message_id") or 0, **_topic(message)}, chat, chat_type
    )
    return InboundMessage(
        source=replace(source, message_id=None),
        text=data,
        event_id=f"telegram:{bot}:{update['update_id']}",
        received_at=received_at,
    )


def _topic(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("is_topic_message") is True:
        return {"is_topic_message": True, "message_thread_id": message.get("message_thread_id")}
    return {}


def normalize_update(update: Any, *, bot: str = "default", received_at: float) -> InboundMessage | None:
    """Like `parse_update`, for callers that do not need the reason an update was ignored."""
    parsed = parse_update(update, bot=bot, received_at=received_at)
    return parsed if isinstance(parsed, InboundMessage) else None


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _object(message: dict[str, Any], key: str, *, required: bool = False) -> dict[str, Any]:
    value = message.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"telegram message field {key!r} is not an object")
    return value


def _person_name(person: Mapping[str, Any]) -> str | None:
    full = " ".join(str(person[k]) for k in ("first_name", "last_name") if person.get(k))
    return full or (str(person["username"]) if person.get("username") else None)


def _source(message: dict[str, Any], chat: dict[str, Any], chat_type: str) -> SessionSource:
    sender = _object(message, "from")
    if sender and not _is_int(sender.get("id")):
        raise BadRequest("telegram sender has no integer id")
    sender_chat = _object(message, "sender_chat")
    if sender_chat:
        # Written on behalf of a chat (a channel post, an anonymous group admin, a linked channel):
        # `from` is then a shared placeholder account, not a person, so there is no user id and
        # the router denies it unless the chat itself is allow-listed.
        user_id = None
        user_name = message.get("author_signature") or sender_chat.get("title")
        is_bot = False
    elif sender:
        user_id = str(sender["id"])
        user_name = _person_name(sender)
        is_bot = sender.get("is_bot") is True
    else:
        user_id, user_name, is_bot = None, None, False
    # A reply in an ordinary group also carries message_thread_id; only a forum topic is a thread.
    topic = message.get("message_thread_id") if message.get("is_topic_message") is True else None
    chat_name = (_person_name(chat) or user_name) if chat_type == "dm" else chat.get("title")
    return SessionSource(
        platform="telegram",
        chat_id=str(chat["id"]),
        chat_type=chat_type,
        user_id=user_id,
        user_name=str(user_name) if user_name else None,
        thread_id=str(topic) if _is_int(topic) else None,
        chat_name=str(chat_name) if chat_name else None,
        is_bot=is_bot,
        message_id=str(message["message_id"]),
    )


def _reply_to(message: dict[str, Any]) -> str | None:
    replied = message.get("reply_to_message")
    if not isinstance(replied, dict) or not _is_int(replied.get("message_id")):
        return None
    # In a forum topic every message "replies" to the topic's opening service message.
    if message.get("is_topic_message") is True and replied["message_id"] == message.get("message_thread_id"):
        return None
    return str(replied["message_id"])


class TelegramRejected(PermanentError):
    """Telegram refused the request (a 4xx other than 429); sending it again cannot succeed."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(f"telegram rejected the request: HTTP {status}: {description}")
        self.status = status
        self.description = description


class TargetGone(TelegramRejected, errors.TargetGone):
    """The chat is out of reach: the bot was blocked or removed, or the chat no longer exists.

    `migrate_to_chat_id` is set when a group became a supergroup: the chat lives on under that id.
    """

    def __init__(self, status: int, description: str, migrate_to_chat_id: str | None = None) -> None:
        super().__init__(status, description)
        self.migrate_to = self.migrate_to_chat_id = migrate_to_chat_id


class TelegramSender:
    """Sends messages with the Bot API. The token is part of every URL, so no URL ever leaves here."""

    def __init__(self, api_base_url: str, token: str, timeout: float = 10.0) -> None:
        self._http = HttpClient(api_base_url, platform="telegram", timeout=timeout, scrub=(token,))
        self._token = token

    def __repr__(self) -> str:
        return f"TelegramSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        return self.send_text(target.chat_id, text, thread_id=target.thread_id, buttons=target.buttons)

    def send_text(
        self,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        parse_mode: str | None = None,
        buttons: tuple[Button, ...] = (),
    ) -> str:
        """Send one message (at most TELEGRAM_TEXT_LIMIT characters); returns Telegram's message id.

        Raises RateLimited, TransientError (5xx, timeouts, connection failures), TargetGone or
        TelegramRejected. Text Telegram cannot parse in `parse_mode` is sent again as plain text.
        """
        payload: dict[str, Any] = {"chat_id": _numeric(chat_id), "text": text}
        if thread_id is not None:
            payload["message_thread_id"] = _numeric(thread_id)
        keyboard = inline_keyboard(buttons)
        if keyboard:
            payload["reply_markup"] = keyboard
        if parse_mode:
            payload["parse_mode"] = parse_mode
        try:
            return self._send_message(payload)
        except TelegramRejected as exc:
            if not parse_mode or exc.status != 400 or "can't parse entities" not in exc.description.lower():
                raise
        logger.warning("telegram could not parse the formatting; sending as plain text", extra={"mode": parse_mode})
        del payload["parse_mode"]
        return self._send_message(payload)

    def _send_message(self, payload: dict[str, Any]) -> str:
        answer = self._http.request("POST", f"/bot{self._token}/sendMessage", json_body=payload)
        body = answer.body if isinstance(answer.body, dict) else None
        if answer.status == 200 and (body is None or body.get("ok") is True):
            result = body.get("result") if body is not None else None
            message_id = result.get("message_id") if isinstance(result, dict) else None
            if _is_int(message_id):
                return str(message_id)
            # The message may well have been sent; resending could post it twice.
            raise OutcomeUnknown("telegram answered 200 without a message_id; the message may have been sent")
        raise self._failure(answer)

    def _failure(self, answer: Answer) -> Exception:
        body = answer.json_object()
        error_code = body.get("error_code")
        code = error_code if _is_int(error_code) else answer.status
        description = self._http.scrub(str(body.get("description") or f"HTTP {answer.status}"))
        parameters = body.get("parameters")
        if not isinstance(parameters, dict):
            parameters = {}
        if code == 429 or answer.status == 429:
            seconds = retry_after_seconds(parameters.get("retry_after"), header(answer.headers, "retry-after"))
            return RateLimited(seconds, f"telegram rate limit; retry after {seconds:g} s")
        if answer.status >= 500 or (answer.status == 200 and code >= 500):
            return TransientError(f"telegram server error: HTTP {answer.status}: {description}")
        migrate_to = parameters.get("migrate_to_chat_id")
        if code == 403 or _is_int(migrate_to) or any(m in description.lower() for m in _GONE_MARKERS):
            return TargetGone(code, description, str(migrate_to) if _is_int(migrate_to) else None)
        return TelegramRejected(code, description)


def inline_keyboard(buttons: tuple[Button, ...]) -> dict[str, Any] | None:
    """One row of inline buttons whose callback data is the reply; a press arrives as a
    `callback_query`. Telegram caps callback data at 64 bytes: longer replies get no button."""
    row = [
        {"text": b.label[:64], "callback_data": b.reply}
        for b in buttons
        if len(b.reply.encode("utf-8")) <= CALLBACK_DATA_LIMIT
    ]
    return {"inline_keyboard": [row]} if row else None


def build_sender(context: AdapterContext) -> TelegramSender | None:
    token = context.secret("TELEGRAM_BOT_TOKEN")
    return TelegramSender(context.platform.api_base_url, token) if token else None


def _numeric(value: str) -> int | str:
    """Telegram ids travel as numbers; a channel's @username stays a string."""
    digits = value.removeprefix("-")
    return int(value) if digits.isascii() and digits.isdigit() else value


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
