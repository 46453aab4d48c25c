"""The work local mode saves in moto (hermes_local.aws) changes no answer: items rendered without
moto's renderer parse to what moto's renderer gives, update expressions checked once are still
refused when invalid, and this process's clients are answered in-process by the embedded AWS."""

from __future__ import annotations

import json
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


def _embedded_aws(monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any]:
    """The embedded AWS's application for a port nothing listens on (serve it with IN_PROCESS)."""
    from moto.moto_server import werkzeug_app

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    configure_moto()
    port = _unused_port()
    return port, LoopbackOnly(werkzeug_app.DomainDispatcherApplication(werkzeug_app.create_backend_app), port)


def test_this_process_clients_are_answered_without_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded AWS's application served for a port nothing listens on: every call is
    answered in-process, as the server would (S3's paths, bodies, metadata and errors)."""
    port, app = _embedded_aws(monkeypatch)
    url = f"http://127.0.0.1:{port}"
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


def test_json_protocol_calls_are_answered_in_process_under_either_loopback_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DynamoDB, SQS and Step Functions calls go straight to moto's response classes: their
    answers and errors are what the server gives. moto's Step Functions names the server
    localhost, the functions 127.0.0.1: both are answered without a socket."""
    port, app = _embedded_aws(monkeypatch)
    with mock_aws():
        IN_PROCESS.serve(f"http://127.0.0.1:{port}", app)
        try:
            for host in ("127.0.0.1", "localhost"):
                url = f"http://{host}:{port}"
                ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)
                if host == "127.0.0.1":
                    ddb.create_table(
                        TableName="t",
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        BillingMode="PAY_PER_REQUEST",
                    )
                ddb.put_item(TableName="t", Item={"pk": {"S": host}}, ConditionExpression="attribute_not_exists(pk)")
                with pytest.raises(ClientError) as refused:
                    ddb.put_item(
                        TableName="t", Item={"pk": {"S": host}}, ConditionExpression="attribute_not_exists(pk)"
                    )
                assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
                with pytest.raises(ClientError, match="ResourceNotFoundException"):
                    ddb.get_item(TableName="absent", Key={"pk": {"S": "x"}})
                sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=url)
                queue = sqs.create_queue(QueueName=f"q-{host.replace('.', '-')}")["QueueUrl"]
                sqs.send_message(QueueUrl=queue, MessageBody="hello")
                assert [m["Body"] for m in sqs.receive_message(QueueUrl=queue)["Messages"]] == ["hello"]
                sfn = boto3.client("stepfunctions", region_name="us-east-1", endpoint_url=url)
                with pytest.raises(ClientError, match="StateMachineDoesNotExist"):
                    sfn.describe_state_machine(stateMachineArn="arn:aws:states:us-east-1:123456789012:stateMachine:x")
            assert sorted(i["pk"]["S"] for i in ddb.scan(TableName="t")["Items"]) == ["127.0.0.1", "localhost"]
        finally:
            IN_PROCESS.forget(f"http://127.0.0.1:{port}")
        for host in ("127.0.0.1", "localhost"):  # both names forgotten
            with pytest.raises(EndpointConnectionError):
                boto3.client("dynamodb", region_name="us-east-1", endpoint_url=f"http://{host}:{port}").list_tables()


def _query_answers(client: Any) -> list[Any]:
    """Queries of one partition among several, paged, reversed, filtered, limited, and of an index."""
    answers: list[Any] = []
    for params in (
        {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "b"}}},
        {
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": "b"}},
            "ScanIndexForward": False,
            "Limit": 3,
        },
        {
            "KeyConditionExpression": "pk = :p AND sk > :s",
            "ExpressionAttributeValues": {":p": {"S": "c"}, ":s": {"N": "2"}},
        },
        {
            "KeyConditionExpression": "pk = :p",
            "FilterExpression": "tag = :t",
            "ExpressionAttributeValues": {":p": {"S": "a"}, ":t": {"S": "odd"}},
        },
        {"KeyConditionExpression": "pk = :p", "ExpressionAttributeValues": {":p": {"S": "none"}}},
        {
            "IndexName": "by-tag",
            "KeyConditionExpression": "tag = :t",
            "ExpressionAttributeValues": {":t": {"S": "even"}},
        },
    ):
        pages, start = [], None
        while True:
            page = client.query(
                TableName="t", **{"Limit": 2, **params, **({"ExclusiveStartKey": start} if start else {})}
            )
            page.pop("ResponseMetadata")
            pages.append(page)
            start = page.get("LastEvaluatedKey")
            if not start or len(pages) > 20:
                break
        answers.append(pages)
    return answers


def test_a_table_query_reads_its_partition_only_and_answers_as_before(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.dynamodb.models.table import Table

    dynamodb.update_table(
        TableName="t",
        AttributeDefinitions=[{"AttributeName": "tag", "AttributeType": "S"}],
        GlobalSecondaryIndexUpdates=[
            {
                "Create": {
                    "IndexName": "by-tag",
                    "KeySchema": [{"AttributeName": "tag", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            }
        ],
    )
    for pk in "cab":
        for sk in (5, 1, 4, 2, 3):
            dynamodb.put_item(
                TableName="t", Item={"pk": {"S": pk}, "sk": {"N": str(sk)}, "tag": {"S": "odd" if sk % 2 else "even"}}
            )
    read: list[int] = []
    shortcut, moto_query, moto_all_items = Table.all_items, Table.query.hermes_original, Table.all_items.hermes_original

    def counting(self: Any) -> Any:
        items = shortcut(self)
        read.append(len(items))
        return items

    monkeypatch.setattr(Table, "all_items", counting)
    answers = _query_answers(dynamodb)
    assert [i["sk"]["N"] for p in answers[0] for i in p["Items"]] == ["1", "2", "3", "4", "5"]
    assert [[i["sk"]["N"] for i in p["Items"]] for p in answers[1]] == [["5", "4", "3"], ["2", "1"]]
    assert {i["pk"]["S"] for p in answers[5] for i in p["Items"]} == {"a", "b", "c"}
    assert max(read[:-3]) == 5  # a table query saw its own partition; the index query saw all 15
    assert read[-1] == 15
    monkeypatch.setattr(Table, "query", moto_query)
    monkeypatch.setattr(Table, "all_items", moto_all_items)
    assert _query_answers(dynamodb) == answers


def test_update_expressions_copied_by_pickle_update_as_moto_does(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import copy

    from moto.dynamodb.parsing import validators

    key = {"pk": {"S": "a"}, "sk": {"N": "1"}}

    def updates() -> list[Any]:
        dynamodb.put_item(TableName="t", Item={**key, "l": {"L": [{"N": "1"}]}, "m": {"M": {"x": {"S": "y"}}}})
        answers = []
        for _ in range(2):  # the second time from the cached copy
            answers.append(
                dynamodb.update_item(
                    TableName="t",
                    Key=key,
                    UpdateExpression="SET l = list_append(l, :l), m.#x = :v, c = if_not_exists(c, :z) + :one"
                    " REMOVE gone",
                    ExpressionAttributeNames={"#x": "x"},
                    ExpressionAttributeValues={
                        ":l": {"L": [{"S": "two"}]},
                        ":v": {"S": "w"},
                        ":z": {"N": "0"},
                        ":one": {"N": "1"},
                    },
                    ReturnValues="ALL_NEW",
                )["Attributes"]
            )
        return answers

    pickled = updates()
    assert pickled[1]["l"] == {"L": [{"N": "1"}, {"S": "two"}, {"S": "two"}]} and pickled[1]["c"] == {"N": "2"}
    monkeypatch.setattr(validators, "deepcopy", copy.deepcopy)
    assert updates() == pickled


def test_update_expressions_traversed_directly_update_and_refuse_as_moto_does(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser

    key = {"pk": {"S": "a"}, "sk": {"N": "1"}}
    updates: list[dict[str, Any]] = [
        {
            "UpdateExpression": "SET m.#x = :v, l[1] = :v, n = if_not_exists(n, :z) + :one, s = :s REMOVE gone, l[0]",
            "ExpressionAttributeNames": {"#x": "x"},
            "ExpressionAttributeValues": {":v": {"S": "w"}, ":z": {"N": "0"}, ":one": {"N": "1"}, ":s": {"SS": ["q"]}},
        },
        {
            "UpdateExpression": "ADD n :one, s :s DELETE t :s",
            "ExpressionAttributeValues": {":one": {"N": "2"}, ":s": {"SS": ["r"]}},
        },
        {"UpdateExpression": "SET pk = :v", "ExpressionAttributeValues": {":v": {"S": "b"}}},  # a key: refused
        {"UpdateExpression": "SET n = n + :v", "ExpressionAttributeValues": {":v": {"S": "text"}}},  # a type mismatch
        {
            "UpdateExpression": "SET m.missing.deeper = :v",
            "ExpressionAttributeValues": {":v": {"S": "x"}},
        },  # no such path
    ]

    def outcomes() -> list[Any]:
        dynamodb.put_item(
            TableName="t",
            Item={**key, "m": {"M": {"x": {"S": "y"}}}, "l": {"L": [{"N": "1"}, {"N": "2"}]}, "t": {"SS": ["r", "u"]}},
        )
        found: list[Any] = []
        for update in updates:
            try:
                found.append(
                    dynamodb.update_item(TableName="t", Key=key, ReturnValues="ALL_NEW", **update)["Attributes"]
                )
            except ClientError as exc:
                found.append((exc.response["Error"]["Code"], exc.response["Error"]["Message"]))
        return found

    direct = outcomes()
    assert direct[1]["n"] == {"N": "3"} and direct[1]["l"] == {"L": [{"S": "w"}]}
    assert [type(o) for o in direct[2:]] == [tuple, tuple, tuple]
    monkeypatch.setattr(DepthFirstTraverser, "traverse", DepthFirstTraverser.traverse.hermes_original)
    assert outcomes() == direct


def test_this_process_requests_go_unsigned_to_their_own_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request the process answers itself carries no SigV4 signature (moto checks none), but
    the credential scope moto reads its region from: a table made in one region is not in another.
    A client of another endpoint is signed as before."""
    port, app = _embedded_aws(monkeypatch)
    url = f"http://127.0.0.1:{port}"
    seen: list[str] = []

    def authorization(request: Any, **_: Any) -> None:
        value = request.headers.get("Authorization") or b""
        seen.append(value.decode() if isinstance(value, bytes) else value)

    with mock_aws():
        IN_PROCESS.serve(url, app)
        try:
            ireland = boto3.client("dynamodb", region_name="eu-west-1", endpoint_url=url)
            ireland.meta.events.register_first("before-send", authorization)
            ireland.create_table(
                TableName="t",
                KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                BillingMode="PAY_PER_REQUEST",
            )
            assert ireland.list_tables()["TableNames"] == ["t"]
            virginia = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=url)
            assert virginia.list_tables()["TableNames"] == []
            assert all("Credential=local/19700101/eu-west-1/dynamodb/" in a for a in seen)
            assert not any("SignedHeaders" in a for a in seen)  # nothing was signed

            elsewhere = boto3.client("dynamodb", region_name="eu-west-1")  # moto's own mock, not ours
            elsewhere.meta.events.register_first("before-send", authorization)
            elsewhere.list_tables()
            assert "SignedHeaders=" in seen[-1]
        finally:
            IN_PROCESS.forget(url)


def test_the_embedded_stream_reads_the_records_get_records_gives(dynamodb: Any) -> None:
    """`EmbeddedStream` reads the records moto keeps, as GetRecords renders them (JSON, the
    creation time in epoch seconds): the same records, in the same order, in pages."""
    from hermes_local.aws import EmbeddedStream

    arn = dynamodb.update_table(
        TableName="t", StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    )["TableDescription"]["LatestStreamArn"]
    dynamodb.put_item(TableName="t", Item={"pk": {"S": "a"}, "sk": {"N": "1"}, "text": {"S": "ünï"}})
    dynamodb.put_item(TableName="t", Item={"pk": {"S": "a"}, "sk": {"N": "1"}, "n": {"N": "2"}})
    dynamodb.delete_item(TableName="t", Key={"pk": {"S": "a"}, "sk": {"N": "1"}})

    stream = EmbeddedStream(arn)
    first, rest, after = stream.read(2), stream.read(), stream.read()
    assert (len(first), len(rest), after) == (2, 1, [])

    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=stream.shard_id, ShardIteratorType="TRIM_HORIZON")[
        "ShardIterator"
    ]
    wire = streams.get_records(ShardIterator=iterator)["Records"]
    ours = first + rest
    assert [r["eventName"] for r in ours] == ["INSERT", "MODIFY", "REMOVE"]
    for mine, theirs in zip(ours, wire, strict=True):
        created = theirs["dynamodb"].pop("ApproximateCreationDateTime")
        assert abs(mine["dynamodb"].pop("ApproximateCreationDateTime") - created.timestamp()) < 1
        assert mine == theirs

    dynamodb.put_item(TableName="t", Item={"pk": {"S": "b"}, "sk": {"N": "1"}})
    assert [r["dynamodb"]["Keys"]["pk"] for r in stream.read()] == [{"S": "b"}]


def test_a_lambda_invoke_is_answered_by_moto_directly_as_the_server_answers_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Lambda invoke (a workflow task, a function's invoke of the delivery) goes to moto's
    LambdaResponse without Flask: the same status, function error, payload and headers as the
    server's routing gives, for a result, a raised error and an asynchronous invoke."""
    import hermes_local.aws as local_aws
    from hermes_local.aws import AsyncInvokes, install_lambda_dispatch

    port, app = _embedded_aws(monkeypatch)
    url = f"http://127.0.0.1:{port}"
    ran: list[str] = []

    def ok(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        ran.append("ok")
        return {"echo": event, "ünï": "✓"}

    def failing(event: dict[str, Any], _context: Any) -> Any:
        raise TimeoutError("the platform did not answer")

    handlers = {"ok": ok, "failing": failing}
    later = AsyncInvokes({}, retry_delays=(0.0,), region="us-east-1")

    def answers() -> list[Any]:
        client = boto3.client("lambda", region_name="us-east-1", endpoint_url=url)
        found = []
        for name, kind in (("ok", "RequestResponse"), ("failing", "RequestResponse"), ("ok", "Event")):
            arn = f"arn:aws:lambda:us-east-1:123456789012:function:{name}"
            answer = client.invoke(FunctionName=arn, InvocationType=kind, Payload=json.dumps({"n": 1}).encode())
            payload = json.loads(answer["Payload"].read() or b"null")
            if isinstance(payload, dict):
                payload.pop("stackTrace", None)
            found.append((answer["StatusCode"], answer.get("FunctionError"), payload))
        assert later.wait_idle(5)
        return found

    with mock_aws():
        install_lambda_dispatch(handlers.get, lambda name: None, later)
        IN_PROCESS.serve(url, app)
        try:
            with pytest.MonkeyPatch.context() as direct_only:
                direct_only.setattr(local_aws.InProcessAws, "_answer", None)  # Flask must not be reached
                direct = answers()
            with pytest.MonkeyPatch.context() as through_flask:  # as the server routes it
                through_flask.setattr(local_aws, "_rest_handler", lambda method, path: None)
                assert answers() == direct
        finally:
            IN_PROCESS.forget(url)
            later.close()
    assert direct[0] == (200, None, {"echo": {"n": 1}, "ünï": "✓"})
    assert direct[1] == (200, "Unhandled", {"errorType": "TimeoutError", "errorMessage": "the platform did not answer"})
    assert direct[2] == (202, None, None)
    assert ran == ["ok", "ok", "ok", "ok"]


def test_step_functions_states_are_copied_as_json_and_still_deep(monkeypatch: pytest.MonkeyPatch) -> None:
    """`json_copy` makes what `copy.deepcopy` makes of JSON data, shares nothing with the original,
    and leaves anything else to `copy.deepcopy`; moto's Step Functions copies states with it."""
    import copy
    import decimal
    from collections import OrderedDict

    from hermes_local.aws import _STATE_COPYING_MODULES, json_copy

    state = {"turn": {"id": "t", "seq": 3, "ok": True, "none": None, "ratio": 0.5, "rows": [{"a": [1, [2]]}]}}
    copied = json_copy(state)
    assert copied == copy.deepcopy(state)
    copied["turn"]["rows"][0]["a"][1].append(3)
    assert state["turn"]["rows"][0]["a"][1] == [2]  # nothing shared
    odd = {"t": (1, [2]), "d": decimal.Decimal("1.5"), "o": OrderedDict(x=[1])}
    again = json_copy(odd)
    assert again == odd and again["o"] is not odd["o"] and isinstance(again["o"], OrderedDict)
    assert again["t"][1] is not odd["t"][1]

    configure_moto()
    import importlib

    for name in _STATE_COPYING_MODULES:
        assert importlib.import_module(name).copy.deepcopy is json_copy


def test_the_routers_of_the_services_answered_in_process_are_built_before_any_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto builds a service's router on its first request, compiling werkzeug rules with
    `ast.parse`; two threads doing it at once can meet CPython's AST bug (gh-106905). After
    `configure_moto` a first Lambda invoke from a workflow's thread parses nothing."""
    import ast
    import threading

    from moto.core.routing import get_service_router

    from hermes_local.aws import install_lambda_dispatch

    get_service_router.cache_clear()  # as in a fresh process
    port, app = _embedded_aws(monkeypatch)  # configure_moto() among it
    url = f"http://127.0.0.1:{port}"
    parsed_in: list[str] = []
    parse = ast.parse

    def recording(*args: Any, **kwargs: Any) -> Any:
        parsed_in.append(threading.current_thread().name)
        return parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", recording)
    answers: list[int] = []

    def invoke() -> None:
        client = boto3.client("lambda", region_name="us-east-1", endpoint_url=url)
        answers.append(client.invoke(FunctionName="f", Payload=b"{}")["StatusCode"])

    with mock_aws():
        install_lambda_dispatch(lambda name: lambda event, context: {}, lambda name: None)
        IN_PROCESS.serve(url, app)
        try:
            client_made = threading.Thread(target=lambda: boto3.client("lambda", region_name="us-east-1"))
            client_made.start()
            client_made.join()
            parsed_in.clear()  # what making a client parses (botocore's own) is not the point
            worker = threading.Thread(target=invoke, name="execution")
            worker.start()
            worker.join()
        finally:
            IN_PROCESS.forget(url)
    assert answers == [200]
    assert parsed_in == []
