"""A cron run's delivery status (BEHAVIOUR §7): recorded on its job by delivery, `sent` only with
the platform's acknowledgement, `failed` when it cannot be delivered, nothing on a transient error."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.errors import TransientError
from hermes_gateway.platforms.base import Sender
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, Undeliverable, deliver
from tests.fakes.jobs import FakeJobStore
from tests.fakes.services import FakeOutbox, FakeSender

NOW = 1_764_400_000.0


def cron_job(cron: Any = None) -> DeliveryJob:
    body: dict[str, Any] = {
        "delivery_id": "cron-j0123456789ab-100",
        "turn_id": "cron-j0123456789ab-100",
        "kind": "push",
        "mirror": True,
        "target": {"platform": "telegram", "chat_id": "99"},
        "text": "the weather is fine",
    }
    if cron is not None:
        body["cron"] = cron
    return DeliveryJob.from_dict(body)


class Jobs:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, str]] = []

    def record_delivery(self, job_id: str, run_id: str, status: str, now: float) -> bool:
        self.records.append((job_id, run_id, status))
        return True


def deps(sender: Sender | None, jobs: Any) -> DeliveryDeps:
    return DeliveryDeps(outbox=FakeOutbox(), sender_for=lambda platform, via: sender, now=lambda: NOW, jobs=jobs)


def test_a_sent_cron_result_is_recorded_sent_on_its_job() -> None:
    jobs = Jobs()
    deliver(cron_job({"job_id": "j0123456789ab", "run_id": "100"}), deps(FakeSender(), jobs))
    assert jobs.records == [("j0123456789ab", "100", "sent")]


def test_an_undeliverable_cron_result_is_recorded_failed_and_still_raised() -> None:
    jobs = Jobs()
    with pytest.raises(Undeliverable):
        deliver(cron_job({"job_id": "j0123456789ab", "run_id": "100"}), deps(None, jobs))
    assert jobs.records == [("j0123456789ab", "100", "failed")]


def test_a_transient_failure_records_nothing_it_is_retried() -> None:
    class Flaky(FakeSender):
        def send(self, target: Any, text: str) -> str:
            raise TransientError("503")

    jobs = Jobs()
    with pytest.raises(TransientError):
        deliver(cron_job({"job_id": "j0123456789ab", "run_id": "100"}), deps(Flaky(), jobs))
    assert jobs.records == []


@pytest.mark.parametrize("cron", [None, "j1", {"job_id": "j1"}, {"run_id": "1"}])
def test_jobs_without_a_cron_run_record_nothing(cron: Any) -> None:
    jobs = Jobs()
    deliver(cron_job(cron), deps(FakeSender(), jobs))
    assert jobs.records == []


def test_the_fake_store_keeps_a_failed_delivery_of_a_run() -> None:
    from hermes_gateway.services.cron import create_job

    store = FakeJobStore()
    job = create_job(store, prompt="p", schedule="every 5m", deliver=["local"], now=NOW, time_zone="UTC")
    assert store.record_delivery(job.id, "1", "failed", NOW)
    assert not store.record_delivery(job.id, "1", "sent", NOW)
    stored = store.get(job.id)
    assert stored is not None and stored.last_delivery_status == "failed"
