"""WhatsApp Cloud API (Meta): the subscription handshake, `X-Hub-Signature-256`, batch
normalization and sending (PLATFORMS §4).

Standard library only; urllib3 (the pooled HTTP client) is imported only when a request is sent.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hermes_gateway import http_pool
from hermes_gateway.domain.media import Attachment, attachment
from hermes_gateway.domain.session_key import canonical_whatsapp_id
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import (
    BadRequest,
    OutcomeUnknown,
    OutsideWindow,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import (
    PRESENCE_TIMEOUT_SECONDS,
    AdapterContext,
    Answer,
    HttpClient,
    Target,
    header,
    retry_after_seconds,
)
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import (
    Accepted,
    DeliveryReport,
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

SIGNATURE_HEADER = "x-hub-signature-256"
_CHALLENGE_LIMIT = 256
# Message types that carry a media object (`id`, `mime_type`, maybe `filename` and `caption`).
_MEDIA_TYPES = ("image", "audio", "video", "document", "sticker")
_IGNORED_TYPES = {"reaction": "reaction", "system": "system", "unsupported": "unsupported_message_type"}

# Meta error codes (error.code in the Graph API error object), from the Cloud API error-code list.
OUTSIDE_WINDOW = 131047  # "Re-engagement message": more than 24 h since the user last wrote
_RATE_LIMITED = {4, 80007, 130429, 131056}  # app, account, throughput and per-recipient pair limits
_PAIR_LIMIT_SECONDS = 6.0  # 131056: about one message every 6 s to the same user
_GONE = {131026}  # message undeliverable: not on WhatsApp, old app version, terms not accepted
_TEMPORARY = {1, 2, 131000, 131016}  # unknown/service errors Meta suggests retrying
_TOKEN = {190}  # the access token expired or was revoked
CALLBACK_DATA_LIMIT = 512  # characters of `biz_opaque_callback_data`


def meta_signature(app_secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` value Meta sends: `sha256=<hex HMAC-SHA256(app secret, raw body)>`."""
    return "sha256=" + hmac.new(app_secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def verify_signature(headers: Mapping[str, str], body: bytes, app_secret: str | None) -> None:
    if not app_secret:
        raise Unauthorized("whatsapp app secret is not configured (WHATSAPP_APP_SECRET); refusing every request")
    presented = headers.get(SIGNATURE_HEADER)
    if not presented:
        raise Unauthorized("whatsapp X-Hub-Signature-256 header is missing")
    if not presented.startswith("sha256="):
        raise Unauthorized("whatsapp X-Hub-Signature-256 header is malformed")
    expected = meta_signature(app_secret, body)
    if not hmac.compare_digest(presented.strip().lower().encode("utf-8"), expected.encode("utf-8")):
        raise Unauthorized("whatsapp signature does not match")


def verify_subscription(query: Mapping[str, str], verify_token: str | None) -> None:
    """The GET handshake: `hub.mode=subscribe` and the verify token chosen in the App Dashboard."""
    if not verify_token:
        raise Unauthorized("whatsapp verify token is not configured (WHATSAPP_VERIFY_TOKEN); refusing the handshake")
    if query.get("hub.mode") != "subscribe":
        raise Unauthorized("whatsapp handshake: hub.mode is not subscribe")
    presented = query.get("hub.verify_token")
    if not presented:
        raise Unauthorized("whatsapp handshake: hub.verify_token is missing")
    if not hmac.compare_digest(presented.encode("utf-8"), verify_token.encode("utf-8")):
        raise Unauthorized("whatsapp handshake: hub.verify_token does not match")


class WhatsAppInbound:
    """GET is the subscription handshake; POST carries a batch of notifications."""

    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        if request.method == "GET":
            verify_subscription(request.query, self._context.secret("WHATSAPP_VERIFY_TOKEN"))
        else:
            verify_signature(request.headers, request.body, self._context.secret("WHATSAPP_APP_SECRET"))

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        if request.method == "GET":
            challenge = request.query.get("hub.challenge", "")
            if not challenge or len(challenge) > _CHALLENGE_LIMIT or not challenge.isprintable():
                raise BadRequest("whatsapp handshake: hub.challenge is missing or malformed")
            return Handshake(HttpResponse.text(200, challenge))
        return parse_notification(json_payload(request), received_at=received_at)


def parse_notification(payload: Any, *, received_at: float) -> Accepted | Ignored:
    """One webhook POST: every message of every change, each an InboundMessage or Ignored."""
    if not isinstance(payload, dict):
        raise BadRequest("whatsapp notification is not a JSON object")
    if payload.get("object") != "whatsapp_business_account":
        return Ignored("unsupported_object")
    items: list[InboundMessage | Ignored | DeliveryReport] = []
    for entry in _list(payload, "entry"):
        for change in _list(_dict(entry, "entry"), "changes"):
            change = _dict(change, "change")
            if change.get("field") != "messages":
                items.append(Ignored("unsupported_field"))
                continue
            items.extend(_value_items(_dict(change.get("value"), "change value"), received_at))
    return Accepted(items=tuple(items) or (Ignored("no_messages"),))


def _value_items(value: dict[str, Any], received_at: float) -> list[InboundMessage | Ignored | DeliveryReport]:
    metadata = _dict(value.get("metadata", {}), "metadata")
    items: list[InboundMessage | Ignored | DeliveryReport] = [_status(s) for s in _list(value, "statuses")]
    items.extend(Ignored("error_callback") for _ in _list(value, "errors"))
    names = {}
    for contact in _list(value, "contacts"):
        contact = _dict(contact, "contact")
        profile = contact.get("profile")
        name = profile.get("name") if isinstance(profile, dict) else None
        if isinstance(contact.get("wa_id"), str) and isinstance(name, str) and name:
            names[contact["wa_id"]] = name
    items.extend(_message(_dict(m, "message"), metadata, names, received_at) for m in _list(value, "messages"))
    return items


def _status(status: Any) -> DeliveryReport | Ignored:
    """A message status. A `failed` one of a message the gateway sent (it carries the outbox row in
    `biz_opaque_callback_data`) is a delivery report; sent, delivered, read and the rest are ignored."""
    if not isinstance(status, dict) or status.get("status") != "failed":
        return Ignored("message_status")  # sent, delivered, read: its line is DEBUG (ingress.RECEIPT_REASONS)
    reference, wamid = status.get("biz_opaque_callback_data"), status.get("id")
    if not isinstance(reference, str) or not reference or not isinstance(wamid, str) or not wamid:
        return Ignored("failed_status_of_another_sender")
    errors = status.get("errors")
    first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
    code, title = first.get("code"), first.get("title")
    error = f"whatsapp {code}" if isinstance(code, int) else "whatsapp"
    if isinstance(title, str) and title:
        error += f" {title[:120]}"  # Meta's title names the error, not the message ("Message undeliverable")
    return DeliveryReport(delivery_id=reference, platform_message_id=wamid, error=error)


def _message(
    message: dict[str, Any], metadata: dict[str, Any], names: dict[str, str], received_at: float
) -> InboundMessage | Ignored:
    wamid, sender = message.get("id"), message.get("from")
    if not isinstance(wamid, str) or not wamid or not isinstance(sender, str) or not sender:
        raise BadRequest("whatsapp message has no string id or from")
    if outlived_deduplication("whatsapp", epoch_seconds(message.get("timestamp")), received_at):
        return Ignored("outlived_deduplication")  # Meta retries for 7 days, ingress remembers 2
    own_number = metadata.get("display_phone_number")
    if isinstance(own_number, str) and canonical_whatsapp_id(sender) == canonical_whatsapp_id(own_number):
        return Ignored("own_message")  # a group echo of what this business number sent
    kind = str(message.get("type") or "")
    if kind in _IGNORED_TYPES:
        return Ignored(_IGNORED_TYPES[kind])
    text, media = _content(message, kind)
    if not text and not media:
        return Ignored("no_text")
    user_id = canonical_whatsapp_id(sender)
    group_id = message.get("group_id")
    is_group = isinstance(group_id, str) and bool(group_id)
    number_id = metadata.get("phone_number_id") if isinstance(metadata.get("phone_number_id"), str) else None
    reply_context = {"phone_number_id": number_id} if number_id else {}
    if is_group:
        reply_context["recipient_type"] = "group"
    replied = message.get("context")
    reply_to = replied.get("id") if isinstance(replied, dict) and isinstance(replied.get("id"), str) else None
    source = SessionSource(
        platform="whatsapp",
        chat_id=str(group_id) if is_group else user_id,
        chat_type="group" if is_group else "dm",
        user_id=user_id,
        user_name=names.get(sender) or names.get(user_id),
        scope_id=number_id,
        message_id=wamid,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"whatsapp:{wamid}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_to_message_id=reply_to,
        reply_context=reply_context,
    )


def _content(message: dict[str, Any], kind: str) -> tuple[str, tuple[Attachment, ...]]:
    """The text a message carries (a caption for media, a button's title) and its attachments."""
    body = message.get(kind)
    body = body if isinstance(body, dict) else {}
    if kind == "text":
        text = body.get("body")
    elif kind in _MEDIA_TYPES:
        text = body.get("caption")
        return (text if isinstance(text, str) else ""), (media_attachment(kind, body),)
    elif kind == "button":
        text = body.get("text")
    elif kind == "interactive":
        reply = body.get("button_reply") or body.get("list_reply")
        text = reply.get("title") if isinstance(reply, dict) else None
    else:
        text = None
    if text is not None and not isinstance(text, str):
        raise BadRequest(f"whatsapp {kind} message text is not a string")
    return text or "", ()


def media_attachment(kind: str, body: Mapping[str, Any]) -> Attachment:
    """A media object as a reference: its media id is fetched with the access token. An audio
    recorded in the app (`voice: true`) is a voice note."""
    if kind == "audio" and body.get("voice") is True:
        kind = "voice"
    return attachment(kind, mime=body.get("mime_type", ""), name=body.get("filename", ""), media_id=body.get("id"))


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadRequest(f"whatsapp {what} is not an object")
    return value


def _list(container: dict[str, Any], key: str) -> list[Any]:
    value = container.get(key, [])
    if not isinstance(value, list):
        raise BadRequest(f"whatsapp field {key!r} is not a list")
    return value


# --- sending ------------------------------------------------------------------------------------


class WhatsAppSender:
    """Sends text with the Cloud API Messages endpoint. A free-form text reaches a user only within
    24 hours of their last message (the customer service window); later, only templates do."""

    typing_refresh_seconds = 20.0  # a typing indicator shows for 25 s, or until the answer

    def __init__(
        self, api_base_url: str, token: str, phone_number_id: str, timeout: float = 10.0, reengage_template: str = ""
    ) -> None:
        self._http = HttpClient(api_base_url, platform="whatsapp", timeout=timeout, scrub=(token,))
        self._token = token
        self._phone_number_id = phone_number_id
        name, _, language = reengage_template.partition(":")
        self._template = (name, language) if name and language else None

    def __repr__(self) -> str:
        return f"WhatsAppSender({self._http.base!r})"

    def send(self, target: Target, text: str) -> str:
        """Send one text (≤ 4096 characters); returns the `wamid` Meta assigned."""
        content = {"type": "text", "text": {"body": text, "preview_url": False}}
        return self._message(target, self._number_id(target), content)

    def _message(self, target: Target, number_id: str, content: dict[str, Any]) -> str:
        recipient_type = target.context.get("recipient_type") or _recipient_type(target.chat_id)
        to = canonical_whatsapp_id(target.chat_id) if recipient_type == "individual" else target.chat_id
        payload = {"messaging_product": "whatsapp", "recipient_type": recipient_type, "to": to, **content}
        if target.reply_to:
            payload["context"] = {"message_id": target.reply_to}  # shown quoting the user's message
        if target.delivery_id and len(target.delivery_id) <= CALLBACK_DATA_LIMIT:
            # Echoed in the message's status webhooks: a later `failed` status names its outbox row.
            payload["biz_opaque_callback_data"] = target.delivery_id
        answer = self._http.request(
            "POST", f"/{number_id}/messages", json_body=payload, headers={"Authorization": f"Bearer {self._token}"}
        )
        if 200 <= answer.status < 300:
            messages = answer.json_object().get("messages")
            first = messages[0] if isinstance(messages, list) and messages else None
            if isinstance(first, dict) and isinstance(first.get("id"), str) and first["id"]:
                return str(first["id"])
            raise OutcomeUnknown("whatsapp answered success without a message id; the message may have been sent")
        raise self._failure(answer)

    caption_limit = 1024  # an image's, video's or document's caption
    uncaptioned_kinds = frozenset({"audio", "voice"})  # an audio message has none: the text goes before it

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """Upload to `/{phone-number-id}/media`, then a message of the file's type naming the
        media id (an audio or voice message has no caption: delivery sends the text before it).
        A voice file (Ogg/Opus: a spoken answer) goes as a voice message (`voice: true`), which
        WhatsApp shows as a voice note, with a play button up to 512 KB."""
        number_id = self._number_id(target)
        auth = {"Authorization": f"Bearer {self._token}"}
        form: http_pool.FormFields = {
            "messaging_product": "whatsapp",
            "type": media.mime,
            "file": (media.name, media.data, media.mime),
        }
        uploaded = self._http.request("POST", f"/{number_id}/media", files=form, headers=auth, timeout=60.0)
        media_id = uploaded.json_object().get("id") if 200 <= uploaded.status < 300 else None
        if not isinstance(media_id, str) or not media_id:
            raise self._failure(uploaded) if uploaded.status >= 300 else PermanentError("whatsapp: no media id")
        kind = {"image": "image", "video": "video", "audio": "audio", "voice": "audio"}.get(media.kind, "document")
        body: dict[str, Any] = {"id": media_id}
        if kind == "document":
            body["filename"] = media.name
        if caption and kind != "audio":
            body["caption"] = caption
        if media.kind == "voice" and media.mime.startswith("audio/ogg"):
            body["voice"] = True
        return self._message(target, number_id, {"type": kind, kind: body})

    @property
    def reengage_template(self) -> str | None:
        return self._template[0] if self._template else None

    def reengage(self, target: Target, text: str) -> str:
        """The re-engagement template (`platforms.whatsapp.reengage_template`) with `text`, one line
        (domain/service_window.template_parameter), as its body parameter: what reaches a person
        whose last message is over 24 hours old."""
        if self._template is None:
            raise OutsideWindow("whatsapp: outside the 24-hour window and no re-engagement template is configured")
        name, language = self._template
        parameter = {"type": "text", "text": text}
        template = {"name": name, "language": {"code": language}, "components": [
            {"type": "body", "parameters": [parameter]}]}  # fmt: skip
        return self._message(target, self._number_id(target), {"type": "template", "template": template})

    def typing(self, target: Target) -> bool:
        """The typing indicator, which Meta shows only with a read receipt for the user's message
        (and so needs its id): that message is marked read too, as it is being answered."""
        if not target.reply_to:
            return False
        payload = {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": target.reply_to,
            "typing_indicator": {"type": "text"},
        }
        answer = self._http.request(
            "POST",
            f"/{self._number_id(target)}/messages",
            json_body=payload,
            headers={"Authorization": f"Bearer {self._token}"},
            timeout=PRESENCE_TIMEOUT_SECONDS,
        )
        if 200 <= answer.status < 300:
            return True
        raise self._failure(answer)

    def _number_id(self, target: Target) -> str:
        number_id = target.context.get("phone_number_id") or self._phone_number_id
        if not number_id or not number_id.isdigit():
            raise PermanentError("whatsapp: no usable phone number id to send from (WHATSAPP_PHONE_NUMBER_ID)")
        return number_id

    def _failure(self, answer: Answer) -> Exception:
        error = answer.json_object().get("error")
        error = error if isinstance(error, dict) else {}
        code = error.get("code") if isinstance(error.get("code"), int) else None
        data = error.get("error_data")
        details = data.get("details") if isinstance(data, dict) else None
        description = self._http.scrub(str(details or error.get("message") or f"HTTP {answer.status}"))
        if code == OUTSIDE_WINDOW:
            return OutsideWindow(
                "whatsapp: outside the 24-hour customer service window: the user must write first "
                "(only an approved template message can start a conversation)"
            )
        if answer.status == 429 or code in _RATE_LIMITED:
            floor = _PAIR_LIMIT_SECONDS if code == 131056 else 0.0
            seconds = max(retry_after_seconds(header(answer.headers, "retry-after")), floor)
            return RateLimited(seconds, f"whatsapp rate limit ({code or 429}); retry after {seconds:g} s")
        if code in _GONE:
            return TargetGone(f"whatsapp: recipient unreachable ({code}): {description}")
        if answer.status >= 500 or code in _TEMPORARY:
            return TransientError(f"whatsapp server error: HTTP {answer.status} ({code}): {description}")
        if code in _TOKEN:
            return PermanentError(f"whatsapp: the access token is invalid or expired: {description}")
        return self._http.failure(answer, gone=(), detail=f"({code}) {description}" if code else description)


def _recipient_type(chat_id: str) -> str:
    """A phone number (digits, maybe with '+' or a JID suffix) is a person; a Cloud API group id is not."""
    return "individual" if canonical_whatsapp_id(chat_id).isdigit() else "group"


def _media_url(
    context: AdapterContext, http: HttpClient, auth: Mapping[str, str], media: Attachment, limit: int
) -> tuple[str, str]:
    """`GET /{media id}`: the file's short-lived URL, its size (checked) and type."""
    from hermes_gateway.platforms.media import MediaUnavailable, too_large

    answer = http.request("GET", f"/{media.ref['media_id']}", headers=auth)
    found = answer.json_object()
    url = found.get("url")
    if answer.status != 200 or not isinstance(url, str) or not url:
        if answer.status == 429 or answer.status >= 500:
            raise WhatsAppSender(context.platform.api_base_url, str(context.secret(_TOKEN_SECRET)), "")._failure(answer)
        raise MediaUnavailable(
            f"whatsapp: the media id is not usable (HTTP {answer.status}); media expire after 30 days"
        )
    over = too_large(attachment(media.kind, size=found.get("file_size")), limit)
    if over is not None:
        raise over
    mime = found.get("mime_type") if isinstance(found.get("mime_type"), str) else media.mime
    return url, str(mime or "")


_TOKEN_SECRET = "WHATSAPP_ACCESS_TOKEN"  # noqa: S105 - the secret's name, not its value
# The media id is looked up for the file's URL, and both requests carry the access token in the
# Authorization header, as Meta requires; the URL must be on Meta's media host (or the API's).
MEDIA = _media.MediaSource(
    "whatsapp", "media_id", _media.bearer(_TOKEN_SECRET), shape="[A-Za-z0-9]+",
    hosts=lambda context: ("lookaside.fbsbx.com",), locate=_media_url,
    missing="no access token or no media id to fetch the file with",
)  # fmt: skip


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    return _media.fetch_from(MEDIA, context, media, limit)


def build_sender(context: AdapterContext) -> WhatsAppSender | None:
    token = context.secret("WHATSAPP_ACCESS_TOKEN")
    if not token:
        return None
    return WhatsAppSender(
        context.platform.api_base_url,
        token,
        str(context.option("phone_number_id") or ""),
        reengage_template=str(context.option("reengage_template") or ""),
    )
