"""Signal, through the signal-cli forwarder (`relays/signal-cli/`, docs/platforms/signal.md).

Signal has no webhooks and no bot API: signal-cli holds the account's keys and connection, where
the operator runs it. The forwarder beside it posts every `receive` notification, as signal-cli
wrote it, to `<WebhookUrl>/signal`, signed the Standard Webhooks way with `SIGNAL_RELAY_SECRET`
(PLATFORMS §13: a timestamp within 5 minutes, so an old request cannot be replayed). Three
requests, one secret:

- `POST /webhooks/signal`: one notification: a JSON-RPC `receive` notification, its manual-mode
  form (`params: {subscription, result}`) or a signal-cli-rest-api `/v1/receive` item
  (`{envelope, account}`), plus `uploads`: {signal-cli attachment id: upload id} for the files the
  forwarder uploaded first. Normalized here, written to the inbox like any platform's message.
- `POST /webhooks/signal/uploads` and `POST /webhooks/signal/outbox`: the forwarder's calls on its
  mailbox (pre-signed upload URLs for a message's files; its reports on sent letters and the next
  ones), answered by `services/mailbox.py` (`platforms/mailbox.py` says why replies wait there).

The forwarder's signature authenticates the forwarder, not the sender: it passes on whatever
anyone on Signal sent the account. So a Signal message is not "delivered by an authenticated
relay" (BEHAVIOUR §4 layer 1, which would allow everyone): each sender is authorized like on any
platform (allowlists of E.164 numbers or UUIDs, groups, pairing).

Ids: a DM's chat is the sender's number (their UUID when signal-cli does not know the number), a
group's chat its group id (base64); the sender is the number, with the UUID as `user_id_alt` (a
group session per user keys on it: it survives a number change). A message's id is its timestamp
(signal-cli's, in milliseconds: what quotes, reactions and edits refer to). Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from hermes_gateway.domain.media import Attachment, attachment, kind_of_mime
from hermes_gateway.domain.source import InboundMessage, SessionSource, user_handle
from hermes_gateway.errors import BadRequest, PermanentError, Unauthorized
from hermes_gateway.platforms import standard_webhook
from hermes_gateway.platforms.base import AdapterContext, Target, is_int
from hermes_gateway.platforms.mailbox import mailbox_name, upload_key
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import (
    Handshake,
    HttpRequest,
    HttpResponse,
    Ignored,
    MailboxCall,
    Parsed,
    epoch_seconds,
    json_payload,
    outlived_deduplication,
)

if TYPE_CHECKING:
    from hermes_gateway.platforms.media import Fetched

SECRET = "SIGNAL_RELAY_SECRET"  # noqa: S105 - the secret's name
TEXT_LIMIT = 2000  # Signal's apps show longer text as a file: the gateway splits instead
MAX_ATTACHMENTS = 32
QUOTE_TEXT_CHARS = 2000
# An E.164 number as signal-cli writes it, a Signal service id (ACI) and a group id (base64 of
# 32 bytes, 16 for the old groups): nothing else names a Signal chat or sender here.
NUMBER = re.compile(r"\+[1-9][0-9]{5,14}")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
GROUP_ID = re.compile(r"[A-Za-z0-9+/]{20,88}={0,2}")
_ATTACHMENT_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
MENTION = "\ufffc"  # where signal-cli's text holds a mention (one character at the mention's start)
# The mailbox calls under /webhooks/signal/<name>
MAILBOX_CALLS = ("uploads", "outbox")
NOT_FOUND = HttpResponse(404, {"ok": False, "error": "unknown signal endpoint"})


class SignalInbound:
    def __init__(self, context: AdapterContext) -> None:
        self._context = context
        self._account = str(context.option("account") or "")

    def verify(self, request: HttpRequest) -> None:
        secret = self._context.secret(SECRET)
        if not secret:
            raise Unauthorized("signal relay secret is not configured (SIGNAL_RELAY_SECRET); refusing every request")
        standard_webhook.verify(secret, request.headers, request.body, self._context.clock())

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        call = _subpath(request.path)
        payload = json_payload(request)
        if not isinstance(payload, dict):
            raise BadRequest("signal body must be a JSON object")
        if call:
            return MailboxCall(call, payload) if call in MAILBOX_CALLS else Handshake(NOT_FOUND)
        params = receive_params(payload)
        account = params.get("account")
        if account is not None and not isinstance(account, str):
            raise BadRequest("signal account must be a string")
        if self._account and account and account != self._account:
            raise BadRequest("the notification is for another Signal account than SIGNAL_ACCOUNT")
        if params.get("exception") is not None:
            return Ignored("undecryptable")  # signal-cli could not read the envelope: nothing to answer
        envelope = params.get("envelope")
        if not isinstance(envelope, dict):
            raise BadRequest("signal notification has no envelope object")
        uploads = _uploads(payload.get("uploads"))
        return normalize(envelope, account or self._account, uploads, received_at)


def _subpath(path: str) -> str:
    """The mailbox call a path names (`/webhooks/signal/outbox`: "outbox"), "" for the message route."""
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts[:-1]):
        if part == "webhooks" and parts[i + 1] == "signal":
            return "/".join(parts[i + 2 :])
    return ""


def receive_params(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    """The `{envelope, account}` object of a notification, in any of the forms signal-cli and
    signal-cli-rest-api hand it over."""
    if "jsonrpc" in payload or "method" in payload:
        if payload.get("method") != "receive":
            raise BadRequest("signal JSON-RPC message is not a receive notification")
        params = payload.get("params")
        if isinstance(params, dict) and "subscription" in params:  # --receive-mode=manual
            params = params.get("result")
        if not isinstance(params, dict):
            raise BadRequest("signal receive notification has no params object")
        return params
    return payload


def _uploads(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_ATTACHMENTS:
        raise BadRequest(f"signal uploads must be an object of at most {MAX_ATTACHMENTS} entries")
    for key, value in raw.items():
        if not _ATTACHMENT_ID.fullmatch(key) or not isinstance(value, str) or not _UPLOAD_ID.fullmatch(value):
            raise BadRequest("signal uploads map attachment ids to the upload ids /webhooks/signal/uploads gave")
    return dict(raw)


def normalize(envelope: Mapping[str, Any], account: str, uploads: Mapping[str, str], received_at: float) -> Parsed:
    """One envelope as a message, or the reason it is not one. Raises BadRequest when malformed."""
    sender, uuid, name = _sender(envelope)
    if sender == account or (uuid and uuid == account):
        return Ignored("own_message")  # the account's own (a sync of what its phone sent)
    kind = _content(envelope)
    if kind != "dataMessage":
        return Ignored(_IGNORED.get(kind, kind))
    data = envelope["dataMessage"]
    if not isinstance(data, dict):
        raise BadRequest("signal dataMessage is not an object")
    timestamp = data.get("timestamp", envelope.get("timestamp"))
    if not is_int(timestamp) or not 0 < timestamp < 10**14:
        raise BadRequest("signal message timestamp is not a millisecond time")
    ignored = _not_a_message(data)
    if ignored:
        return Ignored(ignored)
    group = _group(data.get("groupInfo"))
    text = _text(data, account)
    media = _attachments(data.get("attachments"), uploads)
    if not text.strip() and not media:
        return Ignored("no_text")
    if outlived_deduplication("signal", epoch_seconds(timestamp, milliseconds=True), received_at):
        return Ignored("outlived_deduplication")
    source = SessionSource(
        platform="signal",
        chat_id=group[0] if group else sender,
        chat_type="group" if group else "dm",
        user_id=sender,
        user_id_alt=uuid if uuid and uuid != sender else None,
        user_name=name,
        chat_name=group[1] if group else None,
        message_id=str(timestamp),
    )
    quote = data.get("quote")
    reply_to, quoted = _quote(quote)
    extra: dict[str, Any] = {"sent_at": timestamp / 1000}
    if quoted:
        extra["reply_to_text"] = quoted
    return InboundMessage(
        source=source,
        text=text,
        # the sender's own timestamps never repeat: with the sender they name one message
        event_id=f"signal:{uuid or sender}:{timestamp}",
        received_at=received_at,
        attachments=tuple(a.to_dict() for a in media),
        reply_to_message_id=reply_to,
        extra=extra,
        facts=("mentions_bot",) if _mentions(data, account) else (),
        # a group reply quotes its message by that message's author, whom the target does not name
        reply_context={"quote_author": sender} if group else {},
    )


# What an envelope that is no data message is: acknowledged, nothing to answer.
_IGNORED = {
    "syncMessage": "own_message",  # what the account's other devices sent or read
    "receiptMessage": "message_status",  # delivered, read, viewed
    "typingMessage": "typing",
    "editMessage": "edited",
    "callMessage": "unsupported_event",
    "storyMessage": "unsupported_event",
}
_CONTENTS = ("dataMessage", *_IGNORED)


def _content(envelope: Mapping[str, Any]) -> str:
    """Which content the envelope carries (signal-cli writes exactly one of them, not null)."""
    found = [name for name in _CONTENTS if envelope.get(name) is not None]
    if len(found) > 1:
        raise BadRequest("signal envelope carries more than one content")
    return found[0] if found else "unsupported_event"


def _not_a_message(data: Mapping[str, Any]) -> str:
    """Why a data message carries nothing to answer ("" when it does)."""
    if data.get("reaction") is not None:
        return "reaction"
    if data.get("remoteDelete") is not None:
        return "deleted"
    if data.get("isExpirationUpdate") is True:
        return "expiration_update"
    group = data.get("groupInfo")
    if isinstance(group, dict) and group.get("type") not in (None, "DELIVER"):
        return "group_update"  # a member joined, the title changed: no one wrote anything
    return ""


def _sender(envelope: Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """(the sender as a chat and user id: their number, else their UUID; the UUID; the profile name)."""
    number = envelope.get("sourceNumber")
    uuid = envelope.get("sourceUuid")
    legacy = envelope.get("source")  # signal-cli's older field: the number, else the UUID
    if number is not None and not (isinstance(number, str) and NUMBER.fullmatch(number)):
        raise BadRequest("signal sourceNumber is not an E.164 number")
    if uuid is not None and not (isinstance(uuid, str) and UUID.fullmatch(uuid)):
        raise BadRequest("signal sourceUuid is not a Signal UUID")
    if number is None and isinstance(legacy, str) and NUMBER.fullmatch(legacy):
        number = legacy
    if uuid is None and isinstance(legacy, str) and UUID.fullmatch(legacy):
        uuid = legacy
    sender = number or uuid
    if not sender:
        raise BadRequest("signal envelope names no sender (sourceNumber, sourceUuid)")
    name = envelope.get("sourceName")
    return sender, uuid.lower() if uuid else None, name[:200] if isinstance(name, str) and name else None


def _group(raw: Any) -> tuple[str, str | None] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadRequest("signal groupInfo is not an object")
    group_id = raw.get("groupId")
    if not isinstance(group_id, str) or not GROUP_ID.fullmatch(group_id):
        raise BadRequest("signal groupId is not a Signal group id")
    name = raw.get("groupName")
    return group_id, name[:200] if isinstance(name, str) and name else None


def _text(data: Mapping[str, Any], account: str) -> str:
    """The message's text, each mention's placeholder written out: the bot's own mention left out
    (it only addresses the bot), another member's as a handle (their number is not the model's)."""
    text = data.get("message")
    if text is None:
        return ""
    if not isinstance(text, str):
        raise BadRequest("signal message is not a string")
    mentions = data.get("mentions")
    if not isinstance(mentions, list) or MENTION not in text:
        return text
    # signal-cli counts in UTF-16 code units; placeholders are replaced right to left, by position
    units = text.encode("utf-16-le")
    for mention in sorted((m for m in mentions if isinstance(m, dict)), key=lambda m: -_int(m.get("start"))):
        start = _int(mention.get("start"))
        if not 0 <= start < len(units) // 2 or units[2 * start : 2 * start + 2] != MENTION.encode("utf-16-le"):
            continue
        who = mention.get("number") or mention.get("uuid")
        shown = "" if who == account else f"@user_{user_handle('signal', str(who))}" if who else "@someone"
        units = units[: 2 * start] + shown.encode("utf-16-le") + units[2 * start + 2 :]
    return units.decode("utf-16-le", "replace").strip()


def _mentions(data: Mapping[str, Any], account: str) -> bool:
    mentions = data.get("mentions")
    return (
        bool(account)
        and isinstance(mentions, list)
        and any(isinstance(m, dict) and m.get("number") == account for m in mentions)
    )


def _int(value: Any) -> int:
    return value if is_int(value) else -1


def _quote(raw: Any) -> tuple[str | None, str | None]:
    """The quoted message's id (its timestamp) and its text, when the message answers one."""
    if not isinstance(raw, dict) or not is_int(raw.get("id")):
        return None, None
    text = raw.get("text")
    return str(raw["id"]), text[:QUOTE_TEXT_CHARS] if isinstance(text, str) and text else None


def _attachments(raw: Any, uploads: Mapping[str, str]) -> tuple[Attachment, ...]:
    """Each file, with the upload the forwarder made of it (`upload_id`); a file it did not upload
    (too large, its download failed) is named to the model, never fetched."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_ATTACHMENTS:
        raise BadRequest(f"signal attachments must be a list of at most {MAX_ATTACHMENTS}")
    found = []
    for item in raw:
        if not isinstance(item, dict):
            raise BadRequest("a signal attachment is not an object")
        mime, name = item.get("contentType"), item.get("filename")
        mime, name = mime if isinstance(mime, str) else "", name if isinstance(name, str) else ""
        kind = kind_of_mime(mime)
        if kind == "audio" and not name:
            kind = "voice"  # Signal's apps record voice messages as unnamed audio (AAC)
        upload = uploads.get(item["id"]) if isinstance(item.get("id"), str) else None
        found.append(attachment(kind, mime=mime, size=item.get("size"), name=name, upload_id=upload))
    return tuple(found)


# --- replies: letters in the forwarder's mailbox --------------------------------------------------


class SignalMailbox:
    """Signal's sender: each chunk becomes a letter the forwarder collects (`platforms/mailbox.py`):
    a DM to the number or UUID, a group by its id, the reply quoting the user's message, a file by
    its media bucket key (the forwarder is handed a download URL and gives signal-cli the bytes)."""

    caption_limit = TEXT_LIMIT
    status = "queued"  # what the delivery reports: sent is the forwarder's to say

    def __init__(self, profile: str | None) -> None:
        self.mailbox = mailbox_name("signal", profile)

    def __repr__(self) -> str:
        return f"SignalMailbox({self.mailbox!r})"

    def send(self, target: Target, text: str) -> str:
        """Never called: the delivery service posts a mailbox's letters (`letter`) instead of
        sending. A caller that does not know mailboxes is refused rather than told it sent."""
        raise PermanentError("Signal is sent by its forwarder: post a letter to its mailbox")

    def letter(self, target: Target, text: str, media: MediaFile | None) -> dict[str, Any]:
        letter: dict[str, Any] = {**recipient(target.chat_id), "text": text}
        if media is not None:
            letter["attachments"] = [
                {"key": media.key, "name": media.name, "mime": media.mime, "kind": media.kind, "size": media.size}
            ]
        author = target.context.get("quote_author") or (target.chat_id if "recipient" in letter else "")
        if target.reply_to and target.reply_to.isdigit() and author:
            letter["quote"] = {"timestamp": int(target.reply_to), "author": author}
        return letter


def recipient(chat_id: str) -> dict[str, str]:
    """Whom signal-cli sends to: a number or UUID (a DM), or a group id. The shapes never overlap."""
    if NUMBER.fullmatch(chat_id) or UUID.fullmatch(chat_id):
        return {"recipient": chat_id}
    if GROUP_ID.fullmatch(chat_id):
        return {"group_id": chat_id}
    raise PermanentError("a Signal chat is a number, a UUID or a group id")


def build_sender(context: AdapterContext) -> SignalMailbox:
    return SignalMailbox(context.settings.served_profile)


def fetch_media(context: AdapterContext, media: Attachment, limit: int) -> Fetched:
    """A file of a message, where the forwarder uploaded it before posting the message."""
    from hermes_gateway import wiring
    from hermes_gateway.platforms.media import MediaUnavailable, stored_upload

    upload_id = media.ref.get("upload_id", "")
    if not _UPLOAD_ID.fullmatch(upload_id):
        raise MediaUnavailable("the forwarder did not upload this file (too large, or not downloaded by signal-cli)")
    key = upload_key("signal", context.settings.served_profile, upload_id)
    return stored_upload(wiring.media_store(), key, limit)
