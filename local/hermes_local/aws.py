"""The embedded AWS of local mode: moto in server mode on loopback, with Lambda invokes run
in-process by our own handlers, and the deployment's resources created from
`hermes_gateway.resources` (the description the CDK stack reads too).

The Lambda dispatch replaces one method of moto's "simple" Lambda backend; it is pinned to
moto 5.2.x (requirements/dev.txt) and checked by tests/e2e.
"""

from __future__ import annotations

import base64
import contextvars
import copy
import functools
import importlib
import json
import logging
import os
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3

from hermes_gateway.resources import (
    BUCKETS,
    EVENT_BUS,
    FUNCTIONS,
    QUEUES,
    TABLES,
    TURN_STATE_MACHINE,
    Bindings,
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
    # botocore sends DynamoDB Streams calls to an account-id endpoint that moto's in-process mock
    # does not route (local mode's server is reached through AWS_ENDPOINT_URL, which wins anyway).
    os.environ.setdefault("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    make_dynamodb_atomic()
    make_dynamodb_rollback_item_level()
    notify_stream_writes()
    reuse_step_functions_work()
    skip_repeated_request_work()
    check_update_expressions_once()
    copy_update_expressions_by_pickle()
    traverse_update_expressions_directly()
    query_one_partition()
    parse_json_paths_once()
    copy_step_functions_states_as_json()
    render_dynamodb_items_directly()
    build_moto_routers_now()


def reuse_step_functions_work() -> None:
    """Two things moto's Step Functions does for every execution and every Lambda task that
    took about a quarter of local mode's CPU (py-spy, 100 sessions at once): it parses the state
    machine's definition again (ANTLR) and creates a boto3 client for each task's invoke.

    The parsed program is reused per definition: its components keep each execution's state in
    that execution's environment (retry attempts, the data stack), never in themselves. The
    Lambda client is reused per region and endpoint: boto3 clients are safe across threads."""

    from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
    from moto.stepfunctions.parser.asl.utils import boto_client

    if getattr(AmazonStateLanguageParser.parse, "hermes_reused", False):
        return
    parse = functools.lru_cache(maxsize=16)(AmazonStateLanguageParser.parse)
    parse.hermes_reused = True  # type: ignore[attr-defined]
    AmazonStateLanguageParser.parse = staticmethod(parse)  # type: ignore[method-assign,assignment]

    make_client = boto_client.boto_client_for
    clients: dict[tuple[str, str, str, bool], Any] = {}
    lock = threading.Lock()

    def reused_client(region: str, service: str, state_credentials: Any = None) -> Any:
        # moto's own function ignores the task's credentials too (its clients sign with fixed keys)
        from moto.core.models import botocore_stubber
        from moto.settings import moto_server_port

        key = (region, service, str(moto_server_port()), bool(botocore_stubber.enabled))
        with lock:
            if key not in clients:
                clients[key] = make_client(region=region, service=service)
            return clients[key]

    setattr(lambda_eval_utils, "boto_client_for", reused_client)  # noqa: B010 - moto does not export it


def skip_repeated_request_work() -> None:
    """Two lookups moto repeats for every request although their answer never changes while the
    process runs: which modules moto has (a directory listing and a stat per entry, about 70 per
    request in routing alone), and which actions a response class has (`inspect.getmembers`).
    Both are computed once here; yappi put them at a tenth of local mode's CPU."""

    from moto import backends
    from moto.core import responses
    from moto.core.utils import method_names_from_class
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]

    if getattr(backends.list_of_moto_modules, "hermes_cached", False):
        return
    modules = tuple(backends.list_of_moto_modules())

    def list_of_moto_modules() -> tuple[str, ...]:
        return modules

    list_of_moto_modules.hermes_cached = True  # type: ignore[attr-defined]
    backends.list_of_moto_modules = list_of_moto_modules  # type: ignore[assignment]
    names = functools.lru_cache(maxsize=None)(method_names_from_class)
    setattr(responses, "method_names_from_class", names)  # noqa: B010 - what moto's call_action reads
    # An update expression is parsed up to three times per call, the same few strings every time.
    # moto only reads the parsed tree: its validator works on a deep copy.
    parse = functools.lru_cache(maxsize=256)(UpdateExpressionParser.make.__func__)
    UpdateExpressionParser.make = classmethod(parse)  # type: ignore[arg-type]


def check_update_expressions_once() -> None:
    """Two of the validations moto runs on every update expression depend on nothing but the
    expression and its attribute names: at most one SET, REMOVE and ADD clause, and no path
    updated twice. Both walk the tree once per node (quadratic in the clauses), half the cost of
    the session lease's update. They run the first time an expression is seen with its names,
    and are skipped when the same parsed expression comes again with the same names (it does:
    parsing is cached above). Every other validation and the evaluation still run every time."""
    import weakref

    from moto.dynamodb.parsing.validators import (
        ActionCountValidator,
        OverlappingPathsValidator,
        UpdateExpressionValidator,
    )

    if getattr(UpdateExpressionValidator.__init__, "hermes_once", False):
        return
    structural = (ActionCountValidator, OverlappingPathsValidator)
    passed: weakref.WeakKeyDictionary[Any, set[tuple[tuple[str, str], ...]]] = weakref.WeakKeyDictionary()
    passed_lock = threading.Lock()
    original_init, original_validate = UpdateExpressionValidator.__init__, UpdateExpressionValidator.validate

    def __init__(self: Any, expression: Any, expression_attribute_names: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, expression, expression_attribute_names, *args, **kwargs)
        names = tuple(sorted((expression_attribute_names or {}).items()))
        with passed_lock:
            seen = names in passed.get(expression, ())
        if seen:
            self.processors = [p for p in self.processors if not isinstance(p, structural)]
        self.hermes_checking = None if seen else (expression, names)

    def validate(self: Any) -> Any:
        validated = original_validate(self)  # raises when the expression is invalid: nothing is recorded
        if self.hermes_checking is not None:
            expression, names = self.hermes_checking
            with passed_lock:
                passed.setdefault(expression, set()).add(names)
        return validated

    __init__.hermes_once = True  # type: ignore[attr-defined]
    UpdateExpressionValidator.__init__ = __init__  # type: ignore[method-assign]
    UpdateExpressionValidator.validate = validate  # type: ignore[method-assign]


def copy_update_expressions_by_pickle() -> None:
    """moto's validator deep-copies the parsed update expression before it resolves names and
    values in the copy: the single largest cost of an UpdateItem here (a twelfth of local mode's
    CPU at 100 sessions, py-spy). The parsed trees are cached (above) and hold only nodes and
    strings, so each is pickled once and every copy is an unpickle, about eight times faster
    than `copy.deepcopy` and the same tree (parents included). Anything else the module copies
    (the lists `list_append` joins) still goes through `copy.deepcopy`."""
    import copy
    import pickle
    import weakref

    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.ast_nodes import Node  # type: ignore[attr-defined]

    if getattr(getattr(validators, "deepcopy"), "hermes_pickled", False):  # noqa: B009 - not exported
        return
    pickled: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()
    lock = threading.Lock()

    def deepcopy(value: Any, memo: Any = None) -> Any:
        if memo is not None or not isinstance(value, Node):
            return copy.deepcopy(value, memo)
        with lock:
            frozen = pickled.get(value)
        if frozen is None:
            frozen = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            with lock:
                pickled[value] = frozen
        return pickle.loads(frozen)  # noqa: S301 - bytes this process pickled from its own tree

    deepcopy.hermes_pickled = True  # type: ignore[attr-defined]
    setattr(validators, "deepcopy", deepcopy)  # noqa: B010 - the name the validator module calls


def traverse_update_expressions_directly() -> None:
    """Each of the validator's passes over an update expression asks, for every node, which node
    types it processes, and moto answers by building the pass's map of types to functions again,
    twice per node: most of the cost of validating the session lease's update (16 SETs and 5
    REMOVEs, about 150 nodes, 8 passes). The map is built once per pass here; the walk is the
    same (children first, left to right, the pass's child hook before each child, a processed
    node put in its parent's place)."""
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node  # type: ignore[attr-defined]

    if getattr(DepthFirstTraverser.traverse, "hermes_direct", False):
        return

    is_node: dict[type, bool] = {}  # isinstance on moto's nodes goes through ABCMeta: asked once per type

    def traverse(self: Any, root: Any) -> Any:
        processing = tuple(self._processing_map().items())
        process_of: dict[type, Any] = {}  # a node type -> the pass's function for it (None: not processed)
        before_child = self.pre_processing_of_child

        def visit(node: Any, child_id: int = -1) -> Any:
            kind = type(node)
            if kind not in is_node:
                is_node[kind] = isinstance(node, Node)
            if is_node[kind]:
                parent = node.parent
                if node.children is not None:
                    for i, child in enumerate(node.children):
                        before_child(node, i)
                        visit(child, i)
                if kind not in process_of:
                    process_of[kind] = next((f for k, f in processing if issubclass(kind, k)), None)
                process = process_of[kind]
                if process is not None:
                    node = process(node)
                    node.parent = parent
                    if parent:
                        parent.children[child_id] = node
            return node

        return visit(root)

    traverse.hermes_direct = True  # type: ignore[attr-defined]
    traverse.hermes_original = DepthFirstTraverser.traverse  # type: ignore[attr-defined]
    DepthFirstTraverser.traverse = traverse


_PARTITION = threading.local()  # the partition a base-table query reads, while moto runs it


def query_one_partition() -> None:
    """moto answers a query on a table (not an index) by sorting every item of the table and
    keeping those of the queried partition key, so each transcript read cost more the more
    sessions local mode had served (a sixteenth of its CPU after a few hundred messages). While
    moto runs such a query, the table's item list it asks for is that one partition, sorted the
    same way: the items it keeps are the same, and the others it would have thrown away.
    Index queries still see every item."""
    from moto.dynamodb.models.table import Table

    if getattr(Table.query, "hermes_one_partition", False):
        return
    original_query, original_all_items = Table.query, Table.all_items

    def query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name or hash_key is None:
            return original_query(self, hash_key, *args, **kwargs)
        _PARTITION.of = (self, hash_key)
        try:
            return original_query(self, hash_key, *args, **kwargs)
        finally:
            _PARTITION.of = None

    def all_items(self: Any) -> Any:
        reading: tuple[Any, Any] | None = getattr(_PARTITION, "of", None)
        if reading is None or reading[0] is not self:
            return original_all_items(self)
        hash_key = reading[1]
        partition = self.items.get(hash_key)
        if partition is None:
            return []
        if not self.range_key_attr:
            return [partition]
        return sorted(partition.values(), key=lambda x: (x.hash_key, x.range_key) if x.range_key else x.hash_key)

    query.hermes_one_partition = True  # type: ignore[attr-defined]
    query.hermes_original = original_query  # type: ignore[attr-defined]
    all_items.hermes_original = original_all_items  # type: ignore[attr-defined]
    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def parse_json_paths_once() -> None:
    """moto's Step Functions parses a state's JSONPath again each time the state runs, and
    jsonpath_ng builds its parser (PLY's tables) for every parse: a fortieth of local mode's
    CPU. Parsed paths are immutable (finding and updating change the data, not the path), so
    each path string is parsed once per process."""

    from moto.stepfunctions.parser.asl.component.common.path import result_path
    from moto.stepfunctions.parser.asl.utils import json_path

    for module in (json_path, result_path):
        parse = module.parse
        if getattr(parse, "hermes_once", False):
            continue
        cached = functools.lru_cache(maxsize=256)(parse)
        cached.hermes_once = True  # type: ignore[attr-defined]
        setattr(module, "parse", cached)  # noqa: B010 - the name the module calls


# moto's Step Functions modules that copy a state's JSON data (copy on read: each JSONPath a state
# reads, its input, its result, the data stack of a task's thread)
_STATE_COPYING_MODULES = (
    "moto.stepfunctions.parser.asl.eval.states",
    "moto.stepfunctions.parser.asl.component.common.string.string_expression",
    "moto.stepfunctions.parser.asl.component.common.path.result_path",
    "moto.stepfunctions.parser.asl.component.state.exec.execute_state",
)
_JSON_SCALARS = (str, int, float, bool, type(None))


def json_copy(value: Any, memo: Any = None) -> Any:
    """A deep copy of JSON data (dicts, lists and scalars), as `copy.deepcopy` makes it, about three
    times faster; anything else (a tuple, an object, a subclass of dict) goes to `copy.deepcopy`."""
    kind = type(value)
    if memo is None:
        if kind is dict:
            return {key: json_copy(item) for key, item in value.items()}
        if kind is list:
            return [json_copy(item) for item in value]
        if kind in _JSON_SCALARS:
            return value
    return copy.deepcopy(value, memo)


class _JsonCopying:
    """What a moto module finds under the name `copy`: `deepcopy` is `json_copy`, the rest the module."""

    deepcopy = staticmethod(json_copy)

    def __getattr__(self, name: str) -> Any:
        return getattr(copy, name)


def copy_step_functions_states_as_json() -> None:
    """moto's Step Functions deep-copies a state's data each time a state reads a path of it, takes
    its input or keeps its result: about twenty copies of the turn's state (a few KB) per execution,
    each through `copy.deepcopy`'s memo and dispatch. The data is JSON (an execution's input, a
    task's parsed result, the context object's strings), which `json_copy` copies directly."""
    for name in _STATE_COPYING_MODULES:
        module = importlib.import_module(name)
        if not isinstance(getattr(module, "copy", None), _JsonCopying):
            setattr(module, "copy", _JsonCopying())  # noqa: B010 - the name the module calls `copy.deepcopy` through


# The services whose requests local mode hands to moto's response classes itself (`InProcessAws`)
_DIRECT_SERVICES = ("dynamodb", "dynamodbstreams", "sqs", "stepfunctions", "events", "lambda")


def build_moto_routers_now() -> None:
    """moto builds a service's request router (a werkzeug map of its operations' URLs) on the
    service's first request, in whichever thread makes it. werkzeug compiles each rule with
    `ast.parse`, and two threads building at once (the first Lambda invokes of several workflow
    executions) can meet CPython's AST bug (gh-106905, "AST constructor recursion depth
    mismatch"), which failed a turn. They are built here, once, before any request."""
    from moto.core.routing import get_service_router
    from moto.core.utils import get_service_model

    for service in _DIRECT_SERVICES:
        router = get_service_router(service)
        metadata = get_service_model(service).metadata
        for protocol in metadata.get("protocols") or [metadata["protocol"]]:
            router._get_router(protocol)


# Operations whose result is items, keys, counts and consumed capacity, nothing else.
_ITEM_RESULTS = frozenset(
    {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
)


def render_dynamodb_items_directly() -> None:
    """moto renders an item operation's result through the service model, member by member,
    trying several spellings of each attribute name: about a third of the CPU of a DynamoDB call
    here. For these operations the result is already the wire's JSON (attribute values in
    DynamoDB's typed form, binaries as bytes), so it is written with `json` directly: botocore
    parses the same answer from it (tests/integration/test_local_moto_shortcuts.py compares
    the two). Any other value falls back to moto's renderer."""
    from moto.dynamodb.responses import DynamoResult

    original = DynamoResult.execute_result
    if getattr(original, "hermes_direct", False):
        return

    def binary(value: Any) -> str:
        if isinstance(value, bytes):
            return base64.b64encode(value).decode("ascii")
        raise TypeError(type(value).__name__)

    def execute_result(self: Any, context: Any) -> Any:
        if context.operation_model.name in _ITEM_RESULTS:
            try:
                body = json.dumps(self.result, default=binary)
            except (TypeError, ValueError):
                return original(self, context)
            return 200, {"Content-Type": "application/x-amz-json-1.0"}, body
        return original(self, context)

    execute_result.hermes_direct = True  # type: ignore[attr-defined]
    execute_result.hermes_original = original  # type: ignore[attr-defined]
    DynamoResult.execute_result = execute_result  # type: ignore[method-assign]


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
    The response handlers hold the lock too: they render the item moto keeps (not a copy) after
    the backend returns, and another thread's write to it meanwhile failed the read ("dictionary
    changed size during iteration").
    """
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.responses import DynamoHandler

    for owner in (DynamoDBBackend, DynamoHandler):
        for name in _DYNAMODB_ITEM_OPERATIONS:
            original = getattr(owner, name)
            if getattr(original, "_hermes_atomic", False):
                continue

            def locked(*args: Any, __original: Any = original, **kwargs: Any) -> Any:
                with _DYNAMODB_LOCK:  # reentrant: the handler's call into the backend takes it again
                    return __original(*args, **kwargs)

            locked._hermes_atomic = True  # type: ignore[attr-defined]
            setattr(owner, name, locked)


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


_STREAM_WRITTEN = threading.Condition()
_stream_writes = 0  # how many stream records moto has appended (a poller waits for it to move)


def notify_stream_writes() -> None:
    """Wake local mode's stream pollers when a table with a stream is written.

    Lambda polls a stream four times a second; a poller that slept between looks would add its
    sleep to every message, and one that looked all the time would burn the CPU moto needs.
    moto appends a stream record inside the write (under the DynamoDB lock), so this wraps that
    append: the pollers wait on `wait_for_stream_write` and look as soon as there is something.
    Idempotent; pinned to moto 5.2.x like local mode's other shims.
    """
    from moto.dynamodb.models.table import StreamShard

    original = StreamShard.add
    if getattr(original, "_hermes_notify", False):
        return

    def add(shard: Any, old: Any, new: Any) -> None:
        global _stream_writes
        original(shard, old, new)
        with _STREAM_WRITTEN:
            _stream_writes += 1
            _STREAM_WRITTEN.notify_all()

    add._hermes_notify = True  # type: ignore[attr-defined]
    StreamShard.add = add  # type: ignore[method-assign,assignment]


def stream_writes() -> int:
    """A count that moves with every stream record moto appends: read it before a look at a
    stream, and `wait_for_stream_write(seen, ...)` returns at once if a write came meanwhile."""
    with _STREAM_WRITTEN:
        return _stream_writes


def wait_for_stream_write(seen: int, timeout: float) -> None:
    """Until a stream record is appended after the count `seen` was read (or `timeout` seconds)."""
    with _STREAM_WRITTEN:
        _STREAM_WRITTEN.wait_for(lambda: _stream_writes != seen, timeout)


class EmbeddedStream:
    """A table's stream read from the records the embedded moto keeps, from its first record on
    (TRIM_HORIZON), in pages as GetRecords gives them, without the request.

    GetRecords through botocore was a sixth of local mode's CPU at 100 sessions (py-spy, one call
    per message): moto's response serializer walking each record's image, the request's signing
    and endpoint resolution, botocore's parser, and a new shard iterator per call that moto keeps
    for good. Each record here is a copy of the one moto built at the write (JSON, as the wire
    carries it) with its creation time in epoch seconds, as Lambda's event has it; binary values
    stay the base64 text of the wire (GetRecords through boto3 would decode them). moto is in this
    process in local mode (`LocalGateway.start`), so its records are there to read; pinned to
    moto 5.2.x like the other shims (its `StreamShard`)."""

    def __init__(self, stream_arn: str) -> None:
        from moto.dynamodb.models import dynamodb_backends

        # arn:aws:dynamodb:<region>:<account>:table/<name>/stream/<label>
        _, _, _, region, account, resource = stream_arn.split(":", 5)
        table = dynamodb_backends[account][region].get_table(resource.split("/")[1])
        if table.stream_shard is None:
            raise ValueError(f"the table of {stream_arn} has no stream")
        self._shard = table.stream_shard
        self.shard_id = str(self._shard.id)
        self._next = int(self._shard.starting_sequence_number)  # the sequence number read next

    def read(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The records after the last read, at most `limit` (none: nothing new yet)."""
        with _DYNAMODB_LOCK:  # a write appends under it
            records = self._shard.get(self._next, limit)
        self._next += len(records)
        return [_wire_record(r) for r in records]


def _wire_record(record: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stream record moto keeps, as the wire would carry it (moto built it once and
    never changes it, and the copy is the reader's own)."""
    from datetime import UTC, datetime

    change = dict(record["dynamodb"])
    created = change.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):  # moto's naive UTC time
        change["ApproximateCreationDateTime"] = (created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp()
    copied: dict[str, Any] = json.loads(json.dumps({**record, "dynamodb": change}))
    return copied


def install_lambda_dispatch(
    resolve: Callable[[str], Handler | None],
    context_for: Callable[[str], Any],
    asynchronous: AsyncInvokes | None = None,
) -> None:
    """Make every Lambda invoke inside moto (Step Functions tasks included) call our handler.

    A raised exception comes back as a function error with `errorType` = the exception class,
    so the state machine's Retry/Catch see the same error names as in AWS. An asynchronous invoke
    (InvocationType=Event) is answered 202 at once and run by `asynchronous` on its own threads,
    with Lambda's retries and dead-letter queue; without it, it is run in the caller's thread.
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
        if asynchronous is not None and _header(headers, "X-Amz-Invocation-Type") == "Event":
            asynchronous.submit(name, handler, event, context_for)
            return b""
        try:
            # In a copy of the caller's context, as if in a process of its own: the handler sets
            # (and clears) its log keys there, not under the caller that waits for it.
            result = contextvars.copy_context().run(handler, event, context_for(name))
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


def _header(headers: Any, name: str) -> str:
    """A request header whatever moto's request object makes of the names' case."""
    for key, value in dict(headers or {}).items():
        if str(key).lower() == name.lower():
            return str(value)
    return ""


class AsyncInvokes:
    """Lambda's asynchronous invokes, played in-process: each event runs on a worker thread (never
    the caller's); a run that raises is tried again after `retry_delays` (Lambda: about one and two
    minutes), and after the last the event, as it was sent, goes to the function's dead-letter queue
    with Lambda's attributes (RequestID, ErrorCode, ErrorMessage)."""

    def __init__(
        self,
        dead_letter_urls: dict[str, str],
        *,
        workers: int = 8,
        retry_delays: tuple[float, ...] = (1.0, 2.0),
        region: str | None = None,
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.dead_letter_urls = dead_letter_urls  # function name -> its DeadLetterConfig queue URL
        self.retry_delays = retry_delays
        self._region = region
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lambda-async")
        self._pending = 0
        self._lock = threading.Condition()
        self._timers: set[threading.Timer] = set()

    @property
    def pending(self) -> int:
        """Events submitted and not yet done (run, or dead-lettered), retries included."""
        with self._lock:
            return self._pending

    def submit(self, name: str, handler: Handler, event: dict[str, Any], context_for: Callable[[str], Any]) -> None:
        with self._lock:
            self._pending += 1
        self._pool.submit(self._run, name, handler, event, context_for, 0)

    def _run(
        self, name: str, handler: Handler, event: dict[str, Any], context_for: Callable[[str], Any], tries: int
    ) -> None:
        try:
            handler(event, context_for(name))
        except Exception as exc:  # noqa: BLE001 - a failed run is retried, then dead-lettered, as by Lambda
            if tries < len(self.retry_delays):
                self._later(self.retry_delays[tries], name, handler, event, context_for, tries + 1)
                return
            self._dead_letter(name, event, exc)
        self._done()

    def _later(self, delay: float, *args: Any) -> None:
        def resubmit() -> None:
            with self._lock:
                self._timers.discard(timer)
            self._pool.submit(self._run, *args)

        timer = threading.Timer(delay, resubmit)
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def _dead_letter(self, name: str, event: dict[str, Any], exc: Exception) -> None:
        url = self.dead_letter_urls.get(name)
        print(f"[local] {name}: an asynchronous invoke failed after its retries: {type(exc).__name__}", file=sys.stderr)
        if url is None:
            return
        attributes = {
            "RequestID": str(uuid.uuid4()),
            "ErrorCode": "200",
            "ErrorMessage": f"{type(exc).__name__}: {exc}"[:1000],
        }
        try:
            boto3.client("sqs", region_name=self._region).send_message(
                QueueUrl=url,
                MessageBody=json.dumps(event),
                MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
            )
        except Exception as error:  # noqa: BLE001 - the embedded AWS is stopping
            print(f"[local] {name}: the dead letter was not sent: {type(error).__name__}", file=sys.stderr)

    def _done(self) -> None:
        with self._lock:
            self._pending -= 1
            self._lock.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Until no event is pending (True), or `timeout` seconds."""
        deadline = time.time() + timeout
        with self._lock:
            while self._pending:
                left = deadline - time.time()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def close(self) -> None:
        with self._lock:
            timers, self._timers = set(self._timers), set()
        for timer in timers:
            timer.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)


def _physical(prefix: str, name: str) -> str:
    return f"{prefix}-{name}"


def create_table(client: Any, spec: TableSpec, name: str) -> str | None:
    """Create the table (its indexes, TTL and stream); its stream's ARN, or None."""
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
        projection = {"ProjectionType": index.projection}
        indexes.append({"IndexName": index.name, "KeySchema": index_keys, "Projection": projection})
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": key_schema,
        "AttributeDefinitions": [{"AttributeName": k, "AttributeType": t} for k, t in attributes.items()],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        kwargs["GlobalSecondaryIndexes"] = indexes
    if spec.stream:
        kwargs["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": spec.stream}
    created = client.create_table(**kwargs)["TableDescription"]
    if spec.ttl_attribute:
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
        )
    return str(created["LatestStreamArn"]) if spec.stream else None


def definition_with_substitutions(function_arns: dict[str, str], root: Path | None = None) -> str:
    """The turn workflow's ASL with each `${Placeholder}` replaced, as CloudFormation does."""
    text = ((root or repo_root()) / TURN_STATE_MACHINE.definition_file).read_text(encoding="utf-8")
    for placeholder, function in TURN_STATE_MACHINE.substitutions.items():
        text = text.replace("${" + placeholder + "}", function_arns[function])
    return text


def stream_env_var(table: TableSpec) -> str:
    """Where local mode keeps a table's stream ARN (its poller reads it; no function does)."""
    return table.env_var.removesuffix("_TABLE") + "_STREAM_ARN"


def create_resources(region: str, prefix: str = "hermes-local") -> tuple[Bindings, dict[str, str]]:
    """Create every table (with its stream), queue and the state machine; return the bindings and
    the environment variables that carry them into the functions (every function's ARN too: the
    Lambda invokes are dispatched by name)."""
    env: dict[str, str] = {}
    dynamodb = boto3.client("dynamodb", region_name=region)
    for table in TABLES:
        name = _physical(prefix, table.name)
        stream_arn = create_table(dynamodb, table, name)
        env[table.env_var] = name
        if stream_arn:
            env[stream_env_var(table)] = stream_arn
    sqs = boto3.client("sqs", region_name=region)
    for queue in QUEUES:
        env[queue.env_var] = str(sqs.create_queue(QueueName=_physical(prefix, queue.name))["QueueUrl"])
    s3 = boto3.client("s3", region_name=region)
    for bucket in BUCKETS:
        name = _physical(prefix, bucket.name).lower().replace("_", "-")
        if region == "us-east-1":
            s3.create_bucket(Bucket=name)
        else:
            s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})  # type: ignore[typeddict-item]
        env[bucket.env_var] = name
    for spec in FUNCTIONS:
        env[spec.env_var] = f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{_physical(prefix, spec.name)}"
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


def loopback_hosts(port: int) -> frozenset[str]:
    """The `Host` values a local server answers: this machine's own name for it, nothing else (a
    DNS-rebinding page reaches 127.0.0.1 under a name of its own, and sends that name)."""
    return frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})


class LoopbackOnly:
    """WSGI middleware for the embedded AWS: a request with a foreign `Host`, or with any `Origin`
    (only browsers send one: boto3 and the AWS CLI never do), is refused before moto sees it. moto
    has no authentication, so a web page that reached it could read transcripts, approve pairings
    or put a message marked trusted on the inbound queue."""

    def __init__(self, app: Any, port: int) -> None:
        self.app = app
        self.hosts = loopback_hosts(port)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("HTTP_HOST") not in self.hosts or "HTTP_ORIGIN" in environ:
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"the embedded AWS of local mode answers only this machine's AWS clients\n"]
        return self.app(environ, start_response)


def loopback_moto_server(port: int) -> Any:
    """moto's threaded server on 127.0.0.1, without CORS (moto allows every origin by default)
    and behind `LoopbackOnly`. The server's entry point is replaced, as pinned to moto 5.2.x.
    Its WSGI application is `server.app`, which `IN_PROCESS` serves to this process's clients."""
    from moto.moto_server import werkzeug_app
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import make_server

    werkzeug_app.DISABLE_GLOBAL_CORS = True  # type: ignore[attr-defined]  # read for every backend built
    app = LoopbackOnly(werkzeug_app.DomainDispatcherApplication(werkzeug_app.create_backend_app), port)

    class Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            self._server = make_server(
                self._ip_address, self._port, app, True, request_handler=werkzeug_app.MotoRequestHandler
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    server = Server(ip_address="127.0.0.1", port=port, verbose=False)
    server.app = app  # type: ignore[attr-defined]
    return server


class InProcessAws:
    """botocore's `before-send` hook for this process's own clients: a request for the embedded
    AWS is answered by the server's WSGI application in the calling thread, with no socket.

    The request is the one botocore built for the wire and the response is parsed by botocore
    as one from the wire, so the functions see what the server would have answered; only the
    loopback HTTP (urllib3 and http.client on one side, werkzeug's server and its thread on the
    other) is left out. That was about a third of local mode's CPU (py-spy, 100 sessions at
    once), and local mode runs in one interpreter: its messages per second are bounded by it.
    Such a request is not signed either (`unsigned`): the embedded moto checks no signature, and
    SigV4 was a twelfth of local mode's CPU. Clients of other processes (the CLI's `--local`, the
    AWS CLI) still reach the server, signed."""

    def __init__(self) -> None:
        self._apps: dict[str, Any] = {}  # "http://127.0.0.1:PORT" -> the WSGI application there

    def serve(self, base_url: str, app: Any) -> None:
        """Answer requests for `base_url` in-process, in every botocore session (made already
        or later): the default boto3 session's, and those that register the built-in handlers."""
        import boto3
        import botocore.handlers

        for url in _loopback_spellings(base_url.rstrip("/")):
            self._apps[url] = app
        if ("before-send", self) in botocore.handlers.BUILTIN_HANDLERS:
            return
        hooks = (
            ("before-call", self._before_call, "hermes-local-unsigned"),
            ("before-send", self, "hermes-local-in-process-aws"),
        )
        for event, hook, _ in hooks:
            botocore.handlers.BUILTIN_HANDLERS.append((event, hook))  # sessions made from now on
        if boto3.DEFAULT_SESSION is not None:  # made before: it has the handlers once, not twice
            for event, hook, unique_id in hooks:
                boto3.DEFAULT_SESSION.events.register(event, hook, unique_id=unique_id)

    def forget(self, base_url: str) -> None:
        for url in _loopback_spellings(base_url.rstrip("/")):
            self._apps.pop(url, None)

    def _before_call(self, **kwargs: Any) -> None:
        self.unsigned(**kwargs)  # looked up per call: a metered run (bench/meter.py) signs as deployed

    def unsigned(self, params: dict[str, Any], context: dict[str, Any], model: Any, **_: Any) -> None:
        """botocore's `before-call` hook: a request this process answers itself is built without
        a signature (botocore's own spelling of an operation that takes none). moto reads the
        request's region from the signature's credential scope (an endpoint on 127.0.0.1 names
        none), so the request carries that scope, with no signature to compute. Presigned URLs
        are made without this hook, and are signed as before."""
        from urllib.parse import urlsplit

        parts = urlsplit(params.get("url") or "")
        if f"{parts.scheme}://{parts.netloc}" not in self._apps:
            return
        context["auth_type"] = "none"
        scope = f"local/19700101/{context.get('client_region') or 'us-east-1'}/{model.service_model.signing_name}"
        params["headers"]["Authorization"] = f"AWS4-HMAC-SHA256 Credential={scope}/aws4_request, Signature=none"

    def __call__(self, request: Any, **_: Any) -> Any:
        from urllib.parse import urlsplit

        parts = urlsplit(request.url)
        app = self._apps.get(f"{parts.scheme}://{parts.netloc}")
        if app is None:
            return None  # not ours: botocore sends it
        handler = _json_protocol_handler(request.headers.get("X-Amz-Target")) or _rest_handler(
            request.method, parts.path
        )
        if handler is not None:
            return self._dispatch(handler, request)
        return self._answer(app, request, parts)

    @staticmethod
    def _dispatch(handler: Any, request: Any) -> Any:
        """A JSON-protocol request (or a Lambda invoke) straight to the moto response class that
        the server's routing would pick for it, as moto's own in-process mock calls it: the same
        normalized request, URL and headers, without building a WSGI environ for Flask (a tenth
        of local mode's CPU went to that, for the DynamoDB calls alone)."""
        from botocore.awsrequest import AWSResponse
        from botocore.exceptions import ClientError
        from moto.core.botocore_stubber import MockRawResponse
        from moto.core.request import normalize_request
        from werkzeug.exceptions import HTTPException

        normalized = normalize_request(request)
        try:
            status, headers, body = handler(normalized, normalized.raw_url, dict(normalized.headers))
        except HTTPException as exc:
            status, headers, body = exc.code, exc.get_headers(), exc.get_body()
        except ClientError as exc:  # as moto's Flask wrapper answers it
            status, headers, body = 400, {}, exc.response["Error"]["Message"]
        return AWSResponse(request.url, status, headers, MockRawResponse(body))

    @staticmethod
    def _answer(app: Any, request: Any, parts: Any) -> Any:
        from botocore.awsrequest import AWSResponse
        from moto.core.botocore_stubber import MockRawResponse
        from moto.core.request import (
            PRESERVED_HEADER_NAMES_ENVIRON_KEY,
            environ_key_for_header,
            should_preserve_original_header_name,
        )
        from werkzeug.test import EnvironBuilder

        body = request.body
        if body is None:
            body = b""
        elif hasattr(body, "read"):
            body = body.read()
        elif isinstance(body, str):
            body = body.encode("utf-8")
        headers = [(name, v.decode("latin-1") if isinstance(v, bytes) else v) for name, v in request.headers.items()]
        environ = EnvironBuilder(
            method=request.method,
            base_url=f"{parts.scheme}://{parts.netloc}",
            path=parts.path or "/",
            query_string=parts.query,
            headers=headers,
            data=body,
        ).get_environ()
        # As moto's request handler does on the server: S3 metadata may have "_" in its names.
        names = {environ_key_for_header(n): n for n, _ in headers if should_preserve_original_header_name(n)}
        environ[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = names
        written: list[bytes] = []
        started: dict[str, Any] = {}

        def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            started["status"], started["headers"] = int(status.split(" ", 1)[0]), response_headers
            return written.append

        chunks = app(environ, start_response)
        try:
            content = b"".join(written) + b"".join(chunks)
        finally:
            if hasattr(chunks, "close"):
                chunks.close()
        return AWSResponse(request.url, started["status"], started["headers"], MockRawResponse(content))


def _loopback_spellings(base_url: str) -> tuple[str, ...]:
    """The base URL and, for a loopback one, its other spelling: the functions' clients name the
    server 127.0.0.1, moto's Step Functions names it localhost for the Lambda tasks it invokes
    (moto.stepfunctions.parser.asl.utils.boto_client), and both are answered in-process."""
    for here, other in (("://127.0.0.1:", "://localhost:"), ("://localhost:", "://127.0.0.1:")):
        if here in base_url:
            return base_url, base_url.replace(here, other, 1)
    return (base_url,)


# The X-Amz-Target prefixes of the JSON-protocol services local mode calls most, and the moto
# response class each service's URL map routes its requests to (moto/<service>/urls.py).
_JSON_PROTOCOL_HANDLERS = {
    "DynamoDB_20120810": ("moto.dynamodb.responses", "DynamoHandler"),
    "DynamoDBStreams_20120810": ("moto.dynamodbstreams.responses", "DynamoDBStreamsHandler"),
    "AmazonSQS": ("moto.sqs.responses", "SQSResponse"),
    "AWSStepFunctions": ("moto.stepfunctions.responses", "StepFunctionResponse"),
    "AWSEvents": ("moto.events.responses", "EventsHandler"),
}


# A Lambda invoke (every task of a turn's workflow, the functions' invokes of the delivery): a
# REST request routed by its path (moto/awslambda/urls.py) to LambdaResponse.dispatch, whose
# `invoke` reads the function's name from the path. Through Flask it cost about 2 ms of CPU each.
_LAMBDA_INVOKE_PATH = re.compile(r"/2015-03-31/functions/[^/]+/invocations/?")


def _rest_handler(method: str, path: str) -> Any:
    """moto's dispatch for a REST request local mode makes on a message's path, or None."""
    if method == "POST" and _LAMBDA_INVOKE_PATH.fullmatch(path):
        return _dispatch_of_class("moto.awslambda.responses", "LambdaResponse")
    return None


def _json_protocol_handler(target: Any) -> Any:
    """moto's dispatch for a request with this X-Amz-Target, or None: the server's routing."""
    if isinstance(target, bytes):
        target = target.decode("latin-1")
    if not target or "." not in target:
        return None
    return _dispatch_of(target.split(".", 1)[0])


@functools.cache
def _dispatch_of(prefix: str) -> Any:
    """The moto response class's dispatch for a target prefix (imported once), or None."""
    found = _JSON_PROTOCOL_HANDLERS.get(prefix)
    if found is None:
        return None
    return _dispatch_of_class(*found)


@functools.cache
def _dispatch_of_class(module: str, name: str) -> Any:
    return getattr(importlib.import_module(module), name).dispatch


IN_PROCESS = InProcessAws()
