"""Cron jobs in local mode (BEHAVIOUR §7): a newcomer adds a job with the CLI, local mode's timer
(EventBridge Scheduler's stand-in) starts its run, `cron:ran` shows on /local/events, and the run's
output arrives in the local outbox."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import build_parser
from hermes_cli import main as cli
from tests.e2e.conftest import Client

pytestmark = pytest.mark.e2e


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = cli(list(argv))
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def cron_events(client: Client) -> list[dict[str, Any]]:
    events = client.request("GET", "/local/events")[1]
    rows = events["events"] if isinstance(events, dict) else events
    return [e for e in rows if e.get("event") == "cron:ran"]


def wait_for(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    return check()


@pytest.mark.parametrize("action", ["list", "add", "pause", "resume", "remove", "run"])
def test_every_cron_command_has_help(action: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["cron", action, "--help"])
    assert done.value.code == 0 and "--local" in capsys.readouterr().out


def test_a_job_added_with_the_cli_runs_on_the_local_timer(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = start_gateway(HERMES_LOCAL_STATE=str(tmp_path / "local.json"))
    # Given a job added with the CLI, due in a minute, delivered to the local outbox
    code, job = run_json(
        capsys, "cron", "add", "--schedule", "in 1m", "--prompt", "say hi", "--deliver", "local",
        "--name", "greeting", "--local", "--json",
    )  # fmt: skip
    assert code == 0 and job["id"].startswith("j") and job["state"] == "scheduled"
    assert job["next_run_at"] > time.time() + 30
    code, listed = run_json(capsys, "cron", "list", "--local", "--json")
    assert code == 0 and [j["id"] for j in listed] == [job["id"]]

    # When the minute has passed (made due now, through the store) and local mode's timer fires
    from hermes_gateway import wiring

    store = wiring.job_store()
    assert store.pause(job["id"], time.time()) is not None
    assert store.resume(job["id"], time.time() - 1, time.time()) is not None
    result = client.gateway.run_schedule("expiry")

    # Then its run started once, cron:ran shows on the local event bus, and a second tick does nothing
    assert result["cron_started"] == 1
    assert client.gateway.run_schedule("expiry")["cron_started"] == 0
    ran = cron_events(client)
    assert [e["detail"]["status"] for e in ran] == ["started"]
    assert ran[0]["detail"]["job_id"] == job["id"] and "say hi" not in json.dumps(ran)
    code, shown = run_json(capsys, "cron", "list", "--local", "--json")
    assert shown[0]["state"] == "completed" and shown[0]["repeat"]["completed"] == 1

    # And the run's output arrives in the local outbox, its status recorded on the job
    rows = wait_for(lambda: [r for r in client.outbox(platform="local") if r["status"] == "recorded"], timeout=30)
    assert [r["turn_id"] for r in rows] == [ran[0]["detail"]["turn_id"]]
    assert "say hi" in rows[0]["text"]  # the echo provider answers with the prompt

    def recorded() -> list[dict[str, Any]]:
        listed = run_json(capsys, "cron", "list", "--local", "--json")[1]
        return [j for j in listed if j["last_status"] and j["last_delivery_status"]]

    job_now = wait_for(recorded)
    assert (job_now[0]["last_status"], job_now[0]["last_delivery_status"]) == ("ok", "recorded")


def test_cron_run_pause_resume_remove_against_local_mode(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = start_gateway(HERMES_LOCAL_STATE=str(tmp_path / "local.json"))
    code, job = run_json(
        capsys, "cron", "add", "--schedule", "every monday 9am", "--prompt", "weekly report", "--deliver", "local",
        "--local", "--json",
    )  # fmt: skip
    assert code == 0
    # `cron run` starts it now, whatever its schedule
    code, started = run_json(capsys, "cron", "run", job["id"], "--local", "--json")
    assert code == 0 and started["turn_id"].startswith(f"cron-{job['id']}-manual_")
    assert client.wait_outbox(1, timeout=30, platform="local")
    # pause, resume and remove answer with the job; a bad id or schedule fails clearly
    assert run_json(capsys, "cron", "pause", job["id"], "--local", "--json")[1]["state"] == "paused"
    assert run_json(capsys, "cron", "resume", job["id"], "--local", "--json")[1]["state"] == "scheduled"
    assert run_json(capsys, "cron", "remove", job["id"], "--local", "--json") == (0, {"removed": job["id"]})
    code, failed = run_json(capsys, "cron", "pause", job["id"], "--local", "--json")
    assert code == 1 and "no job" in failed["error"]
    code, failed = run_json(capsys, "cron", "run", "../x", "--local", "--json")
    assert code == 1 and "not a job id" in failed["error"]
    code = cli(["cron", "add", "--schedule", "sometimes", "--prompt", "p", "--deliver", "local", "--local"])
    assert code == 1 and "Accepted forms" in capsys.readouterr().err
    code = cli(["cron", "add", "--schedule", "in 5m", "--prompt", "p", "--deliver", "#nowhere", "--local"])
    assert code == 1 and "no chat named" in capsys.readouterr().err


def test_local_modes_own_timer_fires_the_schedules(tmp_path: Path) -> None:
    from hermes_gateway import wiring
    from hermes_gateway.services.cron import create_job
    from hermes_local.runtime import LocalGateway
    from tests.e2e.conftest import BASE_ENV

    # Given local mode with a fast timer, and a job that is due
    env = {**BASE_ENV, "HERMES_LOCAL_STATE": str(tmp_path / "local.json")}
    gateway = LocalGateway(port=0, environ=env, tick_seconds=0.5, poll_wait_seconds=1).start()
    try:
        client = Client(gateway)
        now = time.time()
        job = create_job(
            wiring.job_store(), prompt="tick", schedule="in 1m", deliver=["local"], now=now - 60, time_zone="UTC"
        )
        # When nobody but the timer runs the schedule, Then the job's run starts and shows on the bus
        ran = wait_for(lambda: cron_events(client))
        assert [e["detail"]["job_id"] for e in ran] == [job.id]
        assert client.wait_outbox(1, timeout=30, platform="local")
    finally:
        gateway.stop()
