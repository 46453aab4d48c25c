"""Cron jobs on DynamoDB (the `JobStore` port of hermes_gateway.domain.cron).

One item per job, keyed `job_id`. A job that can fire carries `due_shard`, which puts it in the
sparse `by_next_run` index (sort key `next_run_at`): the tick queries that index for due jobs and
never scans. Pausing, finishing or retiring a job removes `due_shard`, so such a job cannot be
found by a tick at all. Claims are conditional on the `next_run_at`, `state` and run count the
claimer read, so of two ticks reading the same occurrence exactly one wins it.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from pynamodb.attributes import BooleanAttribute, ListAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, UpdateError
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from hermes_gateway.adapters.dynamo_errors import condition_failed, throttling_is_transient_everywhere
from hermes_gateway.adapters.models import dynamodb_endpoint, table_meta
from hermes_gateway.domain.cron import (
    DELIVERY_FAILURES,
    PAUSED,
    SCHEDULED,
    Advance,
    Claim,
    Job,
    Repeat,
)
from hermes_gateway.errors import Conflict
from hermes_gateway.resources import Bindings

DUE_SHARD = "due"
MAX_ERROR = 500


class JobItem(Model):
    job_id = UnicodeAttribute(hash_key=True)
    name = UnicodeAttribute()
    prompt = UnicodeAttribute()
    schedule = UnicodeAttribute()
    deliver = ListAttribute(of=UnicodeAttribute)  # type: ignore[var-annotated]
    origin = UnicodeAttribute(null=True)  # JSON of the origin reply target
    creator = UnicodeAttribute(null=True)  # JSON of the creator's source (domain.cron.Job.creator)
    repeat_times = NumberAttribute(null=True)
    repeat_completed = NumberAttribute(default=0)
    enabled = BooleanAttribute(default=True)
    state = UnicodeAttribute()
    next_run_at = NumberAttribute(null=True)
    due_shard = UnicodeAttribute(null=True)  # set only while the job can fire: the due index
    last_run_at = NumberAttribute(null=True)
    last_run_id = UnicodeAttribute(null=True)
    last_status = UnicodeAttribute(null=True)
    last_error = UnicodeAttribute(null=True)
    last_delivery_status = UnicodeAttribute(null=True)
    last_delivery_run_id = UnicodeAttribute(null=True)
    retired_reason = UnicodeAttribute(null=True)
    profile = UnicodeAttribute(null=True)
    created_at = NumberAttribute()
    updated_at = NumberAttribute(default=0)


@lru_cache(maxsize=8)
def bind_jobs(table: str, region: str | None, host: str | None = None) -> type[JobItem]:
    class ByNextRun(GlobalSecondaryIndex[JobItem]):  # type: ignore[no-untyped-call]
        class Meta:
            index_name = "by_next_run"
            projection = AllProjection()

        due_shard = UnicodeAttribute(hash_key=True)
        next_run_at = NumberAttribute(range_key=True)

    return type(
        "Jobs",
        (JobItem,),
        {"Meta": table_meta(table, region, host), "by_next_run": ByNextRun(), "__module__": __name__},
    )


def _to_job(item: JobItem) -> Job:
    return Job(
        id=item.job_id,
        name=item.name,
        prompt=item.prompt,
        schedule=item.schedule,
        deliver=tuple(str(t) for t in item.deliver or ()),
        origin=json.loads(item.origin) if item.origin else None,
        created_at=float(item.created_at),
        next_run_at=float(item.next_run_at) if item.next_run_at is not None else None,
        repeat=Repeat(
            int(item.repeat_times) if item.repeat_times is not None else None, int(item.repeat_completed or 0)
        ),
        enabled=bool(item.enabled),
        state=item.state,
        last_run_at=float(item.last_run_at) if item.last_run_at is not None else None,
        last_run_id=item.last_run_id,
        last_status=item.last_status,
        last_error=item.last_error,
        last_delivery_status=item.last_delivery_status,
        retired_reason=item.retired_reason,
        profile=item.profile,
        updated_at=float(item.updated_at or 0),
        creator=json.loads(item.creator) if item.creator else None,
    )


@throttling_is_transient_everywhere
class DynamoJobStore:
    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        self.model = bind_jobs(bindings.table("jobs"), region, dynamodb_endpoint())

    def create(self, job: Job) -> Job:
        fires = job.state == SCHEDULED and job.enabled and job.next_run_at is not None
        item = self.model(
            job.id,
            name=job.name,
            prompt=job.prompt,
            schedule=job.schedule,
            deliver=list(job.deliver),
            origin=json.dumps(job.origin) if job.origin else None,
            creator=json.dumps(job.creator, separators=(",", ":")) if job.creator else None,
            repeat_times=job.repeat.times,
            repeat_completed=job.repeat.completed,
            enabled=job.enabled,
            state=job.state,
            next_run_at=job.next_run_at,
            due_shard=DUE_SHARD if fires else None,
            profile=job.profile,
            created_at=job.created_at,
            updated_at=job.created_at,
        )
        try:
            item.save(condition=self.model.job_id.does_not_exist())
        except PutError as exc:
            if condition_failed(exc):
                raise Conflict(f"job {job.id} exists") from exc
            raise
        return job

    def get(self, job_id: str) -> Job | None:
        try:
            return _to_job(self.model.get(job_id, consistent_read=True))
        except DoesNotExist:
            return None

    def list(self, profile: str | None = None) -> list[Job]:
        # For people and tools (a handful of jobs), never for the tick: the tick queries the index.
        condition = self.model.profile == profile if profile is not None else None
        jobs = [_to_job(item) for item in self.model.scan(filter_condition=condition)]
        return sorted(jobs, key=lambda j: (j.created_at, j.id))

    def pause(self, job_id: str, now: float) -> Job | None:
        Item = self.model
        return self._update(
            job_id,
            [Item.state.set(PAUSED), Item.enabled.set(False), Item.due_shard.remove(), Item.updated_at.set(now)],
            Item.state.is_in(SCHEDULED, PAUSED),
        )

    def resume(self, job_id: str, next_run_at: float, now: float) -> Job | None:
        Item = self.model
        return self._update(
            job_id,
            [
                Item.state.set(SCHEDULED),
                Item.enabled.set(True),
                Item.next_run_at.set(next_run_at),
                Item.due_shard.set(DUE_SHARD),
                Item.updated_at.set(now),
            ],
            Item.job_id.exists() & (Item.state == PAUSED),
        )

    def remove(self, job_id: str) -> bool:
        try:
            self.model(job_id).delete(condition=self.model.job_id.exists())
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def disown(self, job_id: str) -> bool:
        Item = self.model
        return self._update(job_id, [Item.creator.remove()], Item.job_id.exists()) is not None

    def claim_due(self, now: float, limit: int, plan: Callable[[Job, float], Advance]) -> builtins.list[Claim]:
        Item = self.model
        claims: builtins.list[Claim] = []
        due = Item.by_next_run.query(DUE_SHARD, Item.next_run_at <= now, limit=limit)  # type: ignore[attr-defined]
        for item in due:
            job = _to_job(item)
            if job.state != SCHEDULED or job.next_run_at is None:
                continue
            advance = plan(job, now)
            actions: builtins.list[Any] = [
                Item.state.set(advance.state),
                Item.updated_at.set(now),
                (Item.next_run_at.set(advance.next_run_at) if advance.next_run_at is not None
                 else Item.next_run_at.remove()),
                Item.due_shard.set(DUE_SHARD) if advance.next_run_at is not None else Item.due_shard.remove(),
            ]  # fmt: skip
            if advance.run_id:
                actions.append(Item.repeat_completed.set(job.repeat.completed + 1))
            if advance.reason and advance.next_run_at is None:
                actions.append(Item.retired_reason.set(advance.reason[:MAX_ERROR]))
            condition = (
                (Item.next_run_at == job.next_run_at)
                & (Item.state == SCHEDULED)
                & (Item.repeat_completed == job.repeat.completed)
            )
            try:
                Item(job.id).update(actions=actions, condition=condition)
            except UpdateError as exc:
                if condition_failed(exc):
                    continue  # another tick claimed it, or it was paused or removed meanwhile
                raise
            claims.append(Claim(job, advance))
        return claims

    def record_run(self, job_id: str, run_id: str, status: str, error: str | None, now: float) -> bool:
        Item = self.model
        actions = [
            Item.last_run_id.set(run_id),
            Item.last_status.set(status),
            Item.last_run_at.set(now),
            Item.updated_at.set(now),
            Item.last_error.set(error[:MAX_ERROR]) if error else Item.last_error.remove(),
        ]
        repeat = (Item.last_run_id == run_id) & (Item.last_status == status)
        return self._update(job_id, actions, Item.job_id.exists() & ~repeat) is not None

    def record_delivery(self, job_id: str, run_id: str, status: str, now: float) -> bool:
        Item = self.model
        # Within one run a failure sticks: one of two targets failing is a failed delivery.
        failed_already = (Item.last_delivery_run_id == run_id) & Item.last_delivery_status.is_in(*DELIVERY_FAILURES)
        condition = Item.job_id.exists()
        if status not in DELIVERY_FAILURES:
            condition = condition & ~failed_already
        actions = [
            Item.last_delivery_status.set(status),
            Item.last_delivery_run_id.set(run_id),
            Item.updated_at.set(now),
        ]
        return self._update(job_id, actions, condition) is not None

    def _update(self, job_id: str, actions: builtins.list[Any], condition: Any) -> Job | None:
        item = self.model(job_id)
        try:
            item.update(actions=actions, condition=condition)
        except UpdateError as exc:
            if condition_failed(exc):
                return None
            raise
        return _to_job(item)
