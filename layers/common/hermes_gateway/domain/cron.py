"""Cron jobs (BEHAVIOUR §7): a prompt run on a schedule as a fresh agent turn.

A job is claimed for one occurrence by a conditional write that advances `next_run_at` before the
run starts, so two ticks (or a retried tick) never start the same occurrence twice; the run id is
derived from the occurrence, and the turn's execution name from the run id. The job's own status
(`last_status`: did the agent turn succeed) and its delivery status (`last_delivery_status`: did
the platform acknowledge the message) are recorded separately.
"""

from __future__ import annotations

import builtins
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermes_gateway.errors import BadRequest

# Job states. Only a `scheduled` job is in the due index; the others never fire on their own.
SCHEDULED = "scheduled"
PAUSED = "paused"
COMPLETED = "completed"  # a one-shot that ran, or a repeat count that was reached
RETIRED = "retired"  # a one-shot that missed its time by more than the grace (see `retired_reason`)

# A run that failed (the turn engine records `ok` or `error`), and a delivery that failed
# (delivery records `sent` only with the platform's acknowledgement, or `failed`, or
# `outside_window`: refused because the person last wrote too long ago, domain/service_window.py).
RUN_ERROR = "error"
DELIVERY_FAILED = "failed"
DELIVERY_FAILURES = (DELIVERY_FAILED, "outside_window")

MAX_NAME = 200
MAX_PROMPT = 20_000
MAX_TARGETS = 10
_JOB_ID = re.compile(r"^j[0-9a-f]{12}$")
_RUN_ID = re.compile(r"^[A-Za-z0-9_]{1,40}$")


def new_job_id() -> str:
    return "j" + secrets.token_hex(6)


def check_job_id(job_id: str) -> str:
    """A job id as typed by a user or a model: refused before it reaches a key or a name."""
    if not _JOB_ID.match(job_id or ""):
        raise BadRequest(f"not a job id: {job_id[:40]!r} (job ids look like j0123456789ab)")
    return job_id


def occurrence_run_id(occurrence_at: float) -> str:
    """The run id of a scheduled occurrence: the same occurrence always has the same id."""
    return str(int(occurrence_at))


def manual_run_id(now: float) -> str:
    """The run id of `cron run`: one per second, so a repeated command in the same second is one run."""
    return f"manual_{int(now)}"


def turn_id_for(job_id: str, run_id: str) -> str:
    """The turn's id and Step Functions execution name (≤ 80 characters of [A-Za-z0-9_-])."""
    check_job_id(job_id)
    if not _RUN_ID.match(run_id):
        raise BadRequest("not a run id")
    return f"cron-{job_id}-{run_id}"


@dataclass(frozen=True)
class Repeat:
    """How many times a job runs: `times` None is forever; `completed` counts runs started."""

    times: int | None = None
    completed: int = 0

    def to_dict(self) -> dict[str, int | None]:
        return {"times": self.times, "completed": self.completed}


@dataclass(frozen=True)
class Job:
    id: str
    name: str
    prompt: str
    schedule: str  # as the user wrote it; parsed by domain.schedule
    deliver: tuple[str, ...]  # delivery target strings (BEHAVIOUR §6), checked when the job is made
    origin: dict[str, Any] | None  # the reply target of the chat that made the job, if any
    created_at: float
    next_run_at: float | None  # None once the job can never fire again
    repeat: Repeat = field(default_factory=Repeat)
    enabled: bool = True
    state: str = SCHEDULED
    last_run_at: float | None = None
    last_run_id: str | None = None
    last_status: str | None = None
    last_error: str | None = None
    last_delivery_status: str | None = None
    retired_reason: str | None = None
    profile: str | None = None
    updated_at: float = 0.0
    # Who made the job (their source, without empty fields): its runs reach what they may reach
    # (BEHAVIOUR §11). None: made by the operator (the CLI), or before jobs kept their creator.
    creator: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The job as the CLI and the `cronjob` tool show it."""
        return {
            "id": self.id,
            "name": self.name,
            "prompt": self.prompt,
            "schedule": self.schedule,
            "deliver": list(self.deliver),
            "origin": self.origin,
            "repeat": self.repeat.to_dict(),
            "enabled": self.enabled,
            "state": self.state,
            "next_run_at": self.next_run_at,
            "last_run_at": self.last_run_at,
            "last_run_id": self.last_run_id,
            "last_status": self.last_status,
            "last_error": self.last_error,
            "last_delivery_status": self.last_delivery_status,
            "retired_reason": self.retired_reason,
            "profile": self.profile,
            "created_at": self.created_at,
            "creator": self.creator,
        }

    def turn_job(self, run_id: str) -> dict[str, Any]:
        """The `job` of a cron turn's input (the team's turn contract)."""
        return {
            "id": self.id,
            "name": self.name,
            "prompt": self.prompt,
            "deliver": list(self.deliver),
            "origin": self.origin,
            "run_id": run_id,
            "profile": self.profile,  # the profile whose settings and bots run it
            "creator": self.creator,
        }


def check_job_fields(name: str, prompt: str, deliver: list[str] | tuple[str, ...], repeat_times: int | None) -> None:
    """Bad input gets a clear error before anything is stored."""
    if not prompt or not prompt.strip():
        raise BadRequest("a job needs a prompt")
    if len(prompt) > MAX_PROMPT:
        raise BadRequest(f"the prompt is longer than {MAX_PROMPT} characters")
    if len(name) > MAX_NAME:
        raise BadRequest(f"the name is longer than {MAX_NAME} characters")
    if not deliver:
        raise BadRequest("a job needs at least one delivery target")
    if len(deliver) > MAX_TARGETS:
        raise BadRequest(f"at most {MAX_TARGETS} delivery targets")
    if repeat_times is not None and repeat_times < 1:
        raise BadRequest("repeat must be a positive number of runs")


@dataclass(frozen=True)
class Advance:
    """What claiming a due job writes, decided by the tick (services.cron.plan) from the job.

    `run_id` is set when the claim starts a run (None when the claim only retires the job);
    `next_run_at` None leaves the job out of the due index for good, with `state` saying why.
    """

    run_id: str | None
    occurrence_at: float
    next_run_at: float | None
    state: str
    reason: str | None = None
    skipped: int = 0  # occurrences collapsed into this one catch-up run


@dataclass(frozen=True)
class Claim:
    """A due job this caller won: its run (if any) is this caller's to start, and no one else's."""

    job: Job  # as it was before the claim
    advance: Advance


class JobStore(Protocol):
    def create(self, job: Job) -> Job:
        """Store a new job; raises Conflict if its id exists."""
        ...

    def get(self, job_id: str) -> Job | None: ...

    def list(self, profile: str | None = None) -> list[Job]:
        """Every job (of one profile when given), oldest first. For people and tools, not ticks."""
        ...

    def pause(self, job_id: str, now: float) -> Job | None:
        """Take a job out of the due index (it keeps its schedule). None when there is no such job."""
        ...

    def resume(self, job_id: str, next_run_at: float, now: float) -> Job | None:
        """Put a paused job back, due at `next_run_at` (recomputed by the caller, so a long pause
        does not fire a backlog). None when there is no such job."""
        ...

    def remove(self, job_id: str) -> bool: ...

    def disown(self, job_id: str) -> bool:
        """Take the job's creator off it (their forget: a job they made in a group stays the
        group's); its runs then stand for no one. False when there is no such job."""
        ...

    def claim_due(self, now: float, limit: int, plan: Callable[[Job, float], Advance]) -> builtins.list[Claim]:
        """Jobs due at `now`, found through the due index (never a scan), each claimed by a
        conditional write of `plan(job, now)` that holds only if `next_run_at` is still what was
        read. A job another caller claimed first is left out."""
        ...

    def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool:
        """Record a run's outcome (`ok` or `error`, with a short error). Idempotent: a repeat of
        the same record changes nothing and returns False; False too when the job is gone."""
        ...

    def record_delivery(self, job_id: str, run_id: str, status: str, now: float) -> bool:
        """Record the delivery outcome of a run (`sent` only with the platform's acknowledgement)."""
        ...
