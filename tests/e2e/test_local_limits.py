"""Local mode end to end: a user's burst over their message limit (BEHAVIOUR §11). Twelve messages
in one minute with a limit of five reach the model at most five times, the chat hears once which
limit it met and when it resets, and `/usage` still answers (a command calls no model)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.e2e.conftest import Client, telegram_update
from tests.fakes.openai_server import FakeOpenAI

pytestmark = pytest.mark.e2e

pytest_plugins = ("tests.fakes.openai_server",)


def _start_of_a_minute() -> None:
    """The burst is counted in one clock minute: start it early in one (a limit window ends on
    the minute, and a burst across two would rightly get two windows' worth)."""
    into = time.time() % 60
    if into > 40:
        time.sleep(60 - into + 0.2)


def _completions(fake: FakeOpenAI) -> int:
    return sum(1 for r in fake.requests if r.path == "/v1/chat/completions")


def test_a_burst_of_twelve_with_a_limit_of_five(start_gateway: Callable[..., Client], fake_openai: FakeOpenAI) -> None:
    client = start_gateway(
        GATEWAY_PROVIDER="openai",
        GATEWAY_MODEL="gpt-test",
        OPENAI_BASE_URL=fake_openai.base_url,
        GATEWAY_LIMIT_MESSAGES_PER_MINUTE="5",
        TELEGRAM_STREAMING="false",
    )
    _start_of_a_minute()

    # Given a user who sends twelve messages at once
    for n in range(12):
        assert client.telegram(telegram_update(5000 + n, f"message {n}"))[0] == 200

    # When the gateway has answered what it will: five answers and one notice of the limit
    deadline = time.time() + 60
    while time.time() < deadline:
        rows = client.outbox(chat_id="99")
        answers = [r for r in rows if r["text"] == "fake reply"]
        if len(answers) >= 5 and any(str(r["delivery_id"]).startswith("limit-") for r in rows):
            break
        time.sleep(0.2)
    time.sleep(2)  # anything more would come now

    # Then at most five requests reached the model, and the chat was told once
    rows = client.outbox(chat_id="99")
    assert _completions(fake_openai) <= 5
    assert len([r for r in rows if r["text"] == "fake reply"]) == _completions(fake_openai) == 5
    notices = [r["text"] for r in rows if str(r["delivery_id"]).startswith("limit-")]
    assert len(notices) == 1 and "5 messages a minute" in notices[0] and "It resets at" in notices[0]

    # And a gateway command still answers over the limit, without a model call
    assert client.telegram(telegram_update(5100, "/usage"))[0] == 200
    deadline = time.time() + 15
    usage: list[str] = []
    while not usage and time.time() < deadline:
        usage = [r["text"] for r in client.outbox(chat_id="99") if str(r["text"]).startswith("Your usage")]
        time.sleep(0.1)
    assert usage and "Today: 5 messages" in usage[0] and "Limits: 5 messages a minute." in usage[0]
    assert _completions(fake_openai) == 5
