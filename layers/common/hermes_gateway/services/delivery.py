"""Delivery (BEHAVIOUR §6): send a message to its platform, chunk by chunk, through the outbox.

Each chunk is written to the outbox before it is sent and marked `sent` only with the platform's
message id, so a repeated delivery (the queue may hand a job over twice, or the CLI redrives it)
sends nothing twice. What happens on failure is decided here and carried out by the handler:

- RateLimited / TransientError (429, 5xx, timeouts): raised; the queue retries the job after the
  platform's `retry_after` or an exponential backoff with jitter.
- TargetGone (blocked, removed, not found): recorded on the target and the job ends; pushes to that
  target (jobs, `send_message`) are skipped until a send to it succeeds again.
- Undeliverable (any other refusal, no credentials, a malformed job): raised; the handler puts the
  job on the dead-letter queue at once (an alarm watches it) and `hermes-gateway outbox redrive`
  can send it again later.
- An answer that may or may not have posted the message (a success without a message id, or a
  claim left by a worker that stopped mid-send) is recorded `unknown` and never sent again: a
  duplicate is worse than a gap the outbox shows.
- A send the platform refused for certain whose outcome the outbox could not record (the write was
  throttled after its retries) is not left to be settled `unknown`: the job is retried, and the
  instance that knows the send failed takes its own claim back and sends again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from hermes_gateway.adapters.dynamo_outbox import OutboxEntry
from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import SessionStore
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.split import split_message
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, TargetGone, TransientError
from hermes_gateway.observability import MetricUnit, hash_id, logger, metrics
from hermes_gateway.platforms.base import Button, Sender, Target
from hermes_gateway.platforms.catalog import text_limit

KINDS = ("reply", "push")  # a reply answers the chat's own message; a push is sent unasked
MIRROR_PREFIX = "[Delivered to this chat by the agent]"
BACKOFF_BASE_SECONDS = 5
BACKOFF_CAP_SECONDS = 300
MARK_ATTEMPTS = 4
MARK_BACKOFF_SECONDS = 0.2
# Claims this instance holds on chunks whose send failed for certain but whose outcome could not be
# recorded: delivery id -> the claim's time. Lambda keeps it between invocations of a warm instance.
_UNSENT_CLAIMS: dict[str, float] = {}
_UNSENT_CLAIMS_KEPT = 1000


class Undeliverable(PermanentError):
    """Retrying cannot help: the job goes to the dead-letter queue at once."""


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
        buttons: list[dict[str, str]] | None = None,
    ) -> OutboxEntry: ...

    def claim(self, delivery_id: str, now: float) -> bool:
        """Take the chunk for sending; False while another worker holds it or once it is final."""
        ...

    def settle_stale(self, delivery_id: str, now: float) -> bool:
        """Record a claim abandoned mid-send as `unknown`; True when it was stale."""
        ...

    def reclaim(self, delivery_id: str, claimed_at: float, now: float) -> bool:
        """Take back this worker's own claim made at `claimed_at` (its send failed for certain);
        False once anything else has happened to the chunk."""
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


class GoneTargets(Protocol):
    def mark_gone(self, platform: str, chat_id: str, thread_id: str | None, reason: str, now: float) -> None: ...

    def gone_reason(self, platform: str, chat_id: str, thread_id: str | None, now: float) -> str | None: ...

    def clear_gone(self, platform: str, chat_id: str, thread_id: str | None) -> None: ...


class RecordOnly:
    """A sender for targets that are only recorded (`local`, and the web chat page's outbox)."""

    status = "recorded"

    def send(self, target: Target, text: str) -> str:
        return ""


@dataclass
class DeliveryDeps:
    outbox: Outbox
    # (platform, via) -> the sender; via names the relay a chat is reached through, or is empty.
    sender_for: Callable[[str, str], Sender | None]
    now: Callable[[], float]
    events: LifecycleEvents | None = None
    targets: GoneTargets | None = None
    # For mirroring a push into the target chat's transcript; None leaves transcripts alone.
    sessions: SessionStore | None = None
    profile: str | None = None
    # Local mode keeps redacted values in its in-memory outbox: it is the only place a newcomer
    # without a bot token can read the pairing code the bot would have sent.
    store_sensitive: bool = False
    jobs: CronDeliveries | None = None  # records a cron run's delivery status on its job
    sleep: Callable[[float], None] = time.sleep
    # This instance's claims on chunks whose send failed for certain, unrecorded (see _UNSENT_CLAIMS).
    unsent_claims: dict[str, float] = field(default_factory=lambda: _UNSENT_CLAIMS)


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
    kind: str = "reply"
    mirror: bool = False  # append what was sent to the target chat's session transcript
    correlation_id: str | None = None  # the inbound event id, when the job answers one
    session: str | None = None  # the hashed session key, for logs
    cron: tuple[str, str] | None = None  # (job id, run id) of a cron run's result
    buttons: tuple[Button, ...] = ()  # quick replies under the message's last chunk (an approval's)
    profile: str | None = None  # the named profile whose bot sends it (None: the deployment's own)

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
        kind = data.get("kind", "reply")
        if kind not in KINDS:
            raise BadRequest(f"malformed delivery job: kind must be one of {', '.join(KINDS)}")
        return cls(
            delivery_id=data["delivery_id"],
            turn_id=_optional_id(data.get("turn_id")),
            platform=target["platform"],
            chat_id=_optional_id(target.get("chat_id")),
            thread_id=_optional_id(target.get("thread_id")),
            text=data["text"],
            context={str(k): str(v) for k, v in (target.get("context") or {}).items()},
            redact=tuple(str(v) for v in data.get("redact") or () if v),
            kind=kind,
            mirror=bool(data.get("mirror", False)),
            correlation_id=_optional_id(data.get("correlation_id")),
            session=_optional_id(data.get("session")),
            cron=_cron_run(data.get("cron")),
            buttons=Button.parse_all(data.get("buttons")),
            profile=_optional_id(target.get("profile")),
        )


def _optional_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadRequest("malformed delivery job: ids must be strings or numbers")
    return str(value)


def retry_delay_seconds(receive_count: int, rng: Callable[[], float] = random.random) -> int:
    """Exponential backoff with full jitter for the next try after `receive_count` receives."""
    ceiling = min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, receive_count - 1))
    return max(1, int(ceiling / 2 + rng() * ceiling / 2))


@dataclass(frozen=True)
class DeliveryResult:
    status: str  # sent | recorded | gone | skipped | unknown
    entries: list[OutboxEntry]
    sent_chunks: int = 0


class CronDeliveries(Protocol):
    def record_delivery(self, job_id: str, run_id: str, status: str, now: float) -> bool: ...


def _cron_run(value: Any) -> tuple[str, str] | None:
    if not isinstance(value, dict):
        return None
    job_id, run_id = _optional_id(value.get("job_id")), _optional_id(value.get("run_id"))
    return (job_id, run_id) if job_id and run_id else None


def deliver(job: DeliveryJob, deps: DeliveryDeps) -> DeliveryResult:
    """Deliver; for a cron run's result also record the outcome on the job (`sent` only with the
    platform's acknowledgement). A transient failure records nothing: the job is retried."""
    if job.cron is None or deps.jobs is None:
        return _deliver(job, deps)
    try:
        result = _deliver(job, deps)
    except Undeliverable:
        deps.jobs.record_delivery(*job.cron, "failed", deps.now())
        raise
    status = result.status if result.status in ("sent", "recorded", "unknown") else "failed"
    deps.jobs.record_delivery(*job.cron, status, deps.now())
    return result


def _deliver(job: DeliveryJob, deps: DeliveryDeps) -> DeliveryResult:
    """Send every chunk not yet sent. Raises TransientError (retry) or Undeliverable (dead-letter)."""
    via = job.context.get("via", "")
    sender = deps.sender_for(job.platform, via)
    if sender is None:
        raise Undeliverable(f"no way to send to {job.platform}: its credentials are not configured")
    if not job.chat_id:
        raise Undeliverable("the delivery target has no chat id")
    detail = {"platform": job.platform, "delivery_id": job.delivery_id, "kind": job.kind}
    if _skipped_as_gone(job, job.chat_id, deps, detail):
        return DeliveryResult("skipped", [])
    target = Target(job.platform, job.chat_id, job.thread_id, job.context)
    # Through a relay, the chat's own platform's limit applies when the gateway knows it.
    limit = text_limit(job.platform, default=text_limit(via)) if via else text_limit(job.platform)
    chunks = split_message(job.text, limit)
    entries: list[OutboxEntry] = []
    sent = 0
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
            buttons=[{"label": b.label, "reply": b.reply} for b in job.buttons] if index == len(chunks) else None,
        )
        entries.append(entry)
        if entry.status in ("sent", "recorded"):
            continue  # a repeated job: this chunk already went out
        if entry.status in ("unknown", "gone"):
            return _stop(deps, detail, entries, entry.status)
        claimed_at = _claim(deps, delivery_id, detail)
        if claimed_at is None:
            return _stop(deps, detail, entries, "unknown")
        # the buttons go under the last chunk, after everything they refer to
        chunk_target = replace(target, buttons=job.buttons) if index == len(chunks) else target
        status = _send_chunk(sender, chunk_target, chunk, delivery_id, claimed_at, deps, detail)
        if status in ("unknown", "gone"):
            return _stop(deps, detail, entries, status)
        sent += 1
    if sent and deps.targets is not None and job.kind == "push":
        deps.targets.clear_gone(job.platform, job.chat_id, job.thread_id)
    status = getattr(sender, "status", "sent")
    logger.info("delivered", extra={**detail, "chunks": len(chunks), "sent_now": sent})
    _emit(deps, "delivery:sent", {**detail, "chunks": len(chunks), "status": status})
    if job.mirror and deps.sessions is not None:
        mirror(job, deps.sessions, deps.now(), deps.profile)
    return DeliveryResult(status, entries, sent)


def _skipped_as_gone(job: DeliveryJob, chat_id: str, deps: DeliveryDeps, detail: dict[str, Any]) -> bool:
    """A push to a target the platform said is gone is skipped (a reply is always tried)."""
    if job.kind != "push" or deps.targets is None:
        return False
    reason = deps.targets.gone_reason(job.platform, chat_id, job.thread_id, deps.now())
    if reason is None:
        return False
    logger.info("target is gone; push skipped", extra={**detail, "reason": reason})
    metrics.add_metric(name="DeliverySkippedGone", unit=MetricUnit.Count, value=1)
    _emit(deps, "delivery:failed", {**detail, "reason": "target_gone"})
    return True


def _claim(deps: DeliveryDeps, delivery_id: str, detail: dict[str, Any]) -> float | None:
    """The claim's time when this worker may send the chunk; None when a stale claim settled it
    `unknown`. Raises TransientError while another worker holds a fresh claim (it retries after it)."""
    now = deps.now()
    if deps.outbox.claim(delivery_id, now):
        return now
    unsent = deps.unsent_claims.get(delivery_id)
    if unsent is not None:
        reclaimed = deps.outbox.reclaim(delivery_id, unsent, now)  # a throttled one is asked again next time
        deps.unsent_claims.pop(delivery_id, None)
        if reclaimed:
            logger.info("a send that failed unrecorded is retried", extra=detail)
            return now
    if deps.outbox.settle_stale(delivery_id, deps.now()):
        logger.warning("a send was abandoned mid-way; its outcome is unknown", extra=detail)
        metrics.add_metric(name="DeliveryUnknown", unit=MetricUnit.Count, value=1)
        return None
    raise TransientError("another worker is sending this message; retrying after it")


def _send_chunk(
    sender: Sender,
    target: Target,
    chunk: str,
    delivery_id: str,
    claimed_at: float,
    deps: DeliveryDeps,
    detail: dict[str, Any],
) -> str:
    try:
        message_id = sender.send(target, chunk)
    except OutcomeUnknown as exc:
        message_id = ""
        logger.warning("delivery outcome unknown", extra={**detail, "error": str(exc)[:200]})
    except TargetGone as exc:
        _mark_unsent(deps, delivery_id, claimed_at, "gone", exc)
        if deps.targets is not None:
            deps.targets.mark_gone(target.platform, target.chat_id, target.thread_id, str(exc), deps.now())
        logger.warning("delivery target is gone", extra={**detail, "error": type(exc).__name__})
        metrics.add_metric(name="DeliveryTargetGone", unit=MetricUnit.Count, value=1)
        return "gone"
    except TransientError as exc:
        _mark_unsent(deps, delivery_id, claimed_at, "failed", exc)
        logger.warning("delivery failed; will retry", extra={**detail, "error": type(exc).__name__})
        metrics.add_metric(name="DeliveryRetried", unit=MetricUnit.Count, value=1)
        raise
    except Exception as exc:
        _mark_unsent(deps, delivery_id, claimed_at, "failed", exc)
        logger.warning("delivery refused", extra={**detail, "error": type(exc).__name__})
        raise Undeliverable(f"{type(exc).__name__}: {exc}") from exc
    if not message_id and getattr(sender, "status", "sent") == "sent":
        deps.outbox.mark(delivery_id, "unknown", deps.now(), error="the platform gave no message id")
        metrics.add_metric(name="DeliveryUnknown", unit=MetricUnit.Count, value=1)
        return "unknown"
    _mark_sent(deps, delivery_id, getattr(sender, "status", "sent"), message_id or None)
    metrics.add_metric(name="DeliverySent", unit=MetricUnit.Count, value=1)
    return "sent"


def _mark_sent(deps: DeliveryDeps, delivery_id: str, status: str, message_id: str | None) -> None:
    """The platform has the chunk: record it, retrying a throttled write a few times. If it still
    fails, the claim goes stale and the chunk is settled `unknown`: never sent twice."""
    _mark(deps, delivery_id, status, platform_message_id=message_id)


def _mark_unsent(deps: DeliveryDeps, delivery_id: str, claimed_at: float, status: str, exc: Exception) -> None:
    """The platform refused the chunk for certain: record it, retrying a throttled write a few
    times. If it still fails, the job is retried (TransientError) and this instance remembers that
    its claim may be taken back and the chunk sent again; elsewhere the claim goes stale."""
    try:
        _mark(deps, delivery_id, status, error=f"{type(exc).__name__}: {exc}")
    except TransientError as throttled:
        if len(deps.unsent_claims) >= _UNSENT_CLAIMS_KEPT:
            deps.unsent_claims.pop(next(iter(deps.unsent_claims)))
        deps.unsent_claims[delivery_id] = claimed_at
        raise TransientError("the send failed and the outbox could not record it; retrying") from throttled


def _mark(deps: DeliveryDeps, delivery_id: str, status: str, **details: Any) -> None:
    for attempt in range(MARK_ATTEMPTS):
        try:
            deps.outbox.mark(delivery_id, status, deps.now(), **details)
            return
        except TransientError:
            if attempt == MARK_ATTEMPTS - 1:
                raise
            deps.sleep(MARK_BACKOFF_SECONDS * 2**attempt)


def _stop(deps: DeliveryDeps, detail: dict[str, Any], entries: list[OutboxEntry], status: str) -> DeliveryResult:
    """The rest of the message is not sent: the target is gone, or a chunk's fate is unknown."""
    _emit(deps, "delivery:failed", {**detail, "reason": "target_gone" if status == "gone" else "outcome_unknown"})
    return DeliveryResult(status, entries)


def _emit(deps: DeliveryDeps, name: str, detail: dict[str, Any]) -> None:
    if deps.events is not None:
        deps.events.emit(name, detail)


def mirror(job: DeliveryJob, sessions: SessionStore, now: float, profile: str | None) -> bool:
    """Append a pushed message to the target chat's session transcript (BEHAVIOUR §6): as the
    assistant, or as a user line with MIRROR_PREFIX when the transcript already ends with the
    assistant. Written only when exactly one session is the chat's: a DM, or a group chat whose
    session is shared. Returns whether a row was written."""
    assert job.chat_id is not None
    found = []
    for chat_type in ("dm", "group"):
        source = SessionSource(job.platform, chat_id=job.chat_id, chat_type=chat_type, thread_id=job.thread_id)
        entry = sessions.get_route(build_session_key(source, profile=profile))
        if entry is not None:
            found.append(entry)
    if len(found) != 1:
        logger.info("mirror skipped: no single session for the target", extra={"matches": len(found)})
        return False
    session_id = found[0].session_id
    last = sessions.transcript(session_id, limit=1)
    if last and last[-1].role == "assistant":
        role, content = "user", f"{MIRROR_PREFIX} {job.text}"
    else:
        role, content = "assistant", job.text
    sessions.append_message(session_id, role, content, now, dedupe_key=f"mirror:{job.delivery_id}")
    logger.info("mirrored into the target's transcript", extra={"session": hash_id(found[0].session_key), "role": role})
    return True
