"""Cron jobs (BEHAVIOUR §7): making and managing jobs, and the every-minute tick that runs them.

The tick finds due jobs through the store's due index and claims each with a conditional write
that advances `next_run_at` before the run starts; the run's id comes from the occurrence it runs,
and the turn's execution name from that id, so overlapping or retried ticks start an occurrence
once. A job found late runs once for everything it missed (a backlog collapses into one catch-up
run); a one-shot found later than the grace is retired with the reason instead of running.
The run itself is a "cron" turn of the turn workflow (services.turn); it reports back through
`finish_run`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermes_gateway.domain.cron import (
    COMPLETED,
    PAUSED,
    RETIRED,
    RUN_ERROR,
    SCHEDULED,
    Advance,
    Job,
    JobStore,
    Repeat,
    check_job_fields,
    check_job_id,
    manual_run_id,
    new_job_id,
    occurrence_run_id,
    turn_id_for,
)
from hermes_gateway.domain.events import LifecycleEvents
from hermes_gateway.domain.ports import Deliveries, TurnStarter
from hermes_gateway.domain.schedule import InvalidSchedule, Schedule, parse_schedule
from hermes_gateway.domain.turn_state import CronRun
from hermes_gateway.errors import BadRequest
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.services import lifecycle

MAX_MISSED_COUNTED = 100  # a catch-up log counts a calendar's missed occurrences up to this many
FAILURE_NOTICE_ERROR_CHARS = 200


@dataclass
class CronDeps:
    jobs: JobStore
    starter: TurnStarter
    events: LifecycleEvents
    time_zone: str
    grace_seconds: int
    max_jobs_per_tick: int = 50


@dataclass
class TickResult:
    started: list[str] = field(default_factory=list)  # turn ids
    retired: list[str] = field(default_factory=list)  # job ids
    failed_to_start: list[str] = field(default_factory=list)  # job ids

    def to_dict(self) -> dict[str, int]:
        return {
            "cron_started": len(self.started),
            "cron_retired": len(self.retired),
            "cron_failed_to_start": len(self.failed_to_start),
        }


# Making and managing jobs


def create_job(
    jobs: JobStore,
    *,
    prompt: str,
    schedule: str,
    deliver: list[str],
    now: float,
    time_zone: str,
    name: str = "",
    origin: dict[str, Any] | None = None,
    repeat: int | None = None,
    profile: str | None = None,
    check_target: Callable[[str], None] | None = None,
) -> Job:
    """Validate and store a job. `check_target` refuses a target that names nothing (it raises
    BadRequest with the reason); a one-shot time already past is refused."""
    deliver = [t.strip() for t in deliver if t and t.strip()]
    check_job_fields(name, prompt, deliver, repeat)
    parsed = parse_schedule(schedule, now, time_zone)
    first = parsed.next_after(now)
    if first is None:
        raise InvalidSchedule(f"{schedule.strip()[:80]!r} is in the past")
    for target in deliver:
        if target.lower() == "origin" and origin is None:
            raise BadRequest("'origin' needs a chat to answer in; this job has none (name a target instead)")
        if check_target is not None:
            check_target(target)
    job = Job(
        id=new_job_id(),
        name=(name.strip() or prompt.strip().splitlines()[0])[:80],
        prompt=prompt,
        schedule=parsed.text,
        deliver=tuple(deliver),
        origin=origin,
        created_at=now,
        next_run_at=first,
        repeat=Repeat(1 if parsed.once else repeat, 0),
        profile=profile,
    )
    return jobs.create(job)


def pause_job(jobs: JobStore, job_id: str, now: float) -> Job:
    job = _existing(jobs, job_id)
    if job.state not in (SCHEDULED, PAUSED):
        raise BadRequest(f"job {job_id} is {job.state}; only a scheduled job can be paused")
    paused = jobs.pause(job_id, now)
    if paused is None:
        raise BadRequest(f"job {job_id} changed meanwhile; try again")
    return paused


def resume_job(jobs: JobStore, job_id: str, now: float, time_zone: str) -> Job:
    """Resume from now: runs missed while paused are not made up."""
    job = _existing(jobs, job_id)
    if job.state == SCHEDULED:
        return job
    if job.state != PAUSED:
        raise BadRequest(f"job {job_id} is {job.state}; add it again to run it again")
    parsed = parse_schedule(job.schedule, now, time_zone)
    upcoming = parsed.next_after(now, anchor=job.next_run_at)
    if upcoming is None:
        raise BadRequest(f"job {job_id} was due once, at {job.schedule}, which has passed")
    resumed = jobs.resume(job_id, upcoming, now)
    if resumed is None:
        raise BadRequest(f"job {job_id} changed meanwhile; try again")
    return resumed


def remove_job(jobs: JobStore, job_id: str) -> None:
    check_job_id(job_id)
    if not jobs.remove(job_id):
        raise BadRequest(f"no job {job_id}")


def _existing(jobs: JobStore, job_id: str) -> Job:
    job = jobs.get(check_job_id(job_id))
    if job is None:
        raise BadRequest(f"no job {job_id}")
    return job


# The tick


def plan(job: Job, now: float, *, time_zone: str, grace_seconds: int) -> Advance:
    """What claiming a due job does: which occurrence runs, and when the job is due next."""
    assert job.next_run_at is not None
    occurrence = job.next_run_at
    run_id = occurrence_run_id(occurrence)
    late = now - occurrence
    try:
        parsed = parse_schedule(job.schedule, now, time_zone)
    except InvalidSchedule:
        return Advance(None, occurrence, None, RETIRED, reason="its stored schedule no longer parses")
    if parsed.once:
        if late > grace_seconds:
            why = f"missed its time by {int(late)} s (grace {grace_seconds} s)"
            return Advance(None, occurrence, None, RETIRED, reason=why)
        return Advance(run_id, occurrence, None, COMPLETED, reason="ran once")
    upcoming = parsed.next_after(now, anchor=occurrence)
    missed = _missed(parsed, occurrence, now)
    times = job.repeat.times
    if times is not None and job.repeat.completed + 1 >= times:
        return Advance(run_id, occurrence, None, COMPLETED, reason=f"ran {times} times", skipped=missed)
    state = SCHEDULED if upcoming is not None else COMPLETED
    return Advance(run_id, occurrence, upcoming, state, skipped=missed)


def _missed(schedule: Schedule, occurrence: float, now: float) -> int:
    """Occurrences after the one that runs and not later than now: what the catch-up run covers
    (counted exactly for intervals, up to MAX_MISSED_COUNTED for calendars, for the log)."""
    if schedule.interval_seconds:
        return int((now - occurrence) // schedule.interval_seconds)
    count, at = 0, schedule.next_after(occurrence)
    while at is not None and at <= now and count < MAX_MISSED_COUNTED:
        count += 1
        at = schedule.next_after(at)
    return count


def tick(deps: CronDeps, now: float) -> TickResult:
    """Claim the due jobs and start their runs. Safe to run twice at once."""
    result = TickResult()

    def planned(job: Job, at: float) -> Advance:
        return plan(job, at, time_zone=deps.time_zone, grace_seconds=deps.grace_seconds)

    for claim in deps.jobs.claim_due(now, deps.max_jobs_per_tick, planned):
        job, advance = claim.job, claim.advance
        if advance.run_id is None:
            result.retired.append(job.id)
            logger.warning("cron job retired", extra={"job_id": job.id, "reason": advance.reason})
            _emit(deps.events, "cron:ran", {"job_id": job.id, "status": "retired", "reason": advance.reason})
            continue
        if advance.skipped:
            logger.info("cron backlog collapsed", extra={"job_id": job.id, "missed": advance.skipped})
        turn_id = _start(deps, job, advance.run_id, now, result, late=now - advance.occurrence_at)
        if turn_id:
            result.started.append(turn_id)
    if result.started:  # nothing is emitted by an idle tick (a metric bills per month it appears)
        metrics.add_metric(name="CronRunsStarted", unit=MetricUnit.Count, value=len(result.started))
    return result


def run_now(deps: CronDeps, job_id: str, now: float) -> str:
    """`cron run`: start a run of the job now, whatever its schedule; its next run is unchanged.
    Returns the turn id (the same for a repeat within the same second)."""
    job = _existing(deps.jobs, job_id)
    result = TickResult()
    turn_id = _start(deps, job, manual_run_id(now), now, result, late=0.0)
    if turn_id is None:
        raise BadRequest(f"job {job_id} could not be started; see the logs")
    return turn_id


def _start(deps: CronDeps, job: Job, run_id: str, now: float, result: TickResult, *, late: float) -> str | None:
    turn = lifecycle.cron_turn(CronRun.from_json(job.turn_job(run_id)), now)
    turn_id = turn.turn_id
    try:
        started = lifecycle.start(deps.starter, turn)
    except Exception as exc:  # noqa: BLE001 - one job's failure must not stop the others
        # The occurrence is claimed, so no later tick retries it: record the failure on the job.
        logger.exception("cron run could not start", extra={"job_id": job.id, "run_id": run_id})
        deps.jobs.record_run(job.id, run_id, RUN_ERROR, f"could not start: {type(exc).__name__}", now)
        result.failed_to_start.append(job.id)
        _emit(deps.events, "cron:ran", {"job_id": job.id, "run_id": run_id, "status": "start_failed"})
        return None
    logger.info("cron run started", extra={"job_id": job.id, "run_id": run_id, "late_s": round(late, 1)})
    _emit(
        deps.events,
        "cron:ran",
        {"job_id": job.id, "run_id": run_id, "turn_id": turn_id, "status": "started" if started else "already_started"},
    )
    return turn_id


def _emit(events: LifecycleEvents, name: str, detail: dict[str, Any]) -> None:
    try:
        events.emit(name, detail)
    except Exception:  # noqa: BLE001 - an event never fails the work it describes
        logger.warning("lifecycle event failed", extra={"event": name})


# The end of a run (called by the turn engine)


class RunRecorder(Protocol):
    """What recording a run's outcome needs of the job store."""

    def get(self, job_id: str) -> Job | None: ...

    def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool: ...


def finish_run(
    jobs: RunRecorder,
    delivery: Deliveries,
    job: dict[str, Any],
    status: str,
    error: str | None,
    now: float,
) -> bool:
    """Record a cron turn's outcome; a failure is told to the job's origin chat once.

    `job` is the turn input's `job`. Idempotent (a retried task records and tells nothing twice).
    Returns True when this call recorded the outcome."""
    job_id, run_id = str(job["id"]), str(job["run_id"])
    before = jobs.get(job_id)
    recorded = jobs.record_run(job_id, run_id, status, error, now)
    if recorded and status == RUN_ERROR:
        # A job failing every run tells its chat when it starts failing, not every time.
        already_failing = before is not None and before.last_status == RUN_ERROR and before.last_run_id != run_id
        if not already_failing:
            report_failure(delivery, job, error)
    return recorded


def report_failure(delivery: Deliveries, job: dict[str, Any], error: str | None) -> bool:
    """Queue one notice to the job's origin chat; its delivery id is the run's, so the outbox
    sends it once however often it is queued. False when the job has no origin chat."""
    origin = job.get("origin")
    if not isinstance(origin, dict) or not origin.get("platform"):
        return False
    reason = (error or "unknown error").splitlines()[0][:FAILURE_NOTICE_ERROR_CHARS]
    name = str(job.get("name") or job["id"])
    delivery.send(
        {
            "delivery_id": f"cronfail-{job['id']}-{job['run_id']}",
            "turn_id": turn_id_for(str(job["id"]), str(job["run_id"])),
            "kind": "push",
            "target": origin,
            "text": f"Scheduled job {name!r} ({job['id']}) failed: {reason}",
        }
    )
    return True
