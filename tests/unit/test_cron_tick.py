"""The cron tick with a controllable clock (BEHAVIOUR §7): one start per occurrence however many
ticks overlap, a backlog collapses into one catch-up run, a paused job never fires, a one-shot
found past its grace is retired with the reason, repeat counts are honoured, and a failing job
tells its origin chat once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pytest

from hermes_gateway.domain.cron import COMPLETED, PAUSED, RETIRED, SCHEDULED, Job
from hermes_gateway.errors import BadRequest
from hermes_gateway.services import cron
from tests.fakes.jobs import FakeJobStore

T0 = datetime(2026, 11, 29, 14, 0, tzinfo=UTC).timestamp()
ORIGIN = {"platform": "telegram", "chat_id": "99", "thread_id": None}


class FakeStarter:
    """The turn workflow's starter: records each start; a repeated name is not started again."""

    def __init__(self, fail_for: set[str] | None = None) -> None:
        self._lock = threading.Lock()
        self.started: dict[str, dict[str, Any]] = {}
        self.calls = 0
        self.fail_for = fail_for or set()

    def start(self, name: str, turn: dict[str, Any]) -> bool:
        with self._lock:
            self.calls += 1
            if any(job_id in name for job_id in self.fail_for):
                raise RuntimeError("states throttled")
            if name in self.started:
                return False
            self.started[name] = turn
            return True


class Events:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, name: str, detail: dict[str, Any]) -> None:
        self.emitted.append((name, detail))


class Queue:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, body: dict[str, Any]) -> str:
        self.sent.append(body)
        return "m"


def make_deps(store: FakeJobStore | None = None, starter: FakeStarter | None = None, grace: int = 300) -> cron.CronDeps:
    return cron.CronDeps(
        jobs=store or FakeJobStore(),
        starter=starter or FakeStarter(),
        events=Events(),
        time_zone="UTC",
        grace_seconds=grace,
    )


def add(deps: cron.CronDeps, schedule: str, **kwargs: Any) -> Job:
    values: dict[str, Any] = {"prompt": "summarise the news", "deliver": ["local"], **kwargs}
    return cron.create_job(deps.jobs, schedule=schedule, now=T0, time_zone="UTC", **values)


def starter_of(deps: cron.CronDeps) -> FakeStarter:
    assert isinstance(deps.starter, FakeStarter)
    return deps.starter


def test_a_due_job_starts_one_cron_turn_with_the_turn_contract() -> None:
    # Given a job due in 30 minutes, with an origin chat
    deps = make_deps()
    job = add(deps, "in 30m", origin=ORIGIN, deliver=["origin", "local"])
    # When a tick runs before it is due, nothing starts; when it is due, its turn starts
    assert cron.tick(deps, T0 + 60).started == []
    result = cron.tick(deps, T0 + 1800)
    # Then the turn's name and input follow the shared contract
    run_id = str(int(T0 + 1800))
    turn_id = f"cron-{job.id}-{run_id}"
    assert result.started == [turn_id]
    state = starter_of(deps).started[turn_id]
    assert state == {
        "turn": {
            "turn_id": turn_id,
            "kind": "cron",
            "started_at": T0 + 1800,
            "job": {"id": job.id, "run_id": run_id, "prompt": job.prompt, "name": job.name,
                    "deliver": ["origin", "local"], "origin": ORIGIN, "profile": None, "creator": None},
        },
        "next": "model",
    }  # fmt: skip
    # And the one-shot is finished, with its run counted, and cron:ran published without the prompt
    stored = deps.jobs.get(job.id)
    assert stored is not None and stored.state == COMPLETED and stored.next_run_at is None
    assert stored.repeat.completed == 1
    events = [detail for name, detail in deps.events.emitted if name == "cron:ran"]  # type: ignore[attr-defined]
    assert events == [{"job_id": job.id, "run_id": run_id, "turn_id": turn_id, "status": "started"}]


def test_a_job_due_once_fires_once_when_two_ticks_overlap() -> None:
    # Given two ticks that both read the due job before either writes its claim
    both_read = threading.Barrier(2, timeout=5)
    store = FakeJobStore(before_claim_write=both_read.wait)
    starter = FakeStarter()
    deps = make_deps(store, starter)
    job = add(deps, "every 10m")
    due_at = job.next_run_at
    assert due_at is not None
    results: list[cron.TickResult] = []
    # When they run at the same moment
    threads = [threading.Thread(target=lambda: results.append(cron.tick(deps, due_at + 5))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly one started the occurrence, and the starter was asked once
    assert sorted(len(r.started) for r in results) == [0, 1]
    assert starter.calls == 1
    stored = store.get(job.id)
    assert stored is not None and stored.next_run_at == due_at + 600


def test_a_retried_tick_after_a_claim_does_not_start_the_occurrence_again() -> None:
    deps = make_deps()
    job = add(deps, "every 10m")
    assert job.next_run_at is not None
    cron.tick(deps, job.next_run_at)
    # The same tick's time again (a retried invocation): the job is no longer due
    assert cron.tick(deps, job.next_run_at).started == []
    assert starter_of(deps).calls == 1


def test_a_backlog_collapses_into_one_catch_up_run_on_the_schedule_grid() -> None:
    # Given an every-10-minutes job whose ticks stopped for an hour
    deps = make_deps()
    job = add(deps, "every 10m")
    first = job.next_run_at
    assert first is not None
    # When the next tick comes 55 minutes after the job was due
    result = cron.tick(deps, first + 55 * 60)
    # Then it runs once, for the first missed occurrence, and is next due on its 10-minute grid
    assert result.started == [f"cron-{job.id}-{int(first)}"]
    stored = deps.jobs.get(job.id)
    assert stored is not None and stored.next_run_at == first + 60 * 60
    assert stored.repeat.completed == 1
    assert cron.tick(deps, first + 59 * 60).started == []


def test_a_late_one_shot_within_grace_runs_once() -> None:
    deps = make_deps(grace=300)
    job = add(deps, "in 10m")
    assert job.next_run_at is not None
    assert len(cron.tick(deps, job.next_run_at + 299).started) == 1
    assert cron.tick(deps, job.next_run_at + 400).started == []
    assert starter_of(deps).calls == 1


def test_a_one_shot_past_grace_is_retired_with_a_reason() -> None:
    deps = make_deps(grace=300)
    job = add(deps, "in 10m")
    assert job.next_run_at is not None
    result = cron.tick(deps, job.next_run_at + 301)
    assert result.started == [] and result.retired == [job.id]
    stored = deps.jobs.get(job.id)
    assert stored is not None and stored.state == RETIRED and stored.next_run_at is None
    assert stored.retired_reason == "missed its time by 301 s (grace 300 s)"
    assert starter_of(deps).calls == 0


def test_a_paused_job_never_fires_and_resumes_from_now() -> None:
    # Given a paused every-10-minutes job
    deps = make_deps()
    job = add(deps, "every 10m")
    paused = cron.pause_job(deps.jobs, job.id, T0 + 1)
    assert paused.state == PAUSED
    # When ticks run for two hours
    for minute in range(0, 121):
        cron.tick(deps, T0 + minute * 60)
    # Then it never fired
    assert starter_of(deps).calls == 0
    # And resumed, it is due next on its grid after now (what it missed is not made up)
    resumed = cron.resume_job(deps.jobs, job.id, T0 + 7200 + 30, "UTC")
    assert resumed.state == SCHEDULED and resumed.next_run_at == T0 + 7200 + 600
    assert cron.tick(deps, T0 + 7200 + 60).started == []


def test_repeat_counts_are_honoured() -> None:
    deps = make_deps()
    job = add(deps, "every 10m", repeat=2)
    assert job.next_run_at is not None
    started = [cron.tick(deps, job.next_run_at + 600 * i).started for i in range(4)]
    assert [len(s) for s in started] == [1, 1, 0, 0]
    stored = deps.jobs.get(job.id)
    assert stored is not None and stored.state == COMPLETED and stored.repeat.completed == 2


def test_a_run_that_cannot_start_is_recorded_and_does_not_stop_the_others() -> None:
    store = FakeJobStore()
    broken = cron.create_job(store, prompt="a", schedule="in 1m", deliver=["local"], now=T0, time_zone="UTC")
    fine = cron.create_job(store, prompt="b", schedule="in 1m", deliver=["local"], now=T0, time_zone="UTC")
    deps = make_deps(store, FakeStarter(fail_for={broken.id}))
    result = cron.tick(deps, T0 + 60)
    assert result.failed_to_start == [broken.id]
    assert [t for t in result.started] == [f"cron-{fine.id}-{int(T0 + 60)}"]
    stored = store.get(broken.id)
    assert stored is not None and stored.last_status == "error" and "could not start" in (stored.last_error or "")


def test_run_now_starts_a_run_whatever_the_schedule_and_keeps_the_next_run() -> None:
    deps = make_deps()
    job = add(deps, "every monday 9am")
    turn_id = cron.run_now(deps, job.id, T0 + 10)
    assert turn_id == f"cron-{job.id}-manual_{int(T0 + 10)}"
    assert cron.run_now(deps, job.id, T0 + 10) == turn_id  # the same second: the same run
    assert len(starter_of(deps).started) == 1
    stored = deps.jobs.get(job.id)
    assert stored is not None and stored.next_run_at == job.next_run_at
    with pytest.raises(BadRequest):
        cron.run_now(deps, "j000000000000", T0)
    with pytest.raises(BadRequest):
        cron.run_now(deps, "../etc", T0)


def test_a_failing_job_tells_its_origin_chat_once() -> None:
    # Given a job made in a chat
    store, queue = FakeJobStore(), Queue()
    job = cron.create_job(
        store, prompt="p", schedule="every 10m", deliver=["origin"], origin=ORIGIN, now=T0, time_zone="UTC"
    )
    first = job.turn_job("100")
    # When its run fails, and the engine's task is retried
    assert cron.finish_run(store, queue, first, "error", "model timed out\nsecret detail", T0 + 600)
    assert not cron.finish_run(store, queue, first, "error", "model timed out", T0 + 601)
    # And the next run fails too
    assert cron.finish_run(store, queue, job.turn_job("200"), "error", "model timed out", T0 + 1200)
    # Then the chat was told once, with the first line of the error only
    assert len(queue.sent) == 1
    notice = queue.sent[0]
    assert notice["target"] == ORIGIN and notice["kind"] == "push"
    assert notice["delivery_id"] == f"cronfail-{job.id}-100"
    assert "secret detail" not in notice["text"] and "model timed out" in notice["text"]
    # And after a success, a new failure is told again
    cron.finish_run(store, queue, job.turn_job("300"), "ok", None, T0 + 1800)
    cron.finish_run(store, queue, job.turn_job("400"), "error", "boom", T0 + 2400)
    assert len(queue.sent) == 2
    stored = store.get(job.id)
    assert stored is not None and stored.last_status == "error" and stored.last_run_id == "400"


def test_a_job_without_an_origin_fails_silently_in_chat() -> None:
    store, queue = FakeJobStore(), Queue()
    job = cron.create_job(store, prompt="p", schedule="every 10m", deliver=["local"], now=T0, time_zone="UTC")
    assert cron.finish_run(store, queue, job.turn_job("1"), "error", "boom", T0)
    assert queue.sent == []


@pytest.mark.parametrize(
    ("kwargs", "reason"),
    [
        ({"schedule": "whenever"}, "Accepted forms"),
        ({"schedule": "2020-01-01T00:00"}, "in the past"),
        ({"prompt": "  "}, "prompt"),
        ({"deliver": []}, "delivery target"),
        ({"deliver": ["origin"]}, "origin"),
        ({"repeat": 0}, "repeat"),
    ],
)
def test_bad_jobs_are_refused_with_the_reason(kwargs: dict[str, Any], reason: str) -> None:
    values: dict[str, Any] = {"prompt": "p", "schedule": "every 5m", "deliver": ["local"], **kwargs}
    with pytest.raises(BadRequest, match=reason):
        cron.create_job(FakeJobStore(), now=T0, time_zone="UTC", **values)


def test_a_target_check_refuses_an_unknown_target() -> None:
    def check(target: str) -> None:
        raise BadRequest(f"unknown platform {target!r}")

    with pytest.raises(BadRequest, match="unknown platform"):
        cron.create_job(
            FakeJobStore(), prompt="p", schedule="every 5m", deliver=["nowhere:1"], now=T0, time_zone="UTC",
            check_target=check,
        )  # fmt: skip


@pytest.mark.parametrize("schedule", ["every 10m", "*/10 * * * *"])
def test_a_catch_up_run_counts_the_occurrences_it_covers(schedule: str) -> None:
    deps = make_deps()
    job = add(deps, schedule)
    assert job.next_run_at is not None
    advance = cron.plan(job, job.next_run_at + 55 * 60, time_zone="UTC", grace_seconds=300)
    assert advance.run_id == str(int(job.next_run_at)) and advance.skipped == 5
    assert advance.next_run_at == job.next_run_at + 60 * 60 and advance.state == SCHEDULED
