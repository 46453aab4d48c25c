"""In-memory cron job store with the DynamoDB adapter's rules: only a scheduled job with a
`next_run_at` is due, a claim holds only if `next_run_at`, state and run count are still what the
claimer read, a repeated run or delivery record changes nothing, and a failed delivery of a run
is not overwritten by a later success of the same run."""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable
from dataclasses import replace

from hermes_gateway.domain.cron import (
    DELIVERY_FAILURES,
    PAUSED,
    RETIRED,
    SCHEDULED,
    Advance,
    Claim,
    Job,
    Repeat,
)
from hermes_gateway.errors import Conflict


def _claimed(job: Job, advance: Advance, now: float) -> Job:
    """The job as a claim leaves it (the adapter writes the same fields in its conditional update)."""
    completed = job.repeat.completed + (1 if advance.run_id else 0)
    return replace(
        job,
        next_run_at=advance.next_run_at,
        state=advance.state,
        repeat=Repeat(job.repeat.times, completed),
        retired_reason=advance.reason if advance.state == RETIRED else job.retired_reason,
        updated_at=now,
    )


class FakeJobStore:
    def __init__(self, *, before_claim_write: Callable[[], object] | None = None) -> None:
        self._lock = threading.Lock()
        self.jobs: dict[str, Job] = {}
        self.delivery_run: dict[str, str] = {}
        self.due_queries = 0
        # Called between the index read and the conditional write (to widen a race in tests).
        self._before_claim_write = before_claim_write

    def create(self, job: Job) -> Job:
        with self._lock:
            if job.id in self.jobs:
                raise Conflict(f"job {job.id} exists")
            self.jobs[job.id] = replace(job, updated_at=job.created_at)
            return self.jobs[job.id]

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self.jobs.get(job_id)

    def list(self, profile: str | None = None) -> builtins.list[Job]:
        with self._lock:
            jobs = [j for j in self.jobs.values() if profile is None or j.profile == profile]
        return sorted(jobs, key=lambda j: (j.created_at, j.id))

    def pause(self, job_id: str, now: float) -> Job | None:
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.state not in (SCHEDULED, PAUSED):
                return None
            self.jobs[job_id] = replace(job, state=PAUSED, enabled=False, updated_at=now)
            return self.jobs[job_id]

    def resume(self, job_id: str, next_run_at: float, now: float) -> Job | None:
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or job.state != PAUSED:
                return None
            self.jobs[job_id] = replace(job, state=SCHEDULED, enabled=True, next_run_at=next_run_at, updated_at=now)
            return self.jobs[job_id]

    def remove(self, job_id: str) -> bool:
        with self._lock:
            return self.jobs.pop(job_id, None) is not None

    def disown(self, job_id: str) -> bool:
        with self._lock:
            if job_id not in self.jobs:
                return False
            self.jobs[job_id] = replace(self.jobs[job_id], creator=None)
            return True

    def claim_due(self, now: float, limit: int, plan: Callable[[Job, float], Advance]) -> builtins.list[Claim]:
        with self._lock:
            self.due_queries += 1
            due = sorted(
                (j for j in self.jobs.values() if j.state == SCHEDULED and j.next_run_at is not None),
                key=lambda j: j.next_run_at or 0.0,
            )
            due = [j for j in due if (j.next_run_at or 0.0) <= now][:limit]
        claims: list[Claim] = []
        for read in due:
            advance = plan(read, now)
            if self._before_claim_write:
                self._before_claim_write()
            with self._lock:
                current = self.jobs.get(read.id)
                if (
                    current is None
                    or current.state != SCHEDULED
                    or current.next_run_at != read.next_run_at
                    or current.repeat.completed != read.repeat.completed
                ):
                    continue
                self.jobs[read.id] = _claimed(current, advance, now)
            claims.append(Claim(read, advance))
        return claims

    def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool:
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None or (job.last_run_id == run_id and job.last_status == status):
                return False
            self.jobs[job_id] = replace(
                job, last_run_id=run_id, last_status=status, last_error=error, last_run_at=now, updated_at=now
            )
            return True

    def record_delivery(self, job_id: str, run_id: str, status: str, now: float) -> bool:
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                return False
            failed_already = self.delivery_run.get(job_id) == run_id and job.last_delivery_status in DELIVERY_FAILURES
            if status not in DELIVERY_FAILURES and failed_already:
                return False
            self.delivery_run[job_id] = run_id
            self.jobs[job_id] = replace(job, last_delivery_status=status, updated_at=now)
            return True
