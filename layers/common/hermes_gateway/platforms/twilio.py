"""Twilio SMS: `X-Twilio-Signature`, form-encoded messages and sending (PLATFORMS §11, URL
reconstruction §14); webhook registration is the CLI's (`hermes_cli.webhooks.twilio`).

Standard library only; urllib3 (the pooled HTTP client) is imported only when a request is sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

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
from hermes_gateway.platforms import media as _media
from hermes_gateway.platforms.base import AdapterContext, Answer, HttpClient, Target, header, retry_after_seconds
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import Accepted, HttpRequest, HttpResponse, Ignored, Parsed

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

SIGNATURE_HEADER = "x-twilio-signature"
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
API_VERSION = "/2010-04-01"
_MEDIA_LIMIT = 10  # Twilio forwards at most 10 media items per message
# Keywords Twilio's default opt-out handling answers itself (the message still reaches the webhook).
OPT_KEYWORDS = frozenset(
    {"STOP", "STOPALL", "UNSUBSCRIBE", "CANCEL", "END", "QUIT", "START", "YES", "UNSTOP", "HELP", "INFO"}
)

# Twilio REST error codes (the `code` of an error answer).
_GONE = {
    21610: "the recipient unsubscribed (replied STOP)",
    21211: "the 'To' number is not a valid phone number",
    21614: "the 'To' number cannot receive SMS",
}
_RATE_LIMITED = 20429


def twilio_signature(auth_token: str, url: str, params: Iterable[tuple[str, str]]) -> str:
    """Base64 HMAC-SHA1 over the URL followed by every POST parameter, sorted, as name+value.

    Sorted (and de-duplicated) like Twilio's own helper libraries, so a repeated parameter signs
    the way Twilio signs it.
    """
    signed = url + "".join(name + value for name, value in sorted(set(params)))
    digest = hmac.new(auth_token.encode("utf-8"), signed.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signed_url(request: HttpRequest, public_url: str = "") -> str:
    """The URL Twilio called, as it signed it.

    `public_url` (the URL registered in Twilio) wins when set, plus the request's query when the
    option has none. Otherwise the URL is rebuilt from the `host` header, the path and the query,
    with the scheme from `x-forwarded-proto` (a local tunnel) or https.
    """
    if public_url:
        if request.raw_query and "?" not in public_url:
            return f"{public_url}?{request.raw_query}"
        return public_url
    host = request.headers.get("host")
    if not host:
        raise Unauthorized("twilio: no host header to rebuild the signed URL from (set TWILIO_PUBLIC_URL)")
    scheme = (request.headers.get("x-forwarded-proto") or "https").split(",")[0].strip().lower()
    url = f"{scheme if scheme in ('http', 'https') else 'https'}://{host}{request.path}"
    return f"{url}?{request.raw_query}" if request.raw_query else url


def _port_variants(url: str) -> tuple[str, ...]:
    """The URL with and without its default port: Twilio may sign either form."""
    parts = urllib.parse.urlsplit(url)
    default = {"https": 443, "http": 80}.get(parts.scheme)
    if default is None or parts.hostname is None:
        return (url,)
    try:
        port = parts.port
    except ValueError:
        return (url,)
    if port is None:
        return (url, urllib.parse.urlunsplit(parts._replace(netloc=f"{parts.netloc}:{default}")))
    if port == default:
        return (url, urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rsplit(":", 1)[0])))
    return (url,)


def form_params(body: bytes) -> list[tuple[str, str]]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("twilio body is not UTF-8") from None
    return urllib.parse.parse_qsl(text, keep_blank_values=True)


class TwilioInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        token = self._context.secret("TWILIO_AUTH_TOKEN")
        if not token:
            raise Unauthorized("twilio auth token is not configured (TWILIO_AUTH_TOKEN); refusing every request")
        presented = request.headers.get(SIGNATURE_HEADER)
        if not presented:
            raise Unauthorized("twilio X-Twilio-Signature header is missing")
        try:
            params = form_params(request.body)
        except BadRequest:
            raise Unauthorized("twilio body is not form-encoded UTF-8; cannot check its signature") from None
        url = signed_url(request, str(self._context.option("public_url") or ""))
        for candidate in _port_variants(url):
            expected = twilio_signature(token, candidate, params)
            if hmac.compare_digest(presented.encode("utf-8"), expected.encode("ascii")):
                return
        raise Unauthorized("twilio signature does not match (is TWILIO_PUBLIC_URL the URL registered in Twilio?)")

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        ack = HttpResponse.text(200, EMPTY_TWIML, "text/xml")
        item = parse_message(form_params(request.body), received_at=received_at)
        # Always TwiML, even for an ignored message: Twilio reads any other answer as broken TwiML.
        return Accepted(items=(item,), ack=ack)


def parse_message(params: list[tuple[str, str]], *, received_at: float) -> InboundMessage | Ignored:
    fields = dict(reversed(params))  # the first value of each name
    sid = fields.get("MessageSid") or fields.get("SmsSid")
    sender = fields.get("From")
    if not sid or not sender:
        raise BadRequest("twilio message has no MessageSid or From")
    if "Body" not in fields and ("MessageStatus" in fields or "SmsStatus" in fields):
        return Ignored("status_callback")  # a delivery report sent to this URL by mistake
    text = fields.get("Body", "")
    media = attachments(fields)
    if not text.strip() and not media:
        return Ignored("no_text")
    if text.strip().upper() in OPT_KEYWORDS:
        return Ignored("opt_keyword")  # Twilio answers these itself; the agent must not
    our_number = fields.get("To") or None
    source = SessionSource(
        platform="sms",
        chat_id=sender,
        chat_type="dm",
        user_id=sender,
        user_name=fields.get("ProfileName") or None,
        scope_id=our_number,
        message_id=sid,
    )
    return InboundMessage(
        source=source,
        text=text,
        event_id=f"sms:{sid}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_context={"from_number": our_number} if our_number else {},
    )


def attachments(fields: Mapping[str, str]) -> tuple[Attachment, ...]:
    """`MediaUrl<N>` and `MediaContentType<N>` as references, typed by their mime type: the URL is
    fetched with the account's basic auth."""
    try:
        count = min(int(fields.get("NumMedia") or 0), _MEDIA_LIMIT)
    except ValueError:
        raise BadRequest("twilio NumMedia is not a number") from None
    found = []
    for i in range(count):
        url, mime = fields.get(f"MediaUrl{i}"), fields.get(f"MediaContentType{i}", "")
        if url:
            found.append(attachment(kind_of_mime(mime), mime=mime, url=url))
    return tuple(found)


# --- the REST API -------------------------------------------------------------------------------


class _Account:
    """The account's REST client: basic auth with the account SID and auth token."""

    def __init__(self, api_base_url: str, account_sid: str, auth_token: str, timeout: float = 10.0) -> None:
        if not account_sid.isalnum():
            raise PermanentError("twilio account SID must be letters and digits (AC…)")
        credentials = base64.b64encode(f"{account_sid}:{auth_token}".encode()).decode("ascii")
        self.http = HttpClient(api_base_url, platform="sms", timeout=timeout, scrub=(auth_token, credentials))
        self.path = f"{API_VERSION}/Accounts/{account_sid}"
        self._auth = {"Authorization": f"Basic {credentials}"}

    def __repr__(self) -> str:
        return f"TwilioAccount({self.http.base!r})"

    def call(self, method: str, path: str, form: Mapping[str, str] | None = None) -> Answer:
        return self.http.request(method, self.path + path, form=form, headers=self._auth)

    @property
    def auth(self) -> Mapping[str, str]:
        return self._auth

    def failure(self, answer: Answer) -> Exception:
        body = answer.json_object()
        code = body.get("code") if isinstance(body.get("code"), int) else None
        message = self.http.scrub(str(body.get("message") or f"HTTP {answer.status}"))
        if answer.status == 429 or code == _RATE_LIMITED:
            seconds = retry_after_seconds(header(answer.headers, "retry-after"))
            return RateLimited(seconds, f"twilio rate limit; retry after {seconds:g} s")
        if answer.status >= 500:
            return TransientError(f"twilio server error: HTTP {answer.status}: {message}")
        if code in _GONE:
            return TargetGone(f"twilio: {_GONE[code]} ({code})")
        return self.http.failure(answer, gone=(), detail=f"({code}) {message}" if code else message)


class TwilioSender:
    """Sends SMS with the Messages resource; the reply goes out from the number the user wrote to."""

    def __init__(self, account: _Account, from_number: str) -> None:
        self._account = account
        self._from = from_number

    def __repr__(self) -> str:
        return f"TwilioSender({self._account.http.base!r})"

    def send(self, target: Target, text: str) -> str:
        """Send one SMS body (≤ 1600 characters); returns the message SID (SM…)."""
        return self._create(target, {"Body": text})

    caption_limit = 1600  # the MMS body

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        """An MMS (or a WhatsApp message through Twilio): `MediaUrl` is the stored file's
        pre-signed URL, which Twilio fetches; the caption is its body."""
        fields = {"MediaUrl": media.link()}
        if caption:
            fields["Body"] = caption
        return self._create(target, fields)

    def _create(self, target: Target, fields: dict[str, str]) -> str:
        sender = target.context.get("from_number") or self._from
        if not sender:
            raise PermanentError("twilio: no number to send from (TWILIO_FROM_NUMBER)")
        answer = self._account.call("POST", "/Messages.json", {"To": target.chat_id, "From": sender, **fields})
        if 200 <= answer.status < 300:
            sid = answer.json_object().get("sid")
            if isinstance(sid, str) and sid:
                return sid
            raise OutcomeUnknown("twilio answered success without a message sid; the message may have been sent")
        raise self._account.failure(answer)


def _account(context: AdapterContext) -> _Account | None:
    token = context.secret("TWILIO_AUTH_TOKEN")
    account_sid = str(context.option("account_sid") or "")
    return _Account(context.platform.api_base_url, account_sid, token) if token and account_sid else None


def _basic_auth(context: AdapterContext) -> Mapping[str, str] | None:
    account = _account(context)
    return account.auth if account is not None else None


# The media URL, on the API's host only (the account's credentials go nowhere else), with basic
# auth; Twilio redirects to the file's storage, which is fetched without it.
MEDIA = _media.MediaSource(
    "sms", "url", _basic_auth, missing="no account SID and auth token, or no media URL to fetch the file with"
)


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    return _media.fetch_from(MEDIA, context, media, limit)


def build_sender(context: AdapterContext) -> TwilioSender | None:
    account = _account(context)
    return TwilioSender(account, str(context.option("from_number") or "")) if account else None
