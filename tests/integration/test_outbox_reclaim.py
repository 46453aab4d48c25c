"""DynamoOutbox.reclaim: a worker takes back only its own claim, exactly as it left it (moto)."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway import wiring

pytestmark = pytest.mark.integration
NOW = 1_764_400_000.125


def test_only_the_claim_as_it_was_left_is_taken_back(aws: Any) -> None:
    outbox = wiring.outbox()
    outbox.record_claimed(
        "d#1", platform="telegram", chat_id="99", thread_id=None, text="hi", turn_id="t", chunk=1, chunks=1, now=NOW
    )  # claimed at NOW by the write that recorded it
    outbox.mark("d#1", "failed", NOW + 0.1, error="the send failed")
    assert not outbox.reclaim("d#1", NOW, NOW + 1)  # failed, not claimed: nothing to take back
    assert outbox.claim("d#1", NOW + 0.5)
    assert not outbox.reclaim("d#1", NOW, NOW + 1)  # another claim's time
    assert outbox.reclaim("d#1", NOW + 0.5, NOW + 2)
    assert not outbox.reclaim("d#1", NOW + 0.5, NOW + 3)  # it was renewed meanwhile
    assert outbox.settle_stale("d#1", NOW + 1000)
    assert not outbox.reclaim("d#1", NOW + 2, NOW + 1001)  # settled unknown: never sent again
    assert [e.status for e in outbox.recent() if e.delivery_id == "d#1"] == ["unknown"]
