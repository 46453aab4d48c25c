"""E-mail through Amazon SES (PLATFORMS §16, docs/platforms/email.md): the inbound adapter, the
sender and the attachments' fetcher.

No webhook: an SES receipt rule stores each message in the media bucket (`resources.MAIL`) and
invokes the ingress function with SES's receipt (`services.mail_ingress`); `email_inbound` reads
it. The answer is a reply in the same thread (`Re:` the subject, `In-Reply-To` and `References`),
sent with SES v2 `SendEmail` from the receiving address, its Markdown as a plain-text and a simple
HTML part (`email_render`), marked `Auto-Submitted` so that other robots do not answer it; each
sent message carries its outbox row in a message tag, so its bounce or complaint (the
configuration set's events, through EventBridge to the ingress function) marks that row failed.

Standard library only on the ingress path; boto3 (the SES client) is imported when a sender is built.
"""

from __future__ import annotations

import base64
import binascii
import email.policy
import re
from collections.abc import Mapping
from email.message import EmailMessage
from typing import TYPE_CHECKING, Any, Protocol

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import PermanentError, Unauthorized
from hermes_gateway.platforms.base import AdapterContext, Target
from hermes_gateway.platforms.email_inbound import (
    Receipt,
    Skipped,
    decode_part,
    parse_message,
    read_receipt,
)
from hermes_gateway.platforms.email_render import render
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.resources import MAIL
from hermes_gateway.services.ingress import HttpRequest, Ignored, Parsed

if TYPE_CHECKING:
    from hermes_gateway.domain.media import Attachment
    from hermes_gateway.platforms.media import Fetched

TEXT_LIMIT = 100_000  # one answer is one mail: split only past this (the catalogue's limit)
DEFAULT_SUBJECT = "A message from your assistant"  # a push starts a thread of its own
_ADDRESS = re.compile(r"[a-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63})+")
_MESSAGE_ID = re.compile(r"<[^<>\s]{1,248}>")
_TAG_VALUE = re.compile(r"[A-Za-z0-9_-]{1,256}")


def address_of(context: AdapterContext) -> str:
    return str(context.option("address") or "").lower()


def domain_of(options: Mapping[str, Any]) -> str:
    """The domain SES receives for: the setting, else the address's."""
    return str(options.get("domain") or str(options.get("address") or "").rpartition("@")[2]).lower()


class EmailInbound:
    """E-mail's inbound side. SES delivers a receipt, never a request: `receipt` and `message` read
    it (services.mail_ingress). `verify` refuses every webhook request; `parse` reads a raw message
    as a request body for `hermes-gateway explain`, which checks no verdict."""

    def __init__(self, context: AdapterContext) -> None:
        self.address = address_of(context)

    def verify(self, request: HttpRequest) -> None:
        raise Unauthorized("e-mail arrives through SES, never by webhook")

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        parsed = self.message(request.body, None, received_at, object_key=MAIL.prefix + "explain")
        return parsed if isinstance(parsed, InboundMessage) else Ignored(parsed.reason)

    def receipt(self, record: Any, function_arn: str) -> Receipt:
        """The SES receipt of one event record (email_inbound.NotForUs when it is not ours)."""
        return read_receipt(record, function_arn=function_arn, address=self.address)

    def message(
        self, raw: bytes, receipt: Receipt | None, received_at: float, *, object_key: str
    ) -> InboundMessage | Skipped:
        return parse_message(raw, address=self.address, received_at=received_at, object_key=object_key, receipt=receipt)


# --- sending ------------------------------------------------------------------------------------


class Mailer(Protocol):
    def send(self, *, sender: str, to: str, raw: bytes, tags: Mapping[str, str], configuration_set: str | None) -> str:
        """Send one raw MIME message; the provider's message id. Raises as `Sender.send` does."""
        ...


class EmailSender:
    """One answer, one mail: the whole text (up to TEXT_LIMIT) and, for a `MEDIA:` file, the file
    attached to the same mail."""

    caption_limit = TEXT_LIMIT

    def __init__(self, mailer: Mailer, address: str, configuration_set: str | None) -> None:
        self._mailer = mailer
        self._address = address
        self._configuration_set = configuration_set

    def __repr__(self) -> str:
        return f"EmailSender({self._mailer!r})"

    def send(self, target: Target, text: str) -> str:
        return self._send(target, text, None)

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
        return self._send(target, caption, media)

    def _send(self, target: Target, text: str, media: MediaFile | None) -> str:
        to = target.chat_id.strip().lower()
        if not _ADDRESS.fullmatch(to):
            raise PermanentError("email: the target is not an e-mail address")
        raw = compose(sender=self._address, to=to, text=text, context=target.context, media=media)
        tag = delivery_tag(target.delivery_id)
        return self._mailer.send(
            sender=self._address,
            to=to,
            raw=raw,
            tags={MAIL.delivery_tag: tag} if tag else {},
            configuration_set=self._configuration_set,
        )


def compose(*, sender: str, to: str, text: str, context: Mapping[str, str], media: MediaFile | None = None) -> bytes:
    """The raw MIME message of one answer: a reply in its thread (the context's subject,
    In-Reply-To and References; a push starts its own), text and HTML alternatives of the Markdown,
    the file attached. SES gives it its Message-ID and Date."""
    message = EmailMessage(policy=email.policy.SMTP)
    message["From"] = sender
    message["To"] = to
    message["Subject"] = _one_line(context.get("subject", "")) or DEFAULT_SUBJECT
    in_reply_to = context.get("in_reply_to", "")
    if _MESSAGE_ID.fullmatch(in_reply_to):
        message["In-Reply-To"] = in_reply_to
        references = _MESSAGE_ID.findall(context.get("references", "")) or [in_reply_to]
        message["References"] = " ".join(references)
    # RFC 3834: written by a program, so vacation notices and other robots do not answer it.
    message["Auto-Submitted"] = "auto-replied" if "In-Reply-To" in message else "auto-generated"
    message["X-Auto-Response-Suppress"] = "All"  # the same, for Exchange
    plain, html = render(text) if text.strip() else ("", "")
    # quoted-printable: any language, any line length, and still readable as it travels
    message.set_content(plain, cte="quoted-printable")
    if html:
        message.add_alternative(html, subtype="html", cte="quoted-printable")
    if media is not None:
        maintype, _, subtype = (media.mime or "application/octet-stream").partition("/")
        message.add_attachment(
            media.data, maintype=maintype or "application", subtype=subtype or "octet-stream", filename=media.name
        )
    return message.as_bytes()


def _one_line(text: str) -> str:
    """A header value: one line, no control characters (a subject comes from a stranger's mail)."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:250]


def delivery_tag(delivery_id: str | None) -> str | None:
    """The outbox row as an SES message tag's value (letters, digits, '-' and '_' only)."""
    if not delivery_id:
        return None
    value = base64.urlsafe_b64encode(delivery_id.encode("utf-8")).decode("ascii").rstrip("=")
    return value if _TAG_VALUE.fullmatch(value) else None


def delivery_of_tag(value: str) -> str | None:
    """The outbox row a message tag names, or None when it names none."""
    if not _TAG_VALUE.fullmatch(value):
        return None
    try:
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def build_sender(context: AdapterContext) -> EmailSender | None:
    address = address_of(context)
    if not address:
        return None
    from hermes_gateway.adapters.ses_mail import SesMailer

    # `platforms.email.api_base_url` points the SES client elsewhere (tests); empty: SES itself.
    mailer = SesMailer(endpoint_url=context.platform.api_base_url or None)
    return EmailSender(mailer, address, MAIL.name(context.settings.stage))


# --- attachments ----------------------------------------------------------------------------------


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """An attachment's encoded bytes, one ranged read of the stored message (its place found at
    ingress), decoded as the message's part says; at most `limit` bytes decoded."""
    from hermes_gateway.platforms.media import Fetched, MediaUnavailable, too_large

    key, where = media.ref.get("object", ""), media.ref.get("range", "")
    span = re.fullmatch(r"(\d{1,10})-(\d{1,10})", where)
    if context.raw_mail is None or not key.startswith(MAIL.prefix) or ".." in key or span is None:
        raise MediaUnavailable("email: the attachment's place in the stored message is not known")
    over = too_large(media, limit)
    if over is not None:
        raise over
    start, end = int(span.group(1)), int(span.group(2))
    if not 0 <= start <= end <= MAIL.max_message_bytes:
        raise MediaUnavailable("email: the attachment's place in the stored message is not usable")
    data = context.raw_mail.read_range(key, start, end)
    if data is None:
        raise MediaUnavailable("email: the stored message has expired")
    decoded = decode_part(data, media.ref.get("encoding", "7bit"))
    if media.size is not None and len(decoded) != media.size:
        raise MediaUnavailable("email: the stored message does not hold the attachment it held")
    return Fetched(decoded, media.mime)
