"""Telegram Bot API: webhook verification, update normalization and sending (PLATFORMS §1).

Standard library only; urllib3 (the pooled HTTP client) is imported only when a request is sent:
the ingress imports this module on its cold-start path and never sends.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from hermes_gateway import errors, http_pool
from hermes_gateway.domain.media import Attachment, attachment
from hermes_gateway.domain.pacing import PaceRule
from hermes_gateway.domain.quotes import quote_of
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, RateLimited, TransientError, Unauthorized
from hermes_gateway.platforms.base import (
    PRESENCE_TIMEOUT_SECONDS,
    AdapterContext,
    Answer,
    Button,
    HttpClient,
    Target,
    header,
    is_int,
    object_field,
    retry_after_seconds,
)
from hermes_gateway.platforms.outbound_media import MediaFile

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

logger = logging.getLogger(__name__)

TELEGRAM_TEXT_LIMIT = 4096
SECRET_HEADER = "x-telegram-bot-api-secret-token"  # noqa: S105 - a header name, not a secret
CALLBACK_DATA_LIMIT = 64  # bytes of an inline button's callback_data
_WHAT = "telegram message"  # how a malformed field's BadRequest names the payload

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
    if not is_int(update_id):
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
    chat = object_field(message, "chat", _WHAT, required=True)
    chat_type = _CHAT_TYPES.get(str(chat.get("type")))
    if chat_type is None:
        return Ignored("unsupported_chat_type")
    if not is_int(chat.get("id")):
        raise BadRequest("telegram chat has no integer id")
    if not is_int(message.get("message_id")):
        raise BadRequest("telegram message has no integer message_id")
    text = message.get("text", message.get("caption"))
    if text is not None and not isinstance(text, str):
        raise BadRequest("telegram message text is not a string")
    media = attachments(message)
    if not text and not media:
        return Ignored("no_text")
    return InboundMessage(
        source=_source(message, chat, chat_type),
        text=text or "",
        event_id=f"telegram:{bot}:{update_id}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_to_message_id=(replied := _reply_to(message)),
        reply_to_text=_reply_text(message) if replied else None,
    )


# (message field, media kind): a message carries at most one of them (an album is one update per item)
_MEDIA_FIELDS = (
    ("voice", "voice"),
    ("audio", "audio"),
    ("video", "video"),
    ("video_note", "video"),
    ("animation", "video"),
    ("document", "document"),
    ("sticker", "sticker"),
)


def attachments(message: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """A message's media as references: a photo's largest size, or its voice note, audio, video,
    video note, animation, document or sticker (the `file_id` is fetched with getFile)."""
    photos = message.get("photo")
    if isinstance(photos, list):
        sizes = [p for p in photos if isinstance(p, dict) and isinstance(p.get("file_id"), str)]
        if sizes:
            largest = max(
                sizes,
                key=lambda p: (
                    (p.get("width") or 0) * (p.get("height") or 0)
                    if is_int(p.get("width")) and is_int(p.get("height"))
                    else 0
                ),
            )
            return (attachment("image", mime="image/jpeg", size=largest.get("file_size"), file_id=largest["file_id"]),)
    for field_name, kind in _MEDIA_FIELDS:
        item = message.get(field_name)
        if isinstance(item, dict) and isinstance(item.get("file_id"), str):
            mime = item.get("mime_type")
            if field_name == "sticker":
                mime = (
                    "video/webm"
                    if item.get("is_video")
                    else "application/x-tgsticker"
                    if item.get("is_animated")
                    else "image/webp"
                )
            elif field_name == "video_note":
                mime = "video/mp4"
            return (
                attachment(
                    kind, mime=mime, size=item.get("file_size"), name=item.get("file_name", ""), file_id=item["file_id"]
                ),
            )
    return ()


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
    chat = object_field(message, "chat", _WHAT, required=True)
    chat_type = _CHAT_TYPES.get(str(chat.get("type")))
    if chat_type is None or chat_type == "channel":
        return Ignored("unsupported_chat_type")
    if not is_int(chat.get("id")):
        raise BadRequest("telegram chat has no integer id")
    presser = object_field(press, "from", _WHAT, required=True)
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


def _person_name(person: Mapping[str, Any]) -> str | None:
    full = " ".join(str(person[k]) for k in ("first_name", "last_name") if person.get(k))
    return full or (str(person["username"]) if person.get("username") else None)


def _source(message: dict[str, Any], chat: dict[str, Any], chat_type: str) -> SessionSource:
    sender = object_field(message, "from", _WHAT)
    if sender and not is_int(sender.get("id")):
        raise BadRequest("telegram sender has no integer id")
    sender_chat = object_field(message, "sender_chat", _WHAT)
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
        thread_id=str(topic) if is_int(topic) else None,
        chat_name=str(chat_name) if chat_name else None,
        is_bot=is_bot,
        message_id=str(message["message_id"]),
    )


def _reply_to(message: dict[str, Any]) -> str | None:
    replied = message.get("reply_to_message")
    if not isinstance(replied, dict) or not is_int(replied.get("message_id")):
        return None
    # In a forum topic every message "replies" to the topic's opening service message.
    if message.get("is_topic_message") is True and replied["message_id"] == message.get("message_thread_id"):
        return None
    return str(replied["message_id"])


def _reply_text(message: dict[str, Any]) -> str | None:
    """What the user answered: the part they quoted (`quote`, when they picked one), else the
    replied-to message's text or caption (a file without one: none; the turn looks up its id)."""
    picked = message.get("quote")
    if isinstance(picked, dict) and isinstance(picked.get("text"), str):
        return quote_of(picked["text"])
    replied = message["reply_to_message"]
    return quote_of(replied.get("text", replied.get("caption")))


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


CAPTION_LIMIT = 1024  # a media message's caption


class TelegramSender:
    """Sends messages with the Bot API. The token is part of every URL, so no URL ever leaves here."""

    typing_refresh_seconds = 4.0  # a chat action shows for 5 s, or until the bot's next message

    def __init__(self, api_base_url: str, token: str, timeout: float = 10.0) -> None:
        self._http = HttpClient(api_base_url, platform="telegram", timeout=timeout, scrub=(token,))
        self._token = token

    def __repr__(self) -> str:
        return f"TelegramSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        return self.send_text(
            target.chat_id, text, thread_id=target.thread_id, buttons=target.buttons, reply_to=target.reply_to
        )

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """`editMessageText` (a streamed answer); "message is not modified" is no error."""
        payload: dict[str, Any] = {
            "chat_id": _numeric(target.chat_id),
            "message_id": _numeric(message_id),
            "text": text,
        }
        answer = self._http.request("POST", f"/bot{self._token}/editMessageText", json_body=payload)
        body = answer.json_object()
        if answer.status == 200 and body.get("ok") is True:
            return
        if answer.status == 400 and "message is not modified" in str(body.get("description", "")).lower():
            return
        raise self._failure(answer)

    def typing(self, target: Target) -> bool:
        """`sendChatAction` typing, in the chat's topic when it has one."""
        payload: dict[str, Any] = {"chat_id": _numeric(target.chat_id), "action": "typing"}
        if target.thread_id is not None:
            payload["message_thread_id"] = _numeric(target.thread_id)
        answer = self._http.request(
            "POST", f"/bot{self._token}/sendChatAction", json_body=payload, timeout=PRESENCE_TIMEOUT_SECONDS
        )
        if answer.status == 200:
            return True
        raise self._failure(answer)

    def send_text(
        self,
        chat_id: str,
        text: str,
        *,
        thread_id: str | None = None,
        parse_mode: str | None = None,
        buttons: tuple[Button, ...] = (),
        reply_to: str | None = None,
    ) -> str:
        """Send one message (at most TELEGRAM_TEXT_LIMIT characters); returns Telegram's message id.

        Raises RateLimited, TransientError (5xx, timeouts, connection failures), TargetGone or
        TelegramRejected. Text Telegram cannot parse in `parse_mode` is sent again as plain text.
        """
        payload: dict[str, Any] = {"chat_id": _numeric(chat_id), "text": text}
        if thread_id is not None:
            payload["message_thread_id"] = _numeric(thread_id)
        if reply_to is not None and reply_to.isdigit():
            # A reply to a message deleted meanwhile is sent all the same, as a plain message.
            payload["reply_parameters"] = {"message_id": int(reply_to), "allow_sending_without_reply": True}
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

    caption_limit = CAPTION_LIMIT

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """A file by its kind's method (`sendPhoto`, `sendVoice`, `sendAudio`, `sendVideo`, else
        `sendDocument`), uploaded as multipart, with the caption (at most CAPTION_LIMIT)."""
        method, field = _MEDIA_METHODS.get(media.kind, ("sendDocument", "document"))
        form: http_pool.FormFields = {"chat_id": target.chat_id}
        if caption:
            form["caption"] = caption[:CAPTION_LIMIT]
        if target.thread_id is not None:
            form["message_thread_id"] = target.thread_id
        if target.reply_to is not None and target.reply_to.isdigit():
            reply = {"message_id": int(target.reply_to), "allow_sending_without_reply": True}
            form["reply_parameters"] = json.dumps(reply)
        form[field] = (media.name, media.data, media.mime)
        return self._sent_id(self._http.request("POST", f"/bot{self._token}/{method}", files=form, timeout=60.0))

    def _send_message(self, payload: dict[str, Any]) -> str:
        return self._sent_id(self._http.request("POST", f"/bot{self._token}/sendMessage", json_body=payload))

    def _sent_id(self, answer: Answer) -> str:
        body = answer.body if isinstance(answer.body, dict) else None
        if answer.status == 200 and (body is None or body.get("ok") is True):
            result = body.get("result") if body is not None else None
            message_id = result.get("message_id") if isinstance(result, dict) else None
            if is_int(message_id):
                return str(message_id)
            # The message may well have been sent; resending could post it twice.
            raise OutcomeUnknown("telegram answered 200 without a message_id; the message may have been sent")
        raise self._failure(answer)

    def _failure(self, answer: Answer) -> Exception:
        body = answer.json_object()
        error_code = body.get("error_code")
        code = error_code if is_int(error_code) else answer.status
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
        if code == 403 or is_int(migrate_to) or any(m in description.lower() for m in _GONE_MARKERS):
            return TargetGone(code, description, str(migrate_to) if is_int(migrate_to) else None)
        return TelegramRejected(code, description)


# media kind -> the Bot API method and its file field
_MEDIA_METHODS = {
    "image": ("sendPhoto", "photo"),
    "voice": ("sendVoice", "voice"),
    "audio": ("sendAudio", "audio"),
    "video": ("sendVideo", "video"),
}


def inline_keyboard(buttons: tuple[Button, ...]) -> dict[str, Any] | None:
    """One row of inline buttons whose callback data is the reply; a press arrives as a
    `callback_query`. Telegram caps callback data at 64 bytes: longer replies get no button."""
    row = [
        {"text": b.label[:64], "callback_data": b.reply}
        for b in buttons
        if len(b.reply.encode("utf-8")) <= CALLBACK_DATA_LIMIT
    ]
    return {"inline_keyboard": [row]} if row else None


GET_FILE_LIMIT = 20 * 1000 * 1000  # the Bot API hands over files up to 20 MB (getFile)


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """getFile for the file's path, then its download from `/file/bot<token>/<path>`: the token
    is in both URLs, which never leave this function (errors are scrubbed)."""
    from hermes_gateway.platforms.media import MediaTooLarge, MediaUnavailable, download, too_large

    token = context.secret("TELEGRAM_BOT_TOKEN")
    file_id = media.ref.get("file_id")
    if not token or not file_id:
        raise MediaUnavailable("telegram: no bot token or no file id to fetch the file with")
    limit = min(limit, GET_FILE_LIMIT)
    over = too_large(media, limit)
    if over is not None:
        raise over
    http = HttpClient(context.platform.api_base_url, platform="telegram", timeout=10.0, scrub=(token,))
    answer = http.request("POST", f"/bot{token}/getFile", json_body={"file_id": file_id})
    body = answer.json_object()
    result = body.get("result") if answer.status == 200 and body.get("ok") is True else None
    path = result.get("file_path") if isinstance(result, dict) else None
    if not isinstance(path, str) or not path:
        description = str(body.get("description") or f"HTTP {answer.status}")
        if "too big" in description.lower():
            raise MediaTooLarge(media.size, limit)
        if answer.status == 429 or answer.status >= 500:
            raise TelegramSender(context.platform.api_base_url, token)._failure(answer)
        raise MediaUnavailable(f"telegram getFile: {http.scrub(description)[:200]}")
    return download(http, f"/file/bot{token}/{path.lstrip('/')}", limit=limit, mime=media.mime)


def build_sender(context: AdapterContext) -> TelegramSender | None:
    token = context.secret("TELEGRAM_BOT_TOKEN")
    return TelegramSender(context.platform.api_base_url, token) if token else None


GROUP_BURST = 3  # a group's sends after a quiet spell that go at once (an answer's chunks)


def group_pace(chat_id: str, sends_per_minute: int) -> PaceRule | None:
    """How the bot paces its sends to a chat: a group's (Telegram: "no more than 20 messages per
    minute in the same group") at `sends_per_minute`; None for a private chat, whose limit (about
    one a second) its one session's turns keep to, and for a channel's @username. Group and
    supergroup ids are negative; private chats' ids are users' ids, positive."""
    if not chat_id.startswith("-") or not chat_id[1:].isdigit():
        return None
    return PaceRule.per_minute(sends_per_minute, GROUP_BURST)


def _numeric(value: str) -> int | str:
    """Telegram ids travel as numbers; a channel's @username stays a string."""
    digits = value.removeprefix("-")
    return int(value) if digits.isascii() and digits.isdigit() else value
