"""bench/meter.py on moto: a write through boto3's resource layer (`Table.update_item`) is priced
from its item and its indexes like a client write, not at one unit; work a function hands to a
thread of its own (lifecycle events) counts as its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import boto3
import pytest

from bench.meter import Meter
from hermes_gateway.resources import IndexSpec, Key, TableSpec

pytestmark = pytest.mark.integration

SPEC = TableSpec(
    name="routes",
    env_var="BENCH_TEST_TABLE",
    partition=Key("session_key"),
    indexes=(IndexSpec("by_lease_expiry", Key("lease_shard"), Key("lease_expires_at", "N")),),
)


@pytest.fixture
def table() -> Iterator[str]:
    from moto import mock_aws

    saved = dict(os.environ)
    os.environ.update(AWS_ACCESS_KEY_ID="t", AWS_SECRET_ACCESS_KEY="t", AWS_DEFAULT_REGION="us-east-1",
                      AWS_REGION="us-east-1")  # fmt: skip
    os.environ.pop("AWS_ENDPOINT_URL", None)
    try:
        with mock_aws():
            boto3.client("dynamodb").create_table(
                TableName="bench-routes",
                KeySchema=[{"AttributeName": "session_key", "KeyType": "HASH"}],
                AttributeDefinitions=[
                    {"AttributeName": a, "AttributeType": t}
                    for a, t in (("session_key", "S"), ("lease_shard", "S"), ("lease_expires_at", "N"))
                ],
                GlobalSecondaryIndexes=[
                    {
                        "IndexName": "by_lease_expiry",
                        "KeySchema": [
                            {"AttributeName": "lease_shard", "KeyType": "HASH"},
                            {"AttributeName": "lease_expires_at", "KeyType": "RANGE"},
                        ],
                        "Projection": {"ProjectionType": "ALL"},
                    }
                ],
                BillingMode="PAY_PER_REQUEST",
            )
            yield "bench-routes"
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_a_resource_layer_write_is_priced_from_its_item_and_index(table: str) -> None:
    item = {"session_key": "k", "lease_shard": "3", "lease_expires_at": 100, "history": "x" * 2500}
    meter = Meter(table_specs={table: SPEC})
    meter.install()
    try:
        boto3.resource("dynamodb").Table(table).put_item(Item=item)
        meter.reset()
        with meter.within("agent", {"step": "prepare"}):
            # the lease heartbeat: a 2.5 KB item (3 units) whose index key moves (a delete and a put)
            boto3.resource("dynamodb").Table(table).update_item(
                Key={"session_key": "k"},
                UpdateExpression="SET lease_expires_at = :t",
                ExpressionAttributeValues={":t": 160},
            )
    finally:
        meter.uninstall()
    assert meter.wru[("agent", "routes")] == 3 + 2


def test_work_handed_to_a_thread_is_the_invocations_own(table: str) -> None:
    meter = Meter(table_specs={table: SPEC})
    meter.install()
    try:
        client = boto3.client("dynamodb")
        batch = {"Records": [{"eventSource": "aws:sqs"}]}
        with ThreadPoolExecutor(max_workers=1) as pool, meter.within("router", batch):
            pool.submit(lambda: client.get_item(TableName=table, Key={"session_key": {"S": "k"}})).result()
    finally:
        meter.uninstall()
    assert meter.calls[("router", "dynamodb", "GetItem", "routes")] == 1
    (invocation,) = meter.invocations
    assert invocation.aws_calls == 1
    assert invocation.round_trips == []  # beside the handler's own work, not on its path


def test_metered_functions_reach_moto_over_http_so_their_cpu_is_their_own() -> None:
    """Local mode answers its own calls in the calling thread; a metered run must not, or moto's
    work would count as the function's CPU (the Lambda cost model reads the thread's CPU)."""
    from botocore.awsrequest import AWSPreparedRequest

    from hermes_local.aws import IN_PROCESS

    url = "http://127.0.0.1:9"  # discard: nothing is sent there

    def app(environ: dict[str, object], start_response: object) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "application/x-amz-json-1.0")])  # type: ignore[operator]
        return [b"{}"]

    request = AWSPreparedRequest("POST", f"{url}/", {}, b"{}", False)

    model = SimpleNamespace(service_model=SimpleNamespace(signing_name="dynamodb"))  # the operation's

    def auth_type() -> object:
        """What the request's signing is left as once the `before-call` hook ran."""
        context: dict[str, object] = {"auth_type": "v4", "client_region": "us-east-1"}
        IN_PROCESS._before_call(params={"url": f"{url}/", "headers": {}}, context=context, model=model)
        return context["auth_type"]

    IN_PROCESS.serve(url, app)
    try:
        assert IN_PROCESS(request) is not None
        assert auth_type() == "none"  # answered here: not signed
        meter = Meter().install()
        try:
            assert IN_PROCESS(request) is None  # botocore sends it to the server
            assert auth_type() == "v4"  # signed, as a deployed function signs: SigV4 is its CPU
        finally:
            meter.uninstall()
        assert IN_PROCESS(request) is not None
        assert auth_type() == "none"
    finally:
        IN_PROCESS.forget(url)
