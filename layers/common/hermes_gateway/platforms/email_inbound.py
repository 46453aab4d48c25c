"""E-mail as Amazon SES receives it (PLATFORMS §16): the receipt's verdicts, then the stored
message read with the standard library's `email` package into one `InboundMessage` (BEHAVIOUR §1).

Standard library only. What it decides:
- Trust: a receipt whose spam, virus, SPF, DKIM or DMARC verdict is FAIL is refused before the
  message is read, and so is one whose virus scan could not run. Because access is granted by
  address, the sender's domain must also be authenticated: DMARC passed, or SPF passed for an
  envelope sender at the From domain. A message that fails is refused with the reason.
- Loops: nothing auto-generated is answered (Auto-Submitted, Precedence bulk/list/junk, a mailing
  list, a delivery report, a null envelope sender, mailer-daemon and no-reply senders, our own
  address): a loop between two robots costs money on both sides.
- The conversation is the thread: its root is the first `References` id (else `In-Reply-To`, else
  the message's own `Message-ID`). The session is per sender and thread (a DM whose chat is the
  sender's address and whose thread is a hash of the root), so a stranger who copies someone's
  `References` gets a session of their own, never theirs.
- Text: `text/plain` (else the text of the HTML part) without the quoted earlier mail and the
  signature; a short "[replying to: ...]" stands for a quote of someone else's words.
- Attachments: references to their bytes in the stored message (the object and the byte range
  of each part's encoded body), fetched by `platforms.email.fetch_media` when a turn needs them.
"""

from __future__ import annotations

import email
import email.errors
import email.policy
import hashlib
import itertools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage, Message
from email.utils import getaddresses
from html.parser import HTMLParser
from typing import Any

from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource

PLATFORM = "email"
VERDICTS = ("spam", "virus", "spf", "dkim", "dmarc")
TEXT_CHARS = 16_000  # a message's text beyond this is cut, with a note (an inbox item stays small)
QUOTE_CHARS = 200  # a quoted earlier message is shown to the model this short
MAX_ATTACHMENTS = 10
_ID_CHARS = 250  # a Message-ID longer than this is not an id we keep
_REFERENCES_KEPT = 10  # the root and the newest: RFC 5322 allows trimming the middle

# SES message ids (the stored object's name): letters, digits and '-' in every sample.
_SES_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_MESSAGE_ID = re.compile(rf"<[^<>\s]{{1,{_ID_CHARS - 2}}}>")
_ADDRESS = re.compile(r"[a-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63})+")
_NO_REPLY = re.compile(r"(?:no|do[-_.]?not)[-_.]?reply|mailer[-_.]daemon|postmaster|bounces?(?:[-+.].*)?")
_PRECEDENCE_BULK = ("bulk", "list", "junk", "auto_reply")
_REPLY_PREFIX = re.compile(r"^\s*(?:re|aw|sv|antw)\s*:", re.IGNORECASE)


class NotForUs(Exception):
    """An event that is not an SES receipt of our rule for our address: nothing of it is touched."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Receipt:
    """What SES says about a message it received (its Lambda action's event: `mail` and `receipt`)."""

    ses_id: str  # `mail.messageId`: the stored object's name under the prefix
    envelope_from: str  # `mail.source`, the SMTP MAIL FROM ("" for a bounce's null sender)
    verdicts: Mapping[str, str]  # spam, virus, spf, dkim, dmarc -> PASS | FAIL | GRAY | PROCESSING_FAILED

    def refusal(self) -> str | None:
        """Why SES's verdicts refuse the message, or None."""
        for name in VERDICTS:
            if self.verdicts.get(name) == "FAIL":
                return f"{name}_failed"
        if self.verdicts.get("virus") == "PROCESSING_FAILED":
            return "virus_scan_failed"  # its attachments were not scanned: none reach the model
        return None


def read_receipt(record: Any, *, function_arn: str, address: str) -> Receipt:
    """The receipt of one SES event record, checked to be for this function and address: SES's
    event source, a Lambda action naming this function, our address among the recipients.
    Raises NotForUs otherwise."""
    if not isinstance(record, dict) or record.get("eventSource") != "aws:ses":
        raise NotForUs("not_an_ses_event")
    ses = record.get("ses")
    mail = ses.get("mail") if isinstance(ses, dict) else None
    receipt = ses.get("receipt") if isinstance(ses, dict) else None
    if not isinstance(mail, dict) or not isinstance(receipt, dict):
        raise NotForUs("not_an_ses_event")
    found_action = receipt.get("action")
    action: dict[str, Any] = found_action if isinstance(found_action, dict) else {}
    if action.get("type") != "Lambda" or not _same_function(str(action.get("functionArn") or ""), function_arn):
        raise NotForUs("not_our_rule")
    recipients = receipt.get("recipients")
    if not isinstance(recipients, list) or address.lower() not in {str(r).lower() for r in recipients}:
        raise NotForUs("not_our_address")
    ses_id = mail.get("messageId")
    if not isinstance(ses_id, str) or not _SES_ID.fullmatch(ses_id) or ses_id == "AMAZON_SES_SETUP_NOTIFICATION":
        raise NotForUs("no_usable_message_id")
    verdicts = {}
    for name in VERDICTS:
        found = receipt.get(f"{name}Verdict")
        status = found.get("status") if isinstance(found, dict) else None
        verdicts[name] = status if isinstance(status, str) else "GRAY"
    source = mail.get("source")
    return Receipt(ses_id, source if isinstance(source, str) else "", verdicts)


def _same_function(named: str, ours: str) -> bool:
    """The same function, whatever version or alias either ARN is qualified with."""

    def base(arn: str) -> str:
        parts = arn.split(":")
        return ":".join(parts[:7]) if len(parts) >= 7 and parts[5] == "function" else arn

    return bool(named) and base(named) == base(ours)


# --- the stored message ------------------------------------------------------------------------


@dataclass(frozen=True)
class Skipped:
    """A message the gateway does not answer: auto-generated, its sender unusable or not
    authenticated, malformed. `trust`: refused for a reason of trust (logged as a warning)."""

    reason: str
    trust: bool = False


def parse_message(
    raw: bytes,
    *,
    address: str,
    received_at: float,
    object_key: str,
    receipt: Receipt | None = None,
) -> InboundMessage | Skipped:
    """The message SES stored at `object_key`, normalized; `receipt` None: no SES verdicts to
    check (hermes-gateway explain)."""
    try:
        message = email.message_from_bytes(raw, policy=email.policy.default)
        return _normalized(message, raw, address, received_at, object_key, receipt)
    except (ValueError, TypeError, IndexError, LookupError, AttributeError, email.errors.MessageError):
        # The email package is lenient; what it still cannot read is refused, never half-read.
        return Skipped("malformed_message", trust=True)


def _normalized(
    message: EmailMessage, raw: bytes, address: str, received_at: float, object_key: str, receipt: Receipt | None
) -> InboundMessage | Skipped:
    sender = _sender(message)
    if isinstance(sender, Skipped):
        return sender
    name, sender_address = sender
    automatic = _automatic(message, sender_address, address.lower(), receipt)
    if automatic is not None:
        return Skipped(automatic)
    if receipt is not None and not _authenticated(sender_address, receipt):
        return Skipped("sender_not_authenticated", trust=True)
    own_id = _first_id(message.get_all("Message-ID") or ())
    references = _ids(message.get_all("References") or ())
    in_reply_to = _ids(message.get_all("In-Reply-To") or ())
    root = (references or in_reply_to or [own_id or f"<{receipt.ses_id if receipt else object_key}@ses>"])[0]
    subject = _subject(message)
    text = _text_of(message, address.lower())
    if not (references or in_reply_to) and subject:
        text = _joined(f"[subject: {subject}]", text)
    found = _attachments(message, raw, object_key)
    if not text.strip() and not found:
        return Skipped("no_text")
    source = SessionSource(
        platform=PLATFORM,
        chat_id=sender_address,
        chat_type="dm",
        user_id=sender_address,
        user_name=name or None,
        thread_id=thread_id_of(root),
        chat_name=subject or None,
        message_id=own_id,
    )
    return InboundMessage(
        source=source,
        text=_cut(text),
        event_id=event_id_of(sender_address, own_id, receipt.ses_id if receipt else object_key),
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in found),
        reply_to_message_id=in_reply_to[0] if in_reply_to else None,
        reply_context=reply_context(subject, own_id, references or in_reply_to),
    )


def thread_id_of(root: str) -> str:
    """A thread's id in session keys: a hash of its root's Message-ID (ids can be long and hold
    anything a session key must not, `..` or `/`)."""
    return "t" + hashlib.sha256(root.encode("utf-8", "surrogatepass")).hexdigest()[:20]


def event_id_of(sender: str, message_id: str | None, ses_id: str) -> str:
    """De-duplicates by the sender's Message-ID (a mail server that resends after a lost answer
    makes a second SES message of the same mail); without one, by SES's id."""
    if message_id:
        digest = hashlib.sha256(f"{sender}\0{message_id}".encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{PLATFORM}:{digest}"
    return f"{PLATFORM}:{ses_id}"


def reply_context(subject: str, message_id: str | None, thread: Sequence[str]) -> dict[str, str]:
    """What the answer needs to join the thread in the user's mail client: `Re:` the subject,
    `In-Reply-To` this message and `References` its thread (the root and the newest ids)."""
    context = {"subject": subject if _REPLY_PREFIX.match(subject) else f"Re: {subject or '(no subject)'}"}
    ids = [*thread, *([message_id] if message_id else [])]
    if len(ids) > _REFERENCES_KEPT:
        ids = [ids[0], *ids[-(_REFERENCES_KEPT - 1) :]]
    if message_id:
        context["in_reply_to"] = message_id
    if ids:
        context["references"] = " ".join(dict.fromkeys(ids))
    return context


def _sender(message: EmailMessage) -> tuple[str, str] | Skipped:
    """The one From address, lower-cased, and its display name."""
    found = getaddresses([str(value) for value in message.get_all("From") or ()])
    usable = [(name, addr) for name, addr in found if addr]
    if len(usable) != 1:
        return Skipped("no_single_sender" if usable else "no_sender", trust=True)
    name, addr = usable[0]
    addr = addr.strip().lower()
    if not _ADDRESS.fullmatch(addr) or ".." in addr:
        return Skipped("sender_address_unusable", trust=True)
    return " ".join(name.split())[:100], addr


def _automatic(message: EmailMessage, sender: str, ours: str, receipt: Receipt | None) -> str | None:
    """Why the message was written by a machine, or None (RFC 3834 and common practice)."""
    if sender == ours:
        return "own_message"
    auto = str(message.get("Auto-Submitted", "")).strip().lower()
    if auto and auto != "no":
        return "auto_submitted"
    if str(message.get("Precedence", "")).strip().lower() in _PRECEDENCE_BULK:
        return "bulk_or_list"
    if message.get("List-Id") is not None or message.get("List-Unsubscribe") is not None:
        return "mailing_list"
    if message.get_content_type() == "multipart/report":
        return "delivery_report"
    if receipt is not None and receipt.envelope_from.strip("<> ") == "":
        return "null_sender"  # bounces and other reports are sent from <>
    if _NO_REPLY.fullmatch(sender.partition("@")[0]):
        return "no_reply_sender"
    return None


def _authenticated(sender: str, receipt: Receipt) -> bool:
    """Whether the From domain is the one SES authenticated: DMARC passed, or SPF passed for an
    envelope sender at that domain (BATV `prvs=…=user@domain` and a subdomain count)."""
    if receipt.verdicts.get("dmarc") == "PASS":
        return True
    if receipt.verdicts.get("spf") != "PASS":
        return False
    envelope = receipt.envelope_from.strip("<> ").lower().rpartition("@")[2]
    domain = sender.rpartition("@")[2]
    return bool(envelope) and (envelope == domain or envelope.endswith("." + domain) or domain.endswith("." + envelope))


def _first_id(values: Sequence[Any]) -> str | None:
    ids = _ids(values)
    return ids[0] if ids else None


def _ids(values: Sequence[Any]) -> list[str]:
    """The msg-ids of header values, in order, each once."""
    found: dict[str, None] = {}
    for value in values:
        for match in _MESSAGE_ID.findall(str(value)):
            found[match] = None
    return list(found)


def _subject(message: EmailMessage) -> str:
    return " ".join(str(message.get("Subject", "")).split())[:250]


def _joined(*texts: str) -> str:
    return "\n\n".join(t for t in texts if t.strip())


def _cut(text: str) -> str:
    if len(text) <= TEXT_CHARS:
        return text
    return text[:TEXT_CHARS] + f"\n[message cut: {len(text) - TEXT_CHARS} characters more]"


# --- text -----------------------------------------------------------------------------------------


def _text_of(message: EmailMessage, ours: str) -> str:
    """The new text of the message: plain text (else the HTML's text), without the quoted earlier
    mail and the signature; a short "[replying to: ...]" for a quote of someone else's words."""
    body = message.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    content = _content(body)
    if body.get_content_type() == "text/html":
        content = html_text(content)
    new, quoted, attribution = split_quote(content)
    if quoted and ours not in (attribution + quoted[:300]).lower():
        shown = " ".join(quoted.split())
        shown = shown if len(shown) <= QUOTE_CHARS else shown[: QUOTE_CHARS - 1] + "\u2026"
        return _joined(f"[replying to: {shown}]", new)
    return new


def _content(part: Message) -> str:
    try:
        return str(part.get_content())  # type: ignore[attr-defined]
    except (LookupError, ValueError):  # an unknown or broken charset: the bytes as UTF-8
        payload = part.get_payload(decode=True)
        return payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""


# Where the quoted earlier message begins: an attribution ("On <date>, <name> wrote:", possibly
# folded over two lines; a few languages), or Outlook's separator block.
_ATTRIBUTION = re.compile(
    r"^(?:On\b.{0,300}\bwrote|Am\b.{0,300}\bschrieb|Le\b.{0,300}\ba écrit|El\b.{0,300}\bescribió"
    r"|Il\b.{0,300}\bha scritto|Op\b.{0,300}\bschreef)\s*:\s*$",
    re.IGNORECASE | re.DOTALL,
)
_SEPARATOR = re.compile(r"^(?:-{2,}\s*Original Message\s*-{2,}|_{10,})\s*$", re.IGNORECASE)
_SIGNATURE = "-- "


def split_quote(text: str) -> tuple[str, str, str]:
    """(new text, quoted text, the attribution line) of a plain-text mail: lines starting with '>'
    are quoted, and so is everything after an Outlook separator; an attribution ("On ... wrote:"),
    quoted or not, introduces the quote; what remains (top-posted above the quote, or bottom-posted
    and interleaved below it) is new. A signature (after "-- ") is neither."""
    lines = text.replace("\r\n", "\n").split("\n")
    new: list[str] = []
    quoted: list[str] = []
    attribution = ""
    quoting_rest = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if not quoting_rest and line.rstrip() in ("--", _SIGNATURE.rstrip()):
            break
        unquoted = line.lstrip().lstrip(">").strip() if line.lstrip().startswith(">") else line.strip()
        following = lines[i + 1].lstrip().lstrip(">").strip() if i + 1 < len(lines) else ""
        if not quoting_rest and _SEPARATOR.match(line.strip()):
            quoting_rest = True
        elif not attribution and _ATTRIBUTION.match(unquoted):
            attribution = unquoted
        elif not attribution and following and _ATTRIBUTION.match(f"{unquoted} {following}"):
            attribution, i = f"{unquoted} {following}", i + 1
        elif quoting_rest or line.lstrip().startswith(">"):
            if not (quoting_rest and _QUOTED_HEADER.match(line)):
                quoted.append(unquoted)
        else:
            new.append(line)
        i += 1
    return "\n".join(new).strip(), "\n".join(q for q in quoted if q).strip(), attribution


_QUOTED_HEADER = re.compile(r"^\s*(?:From|Sent|To|Cc|Subject|Date)\s*:", re.IGNORECASE)


class _HtmlText(HTMLParser):
    """The readable text of an HTML mail: blocks on their own lines, a blockquote's lines quoted."""

    _BLOCKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "hr"})
    _HIDDEN = frozenset({"script", "style", "head", "title", "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = [""]
        self.depth = 0  # blockquotes open
        self.hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._HIDDEN:
            self.hidden += 1
        elif tag == "blockquote":
            self.depth += 1
            self._break()
        elif tag in self._BLOCKS:
            self._break()
            if tag == "li":
                self.lines[-1] = "> " * self.depth + "- "

    def handle_endtag(self, tag: str) -> None:
        if tag in self._HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag == "blockquote":
            self.depth = max(0, self.depth - 1)
            self._break()
        elif tag in self._BLOCKS:
            self._break()

    def handle_data(self, data: str) -> None:
        if self.hidden:
            return
        text = re.sub(r"\s+", " ", data)
        if not text.strip() and not self.lines[-1].strip(" >-"):
            return
        if not self.lines[-1]:
            self.lines[-1] = "> " * self.depth
        self.lines[-1] += text

    def _break(self) -> None:
        if self.lines[-1].strip(" >-"):
            self.lines.append("")
        else:
            self.lines[-1] = ""

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in self.lines)
        return "\n".join(line for line in lines if line.strip(" >-")).strip()


def html_text(html: str) -> str:
    """The text of an HTML body (a blockquote's lines start with '>', as a plain-text quote)."""
    parser = _HtmlText()
    parser.feed(html)
    parser.close()
    return parser.text()


# --- attachments --------------------------------------------------------------------------------


def _attachments(message: EmailMessage, raw: bytes, object_key: str) -> list[Attachment]:
    """Every part that is a file (not the text the message was read from), at most MAX_ATTACHMENTS,
    each a reference to its encoded bytes in the stored message."""
    bodies = {id(part) for part in _body_parts(message)}
    ranges = part_ranges(raw, message)
    found = []
    for part in _leaves(message):
        if id(part) in bodies or not _is_file(part):
            continue
        where = ranges.get(id(part))
        cte = str(part.get("Content-Transfer-Encoding", "7bit")).strip().lower()
        if part.get_content_type() == "message/rfc822":  # a forwarded mail: its bytes as they are
            if where is None:
                continue
            data, cte, located = raw[where[0] : where[1]], "8bit", True
        else:
            payload = part.get_payload(decode=True)
            if not isinstance(payload, bytes):
                continue
            data = payload
            located = where is not None and decode_part(raw[where[0] : where[1]], cte) == data
        mime = part.get_content_type()
        ref = {"object": object_key, "encoding": cte}
        if located and where is not None:
            ref["range"] = f"{where[0]}-{where[1]}"
        found.append(attachment(kind_of_mime(mime), mime=mime, size=len(data), name=_file_name(part), **ref))
        if len(found) == MAX_ATTACHMENTS:
            break
    return found


def _body_parts(message: EmailMessage) -> list[Message]:
    """The parts the text is read from: the chosen body, and its alternatives."""
    found: list[Message] = []
    for kind in ("plain", "html"):
        body = message.get_body(preferencelist=(kind,))
        if body is not None:
            found.append(body)
    return found


def _leaves(part: Message) -> Iterator[Message]:
    """Every part that holds content, in order; a forwarded message (message/rfc822) is one."""
    children = part.get_payload()
    if part.get_content_maintype() == "multipart" and isinstance(children, list):
        for child in children:
            if isinstance(child, Message):
                yield from _leaves(child)
    else:
        yield part


def _is_file(part: Message) -> bool:
    disposition = (part.get_content_disposition() or "").lower()
    if disposition == "attachment" or part.get_filename():
        return True
    return part.get_content_maintype() not in ("text", "multipart")


def _file_name(part: Message) -> str:
    name = part.get_filename() or ""
    name = name.replace("\\", "/").rsplit("/", 1)[-1].strip()
    if not name and part.get_content_type() == "message/rfc822":
        name = "message.eml"
    return "".join(c for c in name if c.isprintable())[:200]


def decode_part(encoded: bytes, encoding: str) -> bytes:
    """A part's body as its Content-Transfer-Encoding says, decoded as the `email` package does
    (the fetcher decodes the byte range it reads the same way)."""
    holder = Message()
    holder["Content-Transfer-Encoding"] = encoding
    holder.set_payload(encoded.decode("ascii", "surrogateescape"))
    decoded = holder.get_payload(decode=True)
    return decoded if isinstance(decoded, bytes) else b""


_HEADER_END = re.compile(rb"\r?\n\r?\n")


def part_ranges(raw: bytes, message: Message) -> dict[int, tuple[int, int]]:
    """(start, end) in `raw` of each leaf part's encoded body, by the part's id: found by walking
    the multipart boundaries as the parser did; a part whose place cannot be found is left out
    (the caller checks every range against the parsed part before it trusts it)."""
    found: dict[int, tuple[int, int]] = {}
    header_end = _HEADER_END.search(raw)
    if header_end is not None:
        _locate(raw, message, header_end.end(), len(raw), found)
    return found


def _locate(raw: bytes, part: Message, start: int, end: int, found: dict[int, tuple[int, int]]) -> None:
    """Place `part`, whose body is raw[start:end]: a leaf's is its range; a multipart's children
    are between its boundary lines."""
    children = part.get_payload()
    if part.get_content_maintype() != "multipart" or not isinstance(children, list):
        found[id(part)] = (start, end)
        return
    boundary = part.get_boundary()
    if not boundary:
        return
    line = re.compile(rb"(?m)^--" + re.escape(boundary.encode("ascii", "surrogateescape")) + rb"(--)?[ \t]*\r?$")
    delimiters = list(line.finditer(raw, start, end))
    closing = next((i for i, d in enumerate(delimiters) if d.group(1)), len(delimiters) - 1)
    delimiters = delimiters[: closing + 1]
    if len(delimiters) - 1 != len(children):
        return
    for child, (opening, following) in zip(children, itertools.pairwise(delimiters), strict=True):
        child_start = opening.end() + (2 if raw[opening.end() : opening.end() + 2] == b"\r\n" else 1)
        child_end = following.start()
        child_end -= 2 if raw[child_end - 2 : child_end] == b"\r\n" else 1
        header_end = _HEADER_END.search(raw, child_start, child_end)
        if raw[child_start : child_start + 2] in (b"\r\n",) or raw[child_start : child_start + 1] == b"\n":
            body_start = child_start + (2 if raw[child_start : child_start + 2] == b"\r\n" else 1)
        elif header_end is not None:
            body_start = header_end.end()
        else:
            continue
        _locate(raw, child, body_start, max(body_start, child_end), found)
