"""Mattermost outgoing webhooks in, REST API posts out (PLATFORMS §9).

Inbound. An outgoing webhook POSTs the triggering post to the gateway, form-encoded (the default)
or as JSON, as chosen when the webhook was created; the `Content-Type` header says which. There
is no signature: the body carries the webhook's static `token`, compared in constant time with
MATTERMOST_OUTGOING_TOKEN. Verification therefore has to read the body. A body that cannot be
read (not UTF-8, not form syntax, not a JSON object, a repeated field) carries no token anyone can
check, so it is refused as Unauthorized (401), like a missing token: an unauthenticated sender
learns nothing about what a well-formed request looks like, and nothing it sent is parsed further.
Fields that are malformed in a body whose token matched are a BadRequest (400) from `parse`.

Outgoing webhooks fire in public channels only, so every message is a `group` message. Mattermost
posts the JSON answer's `text`, if it has one, as a reply; the gateway answers `{}` so that nothing
is posted at once and the agent's reply arrives later through the REST API. Mattermost does not
retry a webhook; `post_id` de-duplicates anyway. The payload's `timestamp` is seconds in a form
body and milliseconds in a JSON body (Mattermost's own encoders); it is kept as `extra.sent_at`
in seconds.

The payload does not say whether the author is a bot, and a post the gateway makes with the bot
token fires the webhook again when the webhook watches a channel without trigger words. Posts by
`bot_user_id` (when that option is set) are therefore ignored; without it, give the webhook
trigger words.

Outbound. `POST <server>/api/v4/posts` with the bot's access token. A chunk of the outbox carries
`pending_post_id`, derived from its row (`send_key`): the server answers a repeated one of the
last 30 seconds with the post it created then, so the outbox's retry after a timeout the server
had taken posts nothing twice. A repeat that arrives while the first is still being saved gets a
500 (`api.post.deduplicate_create_post.pending`), a TransientError like any 5xx: it is retried.
"""

from __future__ import annotations

import hmac
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hermes_gateway import http_pool
from hermes_gateway.domain.media import Attachment, attachment
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, RateLimited, TargetGone, Unauthorized
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import (
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    header,
    retry_after_seconds,
    send_key,
)
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import (
    Accepted,
    HttpRequest,
    HttpResponse,
    Ignored,
    Parsed,
    outlived_deduplication,
    read_json,
)

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

logger = logging.getLogger(__name__)

_MAX_FIELDS = 32  # Mattermost sends 12
_MAX_FILES = 10  # a post holds at most 10 files
_ID = re.compile(r"^[A-Za-z0-9]{1,64}$")  # Mattermost ids are 26 lower-case letters and digits
# A post to an archived channel (HTTP 400); a channel the bot cannot post in is 403.
_ARCHIVED = "api.post.create_post.can_not_post_to_deleted.error"
# An empty object: Mattermost posts a webhook answer only when it has `text` or `attachments`.
ACK = HttpResponse(200, {})


def read_fields(request: HttpRequest) -> dict[str, Any]:
    """The webhook's fields, from a form or a JSON body. Raises BadRequest when it cannot be read."""
    if "json" in request.headers.get("content-type", "").lower():
        payload = read_json(request.body, "mattermost body")
        if not isinstance(payload, dict):
            raise BadRequest("mattermost body is not a JSON object")
        return payload
    import urllib.parse

    try:
        pairs = urllib.parse.parse_qsl(
            request.body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=True,
            errors="strict",
            max_num_fields=_MAX_FIELDS,
        )
    except ValueError:  # UnicodeDecodeError too
        raise BadRequest("mattermost body is neither a form nor a JSON object") from None
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise BadRequest("a mattermost form field is repeated")
    return fields


def verify_token(request: HttpRequest, expected: str | None) -> None:
    """Accept the request only when its body carries the outgoing webhook's token."""
    if not expected:
        raise Unauthorized("mattermost outgoing webhook token is not configured; refusing every request")
    try:
        fields = read_fields(request)
    except BadRequest:
        raise Unauthorized("mattermost body is unreadable, so it carries no token") from None
    token = fields.get("token")
    if not isinstance(token, str) or not token:
        raise Unauthorized("mattermost token is missing")
    if not hmac.compare_digest(token.encode("utf-8"), expected.encode("utf-8")):
        raise Unauthorized("mattermost token does not match")


def parse_post(fields: dict[str, Any], *, received_at: float, bot_user_id: str = "") -> InboundMessage | Ignored:
    """One outgoing webhook call as a message, or the reason it is ignored. Raises BadRequest."""
    post_id = _id(fields, "post_id")
    channel_id = _id(fields, "channel_id")
    user_id = _id(fields, "user_id")
    team_id = _text(fields, "team_id")
    if team_id and not _ID.match(team_id):
        raise BadRequest("mattermost team_id is not a Mattermost id")
    if bot_user_id and user_id == bot_user_id:
        return Ignored("own_message")  # the gateway's own post, fired back by a webhook without trigger words
    trigger_word = _text(fields, "trigger_word")
    text = strip_trigger_word(_text(fields, "text"), trigger_word)
    media = attachments(fields)
    if not text.strip() and not media:
        return Ignored("no_text")
    source = SessionSource(
        platform="mattermost",
        chat_id=channel_id,
        chat_type="group",
        user_id=user_id,
        user_name=_text(fields, "user_name") or None,
        chat_name=_text(fields, "channel_name") or None,
        scope_id=team_id or None,
        message_id=post_id,
    )
    sent_at = _seconds(fields.get("timestamp"))
    if outlived_deduplication("mattermost", sent_at, received_at):
        return Ignored("outlived_deduplication")
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"mattermost:{post_id}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        extra={"sent_at": sent_at} if sent_at is not None else {},
        # The trigger word is how a message addresses this integration.
        facts=("mentions_bot",) if trigger_word else (),
    )


def attachments(fields: dict[str, Any]) -> tuple[Attachment, ...]:
    """The post's `file_ids` (comma-separated, as Mattermost sends them; a list is read too) as
    references fetched with the bot token. The webhook says nothing else about a file, so each is
    a document until its bytes say otherwise."""
    raw = fields.get("file_ids") or ""
    ids = raw.split(",") if isinstance(raw, str) else raw if isinstance(raw, list) else ()
    found = [i.strip() for i in ids if isinstance(i, str) and _ID.fullmatch(i.strip())]
    return tuple(attachment("document", file_id=file_id) for file_id in found[:_MAX_FILES])


def strip_trigger_word(text: str, trigger_word: str) -> str:
    """The text without its first word when that word is (or, for "starts with" webhooks, begins
    with) the trigger word: Mattermost matches trigger words against the first word only."""
    if not trigger_word:
        return text
    stripped = text.lstrip()
    first_word = stripped.split(None, 1)[0] if stripped else ""
    if not first_word.lower().startswith(trigger_word.lower()):
        return text
    return stripped[len(first_word) :].lstrip(" \t\r\n,:")


def _id(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str) or not _ID.match(value):
        raise BadRequest(f"mattermost {key} is missing or not a Mattermost id")
    return value


def _text(fields: dict[str, Any], key: str) -> str:
    value = fields.get(key, "")
    if not isinstance(value, str):
        raise BadRequest(f"mattermost {key} is not a string")
    return value


def _seconds(value: Any) -> float | None:
    """Mattermost's `timestamp`: seconds in a form body, milliseconds in a JSON body."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value / 1000
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 12:
        return float(value)
    return None


class MattermostInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context
        # Not yet a catalog option everywhere: absent means "unknown" (see the module docstring).
        self._bot_user_id = str(context.platform.options.get("bot_user_id") or "")

    def verify(self, request: HttpRequest) -> None:
        verify_token(request, self._context.secret("MATTERMOST_OUTGOING_TOKEN"))

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        fields = read_fields(request)
        parsed = parse_post(fields, received_at=received_at, bot_user_id=self._bot_user_id)
        return Accepted(items=(parsed,), ack=ACK)


class MattermostSender:
    """Creates posts with the REST API; the bot token travels only in the Authorization header."""

    def __init__(self, server_url: str, token: str, timeout: float = 10.0) -> None:
        base = server_url.rstrip("/").removesuffix("/api/v4")
        self._http = HttpClient(base, platform="mattermost", timeout=timeout, scrub=(token,))
        self._headers = {"Authorization": f"Bearer {token}"}

    def __repr__(self) -> str:
        return f"MattermostSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        """Create one post (in the target's thread when it has one); return the post id."""
        return self._post(target, {"channel_id": target.chat_id, "message": text})

    def edit(self, target: Target, message_id: str, text: str) -> None:
        """`PUT /api/v4/posts/{id}/patch` with the new message: a streamed answer's edit."""
        import urllib.parse

        path = f"/api/v4/posts/{urllib.parse.quote(message_id, safe='')}/patch"
        answer = self._http.request("PUT", path, json_body={"message": text}, headers=self._headers)
        if answer.status != 200:
            raise self._failure(answer)

    caption_limit = 4000  # the post's message

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """`POST /api/v4/files` (multipart `channel_id` and `files`), then a post naming its file id."""
        form: http_pool.FormFields = {"channel_id": target.chat_id, "files": (media.name, media.data, media.mime)}
        answer = self._http.request("POST", "/api/v4/files", files=form, headers=self._headers, timeout=60.0)
        if answer.status not in (200, 201):
            raise self._failure(answer)
        infos = answer.json_object().get("file_infos")
        file_id = infos[0].get("id") if isinstance(infos, list) and infos and isinstance(infos[0], dict) else None
        if not isinstance(file_id, str) or not file_id:
            raise PermanentError("mattermost: the upload named no file id")
        return self._post(target, {"channel_id": target.chat_id, "message": caption, "file_ids": [file_id]})

    def _post(self, target: Target, payload: dict[str, Any]) -> str:
        if target.thread_id:
            payload["root_id"] = target.thread_id
        if key := send_key(target):
            payload["pending_post_id"] = key  # the server's de-duplication key (30 s), at most 64 characters
        answer = self._http.request("POST", "/api/v4/posts", json_body=payload, headers=self._headers)
        if answer.status in (200, 201):
            post_id = answer.json_object().get("id")
            if isinstance(post_id, str) and post_id:
                return post_id
            raise OutcomeUnknown(f"mattermost answered HTTP {answer.status} without a post id; it may have posted")
        raise self._failure(answer)

    def _failure(self, answer: Answer) -> Exception:
        if answer.status == 429:
            # Mattermost's limiter sends Retry-After and X-RateLimit-Reset, both in seconds from now.
            seconds = retry_after_seconds(
                header(answer.headers, "retry-after"), header(answer.headers, "x-ratelimit-reset")
            )
            return RateLimited(seconds, f"mattermost rate limit; retry after {seconds:g} s")
        if answer.status == 400 and answer.json_object().get("id") == _ARCHIVED:
            return TargetGone("mattermost: target unreachable: the channel is archived")
        return self._http.failure(answer, gone=(403, 404))


# A post's file from the server (`GET /api/v4/files/{id}`), with the bot token (the bot must be
# able to read the channel).
MEDIA = _media.MediaSource(
    "mattermost", "file_id", lambda context: _bot_token(context), path="/api/v4/files/{file_id}", shape=_ID.pattern,
    missing="no bot token and server URL, or no file id to fetch the file with",
)  # fmt: skip


def _bot_token(context: AdapterContext) -> Mapping[str, str] | None:
    token = context.secret("MATTERMOST_BOT_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token and context.platform.api_base_url else None


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    return _media.fetch_from(MEDIA, context, media, limit)


def build_sender(context: AdapterContext) -> MattermostSender | None:
    token = context.secret("MATTERMOST_BOT_TOKEN")
    if not token:
        return None
    if not context.platform.api_base_url:
        logger.warning("MATTERMOST_BOT_TOKEN is set but MATTERMOST_API_BASE_URL (the server URL) is not")
        return None
    return MattermostSender(context.platform.api_base_url, token)
