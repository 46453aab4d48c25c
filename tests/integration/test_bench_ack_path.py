"""A reduced run of bench/ack_path.py in the suite: the webhook is acknowledged after one AWS call
(the inbox's conditional put: the durable write and the de-duplication at once), a duplicate after
the same one, every call on a resource the ingress function is granted, and the ack never reaches a
platform (no connection is opened at all)."""

from __future__ import annotations

import pytest

from bench.ack_path import ack
from hermes_gateway.resources import function

pytestmark = pytest.mark.integration


def test_the_ack_makes_one_aws_call_and_never_calls_a_platform() -> None:
    report = ack(requests=20)
    assert report["ack_statuses"] == {"200": 22}  # 20 new updates and 2 duplicates, all acknowledged
    assert report["ack_aws_calls"] == 1
    assert report["ack_aws_calls_duplicate"] == 1
    granted = set(function("ingress").grants)
    operations = report["ack_aws_operations_per_request"]
    assert set(operations) == {"dynamodb.PutItem (inbox)"}  # written somewhere durable before the 200
    assert {op.rsplit("(", 1)[1].rstrip(")") for op in operations} <= granted
    assert report["ack_network_connections"] == 0
    assert 0 < report["ack_p50_ms"] <= report["ack_p99_ms"]
