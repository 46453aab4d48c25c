"""Webhook ingress: verify, normalize, de-duplicate, enqueue, acknowledge.

Nothing is acknowledged before the event is durable in the inbound queue. The order of checks is
the contract: unknown platform 404, wrong method 405, too large 413, failed verification 401
(nothing enqueued), malformed 400, ignorable 200, duplicate 200, enqueued 200, queue down 503
(the platform retries).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import BadRequest, InvalidIdentifier, PayloadTooLarge, TransientError, Unauthorized
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.secrets import Secrets
from hermes_gateway.settings import Settings

IDEMPOTENCY_SECONDS = 2 * 24 * 3600  # longer than Telegram keeps undelivered updates (24 h)


@dataclass(frozen=True)
class HttpRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-cased names, as API Gateway payload 2.0 gives them
    body: bytes
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "application/json"})


@dataclass(frozen=True)
class Ignored:
    """A verified event the gateway has nothing to do with (a sticker, an edit); acknowledged."""

    reason: str


class InboundAdapter(Protocol):
    name: str

    def verify(self, request: HttpRequest, secrets: Secrets) -> None:
        """Raise Unauthorized unless the request is authentic. Runs before the body is parsed."""
        ...

    def parse(self, payload: Any, received_at: float) -> InboundMessage | Ignored:
        """Normalize a verified, JSON-decoded payload. Raise BadRequest when malformed."""
        ...


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


def handle_webhook(
    platform: str,
    request: HttpRequest,
    *,
    settings: Settings,
    secrets: Secrets,
    adapters: Mapping[str, InboundAdapter],
    enqueue_once: EnqueueOnce,
    received_at: float,
) -> HttpResponse:
    adapter = adapters.get(platform)
    if adapter is None or settings.platform(platform) is None:
        return _reject(404, "unknown or disabled platform", platform)
    if request.method != "POST":
        return _reject(405, "webhooks are POST", platform)
    if len(request.body) > settings.max_body_bytes:
        return _reject(413, f"body over {settings.max_body_bytes} bytes", platform)
    try:
        adapter.verify(request, secrets)
    except Unauthorized as exc:
        return _reject(401, str(exc), platform)
    try:
        payload = json.loads(request.body)
        result = adapter.parse(payload, received_at)
    except (ValueError, UnicodeDecodeError) as exc:
        return _reject(400, f"malformed JSON: {type(exc).__name__}", platform)
    except BadRequest as exc:
        return _reject(400, str(exc), platform)
    if isinstance(result, Ignored):
        logger.info("webhook ignored", extra={"platform": platform, "reason": result.reason})
        metrics.add_metric(name="InboundIgnored", unit=MetricUnit.Count, value=1)
        return HttpResponse(200, {"ok": True, "ignored": result.reason})
    try:
        session_key = build_session_key(
            result.source,
            group_sessions_per_user=settings.sessions.group_sessions_per_user,
            thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
            profile=settings.profile,
        )
    except InvalidIdentifier as exc:
        return _reject(400, str(exc), platform)
    logger.append_keys(correlation_id=result.event_id, session=hash_id(session_key))
    envelope = result.to_dict()
    envelope["session_key"] = session_key
    try:
        sent = enqueue_once(envelope)
    except TransientError as exc:
        logger.warning("enqueue failed; asking the platform to retry", extra={"reason": str(exc)})
        return HttpResponse(503, {"ok": False, "error": "busy, retry"}, {"retry-after": "5"})
    if not sent:
        logger.info("duplicate event dropped", extra={"platform": platform})
        metrics.add_metric(name="InboundDuplicate", unit=MetricUnit.Count, value=1)
        return HttpResponse(200, {"ok": True, "duplicate": True})
    logger.info("event accepted", extra={"platform": platform})
    metrics.add_metric(name="InboundAccepted", unit=MetricUnit.Count, value=1)
    return HttpResponse(200, {"ok": True})
