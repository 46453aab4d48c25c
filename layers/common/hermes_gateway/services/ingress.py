"""Webhook ingress: verify, normalize, de-duplicate, enqueue, acknowledge.

Nothing is acknowledged before the event is durable in the inbound queue. The order of checks is
the contract: unknown or disabled platform 404, wrong method 405, too large 413, failed
verification 401 (nothing enqueued), malformed 400, handshake answered, ignorable 200, duplicate
200, enqueued 200 (or the platform's own acknowledgement), queue down 503 (the platform retries).

A named profile's bot posts to `/p/<profile>/webhooks/<platform>`: its request is verified with
that profile's secrets, and its messages carry the profile (never read from the platform's
payload), so the router, the turn and the delivery all act as that profile.
"""

from __future__ import annotations

import base64
import binascii
import json
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
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.platforms import catalog
from hermes_gateway.settings import Settings

IDEMPOTENCY_SECONDS = 2 * 24 * 3600  # longer than Telegram keeps undelivered updates (24 h)


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

    items: tuple[InboundMessage | Ignored, ...]
    ack: HttpResponse | None = None


Parsed = InboundMessage | Ignored | Handshake | Accepted


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


def json_payload(request: HttpRequest) -> Any:
    """The body as JSON, or BadRequest."""
    try:
        return json.loads(request.body)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: absurd nesting
        raise BadRequest(f"malformed JSON: {type(exc).__name__}") from None


EnqueueOnce = Callable[[dict[str, Any]], bool]  # True when sent, False for a duplicate


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
        body = text.encode("utf-8")
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
) -> HttpResponse:
    """`settings` are the deployment's; `profile` names the bot the request is for (None: the
    deployment's own); `adapters(platform, profile)` builds that bot's inbound adapter."""
    try:
        settings = settings.for_profile(profile)
    except UnknownProfile:
        return _reject(404, "unknown profile", platform)
    spec = catalog.spec(platform)
    adapter = adapters(platform, profile) if spec is not None and settings.platform(platform) is not None else None
    if spec is None or adapter is None:
        return _reject(404, "unknown or disabled platform", platform)
    if request.method not in spec.methods:
        return _reject(405, f"{platform} webhooks are {' or '.join(spec.methods)}", platform)
    if len(request.body) > settings.max_body_bytes:
        return _reject(413, f"body over {settings.max_body_bytes} bytes", platform)
    try:
        adapter.verify(request)
    except Unauthorized as exc:
        return _reject(401, str(exc), platform)
    try:
        result = adapter.parse(request, received_at)
    except BadRequest as exc:
        return _reject(400, str(exc), platform)
    if isinstance(result, Handshake):
        logger.info("webhook handshake answered", extra={"platform": platform})
        return result.response
    items = result.items if isinstance(result, Accepted) else (result,)
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


def _enqueue_all(
    platform: str, items: tuple[InboundMessage | Ignored, ...], settings: Settings, enqueue_once: EnqueueOnce
) -> str | HttpResponse:
    """Enqueue each message; the last outcome, or the error response that stops the request."""
    outcome = "accepted"
    for item in items:
        try:
            outcome = _enqueue_one(platform, item, settings, enqueue_once)
        except InvalidIdentifier as exc:
            if len(items) == 1:
                return _reject(400, str(exc), platform)
            # One bad event must not block a batch the platform would resend unchanged forever.
            logger.warning("event in a batch ignored", extra={"platform": platform, "reason": str(exc)})
            metrics.add_metric(name="InboundIgnored", unit=MetricUnit.Count, value=1)
        except TransientError as exc:
            # Every message enqueued so far is de-duplicated when the platform retries the request.
            logger.warning("enqueue failed; asking the platform to retry", extra={"reason": str(exc)})
            return HttpResponse(503, {"ok": False, "error": "busy, retry"}, {"retry-after": "5"})
    return outcome


def _enqueue_one(platform: str, item: InboundMessage | Ignored, settings: Settings, enqueue_once: EnqueueOnce) -> str:
    """Enqueue one message; the outcome is "accepted", "duplicate" or the reason it was ignored."""
    if isinstance(item, Ignored):
        logger.info("webhook ignored", extra={"platform": platform, "reason": item.reason})
        metrics.add_metric(name="InboundIgnored", unit=MetricUnit.Count, value=1)
        return item.reason
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
    logger.append_keys(correlation_id=item.event_id, session=hash_id(session_key))
    envelope = item.to_dict()
    envelope["session_key"] = session_key
    if not enqueue_once(envelope):
        logger.info("duplicate event dropped", extra={"platform": platform})
        metrics.add_metric(name="InboundDuplicate", unit=MetricUnit.Count, value=1)
        return "duplicate"
    logger.info("event accepted", extra={"platform": platform})
    metrics.add_metric(name="InboundAccepted", unit=MetricUnit.Count, value=1)
    return "accepted"
