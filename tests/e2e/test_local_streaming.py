"""Local mode streams a slow answer to the Bot API (services/turn/stream.py as wired for the
agent function): one message, edited in place to the exact answer, its outbox row `sent`."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.conftest import Client, telegram_update
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.e2e

QUESTION = " ".join(f"word{i}" for i in range(20))


def test_a_slow_answer_streams_into_one_telegram_message(
    start_gateway: Callable[..., Client], fake_telegram: FakeTelegram
) -> None:
    client = start_gateway(
        TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_BASE_URL=fake_telegram.base_url,
        HERMES_ECHO_STREAM_DELAY="0.05",  # the echo writes a word every 50 ms: 1 s in all
        TELEGRAM_STREAMING_FIRST_AFTER="0.2",
        TELEGRAM_STREAMING_EDIT_INTERVAL="0.3",
    )
    assert client.telegram(telegram_update(8101, QUESTION))[0] == 200
    rows = client.wait_outbox(1, settled=True)

    assert len(fake_telegram.sent) == 1  # posted once: the Deliver state only completed it
    assert fake_telegram.text_of(1) == f"Echo: {QUESTION}"
    assert len(fake_telegram.edits) >= 2
    assert [(r["status"], r["platform_message_id"]) for r in rows] == [("sent", "1")]
    # the row's text is the answer the message ends with, not the first words it was posted with
    # (`/local/outbox` and `outbox list` showed "Echo: word0 word1 …" while Telegram had it all)
    assert rows[0]["text"] == f"Echo: {QUESTION}"
