"""The local web chat page as a platform (local mode only).

The page posts `{"chat_id", "user_id", "user_name", "message_id", "text", "attachments"}` with the header
`x-hermes-local-token`; local mode generates that token at start-up and embeds it in the page it
serves, so another page in the browser cannot talk to the gateway. Replies are read from the outbox.
A file is uploaded first (`POST /local/upload`, kept in the media bucket under `uploads/webchat/`)
and the message names it: `attachments: [{"upload_id", "name", "mime", "size"}]`.

Its sender records (the page reads the outbox) and can edit, so an answer streams into the page
as it does into a Telegram chat (`WEBCHAT_STREAMING`, on by default): a streamed message's text so
far is kept here, in the process every local function runs in, and `/local/outbox` shows it on the
message's row until the Deliver state completes the row with the answer's text.
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, Unauthorized
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.services.ingress import HttpRequest, Ignored, Parsed, json_payload

if TYPE_CHECKING:
    from hermes_gateway.platforms.base import Target
    from hermes_gateway.platforms.media import Fetched
    from hermes_gateway.platforms.outbound_media import MediaFile

TOKEN_HEADER = "x-hermes-local-token"  # noqa: S105 - a header name, not a secret
TEXT_LIMIT = 8000
MAX_ATTACHMENTS = 10
UPLOAD_PREFIX = "uploads/webchat/"
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_UPLOAD_ID = re.compile(r"^[0-9a-f]{32}$")


class WebchatInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        expected = self._context.secret("WEBCHAT_TOKEN")
        if not expected:
            raise Unauthorized("web chat is not configured (no WEBCHAT_TOKEN)")
        given = request.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
            raise Unauthorized("wrong or missing web chat token")

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        payload = json_payload(request)
        if not isinstance(payload, dict):
            raise BadRequest("web chat payload must be a JSON object")
        ids = {}
        for name in ("chat_id", "user_id", "message_id"):
            value = payload.get(name)
            if not isinstance(value, str) or not _ID.match(value):
                raise BadRequest(f"web chat field {name} must be 1-64 letters, digits, '_' or '-'")
            ids[name] = value
        text = payload.get("text")
        if not isinstance(text, str):
            raise BadRequest("web chat field text must be a string")
        media = _attachments(payload.get("attachments"))
        if not text.strip() and not media:
            return Ignored("empty_text")
        if len(text) > TEXT_LIMIT:
            raise BadRequest(f"web chat text over {TEXT_LIMIT} characters")
        user_name = payload.get("user_name")
        source = SessionSource(
            platform="webchat",
            chat_id=ids["chat_id"],
            chat_type="dm",
            user_id=ids["user_id"],
            user_name=user_name if isinstance(user_name, str) and user_name else "You",
            message_id=ids["message_id"],
        )
        return InboundMessage(
            source=source,
            text=text,
            event_id=f"webchat:{ids['chat_id']}:{ids['message_id']}",
            received_at=received_at,
            attachments=tuple(a.to_dict() for a in media),
        )


def _attachments(raw: object) -> tuple[Attachment, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_ATTACHMENTS:
        raise BadRequest(f"web chat attachments must be a list of at most {MAX_ATTACHMENTS}")
    found = []
    for item in raw:
        upload_id = item.get("upload_id") if isinstance(item, dict) else None
        if not isinstance(upload_id, str) or not _UPLOAD_ID.match(upload_id):
            raise BadRequest("web chat attachment needs the upload_id /local/upload answered")
        mime = item.get("mime") if isinstance(item.get("mime"), str) else ""
        kind = kind_of_mime(mime)
        found.append(attachment(kind, mime=mime, size=item.get("size"), name=item.get("name", ""), upload_id=upload_id))
    return tuple(found)


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """An uploaded file, from the media bucket where `POST /local/upload` left it."""
    from hermes_gateway import wiring
    from hermes_gateway.platforms.media import MediaUnavailable, stored_upload

    upload_id = media.ref.get("upload_id", "")
    if not _UPLOAD_ID.match(upload_id):
        raise MediaUnavailable("the uploaded file is gone (upload it again)")
    return stored_upload(wiring.media_store(), UPLOAD_PREFIX + upload_id, limit)


# A streamed message's text so far, by its message id: the page shows it on the message's outbox
# row while it streams. Kept for the last LIVE_KEPT messages (a message the page has read is done).
LIVE_KEPT = 200
_live: OrderedDict[str, str] = OrderedDict()
_live_lock = threading.Lock()


def live_text(message_id: str | None) -> str | None:
    """The text a streamed web chat message shows now, or None when it is not one of them."""
    with _live_lock:
        return _live.get(message_id) if message_id else None


def _show(message_id: str, text: str) -> None:
    with _live_lock:
        _live[message_id] = text
        _live.move_to_end(message_id)
        while len(_live) > LIVE_KEPT:
            _live.popitem(last=False)


class WebchatSender:
    """Records for the page (the outbox is where it reads its replies) and edits a streamed message."""

    status = "recorded"  # the delivery records the row as such: nothing leaves this machine
    caption_limit = TEXT_LIMIT

    def send(self, target: Target, text: str) -> str:
        message_id = "webchat-" + secrets.token_hex(8)
        if target.delivery_id is None:  # a streamed answer's first post: its row is written after it
            _show(message_id, text)
        return message_id

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        return ""  # the row names the stored file, which the page shows

    def edit(self, target: Target, message_id: str, text: str) -> None:
        _show(message_id, text)


def build_sender(context: AdapterContext) -> WebchatSender:
    return WebchatSender()
