"""An in-memory DynamoDB client for the session storage adapters' unit tests.

The session adapters (`adapters/dynamo_*.py`) talk to DynamoDB through `adapters.dynamo_table`,
which speaks the low-level client API. This fake answers that API in memory, so unit tests run
the very adapter code the functions run, with its conditions, update expressions, transactions
and indexes, without moto and in microseconds. It understands the expressions the adapters
write (SET with `if_not_exists`, `list_append` and arithmetic, ADD, REMOVE, DELETE; conditions
with comparisons, `attribute_exists`, `attribute_not_exists`, `size`, `contains`, AND, OR, NOT,
BETWEEN) and nothing more: an expression outside that grammar raises, so a new form cannot pass
here unnoticed. `tests/contracts/` runs the same checks on this fake and on moto.

Writes are serialized under one lock, as DynamoDB applies a conditional write atomically.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

_SER, _DES = TypeSerializer(), TypeDeserializer()
_TOKEN = re.compile(r"\s*(<>|<=|>=|[(),=<>+]|[#:][A-Za-z0-9_]+|\.|[A-Za-z_][A-Za-z0-9_]*)")


class ClientError(Exception):
    """botocore's ClientError, as far as the adapters read it (`response["Error"]["Code"]`)."""

    def __init__(self, code: str, **response: Any) -> None:
        super().__init__(code)
        self.response: dict[str, Any] = {"Error": {"Code": code}, **response}


@dataclass
class _Index:
    partition: str
    sort: str | None


@dataclass
class _Table:
    partition: str
    sort: str | None
    indexes: dict[str, _Index] = field(default_factory=dict)
    items: dict[tuple[Any, Any], dict[str, Any]] = field(default_factory=dict)

    def key(self, item: dict[str, Any]) -> tuple[Any, Any]:
        return (item[self.partition], item.get(self.sort) if self.sort else None)


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos:].strip():
                raise ValueError(f"unparsed expression text: {text[pos:]!r}")
            break
        out.append(match.group(1))
        pos = match.end()
    return out


class _Expr:
    """Tokens of one expression with its names and values, read left to right."""

    def __init__(self, text: str, names: dict[str, str], values: dict[str, Any]) -> None:
        self.tokens, self.pos = _tokens(text), 0
        self.names, self.values = names, values

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            raise ValueError(f"expected {expected!r}, got {token!r}")
        self.pos += 1
        return token

    def path(self) -> list[str]:
        parts = [self.names[self.take()]]
        while self.peek() == ".":
            self.take()
            parts.append(self.names[self.take()])
        return parts

    def operand(self, item: dict[str, Any]) -> Any:
        token = self.peek()
        if token is not None and token.startswith(":"):
            return self.values[self.take()]
        if token == "size":
            self.take()
            self.take("(")
            found = _get(item, self.path())
            self.take(")")
            return Decimal(len(found)) if found is not None else None
        return _get(item, self.path())


def _get(item: dict[str, Any] | None, path: list[str]) -> Any:
    current: Any = item
    for part in path:
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    return current


def _set(item: dict[str, Any], path: list[str], value: Any) -> None:
    current = item
    for part in path[:-1]:
        current = current.setdefault(part, {})
    current[path[-1]] = value


def _remove(item: dict[str, Any], path: list[str]) -> None:
    current: Any = item
    for part in path[:-1]:
        current = current.get(part) if isinstance(current, dict) else None
    if isinstance(current, dict):
        current.pop(path[-1], None)


# -- conditions ---------------------------------------------------------------------------------


def _condition(expr: _Expr, item: dict[str, Any]) -> bool:
    result = _and(expr, item)
    while expr.peek() is not None and expr.peek().upper() == "OR":  # type: ignore[union-attr]
        expr.take()
        right = _and(expr, item)
        result = result or right
    return result


def _and(expr: _Expr, item: dict[str, Any]) -> bool:
    result = _unary(expr, item)
    while expr.peek() is not None and expr.peek().upper() == "AND":  # type: ignore[union-attr]
        expr.take()
        right = _unary(expr, item)
        result = result and right
    return result


def _unary(expr: _Expr, item: dict[str, Any]) -> bool:
    token = expr.peek()
    if token is not None and token.upper() == "NOT":
        expr.take()
        return not _unary(expr, item)
    if token == "(":
        expr.take()
        result = _condition(expr, item)
        expr.take(")")
        return result
    if token in ("attribute_exists", "attribute_not_exists", "contains"):
        expr.take()
        expr.take("(")
        path = expr.path()
        if token == "contains":
            expr.take(",")
            wanted = expr.operand(item)
            expr.take(")")
            found = _get(item, path)
            return found is not None and wanted in found
        expr.take(")")
        exists = _get(item, path) is not None
        return exists if token == "attribute_exists" else not exists
    return _comparison(expr, item)


_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: a == b,
    "<>": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
}


def _comparison(expr: _Expr, item: dict[str, Any]) -> bool:
    left = expr.operand(item)
    op = expr.take()
    if op.upper() == "BETWEEN":
        low = expr.operand(item)
        expr.take("AND")
        high = expr.operand(item)
        return left is not None and low <= left <= high
    right = expr.operand(item)
    if op == "<>":
        return bool(left != right)
    if left is None or right is None:
        return False
    try:
        return _COMPARE[op](left, right)
    except TypeError:
        return False


def _holds(text: str | None, names: dict[str, str], values: dict[str, Any], item: dict[str, Any] | None) -> bool:
    if not text:
        return True
    expr = _Expr(text, names, values)
    result = _condition(expr, item or {})
    if expr.peek() is not None:
        raise ValueError(f"unparsed condition tail: {expr.tokens[expr.pos :]}")
    return result


# -- updates ------------------------------------------------------------------------------------


def _value(expr: _Expr, item: dict[str, Any]) -> Any:
    value = _term(expr, item)
    while expr.peek() == "+":
        expr.take()
        value = value + _term(expr, item)
    return value


def _term(expr: _Expr, item: dict[str, Any]) -> Any:
    token = expr.peek()
    if token not in ("if_not_exists", "list_append"):
        return copy.deepcopy(expr.operand(item))
    expr.take()
    expr.take("(")
    if token == "if_not_exists":
        path = expr.path()
        expr.take(",")
        fallback = _value(expr, item)
        expr.take(")")
        found = _get(item, path)
        return copy.deepcopy(found) if found is not None else fallback
    first = _value(expr, item)
    expr.take(",")
    second = _value(expr, item)
    expr.take(")")
    return [*first, *second]


def _apply(text: str, names: dict[str, str], values: dict[str, Any], item: dict[str, Any]) -> set[str]:
    """Apply an update expression; the top-level attributes it names (what UPDATED_* return)."""
    expr = _Expr(text, names, values)
    before = copy.deepcopy(item)  # every right-hand side reads the item as it was
    touched: set[str] = set()
    while expr.peek() is not None:
        action = expr.take().upper()
        while True:
            path = expr.path()
            touched.add(path[0])
            if action == "SET":
                expr.take("=")
                _set(item, path, _value(expr, before))
            elif action == "REMOVE":
                _remove(item, path)
            elif action == "ADD":
                value = expr.operand(before)
                current = _get(item, path)
                _set(item, path, ((current or set()) | value) if isinstance(value, set) else (current or 0) + value)
            elif action == "DELETE":
                current = _get(item, path)
                left = (current or set()) - expr.operand(before)
                if left:
                    _set(item, path, left)
                else:
                    _remove(item, path)
            else:
                raise ValueError(f"unknown update action {action}")
            if expr.peek() != ",":
                break
            expr.take()
    return touched


class MemoryDynamo:
    """The DynamoDB client calls the session adapters make, on tables held in memory."""

    def __init__(self, scan_page_items: int = 100) -> None:
        self._tables: dict[str, _Table] = {}
        self._lock = threading.RLock()
        self.calls: list[str] = []  # operation names, in order (for tests that count calls)
        self.scan_page_items = scan_page_items  # a Scan page's items (DynamoDB's page is 1 MB read)

    def create_table(
        self, name: str, partition: str, sort: str | None = None, **indexes: tuple[str, str | None]
    ) -> None:
        self._tables[name] = _Table(partition, sort, {n: _Index(p, s) for n, (p, s) in indexes.items()})

    def tables(self) -> list[str]:
        return list(self._tables)

    def items(self, table: str) -> list[dict[str, Any]]:
        return [_plain(item) for item in self._tables[table].items.values()]

    # -- the client ---------------------------------------------------------------------------

    def get_item(self, TableName: str, Key: dict[str, Any], ConsistentRead: bool = True) -> dict[str, Any]:
        self.calls.append("GetItem")
        table = self._tables[TableName]
        with self._lock:
            found = table.items.get(table.key(_decode(Key)))
            return {"Item": _encode(found)} if found is not None else {}

    def put_item(self, TableName: str, Item: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.calls.append("PutItem")
        with self._lock:
            self._put(self._tables[TableName], _decode(Item), kwargs)
        return {}

    def _put(self, table: _Table, item: dict[str, Any], kwargs: dict[str, Any]) -> None:
        old = table.items.get(table.key(item))
        self._check(old, kwargs)
        table.items[table.key(item)] = item

    def _check(self, old: dict[str, Any] | None, kwargs: dict[str, Any]) -> None:
        names, values = kwargs.get("ExpressionAttributeNames", {}), _decode(kwargs.get("ExpressionAttributeValues", {}))
        if not _holds(kwargs.get("ConditionExpression"), names, values, old):
            extra = {"Item": _encode(old)} if old and kwargs.get("ReturnValuesOnConditionCheckFailure") else {}
            raise ClientError("ConditionalCheckFailedException", **extra)

    def update_item(self, TableName: str, Key: dict[str, Any], UpdateExpression: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("UpdateItem")
        table = self._tables[TableName]
        with self._lock:
            key = _decode(Key)
            old = table.items.get(table.key(key))
            self._check(old, kwargs)
            new = copy.deepcopy(old) if old is not None else dict(key)
            names, values = (
                kwargs.get("ExpressionAttributeNames", {}),
                _decode(kwargs.get("ExpressionAttributeValues", {})),
            )
            touched = _apply(UpdateExpression, names, values, new)
            table.items[table.key(new)] = new
        returns = kwargs.get("ReturnValues", "NONE")
        if returns == "ALL_NEW":
            return {"Attributes": _encode(new)}
        if returns == "ALL_OLD":
            return {"Attributes": _encode(old)} if old else {}
        if returns in ("UPDATED_OLD", "UPDATED_NEW"):
            source = (old or {}) if returns == "UPDATED_OLD" else new
            return {"Attributes": _encode({k: v for k, v in source.items() if k in touched})}
        return {}

    def delete_item(self, TableName: str, Key: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self.calls.append("DeleteItem")
        table = self._tables[TableName]
        with self._lock:
            key = table.key(_decode(Key))
            self._check(table.items.get(key), kwargs)
            table.items.pop(key, None)
        return {}

    def query(self, TableName: str, KeyConditionExpression: str, **kwargs: Any) -> dict[str, Any]:
        self.calls.append("Query")
        table = self._tables[TableName]
        index = table.indexes.get(kwargs["IndexName"]) if kwargs.get("IndexName") else None
        partition, sort = (index.partition, index.sort) if index else (table.partition, table.sort)
        names, values = kwargs.get("ExpressionAttributeNames", {}), _decode(kwargs.get("ExpressionAttributeValues", {}))
        with self._lock:
            found = [
                copy.deepcopy(item)
                for item in table.items.values()
                if partition in item and (sort is None or sort in item)
                and _holds(KeyConditionExpression, names, values, item)
            ]  # fmt: skip
        found.sort(key=lambda item: item.get(sort) if sort else 0, reverse=not kwargs.get("ScanIndexForward", True))
        start = kwargs.get("ExclusiveStartKey")
        if start is not None:
            position = int(_decode(start)["__position"])
            found = found[position:]
        else:
            position = 0
        limit = kwargs.get("Limit")
        page = found[:limit] if limit else found
        out: dict[str, Any] = {"Items": [_encode(i) for i in page], "Count": len(page)}
        if limit and len(found) > limit:
            out["LastEvaluatedKey"] = _encode({"__position": position + limit})
        return out

    def scan(self, TableName: str, **kwargs: Any) -> dict[str, Any]:
        """A page of `scan_page_items` items in storage order, filtered after the page is read
        (as DynamoDB filters after reading), with a `LastEvaluatedKey` while items are left."""
        self.calls.append("Scan")
        table = self._tables[TableName]
        names, values = kwargs.get("ExpressionAttributeNames", {}), _decode(kwargs.get("ExpressionAttributeValues", {}))
        start = kwargs.get("ExclusiveStartKey")
        position = int(_decode(start)["__position"]) if start is not None else 0
        with self._lock:
            every = [copy.deepcopy(item) for item in table.items.values()]
        page = every[position : position + self.scan_page_items]
        kept = [item for item in page if _holds(kwargs.get("FilterExpression"), names, values, item)]
        out: dict[str, Any] = {"Items": [_encode(i) for i in kept], "Count": len(kept), "ScannedCount": len(page)}
        if position + len(page) < len(every):
            out["LastEvaluatedKey"] = _encode({"__position": position + len(page)})
        return out

    def transact_write_items(self, TransactItems: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append("TransactWriteItems")
        with self._lock:
            saved = {name: copy.deepcopy(table.items) for name, table in self._tables.items()}
            codes = []
            for entry in TransactItems:
                ((kind, op),) = entry.items()
                codes.append(self._transact_one(kind, op))
            if any(codes):
                for name, items in saved.items():
                    self._tables[name].items = items
                reasons = [{"Code": code or "None"} for code in codes]
                raise ClientError("TransactionCanceledException", CancellationReasons=reasons)
        return {}

    def _transact_one(self, kind: str, op: dict[str, Any]) -> str:
        try:
            if kind == "Put":
                self._put(self._tables[op["TableName"]], _decode(op["Item"]), op)
            elif kind == "Update":
                self.calls.append("(in transaction)")
                self.update_item(**op)
            elif kind == "Delete":
                self.delete_item(**op)
            elif kind == "ConditionCheck":
                table = self._tables[op["TableName"]]
                self._check(table.items.get(table.key(_decode(op["Key"]))), op)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return "ConditionalCheckFailed"
            raise
        return ""

    def batch_get_item(self, RequestItems: dict[str, dict[str, Any]]) -> dict[str, Any]:
        self.calls.append("BatchGetItem")
        responses: dict[str, list[dict[str, Any]]] = {}
        with self._lock:
            for name, request in RequestItems.items():
                if set(request) - {"Keys", "ConsistentRead"}:
                    raise ValueError(f"unsupported batch read options: {sorted(request)}")
                table = self._tables[name]
                found = (table.items.get(table.key(_decode(key))) for key in request["Keys"])
                responses[name] = [_encode(item) for item in found if item is not None]
        return {"Responses": responses, "UnprocessedKeys": {}}

    def batch_write_item(self, RequestItems: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
        self.calls.append("BatchWriteItem")
        with self._lock:
            for name, requests in RequestItems.items():
                table = self._tables[name]
                for request in requests:
                    if "PutRequest" in request:
                        item = _decode(request["PutRequest"]["Item"])
                        table.items[table.key(item)] = item
                    else:
                        table.items.pop(table.key(_decode(request["DeleteRequest"]["Key"])), None)
        return {"UnprocessedItems": {}}


def _decode(wire: dict[str, Any]) -> dict[str, Any]:
    return {k: _DES.deserialize(v) for k, v in wire.items()}


def _encode(item: dict[str, Any] | None) -> dict[str, Any]:
    return {k: _SER.serialize(v) for k, v in (item or {}).items()}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def session_tables_client() -> MemoryDynamo:
    """The routes, sessions and messages tables with their indexes, as resources.py declares them."""
    from hermes_gateway.resources import MESSAGES, ROUTES, SESSIONS

    client = MemoryDynamo(scan_page_items=5)  # small Scan pages: a test's few rows span several
    for spec in (ROUTES, SESSIONS, MESSAGES):
        indexes = {i.name: (i.partition.name, i.sort.name if i.sort else None) for i in spec.indexes}
        client.create_table(spec.name, spec.partition.name, spec.sort.name if spec.sort else None, **indexes)
    return client
