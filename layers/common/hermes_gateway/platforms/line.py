"""LINE Messaging API: `x-line-signature`, event normalization and reply-or-push sending
(PLATFORMS §8); webhook registration is the CLI's (`hermes_cli.webhooks.line`).

Standard library only; urllib3 (the pooled HTTP client) is imported only when a request is sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hermes_gateway.domain.media import Attachment, attachment
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, Unauthorized
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import (
    PRESENCE_TIMEOUT_SECONDS,
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    optional_str,
)
from hermes_gateway.platforms.outbound_media import MediaFile, link_line
from hermes_gateway.services.ingress import (
    Accepted,
    Handshake,
    HttpRequest,
    HttpResponse,
    Ignored,
    Parsed,
    epoch_seconds,
    json_payload,
    outlived_deduplication,
)

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-line-signature"
# LINE: "use the reply token within one minute of receiving the webhook"; a margin for our own latency.
REPLY_TOKEN_SECONDS = 50.0
LOADING_SECONDS = 20  # a multiple of 5, at most 60: the animation ends by itself this long after each ask
_CHAT_KINDS = {"user": ("dm", "userId"), "group": ("group", "groupId"), "room": ("group", "roomId")}
_REMEMBERED_TOKENS = 1024
# Message types whose content is fetched from the content API, and their media kind: an audio
# message is a recording made in the app (an audio file is sent as a `file`).
_MEDIA_TYPES = {"image": "image", "video": "video", "audio": "voice", "file": "document"}
_MEDIA_MIMES = {"image": "image/jpeg", "video": "video/mp4", "audio": "audio/x-m4a"}  # LINE's own encodings
CONTENT_HOST, API_HOST = "api-data.line.me", "api.line.me"
RETRY_KEY_HEADER = "X-Line-Retry-Key"
# Retry keys are UUIDs named by the outbox row (delivery and chunk) in this namespace.
RETRY_KEY_NAMESPACE = uuid.uuid5(
    uuid.NAMESPACE_URL, "https://developers.line.biz/en/docs/messaging-api/retrying-api-request/"
)


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
    bot = optional_str(payload, "destination")
    return Accepted(items=tuple(parse_event(event, bot=bot, received_at=received_at) for event in payload["events"]))


def parse_event(event: Any, *, bot: str | None, received_at: float) -> InboundMessage | Ignored:
    if not isinstance(event, dict):
        raise BadRequest("line event is not an object")
    if event.get("type") != "message":
        return Ignored("unsupported_event")
    if event.get("mode") == "standby":
        return Ignored("standby")  # another module owns the chat; the bot must not answer
    if outlived_deduplication("line", epoch_seconds(event.get("timestamp"), milliseconds=True), received_at):
        return Ignored("outlived_deduplication")  # a redelivery later than ingress remembers ids
    message = event.get("message")
    if not isinstance(message, dict) or not isinstance(message.get("id"), str) or not message["id"]:
        raise BadRequest("line message event has no message with a string id")
    content = _content(message)
    if content is None:
        return Ignored("no_text")
    text, media = content
    source = _source(event.get("source"), message, bot)
    if source is None:
        return Ignored("unsupported_source")
    event_key = event.get("webhookEventId")
    delivery = event.get("deliveryContext")
    redelivery = isinstance(delivery, dict) and delivery.get("isRedelivery") is True
    reply_token = event.get("replyToken")
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"line:{event_key}" if isinstance(event_key, str) and event_key else f"line:message:{message['id']}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_to_message_id=optional_str(message, "quotedMessageId"),
        extra={"redelivery": True} if redelivery else {},
        facts=("mentions_bot",) if source.chat_type == "group" and _mentions_bot(message) else (),
        reply_context=(
            {"reply_token": reply_token, "received_at": repr(received_at)}
            if isinstance(reply_token, str) and reply_token
            else {}
        ),
    )


def _content(message: dict[str, Any]) -> tuple[str, tuple[Attachment, ...]] | None:
    """A text message's text, or a media message's attachment (with no text); None for a message
    with neither (a sticker, a location, an empty text)."""
    kind = optional_str(message, "type")  # (an array there is no type, and no set member)
    if kind in _MEDIA_TYPES:
        return "", (media_attachment(message),)
    if kind != "text":
        return None
    text = message.get("text")
    if not isinstance(text, str):
        raise BadRequest("line text message has no string text")
    return (text, ()) if text.strip() else None


def media_attachment(message: Mapping[str, Any]) -> Attachment:
    """An image, video, audio or file message as a reference: its message id, fetched from the
    content API. Content another service provided (`contentProvider.type: external`) is named only."""
    kind = str(message.get("type"))
    provider = message.get("contentProvider")
    external = isinstance(provider, dict) and provider.get("type") == "external"
    return attachment(
        _MEDIA_TYPES[kind],
        mime=_MEDIA_MIMES.get(kind, ""),
        size=message.get("fileSize"),
        name=message.get("fileName", ""),
        message_id=None if external else message.get("id"),
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
    return SessionSource(
        platform="line",
        chat_id=chat_id,
        chat_type=chat_type,
        user_id=optional_str(source, "userId"),
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

    A push carries an `X-Line-Retry-Key` derived from the chunk's outbox row, so the push of a
    delivery retried after a timeout (which LINE may have accepted) is the same request to LINE:
    it answers 409 with the first push's `sentMessages` instead of posting it twice. Replies
    cannot carry one (LINE refuses it there); their token is good for one use anyway.
    """

    # Each loading animation is asked for LOADING_SECONDS and renewed before it ends; the answer's
    # arrival ends it anyway.
    typing_refresh_seconds = 15.0

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
        return self._send_messages(target, [{"type": "text", "text": text}])

    caption_limit = 0  # an image message has no caption: the text goes before it

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """An image message of the stored file's pre-signed (https) URL, which LINE fetches; a
        video or audio message needs a preview image or a duration the gateway does not have, so
        other files go as a link."""
        url = media.link()
        if media.kind != "image":
            return self._send_messages(target, [{"type": "text", "text": link_line(media)}])
        if not url.startswith("https://") and not _loopback_http(url):
            raise PermanentError("line: an image message needs an https URL of the file")
        return self._send_messages(target, [{"type": "image", "originalContentUrl": url, "previewImageUrl": url}])

    def _send_messages(self, target: Target, messages: list[dict[str, Any]]) -> str:
        token = target.context.get("reply_token")
        if token and self._can_reply(token, target.context.get("received_at")):
            self._remember(token)
            answer = self._post("/v2/bot/message/reply", {"replyToken": token, "messages": messages})
            if answer.status == 200:
                return _message_id(answer)
            if not _invalid_reply_token(answer):
                raise _failure(self._http, answer)
            logger.info("line refused the reply token; pushing instead")
        key = retry_key(target.delivery_id) if target.delivery_id else None
        answer = self._post("/v2/bot/message/push", {"to": target.chat_id, "messages": messages}, retry_key=key)
        if answer.status == 200:
            return _message_id(answer)
        if answer.status == 409 and key is not None:
            # An earlier try of this very push was accepted (its answer never came back).
            return _message_id(answer, missing="line had accepted this push already (409) and named no message id")
        raise _failure(self._http, answer, gone=(403, 404))

    def typing(self, target: Target) -> bool:
        """The loading animation, which LINE shows only in a one-to-one chat (a user id, `U…`)."""
        if not target.chat_id.startswith("U"):
            return False
        payload = {"chatId": target.chat_id, "loadingSeconds": LOADING_SECONDS}
        answer = self._http.request(
            "POST",
            "/v2/bot/chat/loading/start",
            json_body=payload,
            headers=self._auth,
            timeout=PRESENCE_TIMEOUT_SECONDS,
        )
        if 200 <= answer.status < 300:
            return True
        raise _failure(self._http, answer)

    def _post(self, path: str, payload: dict[str, Any], *, retry_key: str | None = None) -> Answer:
        headers = {**self._auth, RETRY_KEY_HEADER: retry_key} if retry_key else self._auth
        return self._http.request("POST", path, json_body=payload, headers=headers)

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


def retry_key(delivery_id: str) -> str:
    """The `X-Line-Retry-Key` of a chunk's push: the same for every try of it, and for no other."""
    return str(uuid.uuid5(RETRY_KEY_NAMESPACE, delivery_id))


def _message_id(
    answer: Answer, missing: str = "line answered 200 without sentMessages[0].id; the message may have been sent"
) -> str:
    sent = answer.json_object().get("sentMessages")
    first = sent[0] if isinstance(sent, list) and sent else None
    if isinstance(first, dict) and isinstance(first.get("id"), str) and first["id"]:
        return str(first["id"])
    raise OutcomeUnknown(missing)


def _invalid_reply_token(answer: Answer) -> bool:
    message = answer.json_object().get("message")
    return answer.status == 400 and isinstance(message, str) and "reply token" in message.lower()


def _failure(http: HttpClient, answer: Answer, gone: tuple[int, ...] = ()) -> Exception:
    message = answer.json_object().get("message")
    if answer.status == 429 and isinstance(message, str) and "monthly limit" in message.lower():
        # The plan's monthly message quota: waiting seconds will not help.
        return PermanentError(f"line: the channel's monthly message limit is reached: {http.scrub(message)}")
    return http.failure(answer, gone=gone)


def content_base_url(api_base_url: str) -> str:
    """Where message content is downloaded: LINE's data host (api-data.line.me) for its API host,
    else the configured base URL itself (a proxy, a test's fake)."""
    return api_base_url.replace(f"://{API_HOST}", f"://{CONTENT_HOST}", 1)


# `GET /v2/bot/message/{id}/content` on the data host with the channel access token.
MEDIA = _media.MediaSource(
    "line", "message_id", _media.bearer("LINE_CHANNEL_ACCESS_TOKEN"), path="/v2/bot/message/{message_id}/content",
    base=content_base_url, missing="no channel access token or no message id to fetch the content with",
)  # fmt: skip


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    return _media.fetch_from(MEDIA, context, media, limit)


def _loopback_http(url: str) -> bool:
    """Plain http to this machine: local mode's stored files, for an emulator or a test's fake (a
    deployment's pre-signed URLs are https)."""
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


def build_sender(context: AdapterContext) -> LineSender | None:
    token = context.secret("LINE_CHANNEL_ACCESS_TOKEN")
    return LineSender(context.platform.api_base_url, token, context.clock) if token else None
