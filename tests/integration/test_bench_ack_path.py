"""A reduced run of bench/ack_path.py in the suite: the webhook is acknowledged after a bounded
number of AWS calls (the idempotency record, the enqueue, the record's completion), a duplicate
after one, and the ack never reaches a platform (no connection is opened at all)."""

from __future__ import annotations

import pytest

from bench.ack_path import ack

pytestmark = pytest.mark.integration


def test_the_ack_makes_at_most_three_aws_calls_and_never_calls_a_platform() -> None:
    report = ack(requests=20)
    assert report["ack_statuses"] == {"200": 22}  # 20 new updates and 2 duplicates, all acknowledged
    assert report["ack_aws_calls"] <= 3
    assert report["ack_aws_calls_duplicate"] <= 1
    assert set(report["ack_aws_operations_per_request"]) == {
        "dynamodb.PutItem (idempotency)",
        "sqs.SendMessage (inbound)",
        "dynamodb.UpdateItem (idempotency)",
    }
    assert report["ack_network_connections"] == 0
    assert 0 < report["ack_p50_ms"] <= report["ack_p99_ms"]
