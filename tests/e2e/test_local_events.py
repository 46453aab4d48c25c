"""Local mode publishes lifecycle events to its embedded bus and shows them at /local/events."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.e2e.conftest import Client, telegram_update

pytestmark = pytest.mark.e2e


def test_a_reply_shows_its_delivery_event(start_gateway: Callable[..., Client]) -> None:
    client = start_gateway(GATEWAY_ALLOW_ALL_USERS="true")
    assert client.telegram(telegram_update(1, "hello"))[0] == 200
    assert client.wait_outbox(1)
    deadline = time.time() + 10
    events: list[dict[str, object]] = []
    while time.time() < deadline and not events:
        events = [e for e in client.request("GET", "/local/events")[1] if e["event"] == "delivery:sent"]
        time.sleep(0.1)
    assert events and events[0]["detail"]["platform"] == "telegram"  # type: ignore[index]
    assert "hello" not in str(events)  # no message text in an event
