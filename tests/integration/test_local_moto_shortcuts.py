"""The work local mode saves in moto (hermes_local.aws) changes no answer: items rendered without
moto's renderer parse to what moto's renderer gives, update expressions checked once are still
refused when invalid, and this process's clients are answered in-process by the embedded AWS."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from moto import mock_aws

from hermes_local.aws import IN_PROCESS, LoopbackOnly, configure_moto

ITEM = {
    "pk": {"S": "a"},
    "sk": {"N": "1"},
    "blob": {"B": b"\x00\xff binary"},
    "blobs": {"BS": [b"x", b"\x01"]},
    "nested": {"M": {"list": {"L": [{"NULL": True}, {"BOOL": False}, {"N": "-1.5e3"}]}, "empty": {"S": ""}}},
    "strings": {"SS": ["u", "v"]},
    "numbers": {"NS": ["1", "2.5"]},
    "text": {"S": 'ünïcode ✓ "quoted" \\ back'},
}


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name in ("AWS_ENDPOINT_URL", "MOTO_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    configure_moto()
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "N"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def _answers(client: Any) -> list[dict[str, Any]]:
    key = {"pk": {"S": "a"}, "sk": {"N": "1"}}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("put_item", {"TableName": "t", "Item": ITEM, "ReturnValues": "ALL_OLD"}),
        ("put_item", {"TableName": "t", "Item": ITEM, "ReturnValues": "ALL_OLD", "ReturnConsumedCapacity": "TOTAL"}),
        ("get_item", {"TableName": "t", "Key": key}),
        ("get_item", {"TableName": "t", "Key": {"pk": {"S": "none"}, "sk": {"N": "1"}}}),
        (
            "get_item",
            {
                "TableName": "t",
                "Key": key,
                "ProjectionExpression": "#n, #b",
                "ExpressionAttributeNames": {"#n": "nested", "#b": "blob"},
            },
        ),
        (
            "query",
            {
                "TableName": "t",
                "KeyConditionExpression": "pk = :p",
                "ExpressionAttributeValues": {":p": {"S": "a"}},
                "Limit": 1,
                "ReturnConsumedCapacity": "TOTAL",
            },
        ),
        ("scan", {"TableName": "t", "Select": "COUNT"}),
        (
            "update_item",
            {
                "TableName": "t",
                "Key": key,
                "UpdateExpression": "SET v = if_not_exists(v, :z) + :one ADD strings :s",
                "ExpressionAttributeValues": {":z": {"N": "0"}, ":one": {"N": "1"}, ":s": {"SS": ["w"]}},
                "ReturnValues": "ALL_NEW",
            },
        ),
        ("batch_get_item", {"RequestItems": {"t": {"Keys": [key]}}}),
        ("transact_get_items", {"TransactItems": [{"Get": {"TableName": "t", "Key": key}}]}),
        ("delete_item", {"TableName": "t", "Key": key, "ReturnValues": "ALL_OLD"}),
    ]
    answers = []
    for operation, params in calls:
        answer = getattr(client, operation)(**params)
        answer.pop("ResponseMetadata")
        answers.append(answer)
    return answers


def test_items_rendered_directly_parse_as_moto_renders_them(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.dynamodb.responses import DynamoResult

    direct = _answers(dynamodb)
    assert direct[2]["Item"]["blob"] == {"B": b"\x00\xff binary"}  # binaries come back as bytes
    monkeypatch.setattr(DynamoResult, "execute_result", DynamoResult.execute_result.hermes_original)
    assert _answers(dynamodb) == direct


def test_an_update_expression_checked_once_is_still_refused_when_invalid(dynamodb: Any) -> None:
    key = {"pk": {"S": "a"}, "sk": {"N": "1"}}
    values = {":one": {"N": "1"}}

    def update(names: dict[str, str]) -> None:
        dynamodb.update_item(
            TableName="t", Key=key, UpdateExpression="SET #x = :one, #y = :one",
            ExpressionAttributeNames=names, ExpressionAttributeValues=values,
        )  # fmt: skip

    update({"#x": "p", "#y": "q"})
    update({"#x": "p", "#y": "q"})  # the second time, the structural checks are remembered
    # The same expression, names that make it update one path twice: checked again, and refused.
    with pytest.raises(ClientError, match="Two document paths overlap"):
        update({"#x": "p", "#y": "p"})
    for _ in range(2):  # refused every time, never remembered as passed
        with pytest.raises(ClientError, match='The "SET" section can only be used once'):
            dynamodb.update_item(
                TableName="t", Key=key, UpdateExpression="SET p = :one SET q = :one", ExpressionAttributeValues=values
            )
    assert dynamodb.get_item(TableName="t", Key=key)["Item"]["p"] == {"N": "1"}


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_this_process_clients_are_answered_without_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded AWS's application served for a port nothing listens on: every call is
    answered in-process, as the server would (S3's paths, bodies, metadata and errors)."""
    from moto.moto_server import werkzeug_app

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    configure_moto()
    port = _unused_port()
    url = f"http://127.0.0.1:{port}"
    app = LoopbackOnly(werkzeug_app.DomainDispatcherApplication(werkzeug_app.create_backend_app), port)
    with mock_aws():  # moto's state of its own for this test
        IN_PROCESS.serve(url, app)
        try:
            s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=url)
            s3.create_bucket(Bucket="media")
            key = "chat 1/ünï+code%20?.bin"
            body = bytes(range(256)) * 1000
            s3.put_object(Bucket="media", Key=key, Body=body, Metadata={"under_score": "kept"})
            got = s3.get_object(Bucket="media", Key=key)
            assert got["Body"].read() == body
            assert got["Metadata"] == {"under_score": "kept"}
            assert [o["Key"] for o in s3.list_objects_v2(Bucket="media")["Contents"]] == [key]
            with pytest.raises(ClientError, match="NoSuchKey"):
                s3.get_object(Bucket="media", Key="missing")
        finally:
            IN_PROCESS.forget(url)
        with pytest.raises(EndpointConnectionError):  # forgotten: the call goes to the (absent) server
            boto3.client("s3", region_name="us-east-1", endpoint_url=url).list_buckets()
