"""Two bots, one gateway: the deployment's own Telegram bot and a named profile's (`coder`), in
local mode. Each verifies with its own secret, authorizes by its own allowlist, pairs its own users,
and keeps its own sessions; the same user in the same chat talks to two separate agents."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main as cli
from tests.e2e.conftest import Client, telegram_update

pytestmark = pytest.mark.e2e

CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")
CODER_URL = "/p/coder/webhooks/telegram"


def post(client: Client, path: str, update: dict[str, Any], secret: str) -> int:
    headers = {"content-type": "application/json", "x-telegram-bot-api-secret-token": secret}
    status, _ = client.request("POST", path, json.dumps(update).encode(), headers)
    return status


def listed(capsys: pytest.CaptureFixture[str], *profile: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    assert cli(["sessions", "list", "--local", "--json", *profile]) == 0
    return list(json.loads(capsys.readouterr().out)["sessions"])


def test_two_bots_answer_the_same_user_separately(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the deployment's bot open to user 42, and a coder bot that pairs unknown users
    coder_secret = secrets.token_hex(12)
    coder = {"TELEGRAM_ENABLED": "true", "TELEGRAM_ALLOWED_USERS": "7", "TELEGRAM_UNAUTHORIZED_DM": "pair"}
    profiles = {"coder": coder}
    client = start_gateway(
        TELEGRAM_ALLOWED_USERS="42",
        GATEWAY_PROFILES=json.dumps(profiles),
        TELEGRAM_WEBHOOK_SECRET__CODER=coder_secret,
        HERMES_LOCAL_STATE=str(tmp_path / "local.json"),
    )
    # When user 42 writes to both bots, each numbering its update 1
    assert client.telegram(telegram_update(1, "hello main", user_id=42))[0] == 200
    assert post(client, CODER_URL, telegram_update(1, "hello coder", user_id=42), coder_secret) == 200
    # Then the deployment's bot answers, and the coder bot (not the same event) asks for pairing
    rows = client.wait_outbox(2)
    texts = [r["text"] for r in rows]
    assert "Echo: hello main" in texts
    [pairing] = [t for t in texts if CODE.search(t)]
    code = CODE.search(pairing).group(1)  # type: ignore[union-attr]
    assert f"pairing approve telegram {code} --profile coder" in pairing
    # A forged request (the deployment's secret on the coder bot's URL) and an unserved profile
    assert post(client, CODER_URL, telegram_update(2, "forged", user_id=42), "e2e-secret") == 401
    assert post(client, "/p/writer/webhooks/telegram", telegram_update(3, "who?", user_id=42), coder_secret) == 404
    # The code belongs to the coder bot: the deployment's own pairing does not know it
    assert cli(["pairing", "approve", "telegram", code, "--local"]) == 1
    assert cli(["pairing", "approve", "telegram", code, "--local", "--profile", "coder"]) == 0
    # Now the coder bot answers user 42
    assert post(client, CODER_URL, telegram_update(4, "now?", user_id=42), coder_secret) == 200
    assert "Echo: now?" in [r["text"] for r in client.wait_outbox(3)]
    # And each profile lists its own session only
    main_sessions, coder_sessions = listed(capsys), listed(capsys, "--profile", "coder")
    assert len(main_sessions) == 1 and len(coder_sessions) == 1
    assert main_sessions[0]["session_id"] != coder_sessions[0]["session_id"]
    capsys.readouterr()
    assert cli(["sessions", "show", coder_sessions[0]["session_id"], "--local", "--json"]) == 1  # not main's
    capsys.readouterr()
    assert cli(["sessions", "show", coder_sessions[0]["session_id"], "--local", "--json", "--profile", "coder"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [m["content"] for m in shown["session"]["messages"]] == ["now?", "Echo: now?"]
    # The webhook URLs of both bots are listed
    capsys.readouterr()
    assert cli(["webhooks", "urls", "--local"]) == 0
    urls = capsys.readouterr().out
    assert f"{client.gateway.url}/webhooks/telegram" in urls and f"{client.gateway.url}{CODER_URL}" in urls
