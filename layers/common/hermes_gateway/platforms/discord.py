"""Discord interactions over HTTP (PLATFORMS §3): Ed25519 verification, slash commands and
buttons as messages, replies through the interaction webhook or the channel API. Registering the
endpoint and the slash command is the CLI's (`hermes_cli.webhooks.discord`).

Ordinary channel messages never reach an HTTP endpoint (Discord sends them over the Gateway
websocket only): they arrive through a relay (relay.py, relays/discord-gateway/) and are answered
here with the bot token, through `POST /channels/{id}/messages`.

`cryptography` and urllib3 are imported only when first needed.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeGuard

from hermes_gateway import http_pool
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
from hermes_gateway.observability import logger
from hermes_gateway.platforms import media as _media
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
    json_payload,
    signed_timestamp,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from hermes_gateway.platforms.media import Fetched

SIGNATURE_HEADER = "x-signature-ed25519"
TIMESTAMP_HEADER = "x-signature-timestamp"
# Discord documents no replay window; a captured request is refused once this much older (or newer).
TIMESTAMP_TOLERANCE_SECONDS = 300

# Interaction types and interaction callback (response) types.
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT = 1, 2, 3
PONG, CHANNEL_MESSAGE_WITH_SOURCE, DEFERRED_CHANNEL_MESSAGE, DEFERRED_UPDATE_MESSAGE = 1, 4, 5, 6
EPHEMERAL = 1 << 6
LOADING = 1 << 7  # message flag: an interaction response whose bot is still "thinking"
GROUP_DM_CHANNEL = 3
THREAD_CHANNEL_TYPES = (10, 11, 12)  # announcement, public and private threads
PROMPT_OPTION = "prompt"
ATTACHMENT_OPTION_TYPE = 11  # an application command option whose value is an attachment's id
ACTION_ROW_COMPONENT, BUTTON_COMPONENT, PRIMARY_STYLE, CUSTOM_ID_LIMIT = 1, 2, 1, 100
COMPONENT_PREFIX = "hermes:"  # buttons whose custom_id is "hermes:<text>" send <text> as a message
USER_AGENT = "DiscordBot (https://github.com/hermes-serverless-gateway, 0.1)"  # Discord asks for this form
# Agent output must not ping @everyone or roles; mentioning users stays possible.
ALLOWED_MENTIONS = {"parse": ["users"]}
_REMEMBERED_TOKENS = 1024
_TOKEN = re.compile(r"[A-Za-z0-9_.-]{1,500}")
_WHAT = "discord interaction"  # how a malformed field's BadRequest names the payload


# --- verification -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=8)
def public_key(hex_key: str) -> Ed25519PublicKey:
    """The application's public key, parsed once per cold start."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        raw = bytes.fromhex(hex_key)
    except ValueError:
        raise Unauthorized("the configured discord public key is not hex") from None
    if len(raw) != 32:
        raise Unauthorized("the configured discord public key is not 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def verify_signature(
    hex_key: str, headers: Mapping[str, str], body: bytes, now: float, tolerance: int = TIMESTAMP_TOLERANCE_SECONDS
) -> None:
    """Accept only a request signed by the application's key (Ed25519 over timestamp + raw body)
    whose timestamp is within `tolerance` seconds of `now`. Raises Unauthorized naming the reason."""
    from cryptography.exceptions import InvalidSignature

    signature = header(headers, SIGNATURE_HEADER)
    timestamp = header(headers, TIMESTAMP_HEADER)
    if not signature:
        raise Unauthorized(f"missing {SIGNATURE_HEADER} header")
    sent_at = signed_timestamp(timestamp, TIMESTAMP_HEADER)
    try:
        raw_signature = bytes.fromhex(signature)
    except ValueError:
        raise Unauthorized(f"malformed {SIGNATURE_HEADER} header: not hex") from None
    if len(raw_signature) != 64:
        raise Unauthorized(f"malformed {SIGNATURE_HEADER} header: not 64 bytes")
    if abs(now - sent_at) > tolerance:
        raise Unauthorized("stale discord timestamp (outside the 5 minute window)")
    try:
        public_key(hex_key).verify(raw_signature, str(timestamp).encode("ascii") + body)
    except InvalidSignature:
        raise Unauthorized("bad discord signature") from None


# --- inbound ------------------------------------------------------------------------------------


def _is_snowflake(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit()


def _is_token(value: Any) -> TypeGuard[str]:
    """An interaction token: it becomes part of a URL path, so only URL-safe characters pass."""
    return isinstance(value, str) and bool(_TOKEN.fullmatch(value))


def _ephemeral(content: str) -> HttpResponse:
    return HttpResponse(200, {"type": CHANNEL_MESSAGE_WITH_SOURCE, "data": {"content": content, "flags": EPHEMERAL}})


def _prompt(data: Mapping[str, Any]) -> str:
    options = data.get("options") or []
    if not isinstance(options, list):
        raise BadRequest("discord command options are not a list")
    for option in options:
        if isinstance(option, dict) and option.get("name") == PROMPT_OPTION and isinstance(option.get("value"), str):
            return str(option["value"])
    return ""


def command_attachments(data: Mapping[str, Any]) -> tuple[Attachment, ...]:
    """The files given to the command's attachment options, as `data.resolved.attachments` describes them."""
    options = data.get("options")
    resolved = object_field(object_field(data, "resolved", _WHAT), "attachments", _WHAT)
    found = []
    for option in options if isinstance(options, list) else ():
        if isinstance(option, dict) and option.get("type") == ATTACHMENT_OPTION_TYPE:
            item = resolved.get(str(option.get("value")))
            if isinstance(item, dict):
                found.append(attachment_of(item))
    return tuple(found)


def attachment_of(item: Mapping[str, Any]) -> Attachment:
    """A Discord attachment object as a reference: its CDN URL, which needs no token (a voice
    message's attachment carries a waveform)."""
    mime = optional_str(item, "content_type") or ""
    kind = "voice" if item.get("waveform") else kind_of_mime(mime)
    return attachment(kind, mime=mime, size=item.get("size"), name=item.get("filename", ""), url=item.get("url"))


def interaction_source(payload: Mapping[str, Any]) -> SessionSource:
    """Where an interaction came from: guild → scope, channel → chat, a thread keeps its parent."""
    channel = object_field(payload, "channel", _WHAT)
    channel_id = payload.get("channel_id") or channel.get("id")
    if not _is_snowflake(channel_id):
        raise BadRequest("discord interaction has no channel id")
    member = object_field(payload, "member", _WHAT)
    user = object_field(member if member else payload, "user", _WHAT)
    if not _is_snowflake(user.get("id")):
        raise BadRequest("discord interaction has no user id")
    guild_id = payload.get("guild_id")
    if guild_id is not None and not _is_snowflake(guild_id):
        raise BadRequest("discord guild_id is not a snowflake")
    user_name = optional_str(user, "global_name") or optional_str(user, "username")
    channel_type = channel.get("type")
    thread_id = parent_id = None
    if channel_type in THREAD_CHANNEL_TYPES:
        # Discord threads are channels: the thread is the chat and its own thread (as the relay
        # and the reference gateway key them), the channel it hangs off is the parent.
        chat_type, thread_id, parent_id = "thread", channel_id, optional_str(channel, "parent_id")
    elif guild_id or channel_type == GROUP_DM_CHANNEL:
        chat_type = "group"
    else:
        chat_type = "dm"
    message = object_field(payload, "message", _WHAT)
    return SessionSource(
        platform="discord",
        chat_id=channel_id,
        chat_type=chat_type,
        user_id=str(user["id"]),
        user_name=user_name,
        thread_id=thread_id,
        chat_name=optional_str(channel, "name") or (user_name if chat_type == "dm" else None),
        is_bot=user.get("bot") is True,
        scope_id=guild_id,
        parent_chat_id=parent_id,
        message_id=optional_str(message, "id"),
    )


class DiscordInbound:
    """Slash commands (`/ask prompt:...`) and `hermes:` buttons, answered with a deferred ack."""

    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        key = self._context.option("public_key")
        if not key:
            raise Unauthorized("discord public key is not configured; refusing every interaction")
        verify_signature(key, request.headers, request.body, self._context.clock())

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        payload = json_payload(request)
        if not isinstance(payload, dict):
            raise BadRequest("discord interaction is not a JSON object")
        kind = payload.get("type")
        if kind == PING:
            return Handshake(HttpResponse(200, {"type": PONG}))
        if kind == APPLICATION_COMMAND:
            return self._command(payload, received_at)
        if kind == MESSAGE_COMPONENT:
            return self._component(payload, received_at)
        if not is_int(kind):
            raise BadRequest("discord interaction has no integer type")
        return Ignored("unsupported_interaction")

    def _command(self, payload: dict[str, Any], received_at: float) -> Parsed:
        data = object_field(payload, "data", _WHAT)
        name = data.get("name")
        if not isinstance(name, str):
            raise BadRequest("discord command has no name")
        command = self._context.option("command_name") or "ask"
        if name != command:
            return Handshake(_ephemeral(f"Unknown command /{name[:32]}. Use /{command}."))
        text = _prompt(data)
        files = command_attachments(data)
        if not text.strip() and not files:
            return Handshake(_ephemeral(f"Usage: /{command} {PROMPT_OPTION}:<what to ask>"))
        message = self._message(payload, text, received_at, files)
        # The agent needs longer than Discord's 3 s: acknowledge with "thinking…", edit it later.
        return Accepted(items=(message,), ack=HttpResponse(200, {"type": DEFERRED_CHANNEL_MESSAGE}))

    def _component(self, payload: dict[str, Any], received_at: float) -> Parsed:
        data = object_field(payload, "data", _WHAT)
        custom_id = data.get("custom_id")
        if not isinstance(custom_id, str):
            raise BadRequest("discord component has no custom_id")
        # A component ack changes nothing visible; without one the user would see "interaction failed".
        ack = HttpResponse(200, {"type": DEFERRED_UPDATE_MESSAGE})
        text = custom_id.removeprefix(COMPONENT_PREFIX)
        if not custom_id.startswith(COMPONENT_PREFIX) or not text.strip():
            return Accepted(items=(Ignored("unknown_component"),), ack=ack)
        return Accepted(items=(self._message(payload, text, received_at),), ack=ack)

    def _message(
        self, payload: dict[str, Any], text: str, received_at: float, files: tuple[Attachment, ...] = ()
    ) -> InboundMessage:
        interaction_id = payload.get("id")
        if not _is_snowflake(interaction_id):
            raise BadRequest("discord interaction has no id")
        token = payload.get("token")
        if not _is_token(token):
            raise BadRequest("discord interaction has no usable token")
        application_id = payload.get("application_id") or self._context.option("application_id")
        if not _is_snowflake(application_id):
            raise BadRequest("discord interaction has no application_id")
        return InboundMessage(
            source=interaction_source(payload),
            text=text,
            event_id=f"discord:{interaction_id}",
            received_at=received_at,
            attachments=tuple(a.to_dict() for a in files),
            reply_context={"interaction_token": token, "application_id": application_id},
        )


# --- sending ------------------------------------------------------------------------------------


class _InteractionExpired(Exception):
    """The interaction webhook refused its token: tokens live 15 minutes."""


NONCE_LENGTH = 25  # the longest nonce Discord takes


class DiscordSender:
    """Replies to an interaction through its webhook (no bot token needed), or posts in a channel.

    A multi-chunk reply reads in order: the first chunk replaces the deferred "thinking…" message
    (which sits where the command was used), later chunks are follow-ups below it. Whether the
    original is still thinking is asked of Discord (the LOADING flag) unless this process already
    filled it, so a retried job on a fresh instance never overwrites the first chunk.
    """

    typing_refresh_seconds = 8.0  # a typing indicator shows for 10 s, or until the bot's next message

    def __init__(
        self, api_base_url: str, *, bot_token: str | None, application_id: str | None, timeout: float = 10.0
    ) -> None:
        self._bot_token = bot_token
        self._application_id = application_id
        self._http = HttpClient(api_base_url, platform="discord", timeout=timeout, scrub=(bot_token or "",))
        self._filled: dict[str, None] = {}  # interaction tokens whose original holds a chunk (ordered)

    def __repr__(self) -> str:
        return f"DiscordSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        token = target.context.get("interaction_token")
        application_id = target.context.get("application_id") or self._application_id
        if _is_token(token) and _is_snowflake(application_id):
            try:
                return self._send_to_interaction(application_id, token, text, target.buttons)
            except _InteractionExpired:
                if not self._bot_token:
                    raise TargetGone(
                        "discord: the interaction token expired and no bot token is configured for channel sends"
                    ) from None
                logger.info("discord interaction token expired; sending to the channel", extra={"fallback": True})
        return self._send_to_channel(target, text)

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """A streamed answer's edit: through the interaction's webhook when the message answers
        one (no bot token needed), else `PATCH /channels/{id}/messages/{message}` with the bot token."""
        token = target.context.get("interaction_token")
        application_id = target.context.get("application_id") or self._application_id
        body = {"content": text, "allowed_mentions": ALLOWED_MENTIONS}
        if not _is_snowflake(message_id):
            raise PermanentError("discord: the message to edit has no usable id")
        if _is_token(token) and _is_snowflake(application_id):
            answer = self._call("PATCH", f"/webhooks/{application_id}/{token}/messages/{message_id}", token, body)
            if answer.status not in (401, 404):
                if not 200 <= answer.status < 300:
                    raise self._failure(answer, token)
                return
            if not self._bot_token:
                raise TargetGone("discord: the interaction token expired and no bot token is configured")
            logger.info("discord interaction token expired; editing in the channel", extra={"fallback": True})
        channel = self._channel(target)
        headers = {"Authorization": f"Bot {self._bot_token}", "User-Agent": USER_AGENT}
        answer = self._http.request(
            "PATCH", f"/channels/{channel}/messages/{message_id}", json_body=body, headers=headers
        )
        if not 200 <= answer.status < 300:
            raise self._failure(answer, None)

    def typing(self, target: Target) -> bool:
        """`POST /channels/{id}/typing` for a chat reached with the bot token. An interaction's
        answer needs none: its deferred "thinking…" message shows until the answer replaces it."""
        channel = target.thread_id or target.chat_id
        if target.context.get("interaction_token") or not self._bot_token or not _is_snowflake(channel):
            return False
        headers = {"Authorization": f"Bot {self._bot_token}", "User-Agent": USER_AGENT}
        answer = self._http.request(
            "POST", f"/channels/{channel}/typing", headers=headers, timeout=PRESENCE_TIMEOUT_SECONDS
        )
        if 200 <= answer.status < 300:
            return True
        raise self._failure(answer, None)

    def _send_to_interaction(self, application_id: str, token: str, text: str, buttons: tuple[Button, ...]) -> str:
        webhook = f"/webhooks/{application_id}/{token}"
        body = message_body(text, buttons)
        if token not in self._filled and self._original_is_loading(webhook, token):
            message_id = self._message_id(self._call("PATCH", webhook + "/messages/@original", token, body), token)
        else:
            message_id = self._message_id(self._call("POST", webhook + "?wait=true", token, body), token)
        self._remember(token)
        return message_id

    def _original_is_loading(self, webhook: str, token: str) -> bool:
        answer = self._call("GET", webhook + "/messages/@original", token)
        if answer.status in (401, 404):
            raise _InteractionExpired
        if answer.status != 200:
            raise self._failure(answer, token)
        flags = answer.json_object().get("flags")
        return is_int(flags) and bool(flags & LOADING)

    def _send_to_channel(self, target: Target, text: str) -> str:
        channel = self._channel(target)
        headers = {"Authorization": f"Bot {self._bot_token}", "User-Agent": USER_AGENT}
        body = message_body(text, target.buttons)
        if _is_snowflake(target.reply_to):
            # A reply to a message deleted meanwhile is posted all the same, as a plain message.
            body["message_reference"] = {"message_id": target.reply_to, "fail_if_not_exists": False}
        nonce = send_key(target, NONCE_LENGTH)
        if nonce:
            # Discord answers a repeated nonce of the last few minutes with the message it created
            # then: a retried send (a timeout after Discord took it) is not posted twice.
            body.update(nonce=nonce, enforce_nonce=True)
        answer = self._http.request("POST", f"/channels/{channel}/messages", json_body=body, headers=headers)
        return self._message_id(answer, None)

    caption_limit = 2000  # the message's content

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """A message with the file as `files[0]` (multipart, the message itself in `payload_json`).
        An interaction's answer goes through its webhook, as its text would (it replaces the
        deferred "thinking…" message, or follows it); a channel's is posted with the bot token."""
        body: dict[str, Any] = {"attachments": [{"id": 0, "filename": media.name}]}
        if caption:
            body["content"] = caption
        token = target.context.get("interaction_token")
        application_id = target.context.get("application_id") or self._application_id
        if _is_token(token) and _is_snowflake(application_id):
            try:
                return self._media_to_interaction(application_id, token, _form(body, media))
            except _InteractionExpired:
                if not self._bot_token:
                    raise TargetGone(
                        "discord: the interaction token expired and no bot token is configured for channel sends"
                    ) from None
                logger.info("discord interaction token expired; sending to the channel", extra={"fallback": True})
        channel = self._channel(target)
        if _is_snowflake(target.reply_to):
            body["message_reference"] = {"message_id": target.reply_to, "fail_if_not_exists": False}
        headers = {"Authorization": f"Bot {self._bot_token}", "User-Agent": USER_AGENT}
        answer = self._http.request(
            "POST", f"/channels/{channel}/messages", files=_form(body, media), headers=headers, timeout=60.0
        )
        return self._message_id(answer, None)

    def _media_to_interaction(self, application_id: str, token: str, form: http_pool.FormFields) -> str:
        webhook = f"/webhooks/{application_id}/{token}"
        if token not in self._filled and self._original_is_loading(webhook, token):
            answer = self._call("PATCH", webhook + "/messages/@original", token, files=form)
        else:
            answer = self._call("POST", webhook + "?wait=true", token, files=form)
        message_id = self._message_id(answer, token)
        self._remember(token)
        return message_id

    def _channel(self, target: Target) -> str:
        if not self._bot_token:
            raise PermanentError("discord: sending to a channel needs DISCORD_BOT_TOKEN")
        channel = target.thread_id or target.chat_id
        if not _is_snowflake(channel):
            raise PermanentError("discord: the target is not a channel id")
        return channel

    def _call(
        self, method: str, path: str, token: str, body: Any = None, files: http_pool.FormFields | None = None
    ) -> Answer:
        """One request to the interaction webhook; the token in its path never reaches an error."""
        try:
            return self._http.request(
                method, path, json_body=body, files=files, headers={"User-Agent": USER_AGENT},
                timeout=60.0 if files else None,
            )  # fmt: skip
        except (TransientError, PermanentError) as exc:
            raise type(exc)(str(exc).replace(token, "<redacted>")) from None

    def _message_id(self, answer: Answer, token: str | None) -> str:
        if token is not None and answer.status in (401, 404):
            raise _InteractionExpired
        if 200 <= answer.status < 300:
            message_id = answer.json_object().get("id")
            if _is_snowflake(message_id):
                return message_id
            # The message may well have been posted; resending could post it twice.
            raise OutcomeUnknown("discord answered without a message id; the message may have been sent")
        raise self._failure(answer, token)

    def _failure(self, answer: Answer, token: str | None) -> Exception:
        body = answer.json_object()
        if answer.status == 429:
            seconds = retry_after_seconds(body.get("retry_after"), header(answer.headers, "retry-after"))
            scope = "global " if body.get("global") is True else ""
            return RateLimited(seconds, f"discord {scope}rate limit; retry after {seconds:g} s")
        detail = _error_detail(answer)
        if token:
            detail = detail.replace(token, "<redacted>")
        # 403 Missing Access / Cannot send messages to this user, 404 Unknown Channel: out of reach.
        return self._http.failure(answer, gone=(403, 404), detail=detail)

    def _remember(self, token: str) -> None:
        self._filled[token] = None
        while len(self._filled) > _REMEMBERED_TOKENS:
            del self._filled[next(iter(self._filled))]


def _form(body: dict[str, Any], media: MediaFile) -> http_pool.FormFields:
    return {"payload_json": json.dumps(body), "files[0]": (media.name, media.data, media.mime)}


def message_body(text: str, buttons: tuple[Button, ...]) -> dict[str, Any]:
    """The message, with the buttons as one action row; a press comes back as a component
    interaction whose custom_id is `hermes:<reply>` (at most 100 characters: longer ones are left out)."""
    body: dict[str, Any] = {"content": text, "allowed_mentions": ALLOWED_MENTIONS}
    row = [
        {
            "type": BUTTON_COMPONENT,
            "style": PRIMARY_STYLE,
            "label": b.label[:80],
            "custom_id": COMPONENT_PREFIX + b.reply,
        }
        for b in buttons[:5]
        if len(COMPONENT_PREFIX + b.reply) <= CUSTOM_ID_LIMIT
    ]
    if row:
        body["components"] = [{"type": ACTION_ROW_COMPONENT, "components": row}]
    return body


# The attachment's CDN URL is signed by Discord and needs no token, so none is sent (the bot token
# never leaves for the CDN); a signed URL expires after about a day. Only Discord's hosts are asked.
MEDIA = _media.MediaSource(
    "discord", "url", lambda context: {"User-Agent": USER_AGENT},
    hosts=lambda context: ("cdn.discordapp.com", "media.discordapp.net"),
    missing="the attachment has no URL to fetch it from",
)  # fmt: skip


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    return _media.fetch_from(MEDIA, context, media, limit)


def build_sender(context: AdapterContext) -> DiscordSender | None:
    """A sender when the bot token (channel sends) or the application id (interaction replies,
    which need no bot token) is configured."""
    token = context.secret("DISCORD_BOT_TOKEN")
    application_id = context.option("application_id")
    if not token and not application_id:
        return None
    return DiscordSender(context.platform.api_base_url, bot_token=token, application_id=application_id or None)


def _error_detail(answer: Answer) -> str:
    body = answer.json_object()
    return f"{body.get('message') or f'HTTP {answer.status}'} (code {body.get('code', '-')})"
