"""End-to-end: the whole local mode booted in-process, driven over HTTP like a platform would."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from hermes_local.runtime import LocalGateway

BASE_ENV = {"PATH": "/usr/bin:/bin", "GATEWAY_BUSY_RETRY_SECONDS": "1", "TELEGRAM_WEBHOOK_SECRET": "e2e-secret"}


class Client:
    def __init__(self, gateway: LocalGateway) -> None:
        self.gateway = gateway

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        if path.startswith("/local/"):  # the page's token, as the web chat page sends it
            headers = {"x-hermes-local-token": self.gateway.local_secrets["WEBCHAT_TOKEN"], **(headers or {})}
        req = urllib.request.Request(self.gateway.url + path, data=body, headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                raw = res.read()
                status = res.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def telegram(self, update: dict[str, Any], secret: str = "e2e-secret") -> tuple[int, Any]:
        return self.request(
            "POST",
            "/webhooks/telegram",
            json.dumps(update).encode(),
            {"content-type": "application/json", "x-telegram-bot-api-secret-token": secret},
        )

    def outbox(self, **filters: str) -> list[dict[str, Any]]:
        query = "&".join(f"{k}={v}" for k, v in filters.items())
        return self.request("GET", "/local/outbox" + (f"?{query}" if query else ""))[1]  # type: ignore[no-any-return]

    def wait_outbox(
        self, count: int, timeout: float = 15.0, settled: bool = False, **filters: str
    ) -> list[dict[str, Any]]:
        """Until `count` rows are in the outbox, not counting busy notices: a message that comes
        while the previous turn is still finishing (its reply is out before its lease is given
        back) gets one before its own answer, and which messages do is a matter of timing.
        `settled`: and until none of them is still on its way (pending, sending, or streaming: a row
        is written before its send and marked after the platform answered, so the platform may
        have the message first)."""
        deadline = time.time() + timeout
        rows = self._answers(**filters)
        while time.time() < deadline and (
            len(rows) < count or (settled and any(r["status"] in ("pending", "sending", "streaming") for r in rows))
        ):
            time.sleep(0.1)
            rows = self._answers(**filters)
        return rows

    def _answers(self, **filters: str) -> list[dict[str, Any]]:
        return [row for row in self.outbox(**filters) if not str(row["delivery_id"]).startswith("busy-")]


def telegram_update(
    update_id: int,
    text: str,
    chat_id: int = 99,
    user_id: int = 42,
    chat_type: str = "private",
    thread_id: int | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "message_id": update_id,
        "date": int(time.time()),
        "chat": {"id": chat_id, "type": chat_type, "title": "Ops"}
        if chat_type != "private"
        else {"id": chat_id, "type": "private", "first_name": "Al"},
        "from": {"id": user_id, "is_bot": False, "first_name": "Al"},
        "text": text,
    }
    if thread_id is not None:
        message["message_thread_id"] = thread_id
        message["is_topic_message"] = True
    return {"update_id": update_id, "message": message}


@contextmanager
def inbox_writes() -> Iterator[list[dict[str, Any]]]:
    """Every envelope the ingress writes to the inbox while inside (a duplicate, not written, is not
    in it): what a bad request must not add."""
    from hermes_gateway.adapters.dynamo_inbox import DynamoInbox

    written: list[dict[str, Any]] = []
    original = DynamoInbox.put_once

    def put_once(inbox: Any, envelope: dict[str, Any]) -> bool:
        done = original(inbox, envelope)
        if done:
            written.append(envelope)
        return done

    DynamoInbox.put_once = put_once  # type: ignore[method-assign]
    try:
        yield written
    finally:
        DynamoInbox.put_once = original  # type: ignore[method-assign]


@pytest.fixture
def start_gateway() -> Iterator[Callable[..., Client]]:
    started: list[LocalGateway] = []

    def start(**env: str) -> Client:
        gateway = LocalGateway(port=0, environ={**BASE_ENV, **env}, tick_seconds=3600, poll_wait_seconds=1)
        started.append(gateway.start())
        return Client(gateway)

    yield start
    for gateway in started:
        gateway.stop()


@pytest.fixture
def client(start_gateway: Callable[..., Client]) -> Client:
    return start_gateway()
