"""Maintenance (BEHAVIOUR §7): records age out. An inbox item (the de-duplication of a platform's
retries) expires after the platform's retry window; a pairing code past its expiry is ignored by
reads before DynamoDB's TTL deletes it (TTL deletes only eventually, within days)."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from hermes_gateway.adapters.dynamo_access import DynamoAccessStore
from hermes_gateway.adapters.dynamo_inbox import DynamoInbox

pytestmark = pytest.mark.integration


def test_an_inbox_item_expires_after_its_platforms_retry_window(aws: Any) -> None:
    # Given a message written to the inbox (its item de-duplicates the platform's retries)
    inbox = DynamoInbox(aws.bindings.table("inbox"), retention_seconds=lambda platform: 3600, now=lambda: 1000.0)
    envelope = {"event_id": "telegram:default:1", "session_key": "k", "source": {"platform": "telegram"}}
    assert inbox.put_once(envelope) is True
    assert inbox.put_once(envelope) is False  # a retry within the window
    # Then its TTL is the window's end: DynamoDB removes it then (TTL deletions invoke nothing)
    (item,) = boto3.client("dynamodb").scan(TableName=aws.bindings.table("inbox"))["Items"]
    assert item["expires_at"] == {"N": "4600"}


def test_an_expired_pairing_code_is_ignored_by_every_read(aws: Any) -> None:
    store = DynamoAccessStore(aws.bindings)
    now = time.time()
    issued = store.request_code("telegram", "42", "Al", "99", now)
    assert issued.status == "issued" and issued.code and issued.expires_at
    later = issued.expires_at + 1
    assert store.pending("telegram", later) == []
    assert store.approve("telegram", issued.code, later, "test").status == "invalid"
    assert not store.is_approved("telegram", "42")
