"""The embedded AWS of local mode: moto in server mode on loopback, with Lambda invokes run
in-process by our own handlers, and the deployment's resources created from
`hermes_gateway.resources` (the description the CDK stack reads too).

The Lambda dispatch replaces one method of moto's "simple" Lambda backend; it is pinned to
moto 5.2.x (requirements/dev.txt) and checked by tests/e2e.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3

from hermes_gateway.resources import (
    EVENT_BUS,
    QUEUES,
    TABLES,
    TURN_STATE_MACHINE,
    Bindings,
    QueueSpec,
    TableSpec,
    repo_root,
)

ACCOUNT_ID = "123456789012"
FAKE_ARN_ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/hermes-local"
Handler = Callable[[dict[str, Any], Any], Any]


def configure_moto() -> None:
    """Run Step Functions executions for real, keep Lambda out of docker, and keep the embedded
    server's per-request access log out of the terminal."""
    from moto.core.config import default_user_config

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    default_user_config.setdefault("stepfunctions", {})["execute_state_machine"] = True
    default_user_config.setdefault("lambda", {})["use_docker"] = False
    make_dynamodb_atomic()
    make_dynamodb_rollback_item_level()
    honour_fifo_groups()


_DYNAMODB_LOCK = threading.RLock()
_DYNAMODB_ITEM_OPERATIONS = (
    "put_item",
    "update_item",
    "delete_item",
    "get_item",
    "query",
    "scan",
    "transact_write_items",
    "transact_get_items",
    "batch_write_item",
    "batch_get_item",
)


def make_dynamodb_atomic() -> None:
    """Serialize moto's DynamoDB item operations.

    DynamoDB applies a conditional write atomically and runs transactions serializably; moto
    checks the condition and writes without a lock, so two threads can both "win" the same
    conditional write. Local mode and the tests run handlers on many threads, so without this the
    single-flight and lease guarantees would be tested against a weaker store than the real one.
    """
    from moto.dynamodb.models import DynamoDBBackend

    for name in _DYNAMODB_ITEM_OPERATIONS:
        original = getattr(DynamoDBBackend, name)
        if getattr(original, "_hermes_atomic", False):
            continue

        def locked(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
            with _DYNAMODB_LOCK:
                return __original(*args, **kwargs)

        locked._hermes_atomic = True  # type: ignore[attr-defined]
        setattr(DynamoDBBackend, name, locked)


def make_dynamodb_rollback_item_level() -> None:
    """Roll a failed transaction back from copies of the items it names, not of whole tables.

    moto backs up every table a TransactWriteItems touches with a deep copy before it starts, so
    its cost grows with the table (the transcripts) while it holds the DynamoDB lock above: local
    mode got slower the longer it ran, and every function's calls waited on the copy. The outcome
    is the same with a copy of only the named items: a transaction changes nothing else.
    """
    import moto.dynamodb.models as backend_module
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table

    models: Any = backend_module  # its `copy` is the standard module, imported there, not exported
    original = models.DynamoDBBackend.transact_write_items
    if getattr(original, "_hermes_item_level", False):
        return
    real_copy = models.copy

    class TablesUncopied:
        """`copy` as moto's backend module sees it: a table "copies" as itself, the rest as before."""

        def __getattr__(self, name: str) -> Any:
            return getattr(real_copy, name)

        @staticmethod
        def deepcopy(value: Any, memo: Any = None) -> Any:
            return value if isinstance(value, Table) else real_copy.deepcopy(value, memo)

    def transact_write_items(backend: Any, transact_items: list[dict[str, Any]]) -> None:
        with _DYNAMODB_LOCK:
            saved = []
            for entry in transact_items:
                _, op = next(iter(entry.items()))
                table = backend.tables.get(op.get("TableName"))
                source = op.get("Key") or op.get("Item") or {}
                if table is None or any(k and k not in source for k in (table.hash_key_attr, table.range_key_attr)):
                    continue  # moto refuses it before writing anything
                hash_key = DynamoType(source[table.hash_key_attr])
                range_key = DynamoType(source[table.range_key_attr]) if table.range_key_attr else None
                saved.append((table, hash_key, range_key, real_copy.deepcopy(table.get_item(hash_key, range_key))))
            try:
                original(backend, transact_items)
            except Exception:
                for table, hash_key, range_key, item in reversed(saved):
                    _put_back(table, hash_key, range_key, item)
                raise

    transact_write_items._hermes_item_level = True  # type: ignore[attr-defined]
    models.copy = TablesUncopied()
    models.DynamoDBBackend.transact_write_items = transact_write_items


def _put_back(table: Any, hash_key: Any, range_key: Any, item: Any) -> None:
    """Restore one item as it was before a failed transaction (None: it did not exist)."""
    if range_key is None:
        if item is None:
            table.items.pop(hash_key, None)
        else:
            table.items[hash_key] = item
    elif item is None:
        table.items.get(hash_key, {}).pop(range_key, None)
    else:
        table.items[hash_key][range_key] = item


_FIFO_LOCK = threading.Lock()


def honour_fifo_groups() -> None:
    """Receive from a FIFO queue of the embedded AWS as SQS does: a message is handed out only when
    no earlier message of its group is in flight or waiting.

    moto decides which groups are in flight from a snapshot taken when a long poll starts, so a
    later message of a group that turns visible during the poll can go out before an earlier one
    that is already visible again (a delivery retried after a 429 would be overtaken by the next
    reply; the router would find the lease held by the starved message's turn). Idempotent; pinned
    to moto 5.2.x like local mode's other shims. Standard queues keep moto's own receive.
    """
    from moto.sqs.models import SQSBackend

    original = SQSBackend.receive_message
    if getattr(original, "_hermes_fifo_groups", False):
        return

    def receive_message(
        backend: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> list[Any]:
        queue = backend.get_queue(queue_name)
        if not queue.fifo_queue:
            return list(
                original(backend, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names)
            )
        deadline = time.time() + (wait_seconds_timeout or 0)
        while True:
            with _FIFO_LOCK:
                found = _take_in_group_order(backend, queue, count, visibility_timeout, message_attribute_names or [])
            if found or time.time() >= deadline:
                return found
            time.sleep(0.05)

    receive_message._hermes_fifo_groups = True  # type: ignore[attr-defined]
    SQSBackend.receive_message = receive_message  # type: ignore[method-assign,assignment]


def _take_in_group_order(backend: Any, queue: Any, count: int, visibility: int, names: list[str]) -> list[Any]:
    from copy import deepcopy

    from moto.sqs.models import _filter_message_attributes

    found: list[Any] = []
    messages = list(queue._messages)
    blocked = {m.group_id for m in messages if not m.visible}  # in flight (or delayed): holds its group
    for message in messages:
        if message.group_id in blocked:
            continue
        if message.delayed:  # not yet due: the messages after it in its group wait
            blocked.add(message.group_id)
            continue
        queue.pending_messages.discard(message)  # visible again: no longer in flight
        policy = queue.redrive_policy
        if (
            queue.dead_letter_queue is not None
            and policy
            and message.approximate_receive_count >= int(policy["maxReceiveCount"])
        ):
            queue._messages.remove(message)
            queue.dead_letter_queue.add_message(message)
            continue
        if not backend.is_message_valid_based_on_retention_period(queue.name, message):
            break
        queue.pending_messages.add(message)
        message.mark_received(visibility_timeout=visibility)
        handed = deepcopy(message)  # the copy is filtered; the queue's message keeps every attribute
        _filter_message_attributes(handed, names)
        found.append(handed)
        if len(found) >= count:
            break
    return found


def install_lambda_dispatch(resolve: Callable[[str], Handler | None], context_for: Callable[[str], Any]) -> None:
    """Make every Lambda invoke inside moto (Step Functions tasks included) call our handler.

    A raised exception comes back as a function error with `errorType` = the exception class,
    so the state machine's Retry/Catch see the same error names as in AWS.
    """
    from moto.awslambda_simple.models import LambdaSimpleBackend

    def invoke(
        self: LambdaSimpleBackend,
        function_name: str,
        qualifier: str | None,
        body: Any,
        headers: Any,
        response_headers: Any,
    ) -> bytes:
        name = function_name.rsplit(":", 1)[-1]
        handler = resolve(name)
        if handler is None:
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps({"errorType": "ResourceNotFound", "errorMessage": f"no function {name}"}).encode()
        event = json.loads(body) if body else {}
        try:
            result = handler(event, context_for(name))
        except Exception as exc:  # noqa: BLE001 - every failure becomes a function error, as in Lambda
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps(
                {
                    "errorType": type(exc).__name__,
                    "errorMessage": str(exc),
                    "stackTrace": traceback.format_exception(exc)[-3:],
                }
            ).encode()
        return json.dumps(result).encode()

    LambdaSimpleBackend.invoke = invoke  # type: ignore[method-assign]


def _physical(prefix: str, name: str) -> str:
    return f"{prefix}-{name}"


def _create_table(client: Any, spec: TableSpec, name: str) -> None:
    attributes = {spec.partition.name: spec.partition.type}
    key_schema = [{"AttributeName": spec.partition.name, "KeyType": "HASH"}]
    if spec.sort:
        attributes[spec.sort.name] = spec.sort.type
        key_schema.append({"AttributeName": spec.sort.name, "KeyType": "RANGE"})
    indexes = []
    for index in spec.indexes:
        attributes[index.partition.name] = index.partition.type
        index_keys = [{"AttributeName": index.partition.name, "KeyType": "HASH"}]
        if index.sort:
            attributes[index.sort.name] = index.sort.type
            index_keys.append({"AttributeName": index.sort.name, "KeyType": "RANGE"})
        indexes.append({"IndexName": index.name, "KeySchema": index_keys, "Projection": {"ProjectionType": "ALL"}})
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": key_schema,
        "AttributeDefinitions": [{"AttributeName": k, "AttributeType": t} for k, t in attributes.items()],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        kwargs["GlobalSecondaryIndexes"] = indexes
    client.create_table(**kwargs)
    if spec.ttl_attribute:
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
        )


def _create_queue(client: Any, spec: QueueSpec, name: str) -> tuple[str, str]:
    """Create the queue and its dead-letter queue; return both URLs."""
    suffix = ".fifo" if spec.fifo else ""
    fifo_attrs = {"FifoQueue": "true", "ContentBasedDeduplication": "false"} if spec.fifo else {}
    dlq_url = client.create_queue(QueueName=f"{name}-dlq{suffix}", Attributes=dict(fifo_attrs))["QueueUrl"]
    dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    attributes = {
        **fifo_attrs,
        "VisibilityTimeout": str(spec.visibility_timeout_seconds),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": spec.max_receive_count}),
    }
    return str(client.create_queue(QueueName=f"{name}{suffix}", Attributes=attributes)["QueueUrl"]), str(dlq_url)


def definition_with_substitutions(function_arns: dict[str, str], root: Path | None = None) -> str:
    """The turn workflow's ASL with each `${Placeholder}` replaced, as CloudFormation does."""
    text = ((root or repo_root()) / TURN_STATE_MACHINE.definition_file).read_text(encoding="utf-8")
    for placeholder, function in TURN_STATE_MACHINE.substitutions.items():
        text = text.replace("${" + placeholder + "}", function_arns[function])
    return text


def create_resources(region: str, prefix: str = "hermes-local") -> tuple[Bindings, dict[str, str]]:
    """Create every table, queue (with its DLQ) and the state machine; return the bindings and
    the environment variables that carry them into the functions."""
    env: dict[str, str] = {}
    dynamodb = boto3.client("dynamodb", region_name=region)
    for table in TABLES:
        name = _physical(prefix, table.name)
        _create_table(dynamodb, table, name)
        env[table.env_var] = name
    sqs = boto3.client("sqs", region_name=region)
    for queue in QUEUES:
        env[queue.env_var], env[queue.dead_letter_env_var] = _create_queue(sqs, queue, _physical(prefix, queue.name))
    bus_name = _physical(prefix, EVENT_BUS.name)
    boto3.client("events", region_name=region).create_event_bus(Name=bus_name)
    env[EVENT_BUS.env_var] = bus_name
    function_arns = {
        fn: f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{prefix}-{fn}"
        for fn in set(TURN_STATE_MACHINE.substitutions.values())
    }
    sfn = boto3.client("stepfunctions", region_name=region)
    machine = sfn.create_state_machine(
        name=_physical(prefix, TURN_STATE_MACHINE.name),
        definition=definition_with_substitutions(function_arns),
        roleArn=FAKE_ARN_ROLE,
        type="EXPRESS" if TURN_STATE_MACHINE.express else "STANDARD",
    )
    env[TURN_STATE_MACHINE.env_var] = machine["stateMachineArn"]
    return Bindings.from_env(env), env


def local_aws_environment(port: int, region: str) -> dict[str, str]:
    """What the functions (and any AWS CLI the user points at it) need to reach the moto server."""
    return {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "MOTO_PORT": str(port),
        "AWS_ACCESS_KEY_ID": os.environ.get("HERMES_LOCAL_ACCESS_KEY", "local"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("HERMES_LOCAL_SECRET_KEY", "local"),
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
    }
