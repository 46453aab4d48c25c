"""Cron jobs on DynamoDB (moto): the due index, single-winner claims under overlapping ticks,
idempotent run and delivery records, and the every-minute expiry handler starting cron turns."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import pytest

from hermes_gateway.adapters.dynamo_jobs import DynamoJobStore
from hermes_gateway.domain.cron import COMPLETED, PAUSED, Advance, Job
from hermes_gateway.errors import Conflict
from hermes_gateway.resources import function
from hermes_gateway.services import cron
from hermes_local.runtime import LambdaContext, load_handler_module

pytestmark = pytest.mark.integration

T0 = 1_796_000_000.0


def new_job(store: DynamoJobStore, schedule: str = "every 10m", now: float = T0, **kwargs: Any) -> Job:
    values: dict[str, Any] = {"prompt": "the weather", "deliver": ["local"], **kwargs}
    return cron.create_job(store, schedule=schedule, now=now, time_zone="UTC", **values)


def test_jobs_round_trip_and_list(aws: Any) -> None:
    store = DynamoJobStore(aws.bindings)
    origin = {"platform": "telegram", "chat_id": "99", "thread_id": "7"}
    job = new_job(store, deliver=["origin", "telegram:5"], origin=origin, name="weather", repeat=3, profile="coder")
    stored = store.get(job.id)
    assert stored is not None
    assert stored.to_dict() == job.to_dict()
    assert [j.id for j in store.list()] == [job.id]
    assert store.list(profile="other") == []
    with pytest.raises(Conflict):
        store.create(job)
    assert store.remove(job.id) and not store.remove(job.id)
    assert store.get(job.id) is None


def test_only_jobs_that_can_fire_are_in_the_due_index(aws: Any) -> None:
    # Given a scheduled job and a paused one, both due
    store = DynamoJobStore(aws.bindings)
    active, paused = new_job(store), new_job(store)
    assert store.pause(paused.id, T0) is not None
    seen: list[str] = []

    def plan(job: Job, now: float) -> Advance:
        seen.append(job.id)
        return cron.plan(job, now, time_zone="UTC", grace_seconds=300)

    # When due jobs are claimed
    claims = store.claim_due(T0 + 3600, 10, plan)
    # Then only the scheduled one was read from the index and claimed
    assert seen == [active.id] and [c.job.id for c in claims] == [active.id]
    got = store.get(paused.id)
    assert got is not None and got.state == PAUSED
    # And resumed, it is back in the index
    assert store.resume(paused.id, T0 + 60, T0) is not None
    assert [c.job.id for c in store.claim_due(T0 + 3600, 10, plan)] == [paused.id]


def test_two_overlapping_ticks_claim_an_occurrence_once(aws: Any) -> None:
    # Given a due job, and two ticks that both read it before either writes
    store = DynamoJobStore(aws.bindings)
    job = new_job(store)
    both_read = threading.Barrier(2, timeout=10)

    def plan(read: Job, now: float) -> Advance:
        both_read.wait()
        return cron.plan(read, now, time_zone="UTC", grace_seconds=300)

    results: list[int] = []
    errors: list[BaseException] = []

    def tick() -> None:
        try:
            results.append(len(store.claim_due(T0 + 700, 10, plan)))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=tick) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then one won the conditional write and the other was refused
    assert errors == []
    assert sorted(results) == [0, 1]
    stored = store.get(job.id)
    assert stored is not None and stored.repeat.completed == 1 and stored.next_run_at == T0 + 1200


def test_a_finished_job_leaves_the_index(aws: Any) -> None:
    store = DynamoJobStore(aws.bindings)
    job = new_job(store, "in 5m")
    deps = cron.CronDeps(jobs=store, starter=_Starter(), events=_Events(), time_zone="UTC", grace_seconds=300)
    assert len(cron.tick(deps, T0 + 300).started) == 1
    stored = store.get(job.id)
    assert stored is not None and stored.state == COMPLETED and stored.next_run_at is None
    assert cron.tick(deps, T0 + 10**6).started == []


def test_run_and_delivery_records_are_idempotent_and_a_failed_delivery_sticks(aws: Any) -> None:
    store = DynamoJobStore(aws.bindings)
    job = new_job(store)
    assert store.record_run(job.id, "1", "error", "x" * 2000, T0)
    assert not store.record_run(job.id, "1", "error", "again", T0 + 1)
    stored = store.get(job.id)
    assert stored is not None and stored.last_status == "error" and len(stored.last_error or "") == 500
    assert store.record_run(job.id, "1", "ok", None, T0 + 2)
    stored = store.get(job.id)
    assert stored is not None and stored.last_status == "ok" and stored.last_error is None
    # Two targets of one run: one failed, then one was sent; the run's delivery stays failed
    assert store.record_delivery(job.id, "1", "failed", T0)
    assert not store.record_delivery(job.id, "1", "sent", T0)
    assert store.record_delivery(job.id, "2", "sent", T0)
    stored = store.get(job.id)
    assert stored is not None and stored.last_delivery_status == "sent"
    # a push refused outside WhatsApp's 24-hour window is a failure that sticks the same way
    assert store.record_delivery(job.id, "3", "outside_window", T0)
    assert not store.record_delivery(job.id, "3", "sent", T0)
    stored = store.get(job.id)
    assert stored is not None and stored.last_delivery_status == "outside_window"
    assert not store.record_run("j000000000000", "1", "ok", None, T0)
    assert not store.record_delivery("j000000000000", "1", "sent", T0)


def test_the_expiry_handler_starts_due_cron_turns_once(aws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_gateway import wiring

    # Given a job that was due a minute ago, in the expiry function's granted environment
    now = time.time()
    store = wiring.job_store()
    job = new_job(store, "in 1m", now=now - 60)
    monkeypatch.setattr(time, "time", lambda: now + 5)
    handler = load_handler_module(function("expiry")).lambda_handler
    ctx = LambdaContext("expiry", 256, "arn:aws:lambda:us-east-1:123456789012:function:expiry", deadline=now + 60)
    # When the tick runs twice
    first = handler({"source": "aws.scheduler"}, ctx)
    second = handler({"source": "aws.scheduler"}, ctx)
    # Then one cron turn was started, named after the job and its occurrence
    assert first["cron_started"] == 1 and second["cron_started"] == 0
    sfn = boto3.client("stepfunctions")
    names = [e["name"] for e in sfn.list_executions(stateMachineArn=aws.bindings.state_machine("turn"))["executions"]]
    assert names == [f"cron-{job.id}-{int(job.next_run_at or 0)}"]


class _Starter:
    def start(self, name: str, turn: dict[str, Any]) -> bool:
        return True


class _Events:
    def emit(self, name: str, detail: dict[str, Any]) -> None:
        pass


def test_job_states_are_what_a_claim_leaves(aws: Any) -> None:
    store = DynamoJobStore(aws.bindings)
    job = new_job(store, repeat=1)
    claims = store.claim_due(T0 + 600, 10, lambda j, now: cron.plan(j, now, time_zone="UTC", grace_seconds=300))
    assert len(claims) == 1 and claims[0].advance.state == COMPLETED
    stored = store.get(job.id)
    assert stored is not None and stored.state == COMPLETED and stored.repeat.completed == 1
    assert store.pause(job.id, T0) is None  # a finished job cannot be paused
