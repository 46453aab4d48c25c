"""DM pairing in local mode, as a newcomer meets it: an unknown user gets a code, the operator
approves it with the CLI, and from then on the user is answered."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_gateway.cli import main as cli
from tests.e2e.conftest import Client, telegram_update

pytestmark = pytest.mark.e2e

CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


def test_an_unknown_user_is_paired_with_the_cli_and_then_answered(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given local mode with an allowlist that names someone else, and pairing on for DMs
    state = tmp_path / "local.json"
    client = start_gateway(TELEGRAM_ALLOWED_USERS="7", TELEGRAM_UNAUTHORIZED_DM="pair", HERMES_LOCAL_STATE=str(state))
    # When user 42 writes
    assert client.telegram(telegram_update(1, "hello?", user_id=42))[0] == 200
    [reply] = client.wait_outbox(1)
    code = CODE.search(reply["text"]).group(1)  # type: ignore[union-attr]
    assert f"hermes-gateway pairing approve telegram {code}" in reply["text"]
    # ... the operator lists (no code shown) and approves with the CLI
    assert cli(["pairing", "list", "--local"]) == 0
    listing = capsys.readouterr().out
    assert "user 42" in listing and code not in listing
    assert cli(["pairing", "approve", "telegram", code.lower(), "--local"]) == 0
    assert "approved: telegram user 42" in capsys.readouterr().out
    # Then the user's next message is answered by the agent
    assert client.telegram(telegram_update(2, "now?", user_id=42))[0] == 200
    assert [r["text"] for r in client.wait_outbox(2)][-1] == "Echo: now?"
    # ... and a wrong code is refused
    assert cli(["pairing", "approve", "telegram", "AAAA-AAAA", "--local"]) == 1
