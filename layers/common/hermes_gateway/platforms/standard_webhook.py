"""Standard Webhooks v1 (PLATFORMS §13): signing and verification, the generic signed webhook
platform (`webhook`), and the signed callback its replies are POSTed to.

`sign` and `verify` are the scheme itself; the relay platform (relay.py) uses them with its own
secret. Standard library only.

Inbound payload of the generic webhook (JSON object):
    {"text": str, "chat_id"?: str (default "default"), "user_id"?: str, "user_name"?: str,
     "thread_id"?: str, "chat_type"?: "dm" | "group" (default "dm")}
An event without `text` is acknowledged and ignored. The webhook-id header is the
de-duplication key. Replies are POSTed to `callback_url` as
    {"chat_id": str, "thread_id": str | null, "text": str}
signed with the same secret and headers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import (
    BadRequest,
    ConfigError,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    Unauthorized,
)
from hermes_gateway.platforms.base import AdapterContext, Answer, HttpClient, Target, header, retry_after_seconds
from hermes_gateway.services.ingress import HttpRequest, Ignored, Parsed, json_payload, signed_timestamp

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
SECRET_PREFIX = "whsec_"  # noqa: S105 - the scheme's prefix, not a secret
TOLERANCE_SECONDS = 300  # the reference libraries' window, in both directions
CALLBACK_TIMEOUT_SECONDS = 15.0  # the spec recommends 15-30 s
MAX_ID_LENGTH = 256
GENERIC_CHAT_TYPES = ("dm", "group")
_THROTTLE_STATUSES = (429, 502, 504)  # the spec's "slow down" answers


def secret_key(secret: str) -> bytes:
    """The HMAC key: the base64-decoded part after `whsec_` (the prefix is optional, as in the
    reference libraries). Raises ConfigError for a secret that is not base64."""
    try:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError("a Standard Webhooks secret must be whsec_ followed by base64") from None
    if not key:
        raise ConfigError("a Standard Webhooks secret must not be empty")
    return key


def sign(secret: str, msg_id: str, timestamp: int | str, body: bytes) -> str:
    """The `webhook-signature` value for one message: "v1,<base64 HMAC-SHA256>"."""
    content = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def verify(
    secret: str, headers: Mapping[str, str], body: bytes, now: float, tolerance: int = TOLERANCE_SECONDS
) -> None:
    """Accept the request only when one `v1` signature in `webhook-signature` matches and the
    timestamp is within `tolerance` seconds of `now`. Raises Unauthorized naming the reason."""
    msg_id = _required_header(headers, ID_HEADER)
    timestamp = _required_header(headers, TIMESTAMP_HEADER)
    signatures = _required_header(headers, SIGNATURE_HEADER)
    sent_at = signed_timestamp(timestamp, TIMESTAMP_HEADER)
    if now - sent_at > tolerance:
        raise Unauthorized("stale webhook timestamp (older than the tolerance)")
    if sent_at - now > tolerance:
        raise Unauthorized("webhook timestamp too far in the future")
    try:
        expected = sign(secret, msg_id, timestamp, body).encode("ascii")
    except ConfigError as exc:
        raise Unauthorized(f"signing secret is unusable: {exc}") from None
    matched = False
    for entry in signatures.split(" "):
        version, _, _ = entry.partition(",")
        if version != "v1":
            continue  # v1a (ed25519) and future schemes are not ours to check
        # No early exit: every v1 candidate is compared, in constant time each.
        matched |= hmac.compare_digest(entry.encode("utf-8"), expected)
    if not matched:
        raise Unauthorized("no matching webhook signature")


def _required_header(headers: Mapping[str, str], name: str) -> str:
    value = header(headers, name)
    if not value:
        raise Unauthorized(f"missing {name} header")
    return value


def _optional_str(payload: Mapping[str, Any], name: str, *, what: str) -> str | None:
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{what} field {name} must be a string")
    if len(value) > MAX_ID_LENGTH:
        raise BadRequest(f"{what} field {name} is longer than {MAX_ID_LENGTH} characters")
    return value or None


class GenericWebhookInbound:
    """Any system that signs its POSTs the Standard Webhooks way (`WEBHOOK_SIGNING_SECRET`).

    A signed generic webhook is a trusted source (BEHAVIOUR §4 layer 1): allowlists do not apply.
    """

    def __init__(self, context: AdapterContext) -> None:
        self._context = context

    def verify(self, request: HttpRequest) -> None:
        secret = self._context.secret("WEBHOOK_SIGNING_SECRET")
        if not secret:
            raise Unauthorized("generic webhook signing secret is not configured; refusing every request")
        verify(secret, request.headers, request.body, self._context.clock())

    def parse(self, request: HttpRequest, received_at: float) -> Parsed:
        msg_id = header(request.headers, ID_HEADER) or ""
        if len(msg_id) > MAX_ID_LENGTH:
            raise BadRequest(f"{ID_HEADER} is longer than {MAX_ID_LENGTH} characters")
        payload = json_payload(request)
        if not isinstance(payload, dict):
            raise BadRequest("webhook payload must be a JSON object")
        text = payload.get("text")
        if text is None:
            # An event that is no message (`{"type": "invoice.paid", ...}`): refusing it would have
            # the sender retry it for a day. Acknowledged; "no_text" is logged as the reason.
            return Ignored("no_text")
        if not isinstance(text, str):
            raise BadRequest("webhook field text must be a string")
        chat_type = payload.get("chat_type") or "dm"
        if chat_type not in GENERIC_CHAT_TYPES:
            raise BadRequest("webhook field chat_type must be 'dm' or 'group'")
        fields = {name: _optional_str(payload, name, what="webhook") for name in _GENERIC_FIELDS}
        if not text.strip():
            return Ignored("no_text")
        source = SessionSource(
            platform="webhook",
            chat_id=fields["chat_id"] or "default",
            chat_type=chat_type,
            user_id=fields["user_id"],
            user_name=fields["user_name"],
            thread_id=fields["thread_id"],
            message_id=msg_id,
        )
        return InboundMessage(
            source=source,
            text=text,
            event_id=f"webhook:{msg_id}",
            received_at=received_at,
            facts=("trusted",),
        )


_GENERIC_FIELDS = ("chat_id", "user_id", "user_name", "thread_id")


class CallbackSender:
    """POSTs replies to a callback URL, signed the Standard Webhooks way with a fresh webhook-id."""

    def __init__(
        self,
        url: str,
        secret: str,
        *,
        platform: str,
        include_platform: bool = False,
        clock: Callable[[], float] = time.time,
        timeout: float = CALLBACK_TIMEOUT_SECONDS,
    ) -> None:
        secret_key(secret)  # a malformed secret fails when the sender is built, not on every send
        self._url = url
        self._secret = secret
        self._platform = platform
        self._include_platform = include_platform
        self._clock = clock
        self._http = HttpClient(url, platform=platform, timeout=timeout, scrub=(secret, url))

    def __repr__(self) -> str:
        return f"CallbackSender({self._platform})"

    def send(self, target: Target, text: str) -> str:
        payload: dict[str, Any] = {"chat_id": target.chat_id, "thread_id": target.thread_id, "text": text}
        if self._include_platform:
            payload = {"platform": target.platform, **payload}
        body = json.dumps(payload).encode("utf-8")
        msg_id = "msg_" + uuid.uuid4().hex
        timestamp = str(int(self._clock()))
        headers = {
            "Content-Type": "application/json",
            ID_HEADER: msg_id,
            TIMESTAMP_HEADER: timestamp,
            SIGNATURE_HEADER: sign(self._secret, msg_id, timestamp, body),
        }
        answer = self._http.request("POST", self._url, data=body, headers=headers)
        if 200 <= answer.status < 300:
            found = answer.json_object().get("id")
            if isinstance(found, str | int) and not isinstance(found, bool) and str(found):
                return str(found)
            return msg_id  # any 2xx is success; the webhook-id names what was delivered
        raise self._failure(answer)

    def _failure(self, answer: Answer) -> Exception:
        where = f"{self._platform} callback"
        if answer.status == 410:
            return TargetGone(f"{where} answered 410 Gone: the endpoint is disabled")
        retry_after = header(answer.headers, "retry-after")
        if answer.status == 429 or (answer.status in _THROTTLE_STATUSES and retry_after is not None):
            seconds = retry_after_seconds(retry_after)
            return RateLimited(seconds, f"{where} asked to slow down (HTTP {answer.status}); retry after {seconds:g} s")
        if answer.status >= 500 or answer.status == 408:
            return TransientError(f"{where} server error: HTTP {answer.status}")
        return PermanentError(f"{where} rejected the message: HTTP {answer.status}")


def build_callback_sender(context: AdapterContext) -> CallbackSender | None:
    url = context.option("callback_url")
    secret = context.secret("WEBHOOK_SIGNING_SECRET")
    if not url or not secret:
        return None
    return CallbackSender(url, secret, platform="webhook", clock=context.clock)
