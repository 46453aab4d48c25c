"""DM pairing in local mode, as a newcomer meets it: an unknown user gets a code, the operator
approves it with the CLI, and from then on the user is answered."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hermes_cli import main as cli
from hermes_local.runtime import operator_cli
from tests.e2e.conftest import Client, telegram_update

pytestmark = pytest.mark.e2e

CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


@pytest.fixture
def keep_function_logs() -> Iterator[Callable[[], list[str]]]:
    """Every line the functions log, at the level the gateway is started with (DEBUG: every one),
    formatted as in CloudWatch."""
    from hermes_gateway.observability import logger

    std = logging.getLogger(logger.name)
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(logger.registered_formatter.format(record))

    handler, level = Keep(), std.level
    std.addHandler(handler)
    std.setLevel(logging.DEBUG)
    yield lambda: lines
    std.removeHandler(handler)
    std.setLevel(level)


def test_an_unknown_user_is_paired_with_the_cli_and_then_answered(
    start_gateway: Callable[..., Client],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    keep_function_logs: Callable[[], list[str]],
) -> None:
    log_lines = keep_function_logs()
    # Given local mode with an allowlist that names someone else, and pairing on for DMs
    state = tmp_path / "local.json"
    client = start_gateway(
        TELEGRAM_ALLOWED_USERS="7",
        TELEGRAM_UNAUTHORIZED_DM="pair",
        HERMES_LOCAL_STATE=str(state),
        POWERTOOLS_LOG_LEVEL="DEBUG",  # every line: local mode's own level is warnings and errors
    )
    # When user 42 writes
    assert client.telegram(telegram_update(1, "hello?", user_id=42))[0] == 200
    [reply] = client.wait_outbox(1)
    code = CODE.search(reply["text"]).group(1)  # type: ignore[union-attr]
    # ... with the command as the user runs it from here (`.venv/bin/hermes-gateway` unless on PATH)
    assert f"{operator_cli()} pairing approve telegram {code} --local" in reply["text"]
    # ... the operator lists (no code shown) and approves with the CLI
    assert cli(["pairing", "list", "--local"]) == 0
    printed = capsys.readouterr().out
    listing = "\n".join(line for line in printed.splitlines() if not line.startswith("{"))
    assert "user 42" in listing and code not in listing
    assert cli(["pairing", "approve", "telegram", code.lower(), "--local"]) == 0
    approved = capsys.readouterr()
    assert "approved: telegram user 42" in approved.out
    assert '"event":"pairing:approved"' in approved.err.replace(" ", "")  # the lifecycle event
    printed += approved.out + approved.err
    # Then the user's next message is answered by the agent
    assert client.telegram(telegram_update(2, "now?", user_id=42))[0] == 200
    assert [r["text"] for r in client.wait_outbox(2)][-1] == "Echo: now?"
    # ... and a wrong code is refused
    assert cli(["pairing", "approve", "telegram", "AAAA-AAAA", "--local"]) == 1
    # No log line carried the code (every level, as the functions wrote them), nor the CLI's output
    printed += capsys.readouterr().out
    assert any("pairing requested" in line for line in log_lines) and code not in "\n".join(log_lines)
    assert code not in printed
