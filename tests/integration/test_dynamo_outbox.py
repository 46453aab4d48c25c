"""The DynamoDB outbox: one record per chunk, one claim at a time (moto)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox

pytestmark = pytest.mark.integration


def record(outbox: DynamoOutbox, delivery_id: str, now: float) -> Any:
    return outbox.record(
        delivery_id,
        platform="telegram",
        chat_id="99",
        thread_id=None,
        text="hi",
        turn_id="t",
        chunk=1,
        chunks=1,
        now=now,
    )


def test_record_is_written_once_and_returns_what_is_stored(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    first = record(outbox, "t#1", 100.0)
    outbox.mark("t#1", "sent", 101.0, platform_message_id="7")
    again = record(outbox, "t#1", 200.0)
    assert first.status == "pending" and again.status == "sent" and again.platform_message_id == "7"
    assert again.created_at == 100.0 and again.attempts == 1


def test_only_one_of_many_concurrent_claims_wins(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "t#1", 100.0)
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        results.append(outbox.claim("t#1", 100.0))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 1


def test_a_sent_chunk_cannot_be_claimed_and_a_stale_claim_is_settled_unknown(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "a#1", 100.0)
    assert outbox.claim("a#1", 100.0)
    assert not outbox.claim("a#1", 130.0)  # the first worker may still be sending
    assert not outbox.settle_stale("a#1", 130.0)  # ... so its claim is not stale yet
    assert not outbox.claim("a#1", 200.0)
    assert outbox.settle_stale("a#1", 200.0)  # it stopped mid-send: the platform may have the chunk
    assert outbox.get("a#1").status == "unknown"  # type: ignore[union-attr]
    assert not outbox.claim("a#1", 10_000.0)  # never resent
    record(outbox, "b#1", 100.0)
    assert outbox.claim("b#1", 100.0)
    outbox.mark("b#1", "sent", 101.0, platform_message_id="1")
    assert not outbox.claim("b#1", 10_000.0) and not outbox.settle_stale("b#1", 10_000.0)


def test_a_chunks_buttons_are_stored_with_it(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    buttons = [{"label": "Approve", "reply": "/approve"}]
    stored = outbox.record(
        "ask#1", platform="webchat", chat_id="c", thread_id=None, text="ok?", turn_id="t", chunk=1, chunks=1,
        now=1.0, buttons=buttons,
    )  # fmt: skip
    assert stored.buttons == buttons
    assert record(outbox, "plain#1", 1.0).buttons is None
