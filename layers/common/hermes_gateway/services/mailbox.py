"""A forwarder's calls on its mailbox (platforms/mailbox.py says why replies wait there).

The forwarder calls over its platform's signed endpoint (the ingress verified the signature and
the route named the bot's profile):

- `outbox`: `{"reports": [...], "limit"?: 1-20}`. Each report settles a letter it collected
  before: `{"id", "status": "sent", "timestamp"}` marks the row sent with the platform's id (for
  Signal, signal-cli's timestamp of the message), `{"id", "status": "failed" | "gone" |
  "unknown", "error"}` records why not. The answer: `{"settled": [ids], "ignored": [ids],
  "letters": [...]}`, the oldest letters still waiting, each `{"id", <the letter>}` with a file's
  media bucket key replaced by a download URL (`attachments: [{"url", "name", "mime", "kind",
  "size"}]`). A report the gateway answered is done (settled, a repeat, or ignored: not this
  mailbox's, no longer waiting); one it never answered is sent again.
- `uploads`: `{"files": [{"id", "size", "content_type"}]}`, before the forwarder posts a message
  with files: `{"uploads": [{"id", "upload_id", "url", "headers"}], "refused": [{"id", "reason"}]}`.
  The forwarder PUTs each file to its URL with those headers (S3 refuses another length or type)
  and names the upload ids in the message; a file over `media.max_bytes` is refused here.

A letter waiting longer than STALE_SECONDS makes the every-minute tick log an ERROR line
(`check_mailboxes`): its forwarder stopped collecting. A letter that failed for good (`failed`:
signal-cli refused it) is logged at ERROR too; the error alarm watches both. It is not on the dead
letters, since no job of the delivery function holds it any more (`outbox list --status failed`
shows it). `gone` (the number is not on Signal) is recorded as on any platform; `unknown` (the
forwarder stopped mid-send) is never sent again.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.outbox import QueuedLetter
from hermes_gateway.errors import BadRequest
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.platforms.mailbox import MAILBOX_PLATFORMS, mailbox_name, upload_key
from hermes_gateway.services.ingress import HttpResponse, MailboxCall
from hermes_gateway.settings import Settings

LINK_SECONDS = 900  # a download or upload URL is used at once; the function's credentials sign it
MAX_REPORTS = 100
DEFAULT_LETTERS, MAX_LETTERS = 10, 20
MAX_FILES = 32
_ID_CHARS = 256
_OUTCOMES = ("sent", "failed", "gone", "unknown")
_FILE_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_MIME = re.compile(r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,63}")
_TIMESTAMP_DIGITS = 15
# A forwarder collects at least every 30 s (POLL_SECONDS): a letter waiting this long means it stopped.
STALE_SECONDS = 15 * 60


class Letters(Protocol):
    """The outbox's side of a mailbox (adapters.dynamo_outbox.DynamoOutbox)."""

    def collect(self, mailbox: str, limit: int) -> list[QueuedLetter]: ...

    def oldest(self, mailbox: str) -> float | None:
        """When the oldest letter still waiting was posted (None: the mailbox is empty)."""
        ...

    def settle(
        self,
        delivery_id: str,
        mailbox: str,
        status: str,
        now: float,
        *,
        platform_message_id: str | None = None,
        error: str | None = None,
    ) -> str: ...


class FileLinks(Protocol):
    """Pre-signed URLs of the media bucket (adapters.s3_media.S3MediaStore)."""

    def url(self, key: str, expires_seconds: int) -> str: ...

    def upload_url(self, key: str, mime: str, size: int, expires_seconds: int) -> str: ...


@dataclass(frozen=True)
class MailboxDeps:
    letters: Letters
    files: FileLinks
    max_bytes: int  # media.max_bytes: a larger file is not uploaded
    events: LifecycleEvents | None = None


def serve(platform: str, profile: str | None, call: MailboxCall, deps: MailboxDeps, now: float) -> HttpResponse:
    """Answer one call; 400 with the reason when it is malformed (nothing is changed then)."""
    try:
        if call.kind == "outbox":
            return _outbox(platform, mailbox_name(platform, profile), call.body, deps, now)
        if call.kind == "uploads":
            return _uploads(platform, profile, call.body, deps)
    except BadRequest as exc:
        logger.warning("mailbox call refused", extra={"platform": platform, "call": call.kind, "reason": str(exc)})
        return HttpResponse(400, {"ok": False, "error": str(exc)})
    return HttpResponse(404, {"ok": False, "error": f"unknown mailbox call {call.kind!r}"})


# --- outbox: reports in, letters out -----------------------------------------------------------


@dataclass(frozen=True)
class _Report:
    delivery_id: str
    status: str
    platform_message_id: str | None
    error: str | None


def _outbox(platform: str, mailbox: str, body: dict[str, Any], deps: MailboxDeps, now: float) -> HttpResponse:
    reports = _reports(body.get("reports"))
    limit = body.get("limit", DEFAULT_LETTERS)
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LETTERS:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_LETTERS}")
    settled, ignored = [], []
    for report in reports:
        outcome = deps.letters.settle(
            report.delivery_id,
            mailbox,
            report.status,
            now,
            platform_message_id=report.platform_message_id,
            error=report.error,
        )
        if outcome == "settled":
            _settled(platform, report, deps.events)
        if outcome in ("settled", "already"):
            settled.append(report.delivery_id)
        else:
            logger.warning(
                "mailbox report ignored: no such letter waiting",
                extra={"platform": platform, "delivery_id": report.delivery_id, "status": outcome},
            )
            ignored.append(report.delivery_id)
    letters = [_handed_over(found, deps.files) for found in deps.letters.collect(mailbox, limit)]
    if reports or letters:
        logger.info("mailbox collected", extra={"platform": platform, "settled": len(settled), "letters": len(letters)})
    else:
        logger.debug("mailbox empty", extra={"platform": platform})  # a forwarder polls often: no line each
    return HttpResponse(200, {"settled": settled, "ignored": ignored, "letters": letters})


def _reports(raw: Any) -> list[_Report]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_REPORTS:
        raise BadRequest(f"reports must be a list of at most {MAX_REPORTS}")
    return [_report(item) for item in raw]


def _report(item: Any) -> _Report:
    if not isinstance(item, dict):
        raise BadRequest("a report must be an object")
    delivery_id, status = item.get("id"), item.get("status")
    if not isinstance(delivery_id, str) or not 0 < len(delivery_id) <= _ID_CHARS:
        raise BadRequest("a report's id must be the letter's id")
    if status not in _OUTCOMES:
        raise BadRequest(f"a report's status must be one of {', '.join(_OUTCOMES)}")
    if status == "sent":
        timestamp = item.get("timestamp")
        if isinstance(timestamp, int) and not isinstance(timestamp, bool):
            timestamp = str(timestamp)
        if not isinstance(timestamp, str) or not (timestamp.isascii() and timestamp.isdigit()):
            raise BadRequest("a sent report needs the platform's timestamp of the message")
        if len(timestamp) > _TIMESTAMP_DIGITS:
            raise BadRequest("a sent report's timestamp is too long")
        return _Report(delivery_id, status, timestamp, None)
    error = item.get("error")
    if error is not None and not isinstance(error, str):
        raise BadRequest("a report's error must be a string")
    return _Report(delivery_id, status, None, (error or "no reason given")[:500])


def _settled(platform: str, report: _Report, events: LifecycleEvents | None) -> None:
    """What a settled letter tells: the event and metric of its outcome, and a failure's line."""
    detail = {"platform": platform, "delivery_id": report.delivery_id}
    if report.status == "sent":
        metrics.add_metric(name="DeliverySent", unit=MetricUnit.Count, value=1)
        if events is not None:
            events.emit("delivery:sent", {**detail, "status": "sent", "chunks": 1})
        return
    if report.status == "failed":
        # No delivery job holds it any more: the error alarm is what tells the operator.
        logger.error("the forwarder could not send a letter", extra={**detail, "error": report.error})
        metrics.add_metric(name="DeliveryFailed", unit=MetricUnit.Count, value=1)
    else:
        logger.warning("a letter was not delivered", extra={**detail, "status": report.status, "error": report.error})
        metrics.add_metric(
            name="DeliveryTargetGone" if report.status == "gone" else "DeliveryUnknown", unit=MetricUnit.Count, value=1
        )
    if events is not None:
        reason = {"gone": "target_gone", "unknown": "outcome_unknown"}.get(report.status, "refused")
        events.emit("delivery:failed", {**detail, "reason": reason})


def _handed_over(found: QueuedLetter, files: FileLinks) -> dict[str, Any]:
    """The letter as the forwarder gets it: a file's key made into a download URL."""
    letter = {"id": found.delivery_id, **found.letter}
    attachments = letter.get("attachments")
    if isinstance(attachments, list):
        letter["attachments"] = [
            {**{k: v for k, v in item.items() if k != "key"}, "url": files.url(str(item["key"]), LINK_SECONDS)}
            for item in attachments
            if isinstance(item, dict) and item.get("key")
        ]
    return letter


# --- the tick: a forwarder that stopped collecting ----------------------------------------------


def check_mailboxes(letters: Letters, settings: Settings, now: float) -> dict[str, int]:
    """Every minute: a letter that has waited longer than STALE_SECONDS means its forwarder (or
    signal-cli behind it) stopped collecting. Nothing is lost (the letters wait, in order), but no
    one would know: an ERROR line each minute it lasts, which the error alarm watches. One query
    of the sparse index per served bot with a mailbox platform on; none when there is none."""
    stalled = 0
    for served in settings.all_profiles():
        for platform in MAILBOX_PLATFORMS:
            if served.platform(platform) is None:
                continue
            posted = letters.oldest(mailbox_name(platform, served.served_profile))
            if posted is not None and now - posted > STALE_SECONDS:
                stalled += 1
                logger.error(
                    "replies wait uncollected in a mailbox: is its forwarder running?",
                    extra={"platform": platform, "profile": served.profile, "minutes": int((now - posted) // 60)},
                )
    if stalled:
        metrics.add_metric(name="MailboxStalled", unit=MetricUnit.Count, value=stalled)
    return {"mailboxes_stalled": stalled}


# --- uploads: where a message's files go before the message -----------------------------------


def _uploads(platform: str, profile: str | None, body: dict[str, Any], deps: MailboxDeps) -> HttpResponse:
    files = body.get("files")
    if not isinstance(files, list) or not 0 < len(files) <= MAX_FILES:
        raise BadRequest(f"files must be a list of 1 to {MAX_FILES}")
    uploads, refused = [], []
    for item in files:
        file_id, size, mime = _file(item)
        if size > deps.max_bytes:
            refused.append({"id": file_id, "reason": f"over media.max_bytes ({deps.max_bytes} bytes)"})
            continue
        upload_id = secrets.token_hex(16)
        url = deps.files.upload_url(upload_key(platform, profile, upload_id), mime, size, LINK_SECONDS)
        headers = {"Content-Type": mime, "Content-Length": str(size)}
        uploads.append({"id": file_id, "upload_id": upload_id, "url": url, "headers": headers})
    logger.info("mailbox uploads", extra={"platform": platform, "uploads": len(uploads), "refused": len(refused)})
    return HttpResponse(200, {"uploads": uploads, "refused": refused})


def _file(item: Any) -> tuple[str, int, str]:
    if not isinstance(item, dict):
        raise BadRequest("a file must be an object")
    file_id, size, mime = item.get("id"), item.get("size"), item.get("content_type") or "application/octet-stream"
    if not isinstance(file_id, str) or not _FILE_ID.fullmatch(file_id):
        raise BadRequest("a file's id must be the platform's attachment id")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise BadRequest("a file's size must be its number of bytes")
    if not isinstance(mime, str) or not _MIME.fullmatch(mime):
        raise BadRequest("a file's content_type must be a media type")
    return file_id, size, mime
