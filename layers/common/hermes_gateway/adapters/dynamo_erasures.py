"""`ErasureRequests` (domain/privacy.py) on the access table: the chats' `/forget` requests.

All of them in one partition (`erasure`, sorted by `<platform>:<user id>`), so the every-minute
tick finds the confirmed ones with one eventually consistent Query (half a read unit when there
are none: 43,200 a month, about 0.003 USD). An ask carries `expires_at` (the table's TTL) and goes by itself when nobody
confirms it; a confirmed request has none and stays until its erasure is finished.
"""

from __future__ import annotations

import json
from functools import cached_property
from typing import Any

from hermes_gateway.adapters.dynamo_table import ConditionFailed, Table, Update, condition, dynamodb_client
from hermes_gateway.adapters.models import dynamodb_endpoint
from hermes_gateway.domain.privacy import ASKED, CONFIRMED, ErasureCounts, ErasureRequest, Person
from hermes_gateway.resources import Bindings

Item = dict[str, Any]
PARTITION = "erasure"


def _key(person: Person) -> Item:
    return {"pk": PARTITION, "sk": person.label}


def _item(request: ErasureRequest) -> Item:
    item: Item = {
        **_key(request.person),
        "other_ids": list(request.person.other_ids),
        "state": request.state,
        "asked_at": request.asked_at,
        "confirm_by": request.confirm_by,
        "target": json.dumps(request.target) if request.target else None,
        "dm_chat": request.dm_chat,
        "confirmed_at": request.confirmed_at,
        "owned_done": request.owned_done,
        "cursor": request.cursor,
        "counts": json.dumps(request.counts.to_dict()),
    }
    if request.state == ASKED:
        item["expires_at"] = int(request.confirm_by) + 1  # TTL: an ask nobody confirmed goes
    return item


def _request(item: Item) -> ErasureRequest:
    platform, _, user_id = str(item["sk"]).partition(":")
    return ErasureRequest(
        person=Person(platform, user_id, tuple(item.get("other_ids") or ())),
        state=str(item["state"]),
        asked_at=float(item["asked_at"]),
        confirm_by=float(item["confirm_by"]),
        target=json.loads(item["target"]) if item.get("target") else None,
        dm_chat=item.get("dm_chat"),
        confirmed_at=float(item["confirmed_at"]) if item.get("confirmed_at") is not None else None,
        owned_done=bool(item.get("owned_done")),
        cursor=item.get("cursor"),
        counts=ErasureCounts.from_dict(json.loads(item["counts"]) if item.get("counts") else None),
    )


class DynamoErasureRequests:
    def __init__(self, bindings: Bindings, region: str | None = None, *, client: Any = None) -> None:
        self._bindings = bindings
        self._region = region
        self._client = client  # the unit tests' in-memory DynamoDB (tests/fakes/dynamo.py)

    @cached_property
    def table(self) -> Table:
        client = self._client or dynamodb_client(self._region, dynamodb_endpoint())
        return Table(client, self._bindings.table("access"))

    def ask(self, request: ErasureRequest) -> ErasureRequest:
        try:
            self.table.put(
                _item(request), condition(None, "attribute_not_exists({sk}) OR {state} = {:asked}", asked=ASKED)
            )
        except ConditionFailed:
            existing = self.get(request.person)
            if existing is not None:
                return existing
            self.table.put(_item(request))  # its erasure finished meanwhile: ask afresh
        return request

    def confirm(self, person: Person, now: float) -> ErasureRequest | None:
        update = Update().set_many({"state": CONFIRMED, "confirmed_at": now}).remove("expires_at")
        try:
            item = self.table.update(
                _key(person),
                update,
                condition(update, "{state} = {:asked} AND {confirm_by} > {:now}", asked=ASKED, now=now),
                returns="ALL_NEW",
            )
        except ConditionFailed:
            return None
        return _request(item) if item else None

    def cancel(self, person: Person) -> bool:
        try:
            self.table.delete(_key(person), condition(None, "{state} = {:asked}", asked=ASKED))
        except ConditionFailed:
            return False
        return True

    def get(self, person: Person) -> ErasureRequest | None:
        item = self.table.get(_key(person))
        return _request(item) if item else None

    def confirmed(self, limit: int) -> list[ErasureRequest]:
        found = [
            _request(item)
            for item in self.table.query(condition(None, "{pk} = {:p}", p=PARTITION))
            if item.get("state") == CONFIRMED
        ]
        return sorted(found, key=lambda r: r.confirmed_at or 0)[:limit]

    def save(self, request: ErasureRequest) -> None:
        update = Update().set_many(
            {
                "owned_done": request.owned_done,
                "cursor": request.cursor,
                "counts": json.dumps(request.counts.to_dict()),
                "dm_chat": request.dm_chat,
            }
        )
        self.table.update(_key(request.person), update, condition(update, "{state} = {:c}", c=CONFIRMED))

    def finish(self, request: ErasureRequest) -> None:
        self.table.delete(_key(request.person))
