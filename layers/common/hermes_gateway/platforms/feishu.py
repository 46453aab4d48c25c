"""Feishu / Lark event callbacks in, IM messages out (PLATFORMS §12).

Inbound security, as Feishu documents it:
- with an Encrypt Key, every event is signed: `X-Lark-Signature` = hex(SHA-256(timestamp + nonce +
  encrypt_key + raw body)), and the body is `{"encrypt": base64(iv + AES-256-CBC(event))}` with
  key = SHA-256(encrypt_key);
- the Verification Token travels inside the (decrypted) event: `header.token` (schema 2.0) or
  `token` (the `url_verification` challenge and schema 1.0).
The gateway checks every one of those it has the secret for, and refuses everything when it has
neither. The challenge is the one request Feishu does not sign: it is accepted on its token, or,
with only an Encrypt Key configured, because it decrypted with that key.

cryptography and urllib3 are imported only when an encrypted body arrives or a request is sent.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import (
    BadRequest,
    OutcomeUnknown,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms.base import (
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    header,
    object_field,
    object_or_empty,
    optional_str,
    required_str,
    retry_after_seconds,
    send_key,
)
from hermes_gateway.platforms.tokens import CachedToken
from hermes_gateway.services.ingress import (
    Handshake,
    HttpRequest,
    HttpResponse,
    Ignored,
    Parsed,
    read_json,
    signed_timestamp,
)

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-lark-signature"
TIMESTAMP_HEADER = "x-lark-request-timestamp"
NONCE_HEADER = "x-lark-request-nonce"
# Feishu documents no window; five minutes (as Slack) bounds a replay of a captured request.
TIMESTAMP_WINDOW_SECONDS = 300

_CHAT_TYPES = {"p2p": "dm", "group": "group"}
_MENTION_KEY = re.compile(r"@_user_\d+")
# Message types whose content names a resource (its key) the message resources API hands over:
# (media kind, the content's key field, the API's `type`). An audio message is a voice recording.
_MEDIA_TYPES = {
    "image": ("image", "image_key", "image"),
    "file": ("document", "file_key", "file"),
    "audio": ("voice", "file_key", "file"),
    "media": ("video", "file_key", "file"),
}
_RESOURCE_KEY = re.compile(r"[A-Za-z0-9_-]{1,200}")
_WHAT = "feishu event"  # how a malformed field's BadRequest names the payload

RATE_LIMIT_CODES = (99991400, 230020)  # the gateway's frequency limit; a chat's own limit (5 QPS)
TOKEN_INVALID_CODES = (99991661, 99991663, 99991668, 99991677)  # missing, invalid or expired access token
GONE_CODES = (230002, 230013, 232009)  # bot not in the chat; user outside the bot's availability; chat dissolved
ROOT_GONE_CODES = (230011, 230110)  # the thread's root message was recalled or deleted


# --- inbound --------------------------------------------------------------------------------------


def signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """The `X-Lark-Signature` of a request: hex SHA-256 over timestamp + nonce + key + raw body."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode("utf-8") + body).hexdigest()


def verify_signature(headers: Mapping[str, str], body: bytes, encrypt_key: str, now: float) -> None:
    presented = headers.get(SIGNATURE_HEADER)
    timestamp = headers.get(TIMESTAMP_HEADER)
    nonce = headers.get(NONCE_HEADER)
    if not presented or timestamp is None or nonce is None:
        raise Unauthorized("feishu signature, timestamp or nonce header is missing")
    sent_at = signed_timestamp(timestamp, TIMESTAMP_HEADER)
    if abs(now - sent_at) > TIMESTAMP_WINDOW_SECONDS:
        raise Unauthorized("feishu request timestamp is outside the 5-minute window")
    expected = signature(timestamp, nonce, encrypt_key, body)
    if not hmac.compare_digest(presented.strip().lower().encode("utf-8"), expected.encode("ascii")):
        raise Unauthorized("feishu signature does not match")


def decrypt(encrypted: str, encrypt_key: str) -> bytes:
    """The plaintext of an `encrypt` field: AES-256-CBC, key SHA-256(encrypt_key), IV first, PKCS#7."""
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    try:
        data = base64.b64decode(encrypted, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("feishu encrypted body is not base64") from None
    if len(data) < 32 or len(data) % 16:
        raise BadRequest("feishu encrypted body has a wrong length")
    key = hashlib.sha256(encrypt_key.encode("utf-8")).digest()
    decryptor = Cipher(algorithms.AES(key), modes.CBC(data[:16])).decryptor()
    padded = decryptor.update(data[16:]) + decryptor.finalize()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        return unpadder.update(padded) + unpadder.finalize()
    except ValueError:
        raise BadRequest("feishu encrypted body does not decrypt with this Encrypt Key") from None


def open_payload(body: bytes, encrypt_key: str | None) -> tuple[dict[str, Any], bool]:
    """The event as a JSON object, decrypted when it arrived encrypted; and whether it was."""
    outer = _json_object(body, "feishu body")
    encrypted = outer.get("encrypt")
    if encrypted is None:
        return outer, False
    if not isinstance(encrypted, str):
        raise BadRequest("feishu encrypt field is not a string")
    if not encrypt_key:
        raise BadRequest("feishu event is encrypted but FEISHU_ENCRYPT_KEY is not configured")
    return _json_object(decrypt(encrypted, encrypt_key), "feishu decrypted event"), True


def verify_token(payload: Mapping[str, Any], expected: str) -> None:
    head = payload.get("header")
    token = head.get("token") if isinstance(head, dict) else payload.get("token")
    if not isinstance(token, str) or not token:
        raise Unauthorized("feishu event carries no verification token")
    if not hmac.compare_digest(token.encode("utf-8"), expected.encode("utf-8")):
        raise Unauthorized("feishu verification token does not match")


class FeishuInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context
        self._app_id = str(context.option("app_id") or "")

    def verify(self, request: HttpRequest) -> None:
        key = self._context.secret("FEISHU_ENCRYPT_KEY")
        token = self._context.secret("FEISHU_VERIFICATION_TOKEN")
        if not key and not token:
            raise Unauthorized("feishu is not configured (FEISHU_ENCRYPT_KEY, FEISHU_VERIFICATION_TOKEN); refusing all")
        signed = False
        if key and SIGNATURE_HEADER in request.headers:
            verify_signature(request.headers, request.body, key, self._context.clock())
            signed = True
        try:
            payload, was_encrypted = open_payload(request.body, key)
        except BadRequest as exc:
            if signed:
                return  # authentic; parse answers 400 for the malformed body
            raise Unauthorized(f"feishu event cannot be verified: {exc}") from None
        challenge = payload.get("type") == "url_verification"
        if key and not signed and not challenge:
            raise Unauthorized("feishu signature headers are missing")
        if token:
            verify_token(payload, token)
        elif not signed and not was_encrypted:
            raise Unauthorized("feishu challenge is neither encrypted nor checkable without FEISHU_VERIFICATION_TOKEN")

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        payload, _ = open_payload(request.body, self._context.secret("FEISHU_ENCRYPT_KEY"))
        if payload.get("type") == "url_verification":
            challenge = payload.get("challenge")
            if not isinstance(challenge, str):
                raise BadRequest("feishu url_verification has no challenge")
            return Handshake(HttpResponse(200, {"challenge": challenge}))
        if payload.get("schema") != "2.0":
            return Ignored("unsupported_schema")
        return parse_event(payload, app_id=self._app_id, received_at=received_at)


def parse_event(payload: Mapping[str, Any], *, app_id: str = "", received_at: float) -> InboundMessage | Ignored:
    """A schema 2.0 event as a message, or the reason it is ignored. BadRequest when malformed."""
    head = object_field(payload, "header", _WHAT, required=True)
    event_id = required_str(head, "event_id", "feishu event")
    if app_id and head.get("app_id") not in (None, app_id):
        return Ignored("other_app")
    if head.get("event_type") != "im.message.receive_v1":
        return Ignored("unsupported_event")
    event = object_field(payload, "event", _WHAT, required=True)
    message = object_field(event, "message", _WHAT, required=True)
    sender = object_or_empty(event, "sender")
    chat_type = _CHAT_TYPES.get(str(message.get("chat_type")))
    if chat_type is None:
        return Ignored("unsupported_chat_type")
    chat_id = required_str(message, "chat_id", "feishu event")
    message_id = required_str(message, "message_id", "feishu event")
    ids = object_or_empty(sender, "sender_id")
    is_bot = sender.get("sender_type") == "app"
    if is_bot and app_id and app_id in ids.values():
        return Ignored("own_message")
    mentions = [m for m in message.get("mentions") or () if isinstance(m, dict)]
    content = _content(message, mentions)
    if isinstance(content, Ignored):
        return content
    text, media = content
    # A message in a thread carries the thread (omt_…) and its root message (om_…); the root is
    # what a reply in that thread is addressed to, so it keys the thread.
    thread_id = None
    if optional_str(message, "thread_id"):
        thread_id = optional_str(message, "root_id") or message_id
    parent = optional_str(message, "parent_id")
    source = SessionSource(
        platform="feishu",
        chat_id=chat_id,
        chat_type=chat_type,
        user_id=optional_str(ids, "open_id"),
        user_id_alt=optional_str(ids, "union_id"),
        thread_id=thread_id,
        is_bot=is_bot,
        scope_id=optional_str(head, "tenant_key"),
        message_id=message_id,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"feishu:{event_id}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_to_message_id=parent if parent and parent != thread_id else None,
        # Without the group-messages permission Feishu delivers only messages that @mention the
        # bot; the bot's own open_id is not known here, so any mention in a group counts.
        facts=("mentions_bot",) if chat_type == "group" and mentions else (),
    )


def _content(
    message: Mapping[str, Any], mentions: list[dict[str, Any]]
) -> tuple[str, tuple[Attachment, ...]] | Ignored:
    """A text message's text (mentions resolved), or a media message's attachment (no text)."""
    message_type = optional_str(message, "message_type")  # (an array there is no type, and no dict key)
    if message_type != "text" and message_type not in _MEDIA_TYPES:
        return Ignored("unsupported_message_type")
    content = _json_object(required_str(message, "content", "feishu event").encode("utf-8"), "feishu message content")
    if message_type in _MEDIA_TYPES:
        return "", (media_attachment(message_type, content, str(message["message_id"])),)
    raw_text = content.get("text")
    if not isinstance(raw_text, str):
        raise BadRequest("feishu text message content has no text")
    text = resolve_mentions(raw_text, mentions)
    return (text, ()) if text else Ignored("no_text")


def media_attachment(message_type: str, content: Mapping[str, Any], message_id: str) -> Attachment:
    """An image, file, audio or media (video) message as a reference: the message id, the resource
    key and its type, for `GET /im/v1/messages/{id}/resources/{key}?type=…`."""
    import mimetypes

    kind, key_field, resource_type = _MEDIA_TYPES[message_type]
    key, name = content.get(key_field), content.get("file_name")
    mime = (mimetypes.guess_type(name)[0] or "") if isinstance(name, str) else ""
    if kind == "document" and mime:
        kind = kind_of_mime(mime)
    usable = isinstance(key, str) and _RESOURCE_KEY.fullmatch(key) is not None
    return attachment(
        kind,
        mime=mime,
        name=name or "",
        message_id=message_id if usable else None,
        key=key if usable else None,
        type=resource_type if usable else None,
    )


def resolve_mentions(text: str, mentions: list[dict[str, Any]]) -> str:
    """Drop the leading `@_user_N` keys (addressing the bot); name the people mentioned later."""
    names = {m.get("key"): m.get("name") for m in mentions}
    rest = text.strip()
    while (lead := _MENTION_KEY.match(rest)) is not None:
        rest = rest[lead.end() :].lstrip()

    def name(match: re.Match[str]) -> str:
        found = names.get(match.group(0))
        return f"@{found}" if isinstance(found, str) and found else ""

    return re.sub(r"[ \t]{2,}", " ", _MENTION_KEY.sub(name, rest)).strip()


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    value = read_json(raw, what)
    if not isinstance(value, dict):
        raise BadRequest(f"{what} is not a JSON object")
    return value


# --- sender ---------------------------------------------------------------------------------------


class FeishuSender:
    """Sends text as the app's bot with a cached tenant_access_token."""

    def __init__(
        self,
        api_base_url: str,
        app_id: str,
        app_secret: str,
        *,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._http = HttpClient(api_base_url, platform="feishu", timeout=timeout, scrub=(app_secret,))
        self._app_id = app_id
        self._secret = app_secret
        # Fetched again five minutes before it expires, however short its life (no cap on the margin):
        # Feishu hands out a new token once fewer than 30 minutes remain.
        self._token = CachedToken(max_margin_share=1.0, clock=clock)
        self._issued: list[str] = []  # every token this sender held, scrubbed from messages

    def __repr__(self) -> str:
        return f"FeishuSender({self._http.base!r}, {self._app_id!r})"

    def send(self, target: Target, text: str) -> str:
        content = json.dumps({"text": text}, ensure_ascii=False)
        # Feishu sends at most one message per uuid within an hour: every try of one outbox chunk
        # carries the same one, so a retried send Feishu already took is not posted twice.
        once = {"uuid": key} if (key := send_key(target)) else {}
        if target.thread_id:
            try:
                return self._reply_in_thread(target.thread_id, content, once)
            except _RootGone:
                logger.warning("feishu thread root is gone; sending to the chat instead")
        return self._message_id(
            self._call(
                "/im/v1/messages?receive_id_type=chat_id",
                {"receive_id": target.chat_id, "msg_type": "text", "content": content, **once},
            )
        )

    # Feishu lets a message be edited 20 times: a streamed answer keeps its last one for the end.
    max_edits = 20

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """`PUT /im/v1/messages/{id}` with the new text (a streamed answer's edit)."""
        import urllib.parse

        content = json.dumps({"text": text}, ensure_ascii=False)
        path = f"/im/v1/messages/{urllib.parse.quote(message_id, safe='')}"
        self._call(path, {"msg_type": "text", "content": content}, method="PUT")

    def _reply_in_thread(self, root_message_id: str, content: str, once: Mapping[str, str]) -> str:
        import urllib.parse

        path = f"/im/v1/messages/{urllib.parse.quote(root_message_id, safe='')}/reply"
        try:
            data = self._call(path, {"msg_type": "text", "content": content, "reply_in_thread": True, **once})
        except FeishuRejected as exc:
            if exc.code in ROOT_GONE_CODES:
                raise _RootGone from None
            raise
        return self._message_id(data)

    @staticmethod
    def _message_id(data: Mapping[str, Any]) -> str:
        message_id = data.get("message_id")
        if isinstance(message_id, str) and message_id:
            return message_id
        raise OutcomeUnknown("feishu answered success without a message_id; the message may have been sent")

    def _call(self, path: str, body: dict[str, Any], method: str = "POST") -> dict[str, Any]:
        """POST (or `method`) with the tenant token; a token Feishu calls invalid is replaced once."""
        answer, code = self._post(path, body, self._token.get(self._fetch_token), method)
        if code in TOKEN_INVALID_CODES:
            logger.info("feishu refused the tenant access token; fetching a new one")
            self._token.drop()
            answer, code = self._post(path, body, self._token.get(self._fetch_token), method)
        if answer.status == 200 and code == 0:
            data = answer.json_object().get("data")
            return data if isinstance(data, dict) else {}
        raise self._failure(answer, code)

    def download(self, message_id: str, key: str, resource_type: str, *, limit: int, mime: str) -> Fetched:
        """A message's resource (an image, a file) with the tenant token."""
        import urllib.parse

        from hermes_gateway.platforms.media import download

        token = self._token.get(self._fetch_token)
        http = HttpClient(self._http.base, platform="feishu", timeout=self._http.timeout, scrub=(self._secret, token))
        path = (
            f"/im/v1/messages/{urllib.parse.quote(message_id, safe='')}/resources/{urllib.parse.quote(key, safe='')}"
            f"?type={urllib.parse.quote(resource_type, safe='')}"
        )
        return download(http, path, limit=limit, headers={"Authorization": f"Bearer {token}"}, mime=mime)

    def _post(self, path: str, body: dict[str, Any], token: str, method: str = "POST") -> tuple[Answer, int | None]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json; charset=utf-8"}
        answer = self._http.request(method, path, json_body=body, headers=headers)
        return answer, _code(answer)

    def _fetch_token(self) -> tuple[str, float]:
        answer = self._http.request(
            "POST",
            "/auth/v3/tenant_access_token/internal",
            json_body={"app_id": self._app_id, "app_secret": self._secret},
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        code = _code(answer)
        body = answer.json_object()
        token, expire = body.get("tenant_access_token"), body.get("expire")
        if answer.status != 200 or code != 0:
            failure = self._failure(answer, code)
            if isinstance(failure, RateLimited | TransientError):
                raise failure
            raise PermanentError(f"feishu refused the app credentials (FEISHU_APP_ID, FEISHU_APP_SECRET): {failure}")
        if not isinstance(token, str) or not token or not isinstance(expire, int):
            raise PermanentError("feishu answered the token request without a token")
        self._issued = [*self._issued[-3:], token]
        return token, float(expire)

    def _scrub(self, text: str) -> str:
        text = self._http.scrub(text)
        for token in self._issued:
            text = text.replace(token, "<redacted>")
        return text

    def _failure(self, answer: Answer, code: int | None) -> Exception:
        body = answer.json_object()
        detail = self._scrub(str(body.get("msg") or f"HTTP {answer.status}"))
        if answer.status == 429 or code in RATE_LIMIT_CODES:
            seconds = retry_after_seconds(
                header(answer.headers, "x-ogw-ratelimit-reset"), header(answer.headers, "retry-after")
            )
            return RateLimited(seconds, f"feishu rate limit (code {code}); retry after {seconds:g} s")
        if answer.status >= 500:
            return TransientError(f"feishu server error: HTTP {answer.status}: code {code}: {detail}")
        if code in GONE_CODES:
            return TargetGone(f"feishu: the bot cannot reach this chat: code {code}: {detail}")
        if code is None:
            return self._http.failure(answer, gone=(), detail=self._scrub(str(answer.body or "")[:200]))
        return FeishuRejected(answer.status, code, detail)


class FeishuRejected(PermanentError):
    """Feishu refused the request with a business error code; sending it again cannot succeed."""

    def __init__(self, status: int, code: int, description: str) -> None:
        super().__init__(f"feishu rejected the request: HTTP {status}: code {code}: {description}")
        self.status = status
        self.code = code


class _RootGone(Exception):
    """The thread's root message is gone; the reply goes to the chat instead."""


def _code(answer: Answer) -> int | None:
    code = answer.json_object().get("code")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """A message's image or file through the message resources API, as the app's bot (the bot
    must be in the chat)."""
    from hermes_gateway.platforms.media import MediaUnavailable, sender_for, too_large

    message_id, key, resource_type = (media.ref.get(k) for k in ("message_id", "key", "type"))
    if not message_id or not key or not resource_type or resource_type not in ("image", "file"):
        raise MediaUnavailable("feishu: the attachment names no message resource to fetch")
    over = too_large(media, limit)
    if over is not None:
        raise over
    sender = sender_for(context, build_sender)
    if sender is None:
        raise MediaUnavailable("feishu: no app id and secret (FEISHU_APP_ID, FEISHU_APP_SECRET) to fetch it with")
    return sender.download(message_id, key, resource_type, limit=limit, mime=media.mime)


def build_sender(context: AdapterContext) -> FeishuSender | None:
    secret = context.secret("FEISHU_APP_SECRET")
    app_id = str(context.option("app_id") or "")
    if not secret:
        return None
    if not app_id:
        logger.warning("feishu cannot send: FEISHU_APP_ID is not set")
        return None
    return FeishuSender(context.platform.api_base_url, app_id, secret)
