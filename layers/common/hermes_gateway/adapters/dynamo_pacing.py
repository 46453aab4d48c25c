"""Send pacing on DynamoDB (services.delivery `Pacing`): one item per paced chat in the directory
table, `pace#<platform>#<profile>#<chat_id>` / `-`, holding the chat's next send time (`tat`, the
theoretical arrival time of the generic cell rate algorithm) and a TTL an hour on.

A send to a quiet chat is one conditional write (the slot is now). In a busy chat a second one
moves the next send time on by the interval, without reading it first, and says which slot it
took; a slot further off than the caller will wait is not taken.
"""

from __future__ import annotations

from typing import Any

from hermes_gateway.adapters.aws import is_throttle
from hermes_gateway.adapters.dynamo_directory import bind_directory
from hermes_gateway.adapters.dynamo_errors import call_condition_failed
from hermes_gateway.adapters.models import dynamodb_endpoint
from hermes_gateway.errors import TransientError
from hermes_gateway.resources import Bindings

PACE_SECONDS = 3600  # a chat quiet this long drops its item (TTL): its next send is free anyway
_NAMES = {"#t": "tat", "#e": "expires_at"}


def _number(value: float) -> dict[str, str]:
    return {"N": repr(round(value, 3))}


class DynamoPacing:
    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        model = bind_directory(bindings.table("directory"), region, dynamodb_endpoint())
        self.table = model.Meta.table_name
        self.client = model._get_connection().connection.client

    def reserve(self, place: str, now: float, interval: float, tolerance: float, ahead: float) -> tuple[float, bool]:
        """Take the next send slot of `place`: (its time, True), now when the chat is quiet; or
        (the time of the next free slot, False) when that is more than `ahead` seconds off."""
        key = {"pk": {"S": f"pace#{place}"}, "sk": {"S": "-"}}
        expires = {"N": str(int(now + PACE_SECONDS))}
        # A quiet chat: its next send time is in the past (or it has none). The slot is now.
        quiet, _ = self._update(
            key,
            "SET #t = :next, #e = :expires",
            "attribute_not_exists(#t) OR #t <= :now",
            {":next": _number(now + interval), ":now": _number(now), ":expires": expires},
        )
        if quiet:
            return now, True
        # A busy chat: the next slot, `tolerance` (the burst) before its next send time, unless
        # that is further off than `ahead`.
        latest = now + tolerance + ahead
        taken, item = self._update(
            key,
            "SET #t = #t + :interval, #e = :expires",
            "#t <= :latest",
            {":interval": _number(interval), ":latest": _number(latest), ":expires": expires},
        )
        if not taken:
            # (an endpoint that ignores ReturnValuesOnConditionCheckFailure: past `ahead`, at least)
            next_at = float(item["tat"]["N"]) if item and "tat" in item else latest + interval
            return next_at - tolerance, False
        next_at = float((item or {})["tat"]["N"])  # (UPDATED_NEW: the time it set)
        return max(now, next_at - interval - tolerance), True

    def _update(
        self, key: dict[str, Any], expression: str, condition: str, values: dict[str, Any]
    ) -> tuple[bool, dict[str, Any] | None]:
        """(True, the new values) when the update was made; (False, the item as it is) when its
        condition failed."""
        try:
            answer = self.client.update_item(
                TableName=self.table,
                Key=key,
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues=values,
                ReturnValues="UPDATED_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as exc:
            if call_condition_failed(exc):
                return False, getattr(exc, "response", {}).get("Item")
            if is_throttle(exc):
                raise TransientError("DynamoDB is throttling the send pacing") from exc
            raise
        return True, answer.get("Attributes")
