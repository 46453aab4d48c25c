"""Matrix as an application service: transactions in, client-server API out (PLATFORMS §10).

The homeserver is given the AS URL `<WebhookUrl>/matrix` and calls the application-service API
under it (`PUT …/_matrix/app/v1/transactions/{txnId}` and friends); replies go out through the
client-server API with the `as_token`, asserting the bot's identity with `user_id=`.

Standard library only; urllib3 (the pooled HTTP client) is imported only when a request is sent.
"""

from __future__ import annotations

import hmac
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hermes_gateway.domain.media import Attachment, attachment
from hermes_gateway.domain.quotes import quote_of
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, RateLimited, TargetGone, Unauthorized
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import (
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    header,
    optional_str,
    retry_after_seconds,
    send_key,
)
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import (
    Accepted,
    Handshake,
    HttpRequest,
    HttpResponse,
    Ignored,
    Parsed,
    hostile,
    may_hold_surrogates,
    parse_json,
    too_long,
)

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

logger = logging.getLogger(__name__)

_APP_PREFIX = ("_matrix", "app", "v1")
# Routes the homeserver calls, relative to the AS URL; the unprefixed forms are the spec's legacy routes.
_TRANSACTION, _PING, _QUERY = "transaction", "ping", "query"
_TEXT_MSGTYPES = ("m.text",)
_MEDIA_MSGTYPES = {"m.image": "image", "m.audio": "audio", "m.video": "video", "m.file": "document"}
VOICE_FLAG = "org.matrix.msc3245.voice"  # an m.audio recorded as a voice message (MSC3245)
# mxc://<server name>/<media id>: a server name is a host (maybe with a port), a media id [A-Za-z0-9_-]
_MXC = re.compile(r"mxc://([A-Za-z0-9\[][A-Za-z0-9.:\[\]-]*)/([A-Za-z0-9_-]+)")
# A reply fallback (clients before Matrix 1.13) quotes the replied-to event in front of the text.
_REPLY_FALLBACK = re.compile(r"\A(?:>[^\n]*\n)+\n")
_FALLBACK_SENDER = re.compile(r"\A(?:\* )?<[^>]*>\s*")  # `<@alice:example.org> ` (`* <…>` for an emote)


NOT_FOUND = HttpResponse(404, {"errcode": "M_NOT_FOUND", "error": "this application service creates no users or rooms"})
UNRECOGNIZED = HttpResponse(404, {"errcode": "M_UNRECOGNIZED", "error": "unknown endpoint"})
WRONG_METHOD = HttpResponse(405, {"errcode": "M_UNRECOGNIZED", "error": "unsupported method for this endpoint"})
EMPTY_OK = HttpResponse(200, {})


def verify_hs_token(request: HttpRequest, expected: str | None) -> None:
    """The homeserver's `hs_token`, as `Authorization: Bearer` (Matrix 1.4+) or, from a legacy
    homeserver, the `access_token` query parameter; when both are sent both must match."""
    if not expected:
        raise Unauthorized("matrix hs_token is not configured (MATRIX_HS_TOKEN); refusing every request")
    authorization = request.headers.get("authorization")
    legacy = request.query.get("access_token")
    if authorization is None and legacy is None:
        raise Unauthorized("matrix request carries no Authorization header")
    presented: list[str] = []
    if authorization is not None:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("matrix Authorization header is not a Bearer token")
        presented.append(token.strip())
    if legacy is not None:
        presented.append(legacy)
    wanted = expected.encode("utf-8")
    # Compare every presented token (no short-circuit), so timing says nothing about which failed.
    matches = [hmac.compare_digest(token.encode("utf-8"), wanted) for token in presented]
    if not all(matches):
        raise Unauthorized("matrix hs_token does not match")


def route(path: str) -> tuple[str, str | None]:
    """Which application-service endpoint a request path names: (kind, detail).

    The path is the full request path (`/webhooks/matrix/_matrix/app/v1/transactions/35`); the part
    after `/webhooks/matrix` is the route the homeserver appended to the AS URL.
    """
    segments = [s for s in path.split("/") if s]
    for index in range(len(segments) - 1):
        if segments[index] == "webhooks" and segments[index + 1] == "matrix":
            segments = segments[index + 2 :]
            break
    if tuple(segments[:3]) == _APP_PREFIX:
        relative = segments[3:]
        if relative == ["ping"]:
            return _PING, None
    else:
        relative = segments  # the legacy, unprefixed routes
    if len(relative) == 2 and relative[0] == "transactions":
        return _TRANSACTION, relative[1]
    if len(relative) == 2 and relative[0] in ("users", "rooms"):
        return _QUERY, relative[0]
    return "unknown", None


_METHODS = {_TRANSACTION: "PUT", _PING: "POST", _QUERY: "GET"}


class MatrixInbound:
    """The application-service API: transactions become messages; pings and queries are answered."""

    def __init__(self, context: AdapterContext) -> None:
        self._context = context
        self._bot = str(context.option("bot_user_id") or "")

    def verify(self, request: HttpRequest) -> None:
        verify_hs_token(request, self._context.secret("MATRIX_HS_TOKEN"))

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        kind, _ = route(request.path)
        if kind == "unknown":
            return Handshake(UNRECOGNIZED)
        if request.method != _METHODS[kind]:
            return Handshake(WRONG_METHOD)
        if kind == _PING:
            return Handshake(EMPTY_OK)
        if kind == _QUERY:
            # The gateway creates no users or rooms on demand: "does not exist" is the honest answer.
            return Handshake(NOT_FOUND)
        # A bad event is ignored, never a 400: the homeserver retries a transaction unchanged, so
        # refusing it would block every later event behind it. So the transaction is read as it
        # is, and each event is checked for what the gateway cannot handle on its own.
        payload = parse_json(request.body, "matrix transaction")
        if not isinstance(payload, dict) or not isinstance(payload.get("events"), list):
            raise BadRequest("matrix transaction has no events list")
        strings = may_hold_surrogates(request.body)
        items = tuple(
            Ignored("unsafe_event")
            if hostile(event, strings=strings) is not None
            else parse_event(event, bot_user_id=self._bot, received_at=received_at)
            for event in payload["events"]
        )
        return Accepted(items=items, ack=EMPTY_OK)


def parse_event(event: Any, *, bot_user_id: str, received_at: float) -> InboundMessage | Ignored:
    """One client-format event from a transaction, as a message or the reason it is ignored."""
    envelope = _envelope(event, bot_user_id)
    if isinstance(envelope, Ignored):
        return envelope
    event_id, room_id, sender, content = envelope
    relation = content.get("m.relates_to")
    relation = relation if isinstance(relation, dict) else {}
    found = _text_of(content, relation)
    if isinstance(found, Ignored):
        return found
    text, thread_id, reply_to = found
    media = attachments(content)
    source = SessionSource(
        platform="matrix",
        chat_id=room_id,
        # An event does not say whether its room is a DM (that lives in the users' m.direct
        # account data): every room is keyed as a group.
        chat_type="group",
        user_id=sender,
        user_id_alt=None if _key_safe(sender) and "%" not in sender else key_safe_user_id(sender),
        user_name=_localpart(sender),
        thread_id=thread_id,
        scope_id=_server_name(room_id),
        message_id=event_id,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"matrix:{event_id}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_to_message_id=reply_to,
        reply_to_text=reply_quote(content) if reply_to else None,
        facts=("mentions_bot",) if _mentions(content, text, bot_user_id) else (),
        # A threaded answer also points at the latest event it answers (the thread fallback).
        reply_context={"in_reply_to": event_id} if thread_id else {},
    )


def _envelope(event: Any, bot_user_id: str) -> tuple[str, str, str, dict[str, Any]] | Ignored:
    """A room message's event id, room, sender and content, or why the event is not one to read."""
    if not isinstance(event, dict):
        return Ignored("malformed_event")
    if event.get("type") != "m.room.message" or "state_key" in event:
        return Ignored("unsupported_event")
    event_id, room_id, sender = (
        optional_str(event, "event_id"),
        optional_str(event, "room_id"),
        optional_str(event, "sender"),
    )
    content = event.get("content")
    if event_id is None or room_id is None or sender is None or not isinstance(content, dict):
        return Ignored("malformed_event")
    if not _key_safe(room_id) or "\x00" in sender or any(too_long(v) for v in (event_id, room_id, sender)):
        # A 400 would block the homeserver's queue: the transaction is resent unchanged forever.
        return Ignored("unsafe_id")
    if bot_user_id and sender == bot_user_id:
        return Ignored("own_message")
    return event_id, room_id, sender, content


def _text_of(content: dict[str, Any], relation: dict[str, Any]) -> tuple[str, str | None, str | None] | Ignored:
    """The message's text (a reply's quoted fallback removed: `reply_quote` reads it), its thread
    and the event it replies to, or why it is not a message to answer."""
    if relation.get("rel_type") == "m.replace":
        return Ignored("edited")
    msgtype = optional_str(content, "msgtype")  # (an array there is no message type, and no set member)
    if msgtype == "m.notice":
        # The spec: automated clients must never answer a notice (it stops bot-to-bot loops).
        return Ignored("notice")
    if msgtype not in _TEXT_MSGTYPES and msgtype not in _MEDIA_MSGTYPES:
        return Ignored("unsupported_msgtype")
    body = content.get("body")
    if not isinstance(body, str):
        return Ignored("malformed_event")
    thread_id = optional_str(relation, "event_id") if relation.get("rel_type") == "m.thread" else None
    if thread_id is not None and not _key_safe(thread_id):
        return Ignored("unsafe_id")
    reply_to = _reply_to(relation)
    if msgtype in _MEDIA_MSGTYPES:
        return caption(content), thread_id, reply_to  # a media message is a message without text too
    text = _REPLY_FALLBACK.sub("", body, count=1) if reply_to else body
    if not text.strip():
        return Ignored("no_text")
    return text, thread_id, reply_to


def reply_quote(content: Mapping[str, Any]) -> str | None:
    """A reply's fallback (clients before Matrix 1.13 put the replied-to text in front, each line
    after `> `, the first naming its sender `<@user:server>`): that text, else None (a client that
    sends none leaves the turn to look the event id up)."""
    body = content.get("body")
    found = _REPLY_FALLBACK.match(body) if isinstance(body, str) else None
    if found is None:
        return None
    lines = [line[1:].removeprefix(" ") for line in found.group(0).strip().splitlines()]
    lines[0] = _FALLBACK_SENDER.sub("", lines[0], count=1)
    return quote_of("\n".join(lines))


def caption(content: Mapping[str, Any]) -> str:
    """A media message's caption: since Matrix 1.10 `body` is one when `filename` names the file
    and differs from it; otherwise `body` is the file name and there is no caption."""
    filename, body = content.get("filename"), content.get("body")
    return body if isinstance(filename, str) and filename and isinstance(body, str) and body != filename else ""


def attachments(content: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """An m.image, m.audio, m.video or m.file as a reference: its `mxc://` URL, downloaded with
    the application service's token. An encrypted file (`file` instead of `url`) is named only:
    the application service holds no room keys."""
    kind = _MEDIA_MSGTYPES.get(str(content.get("msgtype")))
    if kind is None:
        return ()
    if kind == "audio" and VOICE_FLAG in content:
        kind = "voice"
    info = content.get("info")
    info = info if isinstance(info, dict) else {}
    filename = content.get("filename")
    name = filename if isinstance(filename, str) and filename else content.get("body", "")
    url = content.get("url")
    return (
        attachment(
            kind,
            mime=info.get("mimetype", ""),
            size=info.get("size"),
            name=name,
            mxc=url if isinstance(url, str) and _MXC.fullmatch(url) else None,
        ),
    )


def _key_safe(value: str) -> bool:
    """Whether an id may appear in a session key as it is (domain/session_key.py refuses `..` and
    NUL; ingress an id too long to be a key)."""
    return ".." not in value and "\x00" not in value and not too_long(value)


def key_safe_user_id(user_id: str) -> str:
    """A user id the session key accepts, for a valid Matrix id holding `..` (`@john..doe:example.org`).

    Used for every id holding `..` or `%`: `%` and `.` are percent-encoded, so the form is reversible
    and always holds `%`, which no id keyed as it is holds: two users never share a session. The id
    itself (allowlists, pairing) stays as the homeserver sent it; the form only keys the session,
    as the participant (`user_id_alt`).
    """
    return user_id.replace("%", "%25").replace(".", "%2E")


def _reply_to(relation: Mapping[str, Any]) -> str | None:
    """The replied-to event; a thread's fallback reply (is_falling_back) is not a real reply."""
    replied = relation.get("m.in_reply_to")
    if not isinstance(replied, dict) or relation.get("is_falling_back") is True:
        return None
    return optional_str(replied, "event_id")


def _mentions(content: Mapping[str, Any], text: str, bot_user_id: str) -> bool:
    if not bot_user_id:
        return False
    mentions = content.get("m.mentions")
    user_ids = mentions.get("user_ids") if isinstance(mentions, dict) else None
    if isinstance(user_ids, list) and bot_user_id in user_ids:
        return True
    return bot_user_id in text


def _localpart(user_id: str) -> str:
    return user_id.removeprefix("@").partition(":")[0] or user_id


def _server_name(room_id: str) -> str | None:
    """The server part of `!opaque:example.org`; room version 12 ids have none."""
    _, colon, server = room_id.partition(":")
    return server if colon and server else None


class MatrixSender:
    """Sends `m.room.message` events as the application service's bot user."""

    def __init__(self, api_base_url: str, as_token: str, bot_user_id: str = "", timeout: float = 10.0) -> None:
        self._http = HttpClient(api_base_url, platform="matrix", timeout=timeout, scrub=(as_token,))
        self._token = as_token
        self._bot = bot_user_id

    def __repr__(self) -> str:
        return f"MatrixSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        return self._send_content(target, {"msgtype": "m.text", "body": text})

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """An `m.replace` event of the bot's message `message_id` (a streamed answer's edit):
        clients show the new content in its place; the `* ` body is for those that cannot."""
        content: dict[str, Any] = {
            "msgtype": "m.text",
            "body": f"* {text}",
            "m.new_content": {"msgtype": "m.text", "body": text},
            "m.relates_to": {"rel_type": "m.replace", "event_id": message_id},
        }
        # an edit relates to its message only, and is a new event each time (a transaction id of its own)
        self._send_content(replace(target, thread_id=None, delivery_id=None), content)

    caption_limit = 0  # the text goes as its own message before the file

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """`POST /_matrix/media/v3/upload`, then an `m.image` / `m.audio` / `m.video` / `m.file`
        event naming the `mxc://` URL it answered."""
        import urllib.parse

        query = {"filename": media.name, **({"user_id": self._bot} if self._bot else {})}
        answer = self._http.request(
            "POST",
            "/_matrix/media/v3/upload?" + urllib.parse.urlencode(query),
            data=media.data,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": media.mime},
            timeout=60.0,
        )
        if answer.status != 200:
            raise self._failure(answer)
        uri = answer.json_object().get("content_uri")
        if not isinstance(uri, str) or not uri.startswith("mxc://"):
            raise PermanentError("matrix: the upload answered no mxc:// content_uri")
        msgtype = {"image": "m.image", "audio": "m.audio", "voice": "m.audio", "video": "m.video"}.get(
            media.kind, "m.file"
        )
        info = {"mimetype": media.mime, "size": media.size}
        content: dict[str, Any] = {"msgtype": msgtype, "body": media.name, "url": uri, "info": info}
        if media.kind == "voice":
            content[VOICE_FLAG] = {}  # clients that know voice messages (MSC3245) show it as one
        return self._send_content(target, content)

    def _send_content(self, target: Target, content: dict[str, Any]) -> str:
        import urllib.parse

        if target.thread_id:
            latest = target.context.get("in_reply_to") or target.thread_id
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": target.thread_id,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": latest},
            }
        room = urllib.parse.quote(target.chat_id, safe="")
        # The homeserver de-duplicates on the transaction id per access token: every try of one
        # outbox chunk uses the same one, so a retried send the homeserver already took is not posted
        # again (it answers the first event's id); a send with no outbox row gets a fresh one.
        txn = send_key(target) or uuid.uuid4().hex
        path = f"/_matrix/client/v3/rooms/{room}/send/m.room.message/hermes.{txn}"
        if self._bot:
            path += "?" + urllib.parse.urlencode({"user_id": self._bot})
        answer = self._http.request("PUT", path, json_body=content, headers={"Authorization": f"Bearer {self._token}"})
        if answer.status == 200:
            event_id = answer.json_object().get("event_id")
            if isinstance(event_id, str) and event_id:
                return event_id
            raise OutcomeUnknown("matrix answered 200 without an event_id; the message may have been sent")
        raise self._failure(answer)

    def _failure(self, answer: Answer) -> Exception:
        body = answer.json_object()
        errcode = str(body.get("errcode") or "")
        detail = self._http.scrub(f"{errcode}: {body.get('error') or ''}".strip(": ")) if errcode else ""
        if answer.status == 429 or errcode == "M_LIMIT_EXCEEDED":
            retry_ms = body.get("retry_after_ms")
            in_body = retry_ms / 1000 if isinstance(retry_ms, int | float) and not isinstance(retry_ms, bool) else None
            # Matrix 1.10 prefers the Retry-After header; older servers only send retry_after_ms.
            seconds = retry_after_seconds(header(answer.headers, "retry-after"), in_body)
            return RateLimited(seconds, f"matrix rate limit; retry after {seconds:g} s")
        if answer.status == 403 and errcode == "M_FORBIDDEN":
            return TargetGone(f"matrix: the bot cannot send to this room: {detail}")
        return self._http.failure(answer, gone=(404,), detail=detail)


def _mxc_path(
    context: AdapterContext, http: HttpClient, auth: Mapping[str, str], media: Attachment, limit: int
) -> tuple[str, str]:
    found = _MXC.fullmatch(media.ref["mxc"])
    assert found is not None  # the source's shape
    return f"/_matrix/client/v1/media/download/{found.group(1)}/{found.group(2)}", media.mime


# `GET /_matrix/client/v1/media/download/{server}/{media id}` (authenticated media, Matrix 1.11) on
# the homeserver, with the application service's token.
MEDIA = _media.MediaSource(
    "matrix", "mxc", _media.bearer("MATRIX_AS_TOKEN"), shape=_MXC.pattern, locate=_mxc_path,
    missing="no as_token, homeserver URL or mxc:// URL to fetch the file with",
)  # fmt: skip


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    if not context.platform.api_base_url:
        from hermes_gateway.platforms.media import MediaUnavailable

        raise MediaUnavailable(f"matrix: {MEDIA.missing}")
    return _media.fetch_from(MEDIA, context, media, limit)


def build_sender(context: AdapterContext) -> MatrixSender | None:
    token = context.secret("MATRIX_AS_TOKEN")
    if not token:
        return None
    if not context.platform.api_base_url:
        logger.warning("matrix cannot send: MATRIX_API_BASE_URL (the homeserver's client API URL) is not set")
        return None
    return MatrixSender(context.platform.api_base_url, token, str(context.option("bot_user_id") or ""))
