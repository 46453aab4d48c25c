"""Delivery: send a reply to its platform, chunk by chunk, through the outbox.

Each chunk is written to the outbox before it is sent and marked sent only with the platform's
message id, so a repeated delivery (the queue may hand a job over twice) sends nothing twice.
A failure raises: the queue retries the job, and a job that keeps failing lands in the DLQ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermes_gateway.adapters.dynamo_outbox import OutboxEntry
from hermes_gateway.domain.split import split_message
from hermes_gateway.errors import BadRequest, PermanentError, TransientError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.platforms.base import Sender, Target
from hermes_gateway.platforms.catalog import text_limit


class Outbox(Protocol):
    def record(
        self,
        delivery_id: str,
        *,
        platform: str,
        chat_id: str | None,
        thread_id: str | None,
        text: str,
        turn_id: str | None,
        chunk: int,
        chunks: int,
        now: float,
    ) -> OutboxEntry: ...

    def claim(self, delivery_id: str, now: float) -> bool:
        """Take the chunk for sending; False while another worker holds it or once it is sent."""
        ...

    def mark(
        self,
        delivery_id: str,
        status: str,
        now: float,
        *,
        platform_message_id: str | None = None,
        error: str | None = None,
    ) -> None: ...


class RecordOnly:
    """A sender for targets that are only recorded (the web chat page reads the outbox)."""

    status = "recorded"

    def send(self, target: Target, text: str) -> str:
        return ""


@dataclass
class DeliveryDeps:
    outbox: Outbox
    # The sender for a platform; None when it cannot send (e.g. no bot token in a deployment).
    # (platform, via): via names the relay a chat is reached through, or is empty.
    sender_for: Callable[[str, str], Sender | None]
    now: Callable[[], float]
    # Local mode keeps redacted values in its in-memory outbox: it is the only place a newcomer
    # without a bot token can read the pairing code the bot would have sent.
    store_sensitive: bool = False


def masked(text: str, secrets: tuple[str, ...]) -> str:
    for value in secrets:
        text = text.replace(value, "\u2022" * len(value))
    return text


@dataclass(frozen=True)
class DeliveryJob:
    delivery_id: str
    turn_id: str | None
    platform: str
    chat_id: str | None
    thread_id: str | None
    text: str
    context: Mapping[str, str] = field(default_factory=dict)  # the platform's reply details
    # Values the outbox must not keep (a pairing code): sent to the platform, stored masked.
    redact: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Any) -> DeliveryJob:
        if not isinstance(data, dict) or not isinstance(data.get("target"), dict):
            raise BadRequest("malformed delivery job: expected an object with a target object")
        target = data["target"]
        required = (
            ("delivery_id", data.get("delivery_id")),
            ("text", data.get("text")),
            ("target.platform", target.get("platform")),
        )
        for name, value in required:
            if not isinstance(value, str) or not value:
                raise BadRequest(f"malformed delivery job: {name} must be a non-empty string")
        return cls(
            delivery_id=data["delivery_id"],
            turn_id=_optional_id(data.get("turn_id")),
            platform=target["platform"],
            chat_id=_optional_id(target.get("chat_id")),
            thread_id=_optional_id(target.get("thread_id")),
            text=data["text"],
            context={str(k): str(v) for k, v in (target.get("context") or {}).items()},
            redact=tuple(str(v) for v in data.get("redact") or () if v),
        )


def _optional_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadRequest("malformed delivery job: ids must be strings or numbers")
    return str(value)


def deliver(job: DeliveryJob, deps: DeliveryDeps) -> list[OutboxEntry]:
    """Send every chunk not yet sent; return the outbox entries as they were before sending."""
    sender = deps.sender_for(job.platform, job.context.get("via", ""))
    if sender is None:
        raise PermanentError(f"no way to send to {job.platform}: its credentials are not configured")
    if not job.chat_id:
        raise PermanentError("the delivery target has no chat id")
    target = Target(job.platform, job.chat_id, job.thread_id, job.context)
    chunks = split_message(job.text, text_limit(job.context.get("via") or job.platform))
    entries = []
    for index, chunk in enumerate(chunks, start=1):
        delivery_id = f"{job.delivery_id}#{index}"
        entry = deps.outbox.record(
            delivery_id,
            platform=job.platform,
            chat_id=job.chat_id,
            thread_id=job.thread_id,
            text=chunk if deps.store_sensitive else masked(chunk, job.redact),
            turn_id=job.turn_id,
            chunk=index,
            chunks=len(chunks),
            now=deps.now(),
        )
        entries.append(entry)
        if entry.status in ("sent", "recorded"):
            continue  # a repeated job: this chunk already went out
        if not deps.outbox.claim(delivery_id, deps.now()):
            raise TransientError("another worker is sending this reply; retrying after it")
        try:
            message_id = sender.send(target, chunk)
        except Exception as exc:
            deps.outbox.mark(delivery_id, "failed", deps.now(), error=f"{type(exc).__name__}: {exc}")
            logger.warning("delivery failed", extra={"platform": job.platform, "error": type(exc).__name__})
            metrics.add_metric(name="DeliveryFailed", unit=MetricUnit.Count, value=1)
            raise
        status = getattr(sender, "status", "sent")
        deps.outbox.mark(delivery_id, status, deps.now(), platform_message_id=message_id or None)
        metrics.add_metric(name="DeliverySent", unit=MetricUnit.Count, value=1)
    logger.info("delivered", extra={"platform": job.platform, "chunks": len(chunks)})
    return entries
