"""iMessage through a BlueBubbles server: its webhooks in, its REST API out (PLATFORMS §17).

The user runs BlueBubbles on a Mac signed in to the bot's Apple ID; the server POSTs each event
as `{"type": <event>, "data": <payload>}` to every webhook registered for it, once (no retry), and
signs nothing. The registered URL carries the gateway's webhook secret (`?password=`, the name
BlueBubbles' own API reads its password from): it is compared in constant time with
BLUEBUBBLES_WEBHOOK_SECRET, and a request without it is refused (401) before its body is read. A
query string, unlike a path, stays out of API Gateway's access log.

What each event becomes:
- `new-message` from someone else: a message (`bluebubbles:<message guid>` de-duplicates it). The
  chat GUID says DM (`<service>;-;<address>`) or group (`<service>;+;chat<digits>`); the chat id is
  the whole GUID (the reply goes to exactly that chat), and the session key holds its identifier
  alone (`domain/session_key.canonical_bluebubbles_chat`). The sender is the handle's address.
- the bot's own messages (`isFromMe`: the reply the gateway sent, echoed twice, and anything sent
  from the bot's Apple ID elsewhere): `own_message`, never answered.
- a tapback or sticker on a message (`associatedMessageType`): `reaction`; a group's rename or
  membership change (`itemType` other than 0): `system_message`.
- `updated-message`: an edit (`dateEdited`) is `edited`, and not answered again: the agent
  answered the message as it first arrived, and an edit is no new question (as on Telegram); an
  unsent message (`dateRetracted`) is `unsent`; a delivery or read report is `message_status`.
- `typing-indicator`: `typing`; `chat-read-status-changed`: `read_status`; any other event
  (`hello-world`, `new-server`, group changes, FaceTime): `unsupported_event`. All are
  acknowledged with 200 and enqueue nothing.

Outbound. `POST <server>/api/v1/message/text?password=<server password>` with the chat GUID. Its
`tempGuid` is derived from the chunk's outbox row (`send_key`): the server refuses a tempGuid
still being sent ("already queued": the earlier try will post it, so the outcome is recorded
unknown, never sent again). The server forgets a tempGuid once its send is done, so a try after
a failed one (`Target.earlier_try_at`) first looks among the messages the bot sent to the chat
since the row was recorded (`POST /api/v1/message/query`) for the same text (or file), and a
message it finds is the chunk. Files go to `POST /api/v1/message/attachment` (multipart; a voice
note as an iMessage audio message). With `private_api` (the server's Private API helper
installed) replies thread to the user's message and the chat shows a typing indicator; without
it, neither.

Attachments come from `GET /api/v1/attachment/<guid>/download?password=...` on the configured
server only (`platforms/media.py`); the server hands a voice note (CAF) over as MP3 and a HEIC
photo as JPEG.
"""

from __future__ import annotations

import hmac
import logging
import re
import urllib.parse
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hermes_gateway import http_pool
from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, TransientError, Unauthorized
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import (
    PRESENCE_TIMEOUT_SECONDS,
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    is_int,
    object_field,
    send_key,
)
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import (
    HttpRequest,
    Ignored,
    Parsed,
    epoch_seconds,
    json_payload,
    outlived_deduplication,
)

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

logger = logging.getLogger(__name__)

SECRET_PARAMETER = "password"  # noqa: S105 - the query parameter's name, not a secret
_WHAT = "bluebubbles message"
# A message's or an attachment's GUID (an upper-case UUID, `at_0_<UUID>` for some attachments):
# at most 128 characters, so `bluebubbles:<guid>` stays far below the inbox's 1,024-byte sort key.
GUID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}")
# `<service>;<-|+>;<identifier>`: the identifier is a handle's address (a DM) or `chat<digits>` (a
# group). No white space, control character, ':', ';', '/' or '\\' in it: the session key joins its
# parts with ':' and may hold no path separators or '..'. At most 200 characters and 300 bytes
# (`_bounded`), so a key of a chat and its sender stays far below DynamoDB's 2,048-byte partition key.
_IDENTIFIER = r"[^\s\x00-\x1f\x7f:;/\\]{1,200}"
CHAT_GUID = re.compile(rf"([A-Za-z0-9]{{1,32}});([-+]);({_IDENTIFIER})")
ADDRESS = re.compile(_IDENTIFIER)
_MAX_ID_BYTES = 300
_MAX_ATTACHMENTS = 20
# Link previews and iMessage app balloons carry their payload as an attachment of this kind: no file.
_PLUGIN_PAYLOAD = ".pluginPayloadAttachment"
_VOICE_UTI, _VOICE_MIME = "com.apple.coreaudio-format", "audio/x-caf"  # an iMessage audio message
# Events that are no message: acknowledged and left out (see the module's docstring).
_OTHER_EVENTS = {"typing-indicator": "typing", "chat-read-status-changed": "read_status"}


def _bounded(pattern: re.Pattern[str], value: Any) -> re.Match[str] | None:
    """`value` when it is a string matching `pattern` in full, within the bytes an id may take."""
    if not isinstance(value, str) or len(value.encode("utf-8")) > _MAX_ID_BYTES:
        return None
    return pattern.fullmatch(value)


def verify_secret(query: Mapping[str, str], expected: str | None) -> None:
    """Accept the request only when its URL carries the webhook secret as `?password=`."""
    if not expected:
        raise Unauthorized("bluebubbles webhook secret is not configured; refusing every request")
    presented = query.get(SECRET_PARAMETER)
    if not presented:
        raise Unauthorized("bluebubbles webhook secret is missing from the URL")
    if not hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8")):
        raise Unauthorized("bluebubbles webhook secret does not match")


def parse_event(payload: Any, *, received_at: float) -> InboundMessage | Ignored:
    """One webhook body as a message, or the reason it is acknowledged and left out. Raises
    BadRequest when it is malformed."""
    if not isinstance(payload, dict):
        raise BadRequest("bluebubbles body is not a JSON object")
    kind = payload.get("type")
    if not isinstance(kind, str) or not kind:
        raise BadRequest("bluebubbles event has no type")
    if kind == "new-message":
        return parse_message(_data(payload), received_at=received_at)
    if kind == "updated-message":
        return updated(_data(payload))
    return Ignored(_OTHER_EVENTS.get(kind, "unsupported_event"))


def _data(payload: dict[str, Any]) -> dict[str, Any]:
    data = payload.get("data")
    if not isinstance(data, dict):
        raise BadRequest("bluebubbles message event has no data object")
    return data


def parse_message(data: dict[str, Any], *, received_at: float) -> InboundMessage | Ignored:
    """A `new-message` payload as a message, or the reason it is left out."""
    from_me = data.get("isFromMe")
    if not isinstance(from_me, bool):
        raise BadRequest("bluebubbles message has no boolean isFromMe")
    if from_me:
        return Ignored("own_message")
    guid = _guid(data.get("guid"), "guid")
    if data.get("associatedMessageType") is not None:
        return Ignored("reaction")
    if is_int(data.get("itemType")) and data["itemType"] != 0:
        return Ignored("system_message")
    chat_guid, is_group, chat = _chat(data)
    subject, body = _text(data, "subject"), _text(data, "text")
    text = f"{subject}\n{body}" if subject and body else subject or body
    media = attachments(data)
    if not text.strip() and not media:
        return Ignored("no_text")
    sent_at = epoch_seconds(data.get("dateCreated"), milliseconds=True)
    if outlived_deduplication("bluebubbles", sent_at, received_at):
        return Ignored("outlived_deduplication")
    replied = data.get("threadOriginatorGuid")
    display_name = chat.get("displayName")
    source = SessionSource(
        platform="bluebubbles",
        chat_id=chat_guid,
        chat_type="group" if is_group else "dm",
        user_id=_sender(data, chat_guid, is_group),
        chat_name=display_name if is_group and isinstance(display_name, str) and display_name else None,
        message_id=guid,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"bluebubbles:{guid}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        # The webhook names the message replied to (the inline reply's thread originator), not its text.
        reply_to_message_id=_guid(replied, "threadOriginatorGuid") if replied is not None else None,
        extra={"sent_at": sent_at} if sent_at is not None else {},
    )


def updated(data: dict[str, Any]) -> Ignored:
    """What an `updated-message` is: an edit, an unsent message, or a delivery or read report."""
    if data.get("dateRetracted") is not None:
        return Ignored("unsent")
    if data.get("dateEdited") is not None:
        return Ignored("edited")
    return Ignored("message_status")


def _guid(value: Any, name: str) -> str:
    if not isinstance(value, str) or not GUID.fullmatch(value):
        raise BadRequest(f"bluebubbles {name} is missing or not a GUID of at most 128 characters")
    return value


def _chat(data: dict[str, Any]) -> tuple[str, bool, dict[str, Any]]:
    """(chat GUID, is a group, the chat) of the message: its first chat (a message is in one)."""
    chats = data.get("chats")
    if not isinstance(chats, list) or not chats or not isinstance(chats[0], dict):
        raise BadRequest("bluebubbles message has no chat")
    chat = chats[0]
    guid = chat.get("guid")
    if not isinstance(guid, str) or (found := _bounded(CHAT_GUID, guid)) is None:
        raise BadRequest("bluebubbles chat guid is not <service>;<-|+>;<identifier>")
    return guid, found.group(2) == "+", chat


def _sender(data: dict[str, Any], chat_guid: str, is_group: bool) -> str | None:
    """The sender's address: the handle's, else (a DM) the chat's other party, its identifier."""
    handle = object_field(data, "handle", _WHAT)
    address = handle.get("address")
    if address is None:
        return None if is_group else chat_guid.split(";", 2)[2]
    if not isinstance(address, str) or not _bounded(ADDRESS, address):
        raise BadRequest("bluebubbles handle address is not a phone number or an e-mail address")
    return address


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"bluebubbles message {key} is not a string")
    return value


def attachments(data: dict[str, Any]) -> tuple[Attachment, ...]:
    """The message's files as references fetched from the server by their GUID. A voice note is
    an iMessage audio message (CAF); a link preview's payload is no file."""
    raw = data.get("attachments")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest("bluebubbles message attachments is not a list")
    found = []
    for item in raw[:_MAX_ATTACHMENTS]:
        if not isinstance(item, dict) or not isinstance(item.get("guid"), str) or not GUID.fullmatch(item["guid"]):
            continue
        name, mime = item.get("transferName"), item.get("mimeType")
        if isinstance(name, str) and name.endswith(_PLUGIN_PAYLOAD):
            continue
        mime = mime if isinstance(mime, str) else ""
        voice = item.get("uti") == _VOICE_UTI or mime == _VOICE_MIME
        kind = "voice" if voice else kind_of_mime(mime)
        found.append(attachment(kind, mime=mime, size=item.get("totalBytes"), name=name, guid=item["guid"]))
    return tuple(found)


class BlueBubblesInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        verify_secret(request.query, self._context.secret("BLUEBUBBLES_WEBHOOK_SECRET"))

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        return parse_event(json_payload(request), received_at=received_at)


# --- sending ---------------------------------------------------------------------------------

LOOK_BACK_MESSAGES = 50  # the bot's messages a retried chunk's look reads, sent since its first try
# ... and this much before the row was recorded: this clock against the Mac's (both keep time by NTP).
LOOK_BACK_MARGIN_SECONDS = 10.0
_ALREADY_QUEUED = "already queued"  # the server's answer to a tempGuid it is still sending


def chat_guid(chat_id: str) -> str:
    """The chat GUID a target names: a GUID as it is, a bare address (a target typed by hand,
    `bluebubbles:+15555550123`) as its iMessage DM. The server finds a DM by its address when no
    chat has that GUID yet."""
    if CHAT_GUID.fullmatch(chat_id):
        return chat_id
    if ADDRESS.fullmatch(chat_id):
        return f"iMessage;-;{chat_id}"
    raise PermanentError("bluebubbles: the target is neither a chat GUID nor an address")


def _same_text(sent: Any, text: str) -> bool:
    """The server's text of a message (U+FFFC removed, trimmed) against what was sent."""
    return isinstance(sent, str) and sent.strip() == text.replace("\ufffc", "").strip()


class BlueBubblesSender:
    """Sends through the server's REST API. Its password travels in every URL's query (the server
    reads it nowhere else), so no URL and no answer leaves here unscrubbed."""

    typing_refresh_seconds = 30.0  # shown until the bot's message arrives; asserted again meanwhile
    caption_limit = 0  # the text goes as its own message before a file

    def __init__(self, server_url: str, password: str, *, private_api: bool = False, timeout: float = 10.0) -> None:
        forms = (password, urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password))
        self._http = HttpClient(server_url, platform="bluebubbles", timeout=timeout, scrub=forms)
        self._auth = "?" + urllib.parse.urlencode({SECRET_PARAMETER: password})
        self._private_api = private_api

    def __repr__(self) -> str:
        return f"BlueBubblesSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        """`POST /api/v1/message/text` (at most the catalog's text limit); the message's GUID."""
        guid = chat_guid(target.chat_id)
        if target.earlier_try_at is not None:
            found = self._sent_since(guid, target.earlier_try_at, lambda message: _same_text(message.get("text"), text))
            if found:
                return found
        payload = {"chatGuid": guid, "tempGuid": _temp_guid(target), "message": text, **self._method(target)}
        return self._sent_guid(self._http.request("POST", "/api/v1/message/text" + self._auth, json_body=payload))

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """`POST /api/v1/message/attachment` (multipart); a voice note as an iMessage audio message."""
        guid = chat_guid(target.chat_id)
        if target.earlier_try_at is not None:
            found = self._sent_since(guid, target.earlier_try_at, lambda message: _holds_file(message, media.name))
            if found:
                return found
        form: http_pool.FormFields = {
            "chatGuid": guid,
            "tempGuid": _temp_guid(target),
            "name": media.name,
            "isAudioMessage": "true" if _audio_message(media) else "false",
            **self._method(target),
            "attachment": (media.name, media.data, media.mime),
        }
        answer = self._http.request("POST", "/api/v1/message/attachment" + self._auth, files=form, timeout=60.0)
        return self._sent_guid(answer)

    def typing(self, target: Target) -> bool:
        """`POST /api/v1/chat/<guid>/typing`: the Private API's; none without it."""
        if not self._private_api:
            return False
        path = f"/api/v1/chat/{urllib.parse.quote(chat_guid(target.chat_id), safe='')}/typing" + self._auth
        answer = self._http.request("POST", path, timeout=PRESENCE_TIMEOUT_SECONDS)
        if answer.status == 200:
            return True
        raise self._http.failure(answer, gone=())

    def _method(self, target: Target) -> dict[str, str]:
        """AppleScript, or with the Private API a reply threaded to the user's message."""
        if not self._private_api:
            return {"method": "apple-script"}
        if target.reply_to and GUID.fullmatch(target.reply_to):
            return {"method": "private-api", "selectedMessageGuid": target.reply_to}
        return {"method": "private-api"}

    def _sent_guid(self, answer: Answer) -> str:
        body = answer.json_object()
        if answer.status == 200:
            data = body.get("data")
            guid = data.get("guid") if isinstance(data, dict) else None
            if isinstance(guid, str) and guid:
                return guid
            raise OutcomeUnknown("bluebubbles answered 200 without the message's guid; it may have been sent")
        error = body.get("error")
        detail = str(error.get("message") or "") if isinstance(error, dict) else ""
        if answer.status == 400 and _ALREADY_QUEUED in detail.lower():
            # The earlier try of this chunk is still being sent: it posts, and a second would too.
            raise OutcomeUnknown("bluebubbles is still sending an earlier try of this chunk")
        data = body.get("data")
        code = data.get("error") if isinstance(data, dict) else None
        if answer.status >= 500 and is_int(code) and code != 0:
            # Messages took the message and failed it (the recipient is not on iMessage, say).
            raise PermanentError(f"bluebubbles: Messages could not send it (error {code})")
        raise self._http.failure(answer, gone=(), detail=detail)

    def _sent_since(self, guid: str, since: float, sent: Callable[[dict[str, Any]], bool]) -> str | None:
        """The GUID of the message an earlier try of this chunk sent: among the bot's messages to
        the chat since the chunk was recorded, newest first, the one `sent` recognizes. None when
        none is (the caller sends), or when the server refuses the look; raises on 5xx."""
        query = {
            "chatGuid": guid,
            "after": int((since - LOOK_BACK_MARGIN_SECONDS) * 1000),
            "sort": "DESC",
            "limit": LOOK_BACK_MESSAGES,
            "with": ["attachment"],
        }
        answer = self._http.request("POST", "/api/v1/message/query" + self._auth, json_body=query)
        if answer.status != 200:
            error = self._http.failure(answer, gone=())
            if isinstance(error, TransientError):
                raise error
            logger.warning("bluebubbles refused the look for an earlier try's message: %s", str(error)[:120])
            return None
        messages = answer.json_object().get("data")
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, dict) and message.get("isFromMe") is True and sent(message):
                found = message.get("guid")
                if isinstance(found, str) and found:
                    return found
        return None


def _holds_file(message: dict[str, Any], name: str) -> bool:
    files = message.get("attachments")
    return isinstance(files, list) and any(isinstance(f, dict) and f.get("transferName") == name for f in files)


def _temp_guid(target: Target) -> str:
    """The send's tempGuid: the chunk's outbox row's key, the same on every try of it."""
    return f"temp-{send_key(target) or uuid.uuid4().hex}"


def server_url(context: AdapterContext) -> str:
    return str(context.option("server_url") or "")


def _password(context: AdapterContext) -> Mapping[str, str] | None:
    password = context.secret("BLUEBUBBLES_PASSWORD")
    return {SECRET_PARAMETER: password} if password and server_url(context) else None


# A message's file from the configured server only, the password in the query (the server reads
# it nowhere else).
MEDIA = _media.MediaSource(
    "bluebubbles", "guid", lambda context: {}, path="/api/v1/attachment/{guid}/download", shape=GUID.pattern,
    query=_password, api=server_url,
    missing="no server password and server URL, or no attachment GUID to fetch the file with",
)  # fmt: skip


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    return _media.fetch_from(MEDIA, context, media, limit)


def build_sender(context: AdapterContext) -> BlueBubblesSender | None:
    password = context.secret("BLUEBUBBLES_PASSWORD")
    if not password:
        return None
    if not server_url(context):
        logger.warning("BLUEBUBBLES_PASSWORD is set but BLUEBUBBLES_SERVER_URL (the server's URL) is not")
        return None
    return BlueBubblesSender(server_url(context), password, private_api=bool(context.option("private_api")))


def _audio_message(media: MediaFile) -> bool:
    """A voice note goes as an iMessage audio message, except Ogg/Opus (a spoken answer,
    services/speech.py), which Messages does not play inline: that one goes as an audio file."""
    return media.kind == "voice" and media.mime.split(";")[0].strip().lower() != "audio/ogg"
