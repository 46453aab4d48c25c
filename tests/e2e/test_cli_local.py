"""The operator's CLI against a running local mode: every command has --help, answers, and fails
with a clear message and a non-zero exit when it cannot do what was asked."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_cli import build_parser
from hermes_cli import main as cli
from tests.e2e.conftest import Client, telegram_update

pytestmark = pytest.mark.e2e

COMMANDS = ["local", "pairing", "outbox", "webhooks", "secrets", "send", "deploy", "config", "logs", "users"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([command, "--help"])
    assert done.value.code == 0 and "usage:" in capsys.readouterr().out


def test_the_cli_against_local_mode(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = start_gateway(
        GATEWAY_ALLOW_ALL_USERS="true", SLACK_SIGNING_SECRET="s3cret", HERMES_LOCAL_STATE=str(tmp_path / "l.json")
    )
    assert client.telegram(telegram_update(1, "hello"))[0] == 200
    assert client.wait_outbox(1)

    assert cli(["outbox", "list", "--local", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["text"] for r in listed["rows"]] == ["Echo: hello"] and listed["dead_letters"] == 0

    assert cli(["webhooks", "urls", "--local", "--json"]) == 0
    urls = json.loads(capsys.readouterr().out)
    assert urls["slack"] == f"{client.gateway.url}/webhooks/slack" and "telegram" in urls

    assert cli(["send", "local", "--text", "note to self", "--local"]) == 0
    assert json.loads(capsys.readouterr().out)["target"]["platform"] == "local"
    # the row appears as `pending` when the delivery claims it, and is `recorded` a moment later
    deadline = time.time() + 15
    while [r["status"] for r in client.wait_outbox(1, platform="local")] != ["recorded"] and time.time() < deadline:
        time.sleep(0.05)
    assert [r["status"] for r in client.outbox(platform="local")] == ["recorded"]
    assert cli(["send", "#nowhere", "--text", "x", "--local"]) == 2
    assert "no chat named" in capsys.readouterr().err

    assert cli(["secrets", "check", "--local"]) == 1  # no bot tokens in this environment
    check = capsys.readouterr().out
    assert "telegram     missing TELEGRAM_BOT_TOKEN" in check and "s3cret" not in check

    assert cli(["logs", "tail", "--local"]) == 2
    assert "local mode" in capsys.readouterr().err.lower()
    assert cli(["config", "check"]) == 0
    assert "valid" in capsys.readouterr().out
