"""Telegram Bot API: webhook verification, update normalization and sending (PLATFORMS §1).

Standard library only, and the HTTP client is imported only when a sender is built: the ingress
imports this module on its cold-start path and never sends.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeGuard

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, ConfigError, PermanentError, TransientError, Unauthorized

if TYPE_CHECKING:
    import urllib.error

logger = logging.getLogger(__name__)

TELEGRAM_TEXT_LIMIT = 4096
SECRET_HEADER = "x-telegram-bot-api-secret-token"  # noqa: S105 - a header name, not a secret

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
_DEFAULT_RETRY_AFTER = 1.0

IgnoreReason = Literal["edited", "unsupported_update", "unsupported_chat_type", "no_text"]


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


class RateLimited(TransientError):
    """Telegram's flood control: wait `retry_after` seconds before the next request to this chat."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"telegram rate limit; retry after {retry_after:g} s")
        self.retry_after = retry_after


class TelegramRejected(PermanentError):
    """Telegram refused the request (a 4xx other than 429); sending it again cannot succeed."""

    def __init__(self, status: int, description: str) -> None:
        super().__init__(f"telegram rejected the request: HTTP {status}: {description}")
        self.status = status
        self.description = description


class TargetGone(TelegramRejected):
    """The chat is out of reach: the bot was blocked or removed, or the chat no longer exists.

    `migrate_to_chat_id` is set when a group became a supergroup: the chat lives on under that id.
    """

    def __init__(self, status: int, description: str, migrate_to_chat_id: str | None = None) -> None:
        super().__init__(status, description)
        self.migrate_to_chat_id = migrate_to_chat_id


@dataclass(frozen=True)
class _Answer:
    status: int
    body: dict[str, Any] | None
    retry_after_header: str | None


class TelegramSender:
    """Sends messages with the Bot API. The token is part of every URL, so no URL ever leaves here."""

    def __init__(self, api_base_url: str, token: str, timeout: float = 10.0) -> None:
        if not api_base_url.startswith(("https://", "http://")):
            raise ConfigError("the Telegram API base URL must be an http(s) URL")
        self._base = api_base_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        import urllib.request

        self._opener = urllib.request.build_opener()

    def __repr__(self) -> str:
        return f"TelegramSender({self._base!r})"

    def send_text(
        self,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        parse_mode: str | None = None,
    ) -> str:
        """Send one message (at most TELEGRAM_TEXT_LIMIT characters); returns Telegram's message id.

        Raises RateLimited, TransientError (5xx, timeouts, connection failures), TargetGone or
        TelegramRejected. Text Telegram cannot parse in `parse_mode` is sent again as plain text.
        """
        payload: dict[str, Any] = {"chat_id": _numeric(chat_id), "text": text}
        if thread_id is not None:
            payload["message_thread_id"] = _numeric(thread_id)
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
        answer = self._call("sendMessage", payload)
        body = answer.body
        if answer.status == 200 and (body is None or body.get("ok") is True):
            result = body.get("result") if body is not None else None
            message_id = result.get("message_id") if isinstance(result, dict) else None
            if _is_int(message_id):
                return str(message_id)
            # The message may well have been sent; resending could post it twice.
            raise PermanentError("telegram answered 200 without a message_id; the message may have been sent")
        raise self._failure(answer)

    def _call(self, method: str, payload: dict[str, Any]) -> _Answer:
        import urllib.error
        import urllib.request
        from http.client import HTTPException

        request = urllib.request.Request(  # noqa: S310 - the constructor admits only http(s) base URLs
            f"{self._base}/bot{self._token}/{method}",
            data=json.dumps(payload).encode("utf-8"),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        # `from None` below: urllib's exceptions carry the URL, and with it the token.
        try:
            with self._opener.open(request, timeout=self._timeout) as response:
                return _Answer(response.status, _json_object(response.read()), None)
        except urllib.error.HTTPError as exc:
            return _Answer(exc.code, _json_object(_error_body(exc)), exc.headers.get("Retry-After"))
        except TimeoutError:
            raise TransientError(f"telegram {method} timed out after {self._timeout:g} s") from None
        except urllib.error.URLError as exc:
            raise TransientError(f"telegram {method} failed to connect: {self._scrub(str(exc.reason))}") from None
        except (HTTPException, OSError) as exc:
            raise TransientError(f"telegram {method} failed: {type(exc).__name__}") from None
        except ValueError:
            raise PermanentError("telegram API base URL or bot token is not usable in a URL") from None

    def _failure(self, answer: _Answer) -> Exception:
        body = answer.body or {}
        error_code = body.get("error_code")
        code = error_code if _is_int(error_code) else answer.status
        description = self._scrub(str(body.get("description") or f"HTTP {answer.status}"))
        parameters = body.get("parameters")
        if not isinstance(parameters, dict):
            parameters = {}
        if code == 429 or answer.status == 429:
            return RateLimited(_retry_after(parameters.get("retry_after"), answer.retry_after_header))
        if answer.status >= 500 or (answer.status == 200 and code >= 500):
            return TransientError(f"telegram server error: HTTP {answer.status}: {description}")
        migrate_to = parameters.get("migrate_to_chat_id")
        if code == 403 or _is_int(migrate_to) or any(m in description.lower() for m in _GONE_MARKERS):
            return TargetGone(code, description, str(migrate_to) if _is_int(migrate_to) else None)
        return TelegramRejected(code, description)

    def _scrub(self, text: str) -> str:
        return text.replace(self._token, "<token>") if self._token else text


def _numeric(value: str) -> int | str:
    """Telegram ids travel as numbers; a channel's @username stays a string."""
    digits = value.removeprefix("-")
    return int(value) if digits.isascii() and digits.isdigit() else value


def _error_body(exc: urllib.error.HTTPError) -> bytes:
    from http.client import HTTPException

    try:
        with exc:
            return exc.read()
    except (HTTPException, OSError):
        return b""


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _retry_after(from_body: Any, from_header: str | None) -> float:
    for candidate in (from_body, from_header):
        try:
            seconds = float(candidate)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    return _DEFAULT_RETRY_AFTER
