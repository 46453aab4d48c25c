"""Local mode end to end: a user chats, runs /new, /undo, /retry, /title and /status, and the effect
shows through `hermes-gateway sessions … --local` (the session API with the local token)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main as cli
from tests.e2e.conftest import Client, telegram_update

pytestmark = pytest.mark.e2e


class Chat:
    def __init__(self, client: Client, state: Path) -> None:
        self.client = client
        self.state = state
        self.update_id = 0

    def idle(self) -> None:
        """Wait until no turn holds the session: a reply is delivered just before its turn commits,
        and a session command meanwhile would (rightly) be told the session is busy."""
        api = json.loads(self.state.read_text())["session_api"]
        deadline = time.time() + 10
        while time.time() < deadline:
            request = urllib.request.Request(
                api["url"],
                data=json.dumps({"verb": "session.list"}).encode(),
                headers={"authorization": f"Bearer {api['token']}"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                listed = json.loads(response.read())["sessions"]
            if not any(s.get("busy") for s in listed):
                return
            time.sleep(0.1)
        raise AssertionError("the session stayed busy")

    def say(self, text: str) -> str:
        """Send one message (once the session is idle) and wait for the next reply."""
        self.idle()
        before = len(self.client.wait_outbox(0, chat_id="99"))  # counted as wait_outbox counts
        self.update_id += 1
        assert self.client.telegram(telegram_update(self.update_id, text))[0] == 200
        rows = self.client.wait_outbox(before + 1, chat_id="99")
        assert len(rows) > before, f"no reply to {text!r}"
        return str(rows[before]["text"])  # the first reply: /retry's answer may follow it at once


def sessions(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = cli(["sessions", *argv, "--local", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return dict(json.loads(out.out))


def test_chat_commands_and_the_sessions_cli(
    start_gateway: Callable[..., Client], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = start_gateway(HERMES_LOCAL_STATE=str(tmp_path / "local.json"))
    chat = Chat(client, tmp_path / "local.json")

    # Given a user who chats and names the session
    assert chat.say("hello") == "Echo: hello"
    assert chat.say("/title Plans") == 'Session titled "Plans".'
    assert chat.say("second thought") == "Echo: second thought"
    # When they take the last turn back, and ask for the first answer again
    assert chat.say("/undo").startswith("Undone: 2 message(s)")
    before = len(client.outbox(chat_id="99"))
    assert chat.say("/retry") == "Retrying your last message."
    assert client.wait_outbox(before + 2, chat_id="99")[-1]["text"] == "Echo: hello"
    status = chat.say("/status")
    assert '"Plans"' in status and "2 messages (4 undone)" in status
    assert "Model: echo" in status and "State: idle" in status

    # Then the CLI sees one titled session whose active transcript is the retried turn
    listed = sessions(capsys, "list")["sessions"]
    assert [s["title"] for s in listed] == ["Plans"]
    first = listed[0]["session_id"]
    shown = sessions(capsys, "show", first)["session"]
    assert [(m["role"], m["content"]) for m in shown["messages"]] == [("user", "hello"), ("assistant", "Echo: hello")]

    # When the user starts a new titled session
    assert chat.say("/new Second").startswith('New session "Second" started')
    assert chat.say("fresh start") == "Echo: fresh start"
    chat.idle()
    listed = sessions(capsys, "list")["sessions"]
    assert [s["title"] for s in listed] == ["Second", "Plans"]
    assert listed[1]["ended_at"] is not None and listed[0]["current"] is True

    # And the operator renames, branches, rewinds and deletes through the API
    second = listed[0]["session_id"]
    assert sessions(capsys, "rename", second, "Renamed")["session"]["title"] == "Renamed"
    child = sessions(capsys, "branch", second, "--title", "Fork")["session"]["id"]
    assert [m["content"] for m in sessions(capsys, "show", child)["session"]["messages"]] == [
        "fresh start",
        "Echo: fresh start",
    ]
    assert sessions(capsys, "rewind", child, "--to", "1")["removed"] == 1
    assert sessions(capsys, "delete", first)["deleted"] == first
    assert cli(["sessions", "show", first, "--local"]) == 1
    assert "not_found" in capsys.readouterr().err
    # The chat now lands in the branch (the route followed it)
    assert chat.say("/status").startswith('Session "Fork"')

    # And `explain --local` says where a raw update would land: this chat's branch, or a new session
    for chat_id, expected in ((99, {"status": "existing", "session_id": child}), (5, {"status": "new"})):
        payload = tmp_path / f"update-{chat_id}.json"
        payload.write_text(json.dumps(telegram_update(900, "hi", chat_id=chat_id)))
        assert cli(["explain", "--platform", "telegram", "--payload", str(payload), "--local"]) == 0
        explained = json.loads(capsys.readouterr().out)
        assert explained["authorized"] is True and explained["session_key"] == f"agent:main:telegram:dm:{chat_id}"
        assert {k: v for k, v in explained["session"].items() if k != "revision"} == expected


def test_the_local_session_api_wants_the_token(start_gateway: Callable[..., Client], tmp_path: Path) -> None:
    client = start_gateway(HERMES_LOCAL_STATE=str(tmp_path / "local.json"))
    state = json.loads((tmp_path / "local.json").read_text())
    assert (tmp_path / "local.json").stat().st_mode & 0o077 == 0  # owner-only: it holds the token
    url = state["session_api"]["url"]
    body = json.dumps({"verb": "session.list"}).encode()

    def post(headers: dict[str, str]) -> tuple[int, Any]:
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert post({})[0] == 403
    assert post({"authorization": "Bearer wrong"})[1]["error"]["reason"] == "permission_denied"
    status, answer = post({"authorization": f"Bearer {state['session_api']['token']}"})
    assert status == 200 and answer == {"ok": True, "sessions": [], "next_before": None}
    assert client.gateway.url in url
