"""Maintenance (BEHAVIOUR §7): records past their expiry are ignored by reads before DynamoDB's TTL
deletes them (TTL deletes only eventually, within days): an idempotency record, a pairing code."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hermes_gateway.adapters.aws import IdempotentEnqueue
from hermes_gateway.adapters.dynamo_access import DynamoAccessStore

pytestmark = pytest.mark.integration


def test_an_expired_idempotency_record_no_longer_marks_a_duplicate(aws: Any) -> None:
    # Given an event enqueued once, behind a record that expires after a second
    sent: list[dict[str, Any]] = []

    def send(envelope: dict[str, Any]) -> str:
        sent.append(envelope)
        return f"m{len(sent)}"

    enqueue = IdempotentEnqueue(aws.bindings.table("idempotency"), send, 1)
    envelope = {"event_id": "telegram:default:1", "text": "x"}
    assert enqueue(envelope) is True
    assert enqueue(envelope) is False  # a duplicate while the record lives
    # When the record has expired (still in the table: TTL has not deleted it)
    time.sleep(2.1)
    # Then it is ignored: the event is new again
    assert enqueue(envelope) is True
    assert len(sent) == 2


def test_an_expired_pairing_code_is_ignored_by_every_read(aws: Any) -> None:
    store = DynamoAccessStore(aws.bindings)
    now = time.time()
    issued = store.request_code("telegram", "42", "Al", "99", now)
    assert issued.status == "issued" and issued.code and issued.expires_at
    later = issued.expires_at + 1
    assert store.pending("telegram", later) == []
    assert store.approve("telegram", issued.code, later, "test").status == "invalid"
    assert not store.is_approved("telegram", "42")
