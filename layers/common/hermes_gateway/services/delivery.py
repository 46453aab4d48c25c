"""Delivery (BEHAVIOUR §6): send a message to its platform, chunk by chunk, through the outbox.

Each chunk is written to the outbox before it is sent, claimed for sending by that same write, and
marked `sent` only with the platform's message id, so a repeated delivery (Lambda may run an
asynchronous invoke twice, a turn may retry its Deliver task, the CLI redrives) sends nothing
twice. What happens on failure is decided here and carried out by the handler:

- RateLimited / TransientError (429, 5xx, timeouts): a short `retry_after` is waited out in the
  function (`deliver_waiting`); otherwise raised, and the caller retries the job (Lambda's
  asynchronous retries, or the turn's).
- TargetGone (blocked, removed, not found): recorded on the target and the job ends; pushes to that
  target (jobs, `send_message`) are skipped until a send to it succeeds again.
- WindowClosed (a push to a WhatsApp user whose last message is over 24 hours old, with no
  re-engagement template configured; or Meta's 131047 however it came): an Undeliverable, refused
  at once with that reason, never retried for hours; a cron run records `outside_window`. With a
  template, the push goes as the template instead (domain/service_window.py).
- Undeliverable (any other refusal, no credentials, a malformed job): raised; the handler puts the
  job on the dead letters at once, with the reason (an alarm watches them), and
  `hermes-gateway outbox redrive` can send it again later. The chunk the platform refused is then
  marked `dead_lettered`: a repeat of the job (a task's retry, the turn's Fail state handing its
  answer on again) sends neither it nor what follows it, which would reach the chat after the
  session's later answers. Only a redriven job (`redriven` set by the redrive) sends it again.
- An answer that may or may not have posted the message (a success without a message id, or a
  claim left by a worker that stopped mid-send) is recorded `unknown` and never sent again: a
  duplicate is worse than a gap the outbox shows.
- A send the platform refused for certain whose outcome the outbox could not record (the write was
  throttled after its retries) is not left to be settled `unknown`: the job is retried, and the
  instance that knows the send failed takes its own claim back and sends again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.media import OutboundMedia
from hermes_gateway.domain.outbox import QUEUED, STREAM_SHOWN, OutboxEntry
from hermes_gateway.domain.pacing import PaceRule
from hermes_gateway.domain.ports import DeadLetters, Leases, Routes, Transcript
from hermes_gateway.domain.service_window import (
    OUTSIDE_WINDOW_REASON,
    template_parameter,
    window_applies,
    window_closed,
)
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.split import split_message
from hermes_gateway.domain.voice import speech_text
from hermes_gateway.errors import (
    BadRequest,
    OutcomeUnknown,
    OutsideWindow,
    PermanentError,
    RateLimited,
    TargetGone,
    TransientError,
    UnknownProfile,
)
from hermes_gateway.observability import MetricUnit, correlate, hash_id, logger, metrics
from hermes_gateway.platforms.base import Button, Sender, Target, editor_of, reengager_of
from hermes_gateway.platforms.catalog import VOICE_PLATFORMS, text_limit
from hermes_gateway.platforms.mailbox import Mailbox, mailbox_of
from hermes_gateway.platforms.outbound_media import MediaFile, MediaSender, captions, link_line, media_sender_of
from hermes_gateway.services.outbound_media import Fetching, MediaRefused, outbound_key, stage
from hermes_gateway.services.speech import Speaking, spoken_key, stage_speech

KINDS = ("reply", "push")  # a reply answers the chat's own message; a push is sent unasked
MIRROR_PREFIX = "[Delivered to this chat by the agent]"
MARK_ATTEMPTS = 4
MARK_BACKOFF_SECONDS = 0.2
INLINE_RATE_LIMIT_SECONDS = 5.0  # a 429 asking for at most this long is waited out in the function
# A turn's answers (the Deliver task's list, or the Respond task sending its own answer) wait out
# rate limits this long at most, within their task's time limit, and are then tried again.
TURN_WAIT_BUDGET_SECONDS = 5.0
# A Respond task that sends its own answer has at least 40 s of its 85 left (turn/finish.py's
# END_HERE_WITHIN_SECONDS): the answer's files are fetched within this part of it.
TURN_MEDIA_SECONDS = 25.0
# Deployed, a chunk's outbox row keeps this much of its text (with a byte cap for wide characters):
# with the ids, status and times a row stays under 1 KB, one write unit per write.
OUTBOX_PREVIEW_CHARS = 300
OUTBOX_PREVIEW_BYTES = 600
# Claims this instance holds on chunks whose send failed for certain but whose outcome could not be
# recorded: delivery id -> the claim's time. Lambda keeps it between invocations of a warm instance.
_UNSENT_CLAIMS: dict[str, float] = {}
_UNSENT_CLAIMS_KEPT = 1000


DEAD_LETTERED = "dead_lettered"  # a chunk the platform refused whose job is on the dead letters


class Undeliverable(PermanentError):
    """Retrying cannot help: the job goes to the dead-letter queue at once. `chunk`: the outbox row
    of the part the platform refused, marked `dead_lettered` once the job is on the dead letters."""

    def __init__(self, reason: str, chunk: str | None = None) -> None:
        super().__init__(reason)
        self.chunk = chunk


class WindowClosed(Undeliverable):
    """The platform's customer service window with the person is closed (domain/service_window.py)."""


class Outbox(Protocol):
    def record_claimed(
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
        media: list[dict[str, str]] | None = None,
        status: str = "sending",
        platform_message_id: str | None = None,
        mailbox: tuple[str, dict[str, Any]] | None = None,
    ) -> tuple[OutboxEntry, bool]:
        """Write the chunk as claimed for sending (`sending` at `now`) unless it exists, in one
        write; what is stored, and True when this call wrote (and so claimed) it. A streamed
        answer's message is written `streaming`, with its platform message id; a chunk for a
        forwarder's mailbox (its name, the letter) `queued`, with the letter."""
        ...

    def claim(self, delivery_id: str, now: float, reopen: bool = False) -> bool:
        """Take an existing chunk for sending; False while another worker holds it or once it is
        final. `reopen`: a `dead_lettered` chunk may be taken too (a redriven job's)."""
        ...

    def complete_stream(self, delivery_id: str, now: float, *, text: str) -> OutboxEntry | None:
        """A streamed answer's message row, `streaming`, marked `sent` with the `text` its message
        shows now, in one conditional write; what is stored then, or None when it is not `streaming`."""
        ...

    def mark_dead_lettered(self, delivery_id: str, now: float) -> bool:
        """A `failed` chunk whose job is now on the dead letters becomes `dead_lettered`; True if so."""
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
        text: str | None = None,
    ) -> None:
        """Set the chunk's status (and what is given: its message id, the error, the text it shows)."""
        ...


class Pacing(Protocol):
    def reserve(self, place: str, now: float, interval: float, tolerance: float, ahead: float) -> tuple[float, bool]:
        """Take the next send slot of `place` (one chat of one bot): (its time, True), now when the
        chat is quiet; or (the time of its next free slot, False), nothing taken, when that is more
        than `ahead` seconds off."""
        ...


class FailureReports(Protocol):
    def fail_sent(self, delivery_id: str, *, platform: str, platform_message_id: str, error: str, now: float) -> str:
        """Mark a sent chunk failed; "marked", else the row's status ("missing": no such row)."""
        ...


class GoneTargets(Protocol):
    def mark_gone(self, platform: str, chat_id: str, thread_id: str | None, reason: str, now: float) -> None: ...

    def gone_reason(self, platform: str, chat_id: str, thread_id: str | None, now: float) -> str | None: ...

    def clear_gone(self, platform: str, chat_id: str, thread_id: str | None) -> None: ...


class RecordOnly:
    """A sender for targets that are only recorded (`local`, and the web chat page's outbox):
    a file's outbox row names its stored object, which the web chat page shows."""

    status = "recorded"
    caption_limit = 8000

    def send(self, target: Target, text: str) -> str:
        return ""

    def send_media(self, target: Target, media: MediaFile, caption: str) -> str:
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
    sessions: Mirror | None = None
    profile: str | None = None
    # Local mode keeps redacted values in its in-memory outbox: it is the only place a newcomer
    # without a bot token can read the pairing code the bot would have sent.
    store_sensitive: bool = False
    jobs: CronDeliveries | None = None  # records a cron run's delivery status on its job
    sleep: Callable[[float], None] = time.sleep
    # This instance's claims on chunks whose send failed for certain, unrecorded (see _UNSENT_CLAIMS).
    unsent_claims: dict[str, float] = field(default_factory=lambda: _UNSENT_CLAIMS)
    # How much of a chunk's text its outbox row keeps (None: all of it)
    outbox_text_chars: int | None = OUTBOX_PREVIEW_CHARS
    # platform -> its reply_to_mode: which chunks of a reply are sent as replies to the user's message
    reply_to_mode: Callable[[str], str] = lambda platform: "off"
    # How a reply's MEDIA references are fetched into the media bucket (None: no bucket bound)
    media: Fetching | None = None
    # How an answer whose job says `speak` is spoken into the bucket (None: tts.provider none)
    speaking: Speaking | None = None
    # Where a platform limits one chat's sends: the chats' send slots, and (platform, chat id) ->
    # the chat's rule (None: not paced)
    pacing: Pacing | None = None
    pace_for: Callable[[str, str], PaceRule | None] = lambda platform, chat_id: None
    # A send slot is waited for until then (deliver_waiting: its budget); None: INLINE_RATE_LIMIT_SECONDS
    pace_until: float | None = None
    # The `delivered` line at INFO; False: at DEBUG, when the caller's own line says it (the turn
    # that sends its answer itself: the agent's `agent:end`), one line per function and message.
    logs_delivered: bool = True
    # (platform, chat id) -> when the person last wrote (last_heard: their route, one read), asked
    # only for a push to a person on a platform with a service window; None: not known here.
    heard: Callable[[str, str], float | None] | None = None


def masked(text: str, secrets: tuple[str, ...]) -> str:
    for value in secrets:
        text = text.replace(value, "\u2022" * len(value))
    return text


def preview(text: str, chars: int | None) -> str:
    """What an outbox row keeps of a chunk: its first `chars` characters (at most
    OUTBOX_PREVIEW_BYTES of UTF-8), or all of it when `chars` is None."""
    if chars is None or (len(text) <= chars and len(text.encode("utf-8")) <= OUTBOX_PREVIEW_BYTES):
        return text
    cut = text[:chars].encode("utf-8")[:OUTBOX_PREVIEW_BYTES].decode("utf-8", "ignore")
    return cut + "\u2026"


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
    # The session whose stored files the job may attach (the turn's own, set by the gateway's
    # code, never by the model; BEHAVIOUR §11). None: no stored file at all (a cron run, a push).
    session_id: str | None = None
    cron: tuple[str, str] | None = None  # (job id, run id) of a cron run's result
    buttons: tuple[Button, ...] = ()  # quick replies under the message's last chunk (an approval's)
    profile: str | None = None  # the named profile whose bot sends it (None: the deployment's own)
    reply_to: str | None = None  # the platform's id of the user's message a reply answers
    media: tuple[OutboundMedia, ...] = ()  # files attached to the message (references, never bytes)
    # The answer's first chunk was streamed (services/turn/stream.py): "shown" when the message
    # shows it exactly, "partial" when it is still to be edited to it; None: not streamed.
    streamed: str | None = None
    # Handed over again by `outbox redrive`: a chunk that is `dead_lettered` is sent again.
    redriven: bool = False
    # The chat wants the answer spoken too (domain/voice.py): a voice note beside the text, where
    # speech is set up and the platform shows one.
    speak: bool = False

    @classmethod
    def from_dict(cls, data: Any) -> DeliveryJob:
        if not isinstance(data, dict) or not isinstance(data.get("target"), dict):
            raise BadRequest("malformed delivery job: expected an object with a target object")
        target = data["target"]
        media = _media_of(data.get("media"))
        required = (
            ("delivery_id", data.get("delivery_id")),
            ("text", data.get("text") if not media or data.get("text") else "-"),  # a file may go alone
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
            text=str(data.get("text") or ""),
            context={str(k): str(v) for k, v in (target.get("context") or {}).items()},
            redact=tuple(str(v) for v in data.get("redact") or () if v),
            kind=kind,
            mirror=bool(data.get("mirror", False)),
            correlation_id=_optional_id(data.get("correlation_id")),
            session=_optional_id(data.get("session")),
            session_id=_optional_id(data.get("session_id")),
            cron=_cron_run(data.get("cron")),
            buttons=Button.parse_all(data.get("buttons")),
            profile=_optional_id(target.get("profile")),
            # a push is sent unasked: it answers no message
            reply_to=_optional_id(data.get("reply_to_message_id")) if kind == "reply" else None,
            media=media,
            streamed=_optional_id(data.get("streamed")),
            redriven=data.get("redriven") is True,
            speak=data.get("speak") is True,
        )


def _media_of(raw: Any) -> tuple[OutboundMedia, ...]:
    """A job's `media`: [{"reference", "kind"?, "name"?}]; an entry without a reference is left out."""
    if not isinstance(raw, list):
        return ()
    found = (OutboundMedia.from_dict(item) for item in raw if isinstance(item, dict))
    return tuple(m for m in found if m.reference)


def _optional_id(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise BadRequest("malformed delivery job: ids must be strings or numbers")
    return str(value)


@dataclass(frozen=True)
class DeliveryResult:
    # sent | recorded | queued (in a forwarder's mailbox) | gone | skipped | unknown | dead_lettered
    # (a repeat of a refused job)
    status: str
    entries: list[OutboxEntry]
    sent_chunks: int = 0


class CronDeliveries(Protocol):
    def record_delivery(self, job_id: str, run_id: str, status: str, now: float) -> bool: ...


def _cron_run(value: Any) -> tuple[str, str] | None:
    if not isinstance(value, dict):
        return None
    job_id, run_id = _optional_id(value.get("job_id")), _optional_id(value.get("run_id"))
    return (job_id, run_id) if job_id and run_id else None


def run_job(
    raw: Any,
    deps_for: Callable[[str | None], DeliveryDeps],
    dead_letters: DeadLetters,
    events: LifecycleEvents | None,
    wait_budget: float,
    media_deadline: float | None = None,
) -> str:
    """Deliver one job as it came (a dict): its outcome (sent, recorded, gone, skipped, unknown,
    dead_lettered). A job that can never succeed (malformed, an unknown profile, refused by the
    platform) goes to the dead letters at once, with the reason, and is done. Raises RateLimited
    or TransientError for the caller to retry. `deps_for(profile)`: the profile's delivery ports.
    `media_deadline` (time.monotonic()): the files of the reply are fetched by then, or go without."""
    try:
        job = DeliveryJob.from_dict(raw)
    except BadRequest as exc:
        return dead_letter(raw, f"malformed job: {exc}", dead_letters, events)
    correlate(job.correlation_id or job.turn_id or job.delivery_id, job.session)
    try:
        deps = deps_for(job.profile)
    except UnknownProfile as exc:  # the profile was removed from the deployment since the job was made
        return dead_letter(raw, str(exc), dead_letters, events)
    try:
        return deliver_waiting(job, deps, wait_budget, media_deadline).status
    except Undeliverable as exc:
        outcome = dead_letter(raw, str(exc), dead_letters, events)
        if exc.chunk is not None:
            _settle_dead_lettered(deps, exc.chunk)
        return outcome


def _settle_dead_lettered(deps: DeliveryDeps, delivery_id: str) -> None:
    """The refused chunk's job is on the dead letters: the chunk waits for a redrive (marked after
    the dead letter is written, so a crash in between leaves it `failed`, for the job's retry). A
    throttled write is tried again as a mark is."""
    try:
        _retried(deps, lambda: deps.outbox.mark_dead_lettered(delivery_id, deps.now()))
    except Exception as exc:  # noqa: BLE001 - the job is on the dead letters: its outcome is decided
        logger.warning(
            "the refused chunk stays failed; a repeat of its job may try it again",
            extra={"delivery_id": delivery_id, "error": type(exc).__name__},
        )


def dead_letter(raw: Any, reason: str, dead_letters: DeadLetters, events: LifecycleEvents | None) -> str:
    """Put the job on the dead letters now, with the reason; it is done here."""
    dead_letters.send({"kind": "delivery", "reason": reason[:1000], "job": raw})
    logger.error("delivery dead-lettered", extra={"reason": reason[:300]})
    delivery_id = raw.get("delivery_id") if isinstance(raw, dict) else None
    if events is not None:
        events.emit("delivery:failed", {"reason": "dead_lettered", "delivery_id": delivery_id})
    metrics.add_metric(name="DeliveryDeadLettered", unit=MetricUnit.Count, value=1)
    return "dead_lettered"


def deliver_waiting(
    job: DeliveryJob, deps: DeliveryDeps, budget_seconds: float, media_deadline: float | None = None
) -> DeliveryResult:
    """Deliver, waiting out a platform's short rate limits (at most INLINE_RATE_LIMIT_SECONDS each,
    `budget_seconds` in all) in the function instead of failing the job: the chunks already sent
    are skipped when it goes on. A longer one is raised for the caller to retry later. A paced
    chat's send slot is waited for until `budget_seconds` from now. The job's files are fetched
    by `media_deadline` (time.monotonic()), all of them together."""
    waited = 0.0
    deps = replace(deps, pace_until=deps.now() + max(budget_seconds, 0.0))
    if media_deadline is not None and deps.media is not None:
        deps = replace(deps, media=replace(deps.media, deadline=media_deadline))
    while True:
        try:
            return deliver(job, deps)
        except RateLimited as exc:
            if exc.retry_after > INLINE_RATE_LIMIT_SECONDS or waited + exc.retry_after > budget_seconds:
                raise
            logger.info("rate limited; waiting", extra={"platform": job.platform, "seconds": exc.retry_after})
            deps.sleep(exc.retry_after)
            waited += exc.retry_after


def deliver(job: DeliveryJob, deps: DeliveryDeps) -> DeliveryResult:
    """Deliver; for a cron run's result also record the outcome on the job (`sent` only with the
    platform's acknowledgement). A transient failure records nothing: the job is retried."""
    if job.cron is None or deps.jobs is None:
        return _deliver(job, deps)
    try:
        result = _deliver(job, deps)
    except Undeliverable as exc:
        failed = OUTSIDE_WINDOW_REASON if isinstance(exc, WindowClosed) else "failed"
        deps.jobs.record_delivery(*job.cron, failed, deps.now())
        raise
    # queued: in a forwarder's mailbox, which marks its outbox row sent when signal-cli has it
    status = result.status if result.status in ("sent", "recorded", "unknown", QUEUED) else "failed"
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
    parts = _reengaging(job, deps, sender) if _outside_window(job, deps) else _parts(job, deps, sender, limit)
    entries: list[OutboxEntry] = []
    outcome = _send_parts(job, deps, sender, target, parts, entries, detail)
    if isinstance(outcome, str):
        return _stop(deps, detail, entries, outcome)
    sent, refused = outcome
    if refused:  # a file the platform refused: the chat is told, with the caption it was to carry
        note = _Part(f"{job.delivery_id}#n", _joined(*refused))
        outcome = _send_parts(job, deps, sender, target, [note], entries, detail, first=len(parts) + 1)
        if isinstance(outcome, str):
            return _stop(deps, detail, entries, outcome)
        sent += outcome[0]
    return _delivered(job, deps, detail, sender, entries, sent)


@dataclass(frozen=True)
class _Part:
    """One message of a delivery, with its own outbox row: a chunk of the text, or a file (with
    the text as its caption when it fits), or the re-engagement template carrying the text."""

    delivery_id: str
    text: str
    media: MediaFile | None = None
    buttons: tuple[Button, ...] = ()
    template: bool = False


def _outside_window(job: DeliveryJob, deps: DeliveryDeps) -> bool:
    """A push to a person whose platform's service window with them is closed (a reply answers a
    message just received: never asked)."""
    if job.kind != "push" or deps.heard is None or not job.chat_id or job.context.get("via"):
        return False
    if not window_applies(job.platform, job.chat_id, job.context.get("recipient_type")):
        return False
    return window_closed(job.platform, deps.heard(job.platform, job.chat_id), deps.now())


def _reengaging(job: DeliveryJob, deps: DeliveryDeps, sender: Sender) -> list[_Part]:
    """Outside the window: the text as the re-engagement template (files and buttons do not go
    with it), or WindowClosed when none is configured."""
    found = reengager_of(sender)
    template = found.reengage_template if found is not None else None
    logger.info("outside the service window", extra={"platform": job.platform, "template": bool(template)})
    metrics.add_metric(name="DeliveryOutsideWindow", unit=MetricUnit.Count, value=1)
    if template is None:
        raise WindowClosed(
            f"{job.platform}: the person last wrote more than 24 hours ago and no re-engagement template is "
            f"configured (platforms.{job.platform}.reengage_template): {OUTSIDE_WINDOW_REASON}"
        )
    return [_Part(f"{job.delivery_id}#t", template_parameter(job.text), template=True)]


def _parts(job: DeliveryJob, deps: DeliveryDeps, sender: Sender, limit: int) -> list[_Part]:
    """The text's chunks, then the spoken answer and the files: natively where the sender can,
    else as links in the text; the text is the first file's caption when it fits, carries no
    buttons and the platform shows a caption on a file of that kind."""
    text, files = job.text, list[tuple[str, MediaFile]]()
    # (a forwarder's mailbox attaches files as the platform does: its letters carry them)
    native = media_sender_of(sender) or mailbox_of(sender)
    spoken, spoken_note = _spoken(job, deps, native)
    if spoken is not None:
        files.append((f"{job.delivery_id}#v", spoken))  # its own part id: the files keep theirs
    if job.media:
        staged, notes = _staged(job, deps)
        text = _joined(text, *notes)
        if native is None:
            text, staged = _joined(text, *(link_line(f) for f in staged)), []
        files += [(f"{job.delivery_id}#m{n}", f) for n, f in enumerate(staged, start=1)]
    text = _joined(text, spoken_note)
    caption = ""
    # (a streamed answer's text is in its message already: never a file's caption)
    captioned = files and native is not None and captions(native, files[0][1].kind)
    if captioned and native is not None and not job.buttons and not job.streamed and len(text) <= native.caption_limit:
        caption, text = text, ""
    chunks = split_message(text, limit) if text.strip() else []
    parts = [
        # the buttons go under the last chunk, after everything they refer to
        _Part(f"{job.delivery_id}#{i}", chunk, buttons=job.buttons if i == len(chunks) else ())
        for i, chunk in enumerate(chunks, start=1)
    ]
    parts += [_Part(part_id, caption if n == 0 else "", f) for n, (part_id, f) in enumerate(files)]
    return parts


def _spoken(job: DeliveryJob, deps: DeliveryDeps, native: MediaSender | Mailbox | None) -> tuple[MediaFile | None, str]:
    """The answer spoken (services/speech.py) when its job asks and it can be: speech is set up,
    the chat's platform shows a voice note (not through a relay) and there is a bucket to keep it
    in; with a note for the chat when the speaking failed."""
    if not job.speak or deps.speaking is None or deps.media is None or native is None:
        return None, ""
    if job.platform not in VOICE_PLATFORMS or job.context.get("via"):
        return None, ""
    words = speech_text(job.text, deps.speaking.max_chars)
    if not words:  # a file alone, or only code and links: nothing to say
        return None, ""
    key = spoken_key(deps.profile, job.session, job.delivery_id)
    try:
        return stage_speech(words, key, deps.media, deps.speaking), ""
    except MediaRefused as exc:
        return None, f"(I could not say this aloud: {exc}.)"


def _staged(job: DeliveryJob, deps: DeliveryDeps) -> tuple[list[MediaFile], list[str]]:
    """The job's files, fetched into the media bucket once (a retry finds them there), and a note
    for each that cannot be attached. A throttled bucket raises TransientError (the job retries)."""
    if deps.media is None:
        return [], [f"(I could not attach {len(job.media)} file(s): no media bucket is set up.)"]
    files: list[MediaFile] = []
    notes: list[str] = []
    most = deps.media.max_files
    for n, media in enumerate(job.media[:most], start=1):
        key = outbound_key(deps.profile, job.session, job.delivery_id, n)
        try:  # one file at a time: streamed into the bucket, its bytes read again only to send it
            files.append(stage(media, key, deps.profile, deps.media, session_id=job.session_id))
        except MediaRefused as exc:
            logger.info("media not attached", extra={"delivery_id": job.delivery_id, "reason": str(exc)[:120]})
            notes.append(f"(I could not attach {media.name or _shown(media.reference)}: {exc}.)")
    if len(job.media) > most:
        notes.append(f"({len(job.media) - most} more files were not attached: {most} at most.)")
    return files, notes


def _shown(reference: str) -> str:
    """How a note names a reference: its last path segment (never a query string: tokens live there)."""
    name = reference.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return name[:80] or "a file"


def _joined(*texts: str) -> str:
    return "\n\n".join(t for t in texts if t.strip())


def _send_parts(
    job: DeliveryJob,
    deps: DeliveryDeps,
    sender: Sender,
    target: Target,
    parts: list[_Part],
    entries: list[OutboxEntry],
    detail: dict[str, Any],
    first: int = 1,
) -> str | tuple[int, list[str]]:
    """Send every part not yet sent: how many were sent now and the notes of files the platform
    refused; or "unknown" / "gone" / "dead_lettered" when the rest of the message is not sent."""
    sent, refused = 0, []
    count = first - 1 + len(parts)
    mailbox = mailbox_of(sender)
    for index, part in enumerate(parts, start=first):
        if mailbox is not None:
            entry, posted = _post_letter(job, deps, mailbox, target, part, index, count)
            entries.append(entry)
            sent += posted
            continue
        entry, claimed_at = _record_chunk(job, deps, part, index, count, detail)
        entries.append(entry)
        if claimed_at == _ALREADY_SENT:
            if entry.status == "refused":
                refused.append(_refusal_note(part))
            continue  # a repeated job: this part already went out (or was refused for good)
        if claimed_at == _DEAD_LETTERED:
            return DEAD_LETTERED  # neither it nor what follows it: they wait for the redrive
        if claimed_at is None:
            return entry.status if entry.status == "gone" else "unknown"
        if claimed_at == _STREAMED:
            outcome = _complete_stream(job, deps, sender, replace(target, delivery_id=part.delivery_id), part, entry)
            if outcome != "sent":
                return outcome
            sent += 1
            continue
        if not (job.streamed and index == 1):  # (a streamed answer's message is posted already)
            _pace(job, deps, part.delivery_id, claimed_at, detail)
        part_target = replace(
            target,
            delivery_id=part.delivery_id,
            buttons=part.buttons,
            reply_to=_replying_to(job, index, deps),
            earlier_try_at=entry.created_at if entry.status == "failed" else None,
        )
        status = _send_chunk(sender, part_target, part, claimed_at, deps, detail)
        if status in ("unknown", "gone"):
            return status
        if status == "refused":
            refused.append(_refusal_note(part))
        else:
            sent += 1
    return sent, refused


def _pace(job: DeliveryJob, deps: DeliveryDeps, delivery_id: str, claimed_at: float, detail: dict[str, Any]) -> None:
    """Wait for the chat's next send slot where its platform limits one chat's sends, instead of
    meeting the platform's 429. A slot past `deps.pace_until` (the caller's wait budget; else
    INLINE_RATE_LIMIT_SECONDS off) is not waited for: the chunk goes back to `pending` and
    RateLimited is raised for the caller's retry."""
    until = deps.pace_until
    ahead = INLINE_RATE_LIMIT_SECONDS if until is None else max(0.0, until - deps.now())
    found = _reserve(deps, job.platform, job.chat_id or "", ahead)
    if found is None:
        return
    now, at, taken = found
    if not taken:
        paced = RateLimited(at - now, f"the chat's sends are paced; its next slot is in {at - now:.1f} s")
        _mark_unsent(deps, delivery_id, claimed_at, "pending", paced)
        metrics.add_metric(name="DeliveryPaced", unit=MetricUnit.Count, value=1)
        raise paced
    if at - now >= 0.01:  # (less is the arithmetic of the slots' times)
        logger.info("waiting for the chat's next send slot", extra={**detail, "seconds": round(at - now, 2)})
        deps.sleep(at - now)


def send_slot(deps: DeliveryDeps, platform: str, chat_id: str) -> float:
    """Seconds until the chat's next send slot: 0 when one was taken now for a send that goes at
    once (a streamed answer's post), or when the chat is not paced or pacing cannot be asked."""
    found = _reserve(deps, platform, chat_id, 0.0)
    return 0.0 if found is None or found[2] else max(0.0, found[1] - found[0])


def _reserve(deps: DeliveryDeps, platform: str, chat_id: str, ahead: float) -> tuple[float, float, bool] | None:
    """(now, the slot's time, whether it was taken) for a paced chat; None when the chat is not
    paced, or when pacing cannot be asked (DynamoDB throttling): the send goes, and the
    platform's 429 still holds it back."""
    rule = deps.pace_for(platform, chat_id) if deps.pacing is not None else None
    if rule is None or deps.pacing is None:
        return None
    now = deps.now()
    try:
        at, taken = deps.pacing.reserve(
            f"{platform}#{deps.profile or ''}#{chat_id}", now, rule.interval, rule.tolerance, ahead
        )
    except TransientError:
        logger.warning("send pacing unavailable; sending unpaced", extra={"platform": platform})
        return None
    return now, at, taken


def _refusal_note(part: _Part) -> str:
    """What the chat is told of a file its platform refused: the caption it carried, and why not."""
    name = part.media.name if part.media is not None else "a file"
    return _joined(part.text, f"(I could not attach {name}: the platform refused it.)")


_ALREADY_SENT = -1.0  # _record_chunk: nothing to send
_STREAMED = -2.0  # _record_chunk: the chunk's message was posted while the model wrote it
_DEAD_LETTERED = -3.0  # _record_chunk: the chunk was refused and its job is on the dead letters


def _complete_stream(
    job: DeliveryJob, deps: DeliveryDeps, sender: Sender, target: Target, part: _Part, entry: OutboxEntry
) -> str:
    """A streamed answer's message (posted and edited by the Respond task): edited to the exact
    chunk unless the job says it shows it, then marked sent; never posted again. "sent" or "gone".
    Raises TransientError (retry: the row stays `streaming`) or Undeliverable."""
    if entry.status == "sent":
        return "sent"  # completed as it was recorded (_stream_shown)
    assert entry.platform_message_id is not None
    detail = {"platform": job.platform, "delivery_id": part.delivery_id, "kind": job.kind}
    if job.streamed != STREAM_SHOWN or job.media:  # (a file's note may have joined the text)
        editor = editor_of(sender)
        try:
            if editor is None:
                raise PermanentError(f"{job.platform} cannot edit the streamed message")
            editor.edit(target, entry.platform_message_id, part.text)
        except TargetGone as exc:
            _mark(deps, part.delivery_id, "gone", error=f"{type(exc).__name__}: {exc}")
            logger.warning("delivery target is gone", extra={**detail, "error": type(exc).__name__})
            return "gone"
        except TransientError:
            logger.warning("the streamed message's last edit failed; will retry", extra=detail)
            raise
        except Exception as exc:
            _mark(deps, part.delivery_id, "failed", error=f"{type(exc).__name__}: {exc}")
            raise Undeliverable(f"{type(exc).__name__}: {exc}", chunk=part.delivery_id) from exc
    # The row was written at the message's first post, with the text shown then: it ends with the
    # answer's, as the chat does (the same write that marks it sent).
    final = _row_text(job, deps, part.text)
    _mark(deps, part.delivery_id, "sent", platform_message_id=entry.platform_message_id, text=final)
    metrics.add_metric(name="DeliveryStreamCompleted", unit=MetricUnit.Count, value=1)
    return "sent"


def _row_text(job: DeliveryJob, deps: DeliveryDeps, chunk: str) -> str:
    """What a chunk's outbox row keeps of its text (a preview deployed; redacted unless local)."""
    return preview(chunk if deps.store_sensitive else masked(chunk, job.redact), deps.outbox_text_chars)


def _stream_shown(deps: DeliveryDeps, delivery_id: str, text: str) -> OutboxEntry | None:
    """A streamed answer whose message shows it exactly (the job's `streamed` is STREAM_SHOWN): its row,
    `streaming` since its first post, becomes `sent` with the answer's text in one conditional
    write, without recording the chunk first (a write whose condition fails is billed as one).
    None when the row is not `streaming` (a repeated job: the usual path finds it sent)."""
    found: list[OutboxEntry | None] = []
    _retried(deps, lambda: found.append(deps.outbox.complete_stream(delivery_id, deps.now(), text=text)))
    if found[-1] is not None:
        metrics.add_metric(name="DeliveryStreamCompleted", unit=MetricUnit.Count, value=1)
    return found[-1]


def _replying_to(job: DeliveryJob, chunk: int, deps: DeliveryDeps) -> str | None:
    """The user's message this chunk is sent as a reply to: with `first`, the first chunk only
    (the rest follow it, a reply each would quote the same message again); with `all`, each."""
    if job.reply_to is None:
        return None
    mode = deps.reply_to_mode(job.platform)
    return job.reply_to if mode == "all" or (mode == "first" and chunk == 1) else None


def _record_chunk(
    job: DeliveryJob, deps: DeliveryDeps, part: _Part, index: int, count: int, detail: dict[str, Any]
) -> tuple[OutboxEntry, float | None]:
    """The part's outbox row, recorded and claimed in one write (or found from an earlier try),
    and the claim's time: `_ALREADY_SENT` when it went out before (or its file was refused for
    good), None when its fate is unknown or its target gone, `_DEAD_LETTERED` when it was refused
    and the job is not a redrive's (in both the rest of the message is not sent), `_STREAMED` when
    its message was posted while the model wrote it (the row already `sent` when the job says the
    message shows the chunk: one write, no record first)."""
    now = deps.now()
    delivery_id, chunk, media = part.delivery_id, part.text, part.media
    if index == 1 and job.streamed == STREAM_SHOWN and not job.media and media is None:
        shown = _stream_shown(deps, delivery_id, _row_text(job, deps, chunk))
        if shown is not None:
            return shown, _STREAMED
    entry, claimed = _record(job, deps, part, index, count, now)
    if claimed:
        return entry, now
    if entry.status in ("sent", "recorded", "refused"):
        return entry, _ALREADY_SENT
    if entry.status in ("unknown", "gone"):
        return entry, None
    if entry.status == "streaming" and entry.platform_message_id and media is None:
        return entry, _STREAMED
    if entry.status == DEAD_LETTERED:
        if not job.redriven:
            return entry, _DEAD_LETTERED
        logger.info("a redrive sends a dead-lettered chunk again", extra=detail)
    return entry, _claim(deps, delivery_id, detail, reopen=job.redriven)


def _record(
    job: DeliveryJob,
    deps: DeliveryDeps,
    part: _Part,
    index: int,
    count: int,
    now: float,
    mailbox: tuple[str, dict[str, Any]] | None = None,
) -> tuple[OutboxEntry, bool]:
    """The part's outbox row, written unless it exists (one conditional write)."""
    chunk, media = part.text, part.media
    return deps.outbox.record_claimed(
        part.delivery_id,
        platform=job.platform,
        chat_id=job.chat_id,
        thread_id=job.thread_id,
        text=_row_text(job, deps, chunk),
        turn_id=job.turn_id,
        chunk=index,
        chunks=count,
        now=now,
        buttons=[{"label": b.label, "reply": b.reply} for b in part.buttons] or None,
        media=[{"key": media.key, "name": media.name, "kind": media.kind, "mime": media.mime}] if media else None,
        mailbox=mailbox,
    )


def _post_letter(
    job: DeliveryJob, deps: DeliveryDeps, mailbox: Mailbox, target: Target, part: _Part, index: int, count: int
) -> tuple[OutboxEntry, int]:
    """A part for a forwarder to collect (platforms/mailbox.py): its row is written `queued` with
    the letter in the one write that records it, and the forwarder's report marks it sent. A
    repeated job finds the row and posts nothing again, whatever the forwarder made of it since.
    The letter holds the whole text, a redacted value too (a pairing code): the forwarder must be
    given it, and it goes from the row when the letter is settled. (row, 1 when posted now)"""
    letter_target = replace(target, delivery_id=part.delivery_id, reply_to=_replying_to(job, index, deps))
    try:
        letter = mailbox.letter(letter_target, part.text, part.media)
    except PermanentError as exc:
        raise Undeliverable(f"{type(exc).__name__}: {exc}") from exc
    entry, posted = _record(job, deps, part, index, count, deps.now(), mailbox=(mailbox.mailbox, letter))
    if posted:
        metrics.add_metric(name="DeliveryQueued", unit=MetricUnit.Count, value=1)
    return entry, int(posted)


def _delivered(
    job: DeliveryJob, deps: DeliveryDeps, detail: dict[str, Any], sender: Sender, entries: list[OutboxEntry], sent: int
) -> DeliveryResult:
    """Every chunk is out: a gone mark cleared, delivery:sent, a push mirrored into its chat."""
    if sent and deps.targets is not None and job.kind == "push" and job.chat_id:
        deps.targets.clear_gone(job.platform, job.chat_id, job.thread_id)
    status = getattr(sender, "status", "sent")
    (logger.info if deps.logs_delivered else logger.debug)(
        "delivered", extra={**detail, "chunks": len(entries), "sent_now": sent}
    )
    _emit(deps, "delivery:sent", {**detail, "chunks": len(entries), "status": status})
    if job.mirror and deps.sessions is not None and sent:
        # Only the delivery that sent it mirrors it: a repeated job (everything already sent)
        # writes no second row.
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


def _claim(deps: DeliveryDeps, delivery_id: str, detail: dict[str, Any], reopen: bool = False) -> float | None:
    """For a chunk recorded before (a retried job): the claim's time when this worker may send
    it; None when a stale claim settled it `unknown`. Raises TransientError while another worker
    holds a fresh claim (it retries after it). `reopen`: a `dead_lettered` chunk may be claimed."""
    now = deps.now()
    if deps.outbox.claim(delivery_id, now, reopen=reopen):
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
    sender: Sender, target: Target, part: _Part, claimed_at: float, deps: DeliveryDeps, detail: dict[str, Any]
) -> str:
    """Send one part: "sent", "unknown", "gone", or "refused" (a file the platform refused for
    good: the chat is told instead). Raises TransientError (retry) or Undeliverable."""
    delivery_id = part.delivery_id
    try:
        message_id = _send_part(sender, target, part)
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
        refused = part.media is not None and isinstance(exc, PermanentError) and not isinstance(exc, OutsideWindow)
        _mark_unsent(deps, delivery_id, claimed_at, "refused" if refused else "failed", exc)
        logger.warning("delivery refused", extra={**detail, "error": type(exc).__name__})
        if refused:
            metrics.add_metric(name="DeliveryMediaRefused", unit=MetricUnit.Count, value=1)
            return "refused"
        closed = WindowClosed if isinstance(exc, OutsideWindow) else Undeliverable  # Meta's 131047, still
        raise closed(f"{type(exc).__name__}: {exc}", chunk=delivery_id) from exc
    if not message_id and getattr(sender, "status", "sent") == "sent":
        deps.outbox.mark(delivery_id, "unknown", deps.now(), error="the platform gave no message id")
        metrics.add_metric(name="DeliveryUnknown", unit=MetricUnit.Count, value=1)
        return "unknown"
    _mark_sent(deps, delivery_id, getattr(sender, "status", "sent"), message_id or None)
    metrics.add_metric(name="DeliverySent", unit=MetricUnit.Count, value=1)
    return "sent"


def _send_part(sender: Sender, target: Target, part: _Part) -> str:
    reengaging = reengager_of(sender) if part.template else None
    if reengaging is not None:
        return reengaging.reengage(target, part.text)
    native = media_sender_of(sender) if part.media is not None else None
    if native is not None and part.media is not None:
        return native.send_media(target, part.media, part.text)
    return sender.send(target, part.text)


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
    _retried(deps, lambda: deps.outbox.mark(delivery_id, status, deps.now(), **details))


def _retried(deps: DeliveryDeps, write: Callable[[], object]) -> None:
    """An outbox write, tried again after a throttle MARK_ATTEMPTS times in all (then raised)."""
    for attempt in range(MARK_ATTEMPTS):
        try:
            write()
            return
        except TransientError:
            if attempt == MARK_ATTEMPTS - 1:
                raise
            deps.sleep(MARK_BACKOFF_SECONDS * 2**attempt)


def _stop(deps: DeliveryDeps, detail: dict[str, Any], entries: list[OutboxEntry], status: str) -> DeliveryResult:
    """The rest of the message is not sent: the target is gone, a chunk's fate is unknown, or a
    chunk is on the dead letters (the try that put it there said so: this repeat only logs)."""
    if status == DEAD_LETTERED:
        logger.info("a part of this message is on the dead letters; it waits for a redrive", extra=detail)
        return DeliveryResult(status, entries)
    _emit(deps, "delivery:failed", {**detail, "reason": "target_gone" if status == "gone" else "outcome_unknown"})
    return DeliveryResult(status, entries)


def _emit(deps: DeliveryDeps, name: str, detail: dict[str, Any]) -> None:
    if deps.events is not None:
        deps.events.emit(name, detail)


def record_failed_later(
    platform: str,
    delivery_id: str,
    platform_message_id: str,
    error: str,
    *,
    outbox: FailureReports,
    events: LifecycleEvents | None,
    now: float,
) -> bool:
    """The platform accepted a chunk and reported later that it failed (a WhatsApp `failed`
    status): its outbox row becomes `failed` with the platform's error (code and title, never the
    text), `delivery:failed` is published and DeliveryFailedLater counted. A report for no sent
    row of this platform is ignored; one that overtook the worker still recording the send raises
    TransientError, so the platform reports it again later. True when the row was marked."""
    detail = {"platform": platform, "delivery_id": delivery_id}
    found = outbox.fail_sent(
        delivery_id, platform=platform, platform_message_id=platform_message_id, error=f"failed later: {error}", now=now
    )
    if found == "sending":
        raise TransientError("a failure report came before the send was recorded; asking for it again")
    if found != "marked":
        logger.info("failure report ignored: no sent message of this platform", extra={**detail, "status": found})
        return False
    logger.warning("a sent message failed later", extra={**detail, "error": error})
    metrics.add_metric(name="DeliveryFailedLater", unit=MetricUnit.Count, value=1)
    if events is not None:
        events.emit("delivery:failed", {**detail, "reason": "failed_later", "error": error})
    return True


@dataclass(frozen=True)
class Mirror:
    """What mirroring a push into its chat's transcript needs: the chat's route, its seqs, its rows."""

    routes: Routes
    leases: Leases
    transcript: Transcript


def last_heard(routes: Routes, platform: str, chat_id: str, profile: str | None) -> float | None:
    """When the person of a one-to-one chat last wrote (domain/service_window.py): their route's
    `heard_at` (a route from before it was kept: its activity clock), None without a route."""
    source = SessionSource(platform, chat_id=chat_id, chat_type="dm")
    entry = routes.get(build_session_key(source, profile=profile))
    if entry is None:
        return None
    return entry.heard_at if entry.heard_at is not None else entry.last_activity_at


def mirror(job: DeliveryJob, sessions: Mirror, now: float, profile: str | None) -> bool:
    """Append a pushed message to the target chat's session transcript (BEHAVIOUR §6): as the
    assistant, or as a user line with MIRROR_PREFIX when the transcript already ends with the
    assistant. Written only when exactly one session is the chat's: a DM, or a group chat whose
    session is shared. Returns whether a row was written."""
    assert job.chat_id is not None
    found = []
    for chat_type in ("dm", "group"):
        source = SessionSource(job.platform, chat_id=job.chat_id, chat_type=chat_type, thread_id=job.thread_id)
        entry = sessions.routes.get(build_session_key(source, profile=profile))
        if entry is not None:
            found.append(entry)
    if len(found) != 1:
        logger.info("mirror skipped: no single session for the target", extra={"matches": len(found)})
        return False
    entry = found[0]
    last = sessions.transcript.window(entry.session_id, upto_seq=None, limit=1, hidden=entry.hidden)
    if last and last[-1].role == "assistant":
        role, content = "user", f"{MIRROR_PREFIX} {job.text}"
    else:
        role, content = "assistant", job.text
    seq = sessions.leases.allocate(entry.session_key, entry.session_id, 1, now)
    if seq is None:
        return False  # the chat's route moved to another session meanwhile
    sessions.transcript.put(entry.session_id, TranscriptRow(seq, role, content, now, turn_id=job.turn_id))
    logger.info("mirrored into the target's transcript", extra={"session": hash_id(entry.session_key), "role": role})
    return True
