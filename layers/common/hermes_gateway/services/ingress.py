"""Webhook ingress: verify, normalize, write to the inbox once, acknowledge.

Nothing is acknowledged before the event is durable in the inbox: one conditional write per event
(`EnqueueOnce`) that is also its de-duplication, so the webhook's 200 waits on exactly one AWS call.
The order of checks is the contract: unknown or disabled platform 404, wrong method 405, too large
413, failed verification 401 (nothing written), malformed 400, handshake answered, ignorable 200,
duplicate 200, written 200 (or the platform's own acknowledgement), inbox down 503 (the platform
retries).

A named profile's bot posts to `/p/<profile>/webhooks/<platform>`: its request is verified with
that profile's secrets, and its messages carry the profile (never read from the platform's
payload), so the router, the turn and the delivery all act as that profile.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import (
    BadRequest,
    InvalidIdentifier,
    PayloadTooLarge,
    TransientError,
    Unauthorized,
    UnknownProfile,
)
from hermes_gateway.observability import MetricUnit, correlate, hash_id, logger, metrics
from hermes_gateway.platforms import catalog
from hermes_gateway.settings import Settings

# A platform that retries with no bound (Matrix resends a transaction until it is answered) is
# remembered this long; every other at least MIN_DEDUP_WINDOW_SECONDS, more when its catalog entry's
# retry window is longer (WhatsApp: 7 days). An inbox item costs its storage only, deleted by TTL.
UNBOUNDED_RETRY_WINDOW_SECONDS = 7 * 24 * 3600
MIN_DEDUP_WINDOW_SECONDS = 2 * 24 * 3600  # windows are estimates for several platforms: a margin
# The Ignored reasons that are a platform's reports on, or echoes of, a message the gateway sent
# (WhatsApp's sent, delivered and read statuses; the bot's own reply coming back as a message:
# Slack, Matrix, Mattermost, WhatsApp groups, and Feishu and Teams should they send one): they come
# for every reply and are no message, so their line is DEBUG, not an INFO line each
# (bench/receipts_cost.py).
RECEIPT_REASONS = frozenset({"message_status", "own_message"})


def dedup_window_seconds(platform: str) -> int:
    """How long a platform's event is remembered (its inbox item's TTL): its retry window."""
    spec = catalog.spec(platform)
    window = spec.retry_window_seconds if spec is not None else None
    return UNBOUNDED_RETRY_WINDOW_SECONDS if window is None else max(MIN_DEDUP_WINDOW_SECONDS, window)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-cased names, as API Gateway payload 2.0 gives them
    body: bytes
    query: Mapping[str, str] = field(default_factory=dict)  # repeated names comma-joined (payload 2.0)
    raw_query: str = ""  # the query string as sent (Twilio signs the URL with it)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: dict[str, Any] | str  # a dict is sent as JSON; text as it is, with the content-type given
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})

    @classmethod
    def text(cls, status: int, body: str, content_type: str = "text/plain") -> HttpResponse:
        return cls(status, body, {"content-type": content_type})

    def encoded_body(self) -> str:
        return self.body if isinstance(self.body, str) else json.dumps(self.body)


@dataclass(frozen=True)
class Ignored:
    """A verified event the gateway has nothing to do with (a sticker, an edit); acknowledged."""

    reason: str


@dataclass(frozen=True)
class DeliveryReport:
    """A verified report that a message the platform had accepted from the gateway failed later (a
    WhatsApp `failed` status). It is recorded on the message's outbox row before the request is
    acknowledged (ReportDelivery); nothing is enqueued."""

    delivery_id: str  # the outbox row, as the gateway gave it to the platform with the message
    platform_message_id: str
    error: str  # the platform's error code and title, never message text


# Records a report of a platform; raises TransientError when the platform should send it again.
ReportDelivery = Callable[[str, DeliveryReport], None]


@dataclass(frozen=True)
class Handshake:
    """A verified request answered at once with nothing enqueued (Slack `url_verification`, Discord
    PING, the WhatsApp GET check, a Matrix ping)."""

    response: HttpResponse


@dataclass(frozen=True)
class Accepted:
    """A verified request carrying several events (a WhatsApp or LINE batch, a Matrix transaction),
    and/or one whose acknowledgement the platform expects in its own shape (a Discord deferred
    response, Twilio's TwiML). Each message is enqueued once; the request is acknowledged only when
    every one of them is durable."""

    items: tuple[InboundMessage | Ignored | DeliveryReport, ...]
    ack: HttpResponse | None = None


@dataclass(frozen=True)
class MailboxCall:
    """A verified call of a platform's forwarder on its mailbox (Signal's, `platforms/mailbox.py`):
    `outbox`, its reports on the letters it sent and a request for the next ones; `uploads`, where
    to upload a message's files. Answered by the mailbox service; nothing is enqueued."""

    kind: str
    body: dict[str, Any]


# Answers a mailbox call: (platform, profile, the call, now) -> the response.
ServeMailbox = Callable[[str, str | None, MailboxCall, float], HttpResponse]

Parsed = InboundMessage | Ignored | Handshake | Accepted | MailboxCall


class InboundAdapter(Protocol):
    """A platform's inbound side, built once per cold start with its `AdapterContext`."""

    def verify(self, request: HttpRequest) -> None:
        """Raise Unauthorized unless the request is authentic. Runs on the raw body, before parsing."""
        ...

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        """Normalize a verified request. Raise BadRequest when it is malformed."""
        ...


class AdapterLookup(Protocol):
    """A profile's inbound adapter of a platform (`wiring.inbound_adapter`); None when unknown."""

    def __call__(self, platform: str, profile: str | None = None) -> InboundAdapter | None: ...


# --- reading what a request carries ----------------------------------------------------------
#
# Every adapter reads its body and its signed timestamps through these, so hostile input (a
# 5,000-digit number, a body nested 20,000 deep, a lone surrogate that no UTF-8 encoder accepts)
# is a 400 or a 401 decided here, once, before anything downstream (a session key, a log line,
# the queue, the router) meets it.

MAX_JSON_DEPTH = 64  # platform payloads nest about 10 deep (Teams cards, Slack blocks)
MAX_NUMBER_CHARS = 40  # ids beyond 64 bits travel as strings; no float needs more digits
MAX_TIMESTAMP_DIGITS = 12  # seconds until the year 33658: `now - t` can never overflow a float
# A platform id (a chat, a user, an event) is at most this long in UTF-8: platforms' own ids are
# under 100 characters. The ids become DynamoDB keys (the inbox's sort key, the routes' partition
# key, the pairing table's) of at most 1,024 and 2,048 bytes, with prefixes: a longer one would be
# a ValidationException at the inbox's write, a 500 the platform retries for days.
MAX_ID_BYTES = 512
MAX_SESSION_KEY_BYTES = 1024  # the routes' partition key, and keys made of it, with room to spare
ID_FIELDS = (
    "chat_id",
    "user_id",
    "thread_id",
    "user_id_alt",
    "chat_id_alt",
    "scope_id",
    "parent_chat_id",
    "message_id",
    "prospective_thread_id",
)
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


class _UnusableNumber:
    """Where a JSON number too long or out of range stood (or NaN, Infinity): `hostile` names it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unusable number>"


UNUSABLE_NUMBER = _UnusableNumber()


def _bounded_int(literal: str) -> int | _UnusableNumber:
    return int(literal) if len(literal) <= MAX_NUMBER_CHARS else UNUSABLE_NUMBER


def _bounded_float(literal: str) -> float | _UnusableNumber:
    value = float(literal) if len(literal) <= MAX_NUMBER_CHARS else math.inf
    return value if math.isfinite(value) else UNUSABLE_NUMBER


def _constant(_: str) -> _UnusableNumber:
    return UNUSABLE_NUMBER


def parse_json(raw: bytes, what: str = "body") -> Any:
    """`raw` as JSON (strict UTF-8), every unusable number replaced by UNUSABLE_NUMBER; BadRequest
    when it is not JSON or nests past the interpreter's limit. Check the result with `hostile`
    before using it (`read_json` does both)."""
    try:
        return json.loads(
            raw.decode("utf-8"), parse_int=_bounded_int, parse_float=_bounded_float, parse_constant=_constant
        )
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError; RecursionError: nesting
        raise BadRequest(f"{what} is not JSON: {type(exc).__name__}") from None


def may_hold_surrogates(raw: bytes) -> bool:
    """Strictly decoded UTF-8 holds no surrogate: only a \\uD800-\\uDFFF escape can make one."""
    return _SURROGATE_ESCAPE.search(raw) is not None


def hostile(value: Any, *, strings: bool = True) -> str | None:
    """Why a parsed JSON value cannot be used, or None: nesting deeper than MAX_JSON_DEPTH, an
    unusable number, or (when `strings`) a lone surrogate in a key or string, which can be neither
    encoded, hashed, logged nor stored. Iterative: the depth is no recursion's business."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            if strings and any(has_surrogate(key) for key in node):
                return "a lone surrogate (not valid Unicode)"
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        elif node is UNUSABLE_NUMBER:
            return f"a number longer than {MAX_NUMBER_CHARS} characters or out of range"
        elif strings and isinstance(node, str) and has_surrogate(node):
            return "a lone surrogate (not valid Unicode)"
        else:
            continue
        if depth >= MAX_JSON_DEPTH:
            return f"nesting deeper than {MAX_JSON_DEPTH} levels"
        stack.extend((child, depth + 1) for child in children)
    return None


def read_json(raw: bytes, what: str = "body") -> Any:
    """`raw` as JSON that every later step can handle, or BadRequest naming what is wrong with it."""
    value = parse_json(raw, what)
    reason = hostile(value, strings=may_hold_surrogates(raw))
    if reason is not None:
        raise BadRequest(f"{what} holds {reason}")
    return value


def too_long(value: str | None) -> bool:
    """Whether a platform id is longer than MAX_ID_BYTES (in UTF-8) and so cannot be a key."""
    return value is not None and (len(value) > MAX_ID_BYTES or len(value.encode("utf-8")) > MAX_ID_BYTES)


def _check_ids(item: InboundMessage) -> None:
    """InvalidIdentifier naming the first id of the message too long to be a key (never its value)."""
    if too_long(item.event_id):
        raise InvalidIdentifier(f"the event id is over {MAX_ID_BYTES} bytes")
    for name in ID_FIELDS:
        if too_long(getattr(item.source, name)):
            raise InvalidIdentifier(f"the {name} is over {MAX_ID_BYTES} bytes")


def has_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate code point, which no UTF-8 encoder accepts."""
    return _SURROGATE.search(text) is not None


def outlived_deduplication(platform: str, sent_at: float | None, received_at: float) -> bool:
    """Whether an event the platform says it sent at `sent_at` (epoch seconds; None: it does not
    say) is older than the inbox remembers the platform's event ids. A retry that late could not be
    told from a first delivery and would be answered twice: the adapter acknowledges it and drops
    it (`Ignored("outlived_deduplication")`, logged with the reason)."""
    return sent_at is not None and received_at - sent_at > dedup_window_seconds(platform)


def epoch_seconds(value: Any, *, milliseconds: bool = False) -> float | None:
    """A payload's timestamp (an integer, or a string of at most 13 ASCII digits) in seconds."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 13:
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return value / 1000 if milliseconds else float(value)


def json_payload(request: HttpRequest) -> Any:
    """The body as JSON (`read_json`), or BadRequest."""
    return read_json(request.body)


def signed_timestamp(value: str | None, name: str) -> int:
    """A signature's timestamp header, in seconds: only ASCII digits, at most MAX_TIMESTAMP_DIGITS
    of them; anything else is Unauthorized (nothing that unsigned can be trusted or compared)."""
    if not value:
        raise Unauthorized(f"missing {name} header")
    if not (value.isascii() and value.isdigit() and len(value) <= MAX_TIMESTAMP_DIGITS):
        raise Unauthorized(f"malformed {name} header")
    return int(value)


EnqueueOnce = Callable[[dict[str, Any]], bool]  # True when written, False for a duplicate


def decode_body(raw: str | None, is_base64: bool, limit: int) -> bytes:
    """The raw body bytes, checked against the size limit before and after decoding."""
    text = raw or ""
    # Refuse before decoding, so an oversize body costs no memory.
    encoded_limit = (limit * 4) // 3 + 4 if is_base64 else limit * 4
    if len(text) > encoded_limit:
        raise PayloadTooLarge(f"body over {limit} bytes")
    if is_base64:
        try:
            body = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("body is not valid base64") from None
    else:
        try:
            body = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate in the event's body text
            raise BadRequest("body is not valid UTF-8") from None
    if len(body) > limit:
        raise PayloadTooLarge(f"body over {limit} bytes")
    return body


def _reject(status: int, reason: str, platform: str) -> HttpResponse:
    logger.warning("webhook rejected", extra={"platform": platform, "status": status, "reason": reason})
    metrics.add_metric(name=f"InboundRejected{status}", unit=MetricUnit.Count, value=1)
    return HttpResponse(status, {"ok": False, "error": reason})


def webhook_route(raw_path: str) -> tuple[str | None, str]:
    """(profile, platform) of a webhook path: `/webhooks/<platform>[/...]` is the deployment's own
    profile (None), `/p/<profile>/webhooks/<platform>[/...]` a named one's; platform "" when the
    path is neither."""
    parts = [p for p in raw_path.split("/") if p]
    for i, part in enumerate(parts):  # the leftmost match: a sub-path never decides
        if part == "p" and i + 3 < len(parts) and parts[i + 2] == "webhooks":
            return parts[i + 1], parts[i + 3]
        if part == "webhooks" and i + 1 < len(parts):
            return None, parts[i + 1]
    return None, ""


def handle_webhook(
    platform: str,
    request: HttpRequest,
    *,
    settings: Settings,
    adapters: AdapterLookup,
    enqueue_once: EnqueueOnce,
    received_at: float,
    profile: str | None = None,
    report_delivery: ReportDelivery | None = None,
    serve_mailbox: ServeMailbox | None = None,
) -> HttpResponse:
    """`settings` are the deployment's; `profile` names the bot the request is for (None: the
    deployment's own); `adapters(platform, profile)` builds that bot's inbound adapter;
    `report_delivery` records the platform's reports on sent messages (None: they are ignored);
    `serve_mailbox` answers a forwarder's calls on its mailbox (None: 404)."""
    try:
        settings = settings.for_profile(profile)
    except UnknownProfile:
        return _reject(404, "unknown profile", platform)
    spec = catalog.spec(platform)
    served = spec is not None and spec.webhook and settings.platform(platform) is not None
    adapter = adapters(platform, profile) if served else None
    if spec is None or adapter is None:
        return _reject(404, "unknown or disabled platform", platform)
    if request.method not in spec.methods:
        return _reject(405, f"{platform} webhooks are {' or '.join(spec.methods)}", platform)
    if len(request.body) > settings.max_body_bytes:
        return _reject(413, f"body over {settings.max_body_bytes} bytes", platform)
    if _unencodable(request):
        return _reject(400, "a header or query value is not valid Unicode", platform)
    result = _verified_and_parsed(platform, adapter, request, received_at)
    if isinstance(result, HttpResponse):
        return result
    if isinstance(result, Handshake | MailboxCall):
        return _answered(platform, result, settings.served_profile, serve_mailbox, received_at)
    items = _record_reports(platform, result.items, report_delivery) if isinstance(result, Accepted) else (result,)
    if isinstance(items, HttpResponse):
        return items
    ack = result.ack if isinstance(result, Accepted) else None
    outcome = _enqueue_all(platform, items, settings, enqueue_once)
    if isinstance(outcome, HttpResponse):
        return outcome
    if ack is not None:
        return ack
    if len(items) == 1 and outcome != "accepted":
        return HttpResponse(
            200, {"ok": True, outcome: True} if outcome == "duplicate" else {"ok": True, "ignored": outcome}
        )
    return HttpResponse(200, {"ok": True})


def _answered(
    platform: str, result: Handshake | MailboxCall, profile: str | None, serve: ServeMailbox | None, now: float
) -> HttpResponse:
    """A request answered at once, with nothing enqueued: a handshake, a forwarder's mailbox call."""
    if isinstance(result, Handshake):
        logger.info("webhook handshake answered", extra={"platform": platform})
        return result.response
    if serve is None:
        return _reject(404, "no mailbox is served here", platform)
    return serve(platform, profile, result, now)


def _verified_and_parsed(
    platform: str, adapter: InboundAdapter, request: HttpRequest, received_at: float
) -> Parsed | HttpResponse:
    """What the request carries, or the answer that ends it: 401 forged, 400 malformed, 503 when a
    secret could not be read just now (SSM throttled: the platform retries)."""
    try:
        adapter.verify(request)
    except Unauthorized as exc:
        return _reject(401, str(exc), platform)
    except TransientError as exc:
        return _retry_later(platform, "webhook not verified yet; asking the platform to retry", exc)
    try:
        return adapter.parse(request, received_at)
    except BadRequest as exc:
        return _reject(400, str(exc), platform)
    except TransientError as exc:
        return _retry_later(platform, "webhook not read yet; asking the platform to retry", exc)


def _record_reports(
    platform: str, items: tuple[InboundMessage | Ignored | DeliveryReport, ...], report: ReportDelivery | None
) -> tuple[InboundMessage | Ignored, ...] | HttpResponse:
    """Record every delivery report (each then counts as a status the request carried); the items
    left to enqueue, or 503 when one could not be recorded (the platform sends the batch again)."""
    rest: list[InboundMessage | Ignored] = []
    for item in items:
        if not isinstance(item, DeliveryReport):
            rest.append(item)
            continue
        if report is not None:
            try:
                report(platform, item)
            except TransientError as exc:
                return _retry_later(platform, "delivery report not recorded; asking the platform to retry", exc)
        rest.append(Ignored("delivery_report"))
    return tuple(rest)


def _unencodable(request: HttpRequest) -> bool:
    """Whether a header or query value holds a surrogate: signature checks encode them."""
    texts = (*request.headers.items(), *request.query.items(), (request.path, request.raw_query))
    return any(has_surrogate(name) or has_surrogate(value) for name, value in texts)


def _enqueue_all(
    platform: str, items: tuple[InboundMessage | Ignored, ...], settings: Settings, enqueue_once: EnqueueOnce
) -> str | HttpResponse:
    """Enqueue each message; the last outcome, or the error response that stops the request."""
    outcome = "accepted"
    for item in items:
        try:
            outcome = enqueue_message(platform, item, settings, enqueue_once)
        except InvalidIdentifier as exc:
            if len(items) == 1:
                return _reject(400, str(exc), platform)
            # One bad event must not block a batch the platform would resend unchanged forever.
            logger.warning("event in a batch ignored", extra={"platform": platform, "reason": str(exc)})
            metrics.add_metric(name="InboundIgnored", unit=MetricUnit.Count, value=1)
        except TransientError as exc:
            # Every message written so far is de-duplicated when the platform retries the request.
            return _retry_later(platform, "inbox write failed; asking the platform to retry", exc)
    return outcome


def _retry_later(platform: str, what: str, exc: TransientError) -> HttpResponse:
    logger.warning(what, extra={"platform": platform, "reason": str(exc)})
    return HttpResponse(503, {"ok": False, "error": "busy, retry"}, {"retry-after": "5"})


def enqueue_message(
    platform: str, item: InboundMessage | Ignored, settings: Settings, enqueue_once: EnqueueOnce
) -> str:
    """Enqueue one message (a webhook's, or an e-mail SES received); the outcome is "accepted",
    "duplicate" or the reason it was ignored. Raises InvalidIdentifier for a key that cannot be
    stored, TransientError when the inbox could not be written."""
    if isinstance(item, Ignored):
        log = logger.debug if item.reason in RECEIPT_REASONS else logger.info
        log("webhook ignored", extra={"platform": platform, "reason": item.reason})
        metrics.add_metric(name="InboundIgnored", unit=MetricUnit.Count, value=1)
        return item.reason
    _check_ids(item)
    if settings.served_profile:
        # A named profile's messages say so, and its event ids are its own: two bots in one chat
        # may both see an event numbered 7, and neither may be dropped as the other's duplicate.
        item = replace(
            item,
            source=replace(item.source, profile=settings.served_profile),
            event_id=f"p:{settings.served_profile}:{item.event_id}",
        )
    session_key = build_session_key(
        item.source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
        profile=settings.profile,
    )
    if len(session_key.encode("utf-8")) > MAX_SESSION_KEY_BYTES:
        raise InvalidIdentifier(f"the session key its ids make is over {MAX_SESSION_KEY_BYTES} bytes")
    correlate(item.event_id, hash_id(session_key))
    envelope = item.to_dict()
    envelope["session_key"] = session_key
    if not enqueue_once(envelope):
        logger.info("duplicate event dropped", extra={"platform": platform})
        metrics.add_metric(name="InboundDuplicate", unit=MetricUnit.Count, value=1)
        return "duplicate"
    logger.info("event accepted", extra={"platform": platform})
    metrics.add_metric(name="InboundAccepted", unit=MetricUnit.Count, value=1)
    return "accepted"
