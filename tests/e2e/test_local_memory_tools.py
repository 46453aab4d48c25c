"""Local mode with tools, as a newcomer meets it: ask the agent to remember something, start a new
session and have it recall; ask for a reminder and see the job listed. Driven by the echo
provider's `echo-tool:` lines (no model needed) and by a scripted OpenAI-compatible fake."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from tests.e2e.conftest import Client, telegram_update
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e

pytest_plugins = ("tests.fakes.openai_server",)


def _say(client: Client, update_id: int, text: str, expect: int) -> str:
    """Send `text` and return the `expect`-th answer. A message that comes while the previous
    turn is still finishing (its reply is out before its lease is released) waits behind it and
    gets the one busy notice first: notices are not answers."""
    assert client.telegram(telegram_update(update_id, text))[0] == 200
    deadline = time.time() + 30
    answers: list[dict[str, object]] = []
    while time.time() < deadline:
        answers = [r for r in client.outbox() if not str(r["delivery_id"]).startswith("busy-")]
        if len(answers) >= expect:
            break
        time.sleep(0.1)
    assert len(answers) >= expect, f"no reply to {text!r}"
    return str(answers[expect - 1]["text"])


def test_remember_then_recall_after_new_with_echo(client: Client) -> None:
    # Given the echo agent asked to save a note
    added = _say(client, 9001, 'echo-tool:memory {"action": "add", "text": "prefers metric units"}', 1)
    assert added.startswith('Echo: [memory] {"added"')

    # When the user starts a new session and asks what is saved
    _say(client, 9002, "/new", 2)
    listed = _say(client, 9003, 'echo-tool:memory {"action": "list"}', 3)

    # Then the note from the old session is there
    assert "prefers metric units" in listed


def test_a_reminder_is_created_and_listed_with_echo(client: Client) -> None:
    create = {"action": "create", "prompt": "Remind the user to stretch", "schedule": "every 2h"}
    created = _say(client, 9101, f"echo-tool:cronjob {json.dumps(create)}", 1)
    assert '"created"' in created

    listed = _say(client, 9102, 'echo-tool:cronjob {"action": "list"}', 2)
    assert "Remind the user to stretch" in listed
    assert '"count":1' in listed


def test_remember_and_recall_with_an_openai_compatible_model(
    start_gateway: Callable[..., Client], fake_openai: FakeOpenAI
) -> None:
    client = start_gateway(GATEWAY_PROVIDER="openai", GATEWAY_MODEL="gpt-test", OPENAI_BASE_URL=fake_openai.base_url)
    # Given a model that saves a note, then answers
    fake_openai.call_tools_next(("memory", {"action": "add", "text": "my sister is called Ana"}))
    fake_openai.reply_next("I'll remember that.")
    assert _say(client, 9201, "remember that my sister is called Ana", 1) == "I'll remember that."

    # When a new session starts (the old one's memory flush, a model call of its own, runs first)
    before = len(fake_openai.requests)
    _say(client, 9202, "/new", 2)
    deadline = time.time() + 15
    while len(fake_openai.requests) == before and time.time() < deadline:
        time.sleep(0.05)
    flush = fake_openai.requests[before].json
    assert [t["function"]["name"] for t in flush["tools"]] == ["memory"]  # a memory-only turn
    # and the user asks
    fake_openai.reply_next("Your sister is Ana.")
    assert _say(client, 9203, "what is my sister called?", 3) == "Your sister is Ana."

    # Then the model was given the saved note before it answered
    system = fake_openai.sent_messages()[0]
    assert system["role"] == "system"
    assert "my sister is called Ana" in system["content"]
    # and the tool went out with the first request
    assert any(t["function"]["name"] == "memory" for t in fake_openai.requests[0].json["tools"])
