"""The inbox on DynamoDB (resources.INBOX): every inbound message, written once by the ingress.

An item is `group` (the hashed session key: the stream keeps one session's messages in order),
`event_id`, the message as the ingress normalized it (`envelope`, JSON), `received_at` and
`expires_at` (the TTL: the platform's retry window). The ingress's conditional put is the durable
write and the de-duplication at once; the table's stream hands new items to the router. The router
counts a message's failed attempts on its item (`attempts`, `error`); an operator's redrive puts a
message back (a new item, so the stream sees it again).

Plain boto3, no pynamodb: the ingress is the one function on a platform's clock, and imports the least.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import cached_property
from typing import Any

from hermes_gateway.adapters.aws import group_id_for, is_throttle
from hermes_gateway.errors import TransientError

CONDITION_FAILED = "ConditionalCheckFailedException"


def item_key(envelope: dict[str, Any]) -> tuple[str, str]:
    """(group, event_id) of a message's item."""
    return group_id_for(str(envelope["session_key"])), str(envelope["event_id"])


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _transient(exc: Exception) -> bool:
    """Throttled, a 5xx, or no answer at all (a connection or read timeout): the caller retries."""
    from botocore.exceptions import ConnectionError as NoConnection
    from botocore.exceptions import HTTPClientError

    return is_throttle(exc) or isinstance(exc, NoConnection | HTTPClientError)


class DynamoInbox:
    def __init__(
        self,
        table_name: str,
        region: str | None = None,
        *,
        retention_seconds: Callable[[str], int],
        now: Callable[[], float] = time.time,
    ) -> None:
        """`retention_seconds(platform)`: how long an item keeps de-duplicating that platform's retries."""
        self.table_name = table_name
        self._region = region
        self._retention = retention_seconds
        self._now = now

    @cached_property
    def _client(self) -> Any:
        import boto3

        return boto3.client("dynamodb", region_name=self._region)

    def _item(self, envelope: dict[str, Any]) -> dict[str, Any]:
        group, event_id = item_key(envelope)
        now = self._now()
        platform = str((envelope.get("source") or {}).get("platform") or "")
        return {
            "group": {"S": group},
            "event_id": {"S": event_id},
            "envelope": {"S": json.dumps(envelope, separators=(",", ":"))},
            "received_at": {"N": repr(round(float(envelope.get("received_at") or now), 3))},
            "expires_at": {"N": str(int(now + self._retention(platform)))},
        }

    def put_once(self, envelope: dict[str, Any]) -> bool:
        """Write the message unless its event is in the inbox already: True when written, False for
        a duplicate (a platform's retry). TransientError when DynamoDB is throttling or unreachable."""
        written = self._conditional(
            self._client.put_item,
            TableName=self.table_name,
            Item=self._item(envelope),
            ConditionExpression="attribute_not_exists(event_id)",
        )
        return written is not None

    def failed(self, key: tuple[str, str], reason: str) -> int | None:
        """Count a failed attempt on the message's item (`Attempts` of services.consumer): the count
        so far, or None when the item is gone (expired)."""
        response = self._conditional(
            self._client.update_item,
            TableName=self.table_name,
            Key={"group": {"S": key[0]}, "event_id": {"S": key[1]}},
            UpdateExpression="ADD attempts :one SET #error = :error",
            ConditionExpression="attribute_exists(event_id)",
            ExpressionAttributeNames={"#error": "error"},
            ExpressionAttributeValues={":one": {"N": "1"}, ":error": {"S": reason[:300]}},
            ReturnValues="UPDATED_NEW",
        )
        return None if response is None else int(response["Attributes"]["attempts"]["N"])

    @staticmethod
    def _conditional(call: Any, **request: Any) -> dict[str, Any] | None:
        """A conditional write: its response, or None when the condition did not hold."""
        try:
            response: dict[str, Any] = call(**request)
        except Exception as exc:
            if _code(exc) == CONDITION_FAILED:
                return None
            if _transient(exc):
                raise TransientError("the inbox is throttling or unreachable") from exc
            raise
        return response

    def get(self, key: tuple[str, str]) -> dict[str, Any] | None:
        """The message of an item (an operator's redrive reads dead-lettered batches back)."""
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"group": {"S": key[0]}, "event_id": {"S": key[1]}},
            ConsistentRead=True,
        )
        item = response.get("Item")
        return json.loads(item["envelope"]["S"]) if item else None

    @cached_property
    def _streams(self) -> Any:
        import boto3

        return boto3.client("dynamodbstreams", region_name=self._region)

    def batch_keys(self, stream_arn: str, shard_id: str, first: str, last: str) -> list[tuple[str, str]] | None:
        """The items of a stream batch (sequence numbers `first` to `last`) that were new: read
        back from the stream, for an operator's redrive. None once the stream no longer holds them."""
        try:
            iterator = self._streams.get_shard_iterator(
                StreamArn=stream_arn, ShardId=shard_id, ShardIteratorType="AT_SEQUENCE_NUMBER", SequenceNumber=first
            ).get("ShardIterator")
            keys: list[tuple[str, str]] = []
            while iterator:
                page = self._streams.get_records(ShardIterator=iterator, Limit=1000)
                records = page.get("Records", [])
                for record in records:
                    if int(record["dynamodb"]["SequenceNumber"]) > int(last):
                        return keys
                    if record.get("eventName") == "INSERT":
                        found = record["dynamodb"]["Keys"]
                        keys.append((found["group"]["S"], found["event_id"]["S"]))
                iterator = page.get("NextShardIterator") if records else None
        except Exception as exc:
            if _code(exc) in ("TrimmedDataAccessException", "ResourceNotFoundException", "ExpiredIteratorException"):
                return None
            raise
        return keys

    def received_between(self, start: float, end: float) -> Iterator[dict[str, Any]]:
        """Every message received in [start, end]: a scan, for an operator's redrive of a batch the
        stream no longer holds (it keeps 24 hours), never on a message's path."""
        pages = self._client.get_paginator("scan").paginate(
            TableName=self.table_name,
            FilterExpression="received_at BETWEEN :start AND :end",
            ExpressionAttributeValues={":start": {"N": repr(start)}, ":end": {"N": repr(end)}},
        )
        for page in pages:
            for item in page.get("Items", []):
                yield json.loads(item["envelope"]["S"])

    def put_back(self, envelope: dict[str, Any]) -> bool:
        """Route a message again (an operator's redrive): its item is written anew, so the stream
        hands it to the router as a new message; it starts with no failed attempts. False when the
        platform's retry put it back first (it is routed anyway)."""
        group, event_id = item_key(envelope)
        self._client.delete_item(TableName=self.table_name, Key={"group": {"S": group}, "event_id": {"S": event_id}})
        return self.put_once(envelope)
