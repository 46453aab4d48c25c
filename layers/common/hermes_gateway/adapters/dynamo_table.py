"""A small typed layer over the DynamoDB client for the session storage adapters.

Why not the model classes here: the route item is written with conditional update expressions
that read several of its attributes at once (the lease, the queue, the revision), and a failed
condition is answered with the item as it was (`ReturnValuesOnConditionCheckFailure`) instead of
a second read. The client says both plainly; `Update` builds the expressions, `Tx` runs a
transaction whose cancellation reasons are matched with its operations in the order they were
written (the client sends them in that order). Numbers come back as int or float, never Decimal.

Errors are read here and nowhere else: a failed condition is `ConditionFailed` (carrying the item
when it was asked for), throttling is `TransientError` (the caller's retry policy applies).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from hermes_gateway.adapters.dynamo_errors import CONDITION_FAILED, THROTTLED, TRANSACTION_CONFLICT
from hermes_gateway.errors import TransientError

Item = dict[str, Any]
_TX_ATTEMPTS = 8


class ConditionFailed(Exception):
    """A conditional write's condition did not hold; `item` is the item as it was (when asked)."""

    def __init__(self, item: Item | None = None) -> None:
        super().__init__("condition failed")
        self.item = item


class TxCancelled(Exception):
    """A transaction was cancelled: `codes[i]` is the reason of the i-th operation written."""

    def __init__(self, codes: list[str]) -> None:
        super().__init__(f"transaction cancelled: {codes}")
        self.codes = codes

    def failed(self, index: int) -> bool:
        return index < len(self.codes) and self.codes[index] == CONDITION_FAILED


def plain(value: Any) -> Any:
    """DynamoDB's Decimal numbers and sets as the domain wants them."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, set):
        return {plain(v) for v in value}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def dynamo(value: Any) -> Any:
    """Floats become Decimal (the serializer refuses floats); None values inside maps are dropped."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, list | tuple):
        return [dynamo(v) for v in value]
    if isinstance(value, dict):
        return {k: dynamo(v) for k, v in value.items() if v is not None}
    return value


@dataclass
class Update:
    """An update expression built clause by clause, with placeholders made here."""

    _set: list[str] = field(default_factory=list)
    _add: list[str] = field(default_factory=list)
    _remove: list[str] = field(default_factory=list)
    _delete: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def name(self, attribute: str) -> str:
        """`#n` for an attribute name (dotted paths are maps: `approval.decision`)."""
        parts = []
        for part in attribute.split("."):
            placeholder = f"#{part}"
            self.names[placeholder] = part
            parts.append(placeholder)
        return ".".join(parts)

    def value(self, value: Any) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def set(self, attribute: str, value: Any) -> Update:
        if value is None:
            return self.remove(attribute)
        self._set.append(f"{self.name(attribute)} = {self.value(value)}")
        return self

    def set_many(self, values: Mapping[str, Any]) -> Update:
        for attribute, value in values.items():
            self.set(attribute, value)
        return self

    def increment(self, attribute: str, by: int | float = 1) -> Update:
        """`attribute = if_not_exists(attribute, 0) + by` (works where ADD does not: inside SET)."""
        ref = self.name(attribute)
        self._set.append(f"{ref} = if_not_exists({ref}, {self.value(0)}) + {self.value(by)}")
        return self

    def set_expression(self, expression: str) -> Update:
        """A SET clause written by the caller with `name()`/`value()` placeholders."""
        self._set.append(expression)
        return self

    def add(self, attribute: str, value: Any) -> Update:
        """ADD to a number (by `value`) or a set (its members)."""
        self._add.append(f"{self.name(attribute)} {self.value(value)}")
        return self

    def delete(self, attribute: str, members: AbstractSet[str]) -> Update:
        self._delete.append(f"{self.name(attribute)} {self.value(members)}")
        return self

    def remove(self, *attributes: str) -> Update:
        self._remove.extend(self.name(a) for a in attributes)
        return self

    def expression(self) -> str:
        clauses = []
        for word, parts in (("SET", self._set), ("ADD", self._add), ("REMOVE", self._remove), ("DELETE", self._delete)):
            if parts:
                clauses.append(f"{word} {', '.join(parts)}")
        return " ".join(clauses)


@dataclass
class Condition:
    """A condition expression sharing an `Update`'s placeholders (or its own)."""

    text: str
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


def condition(update: Update | None, template: str, **values: Any) -> Condition:
    """`template` with `{attr}` for attribute names and `{:x}` for the keyword values: e.g.
    condition(u, "{lease_token} = {:tok}", tok=token). Placeholders join the update's own."""
    host = update or Update()
    text = template
    for key, value in values.items():
        text = text.replace("{:" + key + "}", host.value(value))
    while "{" in text:
        start = text.index("{")
        end = text.index("}", start)
        text = text[:start] + host.name(text[start + 1 : end]) + text[end + 1 :]
    return Condition(text, host.names if update is None else {}, host.values if update is None else {})


class Table:
    """One table, through the client (thread-safe, shared per region and endpoint)."""

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name

    @cached_property
    def _serializer(self) -> Any:
        from boto3.dynamodb.types import TypeSerializer

        return TypeSerializer()

    @cached_property
    def _deserializer(self) -> Any:
        from boto3.dynamodb.types import TypeDeserializer

        return TypeDeserializer()

    def wire(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return {k: self._serializer.serialize(dynamo(v)) for k, v in item.items() if v is not None}

    def read(self, raw: Mapping[str, Any] | None) -> Item | None:
        if not raw:
            return None
        return {k: plain(self._deserializer.deserialize(v)) for k, v in raw.items()}

    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self.client, operation)(TableName=self.name, **kwargs)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code == "ConditionalCheckFailedException":
                raise ConditionFailed(self.read(getattr(exc, "response", {}).get("Item"))) from None
            if code in THROTTLED:
                raise TransientError(f"DynamoDB is throttling ({code})") from exc
            raise

    def get(self, key: Mapping[str, Any], *, consistent: bool = True) -> Item | None:
        found = self._call("get_item", Key=self.wire(key), ConsistentRead=consistent)
        return self.read(found.get("Item"))

    def put(self, item: Mapping[str, Any], when: Condition | None = None, *, old_on_failure: bool = False) -> None:
        kwargs: dict[str, Any] = {"Item": self.wire(item)}
        self._with_condition(kwargs, when, old_on_failure)
        self._call("put_item", **kwargs)

    def update(
        self,
        key: Mapping[str, Any],
        update: Update,
        when: Condition | None = None,
        *,
        returns: str = "NONE",
        old_on_failure: bool = False,
    ) -> Item | None:
        kwargs: dict[str, Any] = {"Key": self.wire(key), "UpdateExpression": update.expression()}
        names, values = dict(update.names), dict(update.values)
        if when is not None:
            kwargs["ConditionExpression"] = when.text
            names.update(when.names)
            values.update(when.values)
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if values:
            kwargs["ExpressionAttributeValues"] = self.wire(values)
        if returns != "NONE":
            kwargs["ReturnValues"] = returns
        if old_on_failure:
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return self.read(self._call("update_item", **kwargs).get("Attributes"))

    def delete(self, key: Mapping[str, Any], when: Condition | None = None) -> None:
        kwargs: dict[str, Any] = {"Key": self.wire(key)}
        self._with_condition(kwargs, when, False)
        self._call("delete_item", **kwargs)

    def query(
        self,
        key_condition: Condition,
        *,
        index: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        consistent: bool = False,
        projection: Sequence[str] = (),
    ) -> Iterable[Item]:
        """Items in key order, page by page: reading stops as soon as the caller stops."""
        kwargs: dict[str, Any] = {
            "KeyConditionExpression": key_condition.text,
            "ScanIndexForward": not newest_first,
            "ConsistentRead": consistent,
        }
        names = dict(key_condition.names)
        if projection:
            kwargs["ProjectionExpression"] = ", ".join(f"#p{i}" for i in range(len(projection)))
            names.update({f"#p{i}": attr for i, attr in enumerate(projection)})
        kwargs["ExpressionAttributeNames"] = names
        kwargs["ExpressionAttributeValues"] = self.wire(key_condition.values)
        if index:
            kwargs["IndexName"] = index
        if limit is not None:
            kwargs["Limit"] = limit
        while True:
            page = self._call("query", **kwargs)
            for raw in page.get("Items", []):
                item = self.read(raw)
                assert item is not None
                yield item
            start = page.get("LastEvaluatedKey")
            if not start:
                return
            kwargs["ExclusiveStartKey"] = start

    def batch_get(self, keys: Sequence[Mapping[str, Any]], *, consistent: bool = False) -> list[Item]:
        """The items of `keys` that exist, in no particular order (100 keys a request)."""
        found: list[Item] = []
        for start in range(0, len(keys), 100):
            pending: dict[str, Any] = {
                self.name: {"Keys": [self.wire(k) for k in keys[start : start + 100]], "ConsistentRead": consistent}
            }
            for attempt in range(_TX_ATTEMPTS):
                try:
                    answer = self.client.batch_get_item(RequestItems=pending)
                except Exception as exc:
                    if getattr(exc, "response", {}).get("Error", {}).get("Code") in THROTTLED:
                        raise TransientError("DynamoDB is throttling a batch read") from exc
                    raise
                for raw in (answer.get("Responses") or {}).get(self.name, []):
                    item = self.read(raw)
                    assert item is not None
                    found.append(item)
                pending = answer.get("UnprocessedKeys") or {}
                if not pending:
                    break
                _backoff(attempt)
            else:
                raise TransientError("DynamoDB left a batch read unprocessed; try again")
        return found

    def scan_page(
        self, when: Condition | None = None, *, start: Mapping[str, Any] | None = None
    ) -> tuple[list[Item], dict[str, Any] | None]:
        """One page of a Scan (at most 1 MB read, filtered by `when` after reading: the read is
        paid for whole) and where the next page starts (`LastEvaluatedKey`, as on the wire; None
        at the end). Eventually consistent: half the read units of a consistent Scan."""
        kwargs: dict[str, Any] = {}
        if when is not None:
            kwargs["FilterExpression"] = when.text
            if when.names:
                kwargs["ExpressionAttributeNames"] = when.names
            if when.values:
                kwargs["ExpressionAttributeValues"] = self.wire(when.values)
        if start:
            kwargs["ExclusiveStartKey"] = dict(start)
        page = self._call("scan", **kwargs)
        items = [item for raw in page.get("Items", []) if (item := self.read(raw)) is not None]
        return items, page.get("LastEvaluatedKey") or None

    def batch_put(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._batch([{"PutRequest": {"Item": self.wire(i)}} for i in items])

    def batch_delete(self, keys: Sequence[Mapping[str, Any]]) -> None:
        self._batch([{"DeleteRequest": {"Key": self.wire(k)}} for k in keys])

    def _batch(self, requests: list[dict[str, Any]]) -> None:
        for start in range(0, len(requests), 25):
            pending = {self.name: requests[start : start + 25]}
            for attempt in range(_TX_ATTEMPTS):
                left = self.client.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
                if not left:
                    break
                pending = left
                _backoff(attempt)
            else:
                raise TransientError("DynamoDB left a batch write unprocessed; try again")

    def _with_condition(self, kwargs: dict[str, Any], when: Condition | None, old_on_failure: bool) -> None:
        if when is None:
            return
        kwargs["ConditionExpression"] = when.text
        if when.names:
            kwargs["ExpressionAttributeNames"] = when.names
        if when.values:
            kwargs["ExpressionAttributeValues"] = self.wire(when.values)
        if old_on_failure:
            kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"


@dataclass
class Tx:
    """One TransactWriteItems, its operations in the order written."""

    client: Any
    operations: list[dict[str, Any]] = field(default_factory=list)

    def put(self, table: Table, item: Mapping[str, Any], when: Condition | None = None) -> Tx:
        op: dict[str, Any] = {"TableName": table.name, "Item": table.wire(item)}
        self._condition(table, op, when)
        self.operations.append({"Put": op})
        return self

    def update(self, table: Table, key: Mapping[str, Any], update: Update, when: Condition | None = None) -> Tx:
        op: dict[str, Any] = {"TableName": table.name, "Key": table.wire(key), "UpdateExpression": update.expression()}
        names, values = dict(update.names), dict(update.values)
        if when is not None:
            op["ConditionExpression"] = when.text
            names.update(when.names)
            values.update(when.values)
        if names:
            op["ExpressionAttributeNames"] = names
        if values:
            op["ExpressionAttributeValues"] = table.wire(values)
        self.operations.append({"Update": op})
        return self

    def delete(self, table: Table, key: Mapping[str, Any], when: Condition | None = None) -> Tx:
        op: dict[str, Any] = {"TableName": table.name, "Key": table.wire(key)}
        self._condition(table, op, when)
        self.operations.append({"Delete": op})
        return self

    def check(self, table: Table, key: Mapping[str, Any], when: Condition) -> Tx:
        op: dict[str, Any] = {"TableName": table.name, "Key": table.wire(key)}
        self._condition(table, op, when)
        self.operations.append({"ConditionCheck": op})
        return self

    @staticmethod
    def _condition(table: Table, op: dict[str, Any], when: Condition | None) -> None:
        if when is None:
            return
        op["ConditionExpression"] = when.text
        if when.names:
            op["ExpressionAttributeNames"] = when.names
        if when.values:
            op["ExpressionAttributeValues"] = table.wire(when.values)

    def commit(self) -> None:
        """Run it; a conflict with another transaction is retried with backoff, a failed
        condition raises TxCancelled (reasons in the order the operations were written)."""
        for attempt in range(_TX_ATTEMPTS):
            try:
                self.client.transact_write_items(TransactItems=self.operations)
                return
            except Exception as exc:
                error = getattr(exc, "response", {}).get("Error", {})
                reasons = getattr(exc, "response", {}).get("CancellationReasons") or []
                codes = [str((r or {}).get("Code") or "") for r in reasons]
                if error.get("Code") in THROTTLED or THROTTLED & set(codes):
                    raise TransientError("DynamoDB is throttling a transaction") from exc
                if error.get("Code") != "TransactionCanceledException":
                    raise
                if CONDITION_FAILED in codes:
                    raise TxCancelled(codes) from None
                if TRANSACTION_CONFLICT not in codes:
                    raise
                _backoff(attempt)
        raise TransientError("a session change met other writers too often; try again")


def _backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))  # noqa: S311 - jitter, not security


def dynamodb_client(region: str | None, endpoint: str | None) -> Any:
    """One client per region and endpoint (botocore clients are thread-safe)."""
    return _clients(region, endpoint)


_CLIENTS: dict[tuple[str | None, str | None], Any] = {}


def _clients(region: str | None, endpoint: str | None) -> Any:
    key = (region, endpoint)
    if key not in _CLIENTS:
        import boto3

        _CLIENTS[key] = boto3.client("dynamodb", region_name=region, endpoint_url=endpoint)
    return _CLIENTS[key]
