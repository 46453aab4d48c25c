"""Which running local mode the CLI's `--local` talks to (cli/hermes_cli/target.py).

Each local mode writes its own state file, keyed by its port, so a second one (another `make run`,
the e2e tests' gateways) never takes the first one's place; `--local` follows GATEWAY_PORT (8080
by default, as `make run`), else the only one running, and a local mode that is gone is one clear
line, never a traceback. HERMES_LOCAL_STATE names one file for both sides instead.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main
from hermes_cli.target import LOCAL_STATE_ENV, local_state, local_state_path, write_local_state
from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import TABLES


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for name in (LOCAL_STATE_ENV, "GATEWAY_PORT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "hermes-gateway"


def gone_pid() -> int:
    """The pid of a process that has ended."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(ended.stdout)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def state(port: int, pid: int | None = None, aws_port: int | None = None) -> dict[str, Any]:
    endpoint = f"http://127.0.0.1:{aws_port or closed_port()}"
    return {
        "pid": os.getpid() if pid is None else pid,
        "url": f"http://127.0.0.1:{port}",
        "platforms": ["telegram", "webchat"],
        "profile": "default",
        "profiles": {},
        "aws_environment": {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_MAX_ATTEMPTS": "1",
        },
        "resources": {table.env_var: f"local-{table.name}" for table in TABLES},
    }


def test_each_local_mode_keeps_its_own_state_and_gateway_port_picks_one(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given `make run` on 8080, then a second local mode on 8091 (another checkout, a test)
    write_local_state(state(8080), 8080)
    write_local_state(state(8091), 8091)
    # Then the first one's file is still its own
    assert json.loads(local_state_path(8080).read_text())["url"] == "http://127.0.0.1:8080"
    # And `--local` talks to 8080, as `make run` starts it, or to the one GATEWAY_PORT names
    assert local_state()["url"] == "http://127.0.0.1:8080"
    monkeypatch.setenv("GATEWAY_PORT", "8091")
    assert local_state()["url"] == "http://127.0.0.1:8091"


def test_without_gateway_port_the_only_one_running_is_found(cache: Path) -> None:
    write_local_state(state(8091), 8091)
    write_local_state(state(8092, pid=gone_pid()), 8092)  # killed: its file stayed behind
    assert local_state()["url"] == "http://127.0.0.1:8091"
    assert not local_state_path(8092).exists()  # and it is cleaned up on the way


def test_several_running_and_no_gateway_port_is_one_clear_line(cache: Path) -> None:
    write_local_state(state(8090), 8090)
    write_local_state(state(8091), 8091)
    with pytest.raises(ConfigError, match=r"several local modes are running \(ports 8090, 8091\): set GATEWAY_PORT"):
        local_state()


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def test_a_local_mode_that_is_gone_is_one_line_and_its_file_goes(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the state of a local mode whose process has ended (stopped with kill -9)
    pid = gone_pid()
    write_local_state(state(8080, pid=pid), 8080)
    # When the operator approves a code against it
    err = one_line_error(capsys, ["pairing", "approve", "telegram", "K7QM2XPR", "--local"])
    # Then one line says so, with what to do
    assert err == f"error: the local mode on port 8080 (pid {pid}) is not running any more: start it with `make run`"
    assert not local_state_path(8080).exists()
    assert (
        one_line_error(capsys, ["pairing", "list", "--local"])
        == "error: no running local mode found: start it with `make run`"
    )


def test_a_local_mode_whose_embedded_aws_does_not_answer_is_one_line(
    cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a state whose process runs but whose embedded AWS is not there (another process has its pid)
    aws_port = closed_port()
    write_local_state(state(8080, aws_port=aws_port), 8080)
    for name in state(8080)["aws_environment"]:  # what `--local` sets, put back after the test
        monkeypatch.setenv(name, os.environ.get(name, ""))
    err = one_line_error(capsys, ["pairing", "list", "--local"])
    assert err == (
        f"error: cannot reach the local mode's embedded AWS at http://127.0.0.1:{aws_port}/: "
        "is `make run` still running?"
    )


def test_hermes_local_state_names_one_file_for_both_sides(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chosen = cache.parent / "mine.json"
    monkeypatch.setenv(LOCAL_STATE_ENV, str(chosen))
    assert write_local_state(state(8093), 8093) == chosen
    assert local_state()["url"] == "http://127.0.0.1:8093"
