"""DynamoDB adapter for `TurnControl`: the queue, approvals and hand-off on the routing entry.

Everything lives on the route item the lease lives on, so "release the lease unless input is
queued" is one UpdateItem whose condition reads both (`finish`). The queue is a list plus a string
set of its event ids (a redelivered message is not queued twice). A paused turn's state can be
large, so it is kept in the messages table under a negative sort key (like the de-duplication
markers, invisible to transcript reads) and only the question rides on the route.

Written with the low-level client: list_append, size() and nested conditions read more plainly
as expressions than through the model classes, and the route model never learns these attributes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from functools import cached_property
from typing import Any

from hermes_gateway.adapters.dynamo_errors import CONDITION_FAILED_EXCEPTION, THROTTLED
from hermes_gateway.adapters.models import LEASE_ATTRS, dynamodb_endpoint, marker_seq
from hermes_gateway.domain.turns import (
    ControlState,
    Enqueued,
    Finished,
    NextTurn,
    PendingApproval,
    QueuedInput,
)
from hermes_gateway.errors import TransientError
from hermes_gateway.resources import Bindings

_FINISH_ATTEMPTS = 8


def _state_seq(turn_id: str) -> int:
    """A paused turn's state row: a marker row in the session's partition."""
    return marker_seq(f"paused|{turn_id}")


def _plain(value: Any) -> Any:
    """DynamoDB numbers come back as Decimal; the domain wants ints and floats."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return {_plain(v) for v in value}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _dynamo(value: Any) -> Any:
    """Floats become Decimal (boto3's serializer refuses floats)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, list):
        return [_dynamo(v) for v in value]
    if isinstance(value, dict):
        return {k: _dynamo(v) for k, v in value.items() if v is not None}
    return value


class DynamoTurnControl:
    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        self._bindings = bindings
        self._region = region

    @cached_property
    def _resource(self) -> Any:
        import boto3

        return boto3.resource("dynamodb", region_name=self._region, endpoint_url=dynamodb_endpoint())

    @cached_property
    def _routes(self) -> Any:
        return self._resource.Table(self._bindings.table("routes"))

    @cached_property
    def _messages(self) -> Any:
        return self._resource.Table(self._bindings.table("messages"))

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, fn: Callable[..., Any], **kwargs: Any) -> Any | None:
        """One request; None when its condition failed. Throttling is a TransientError."""
        try:
            return fn(**kwargs)
        except Exception as exc:
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code == CONDITION_FAILED_EXCEPTION:
                return None
            if code in THROTTLED:
                raise TransientError(f"DynamoDB is throttling ({code})") from exc
            raise

    def _item(self, session_key: str) -> dict[str, Any]:
        found = self._call(self._routes.get_item, Key={"session_key": session_key}, ConsistentRead=True)
        item: dict[str, Any] = _plain((found or {}).get("Item") or {})
        return item

    def _update(
        self, session_key: str, update: str, condition: str, names: dict[str, str], values: dict[str, Any]
    ) -> bool:
        kwargs: dict[str, Any] = {
            "Key": {"session_key": session_key},
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
        }
        if values:
            kwargs["ExpressionAttributeValues"] = _dynamo(values)
        return self._call(self._routes.update_item, **kwargs) is not None

    # -- reading ----------------------------------------------------------------------------

    def state(self, session_key: str) -> ControlState:
        return self._control_state(self._item(session_key))

    @staticmethod
    def _control_state(item: dict[str, Any]) -> ControlState:
        session = item.get("approved_session") or {}
        handoff = item.get("handoff") or {}
        return ControlState(
            lease_token=item.get("lease_token"),
            lease_turn_id=item.get("lease_turn_id"),
            queue=tuple(QueuedInput.from_dict(q) for q in item.get("turn_queue") or ()),
            stop_turn_id=item.get("stop_turn_id"),
            approval=PendingApproval.from_dict(item["approval"]) if item.get("approval") else None,
            yolo=bool(item.get("yolo")),
            approved_always=frozenset(item.get("approved_tools") or ()),
            approved_session=(session.get("session_id"), frozenset(session.get("tools") or ())),
            handoff_from=handoff.get("from_token"),
            handoff_turn=json.loads(handoff["turn"]) if handoff.get("turn") else None,
        )

    # -- the queue --------------------------------------------------------------------------

    def enqueue(self, session_key: str, item: QueuedInput, *, max_items: int) -> Enqueued:
        queued = self._update(
            session_key,
            "SET #q = list_append(if_not_exists(#q, :empty), :item) ADD #ids :id",
            "attribute_exists(#tok) AND NOT contains(#ids, :eid) AND (attribute_not_exists(#q) OR size(#q) < :max)",
            {"#q": "turn_queue", "#ids": "turn_queue_ids", "#tok": "lease_token"},
            {":empty": [], ":item": [item.to_dict()], ":id": {item.event_id}, ":eid": item.event_id, ":max": max_items},
        )
        current = self._item(session_key)
        holder = current.get("lease_turn_id")
        if queued:
            return Enqueued("queued", holder)
        if not current.get("lease_token"):
            return Enqueued("not_busy")
        if item.event_id in (current.get("turn_queue_ids") or set()):
            return Enqueued("duplicate", holder)
        return Enqueued("full", holder)

    def mark_busy_acknowledged(self, session_key: str, turn_id: str) -> bool:
        return self._update(
            session_key,
            "SET #ack = :turn",
            "attribute_exists(session_key) AND (attribute_not_exists(#ack) OR #ack <> :turn)",
            {"#ack": "busy_acked"},
            {":turn": turn_id},
        )

    def extend(self, session_key: str, token: str, until: float) -> ControlState | None:
        written = self._call(
            self._routes.update_item,
            Key={"session_key": session_key},
            UpdateExpression="SET #exp = :until",
            ConditionExpression="#tok = :tok",
            ExpressionAttributeNames={"#exp": "lease_expires_at", "#tok": "lease_token"},
            ExpressionAttributeValues=_dynamo({":until": until, ":tok": token}),
            ReturnValues="ALL_NEW",
        )
        return None if written is None else self._control_state(_plain(written.get("Attributes") or {}))

    def take_steering(self, session_key: str, token: str) -> list[QueuedInput]:
        for _ in range(_FINISH_ATTEMPTS):
            item = self._item(session_key)
            if item.get("lease_token") != token:
                return []
            queue = [QueuedInput.from_dict(q) for q in item.get("turn_queue") or ()]
            steer = [q for q in queue if q.mode == "steer"]
            if not steer:
                return []
            rest = [q.to_dict() for q in queue if q.mode != "steer"]
            if self._update(
                session_key,
                "SET #q = :rest",
                "#tok = :tok AND size(#q) = :n",
                {"#q": "turn_queue", "#tok": "lease_token"},
                {":rest": rest, ":tok": token, ":n": len(queue)},
            ):
                return steer
        raise TransientError("the turn queue kept changing while steering input was taken")

    def finish(
        self, session_key: str, token: str, plan: Callable[[list[QueuedInput]], NextTurn], ttl_seconds: int, now: float
    ) -> Finished:
        for _ in range(_FINISH_ATTEMPTS):
            item = self._item(session_key)
            if item.get("lease_token") != token:
                handoff = item.get("handoff") or {}
                if handoff.get("from_token") == token and handoff.get("turn"):
                    return Finished("handed_off", json.loads(handoff["turn"]))
                return Finished("lost")
            queue = [QueuedInput.from_dict(q) for q in item.get("turn_queue") or ()]
            if not queue:
                released = self._update(
                    session_key,
                    "REMOVE " + ", ".join(LEASE_ATTRS) + ", stop_turn_id, busy_acked",
                    "#tok = :tok AND (attribute_not_exists(#q) OR size(#q) = :zero)",
                    {"#tok": "lease_token", "#q": "turn_queue"},
                    {":tok": token, ":zero": 0},
                )
                if released:
                    return Finished("released")
                continue  # a message was queued meanwhile (or the lease moved): look again
            nxt = plan(queue)
            taken = queue[: nxt.taken]
            rest = [q.to_dict() for q in queue[nxt.taken :]]
            handed = self._update(
                session_key,
                "SET #tok = :new, lease_turn_id = :turn, lease_started_at = :now, lease_expires_at = :exp, "
                "#q = :rest, handoff = :handoff, execution_generation = execution_generation + :one "
                "REMOVE stop_turn_id, busy_acked DELETE #ids :taken",
                "#tok = :tok AND size(#q) = :n",
                {"#tok": "lease_token", "#q": "turn_queue", "#ids": "turn_queue_ids"},
                {
                    ":new": nxt.token,
                    ":turn": nxt.turn_id,
                    ":now": now,
                    ":exp": now + ttl_seconds,
                    ":rest": rest,
                    ":handoff": {"from_token": token, "turn": json.dumps(nxt.turn)},
                    ":one": 1,
                    ":taken": {q.event_id for q in taken},
                    ":tok": token,
                    ":n": len(queue),
                },
            )
            if handed:
                return Finished("handed_off", nxt.turn)
        raise TransientError("the turn queue kept changing while the lease was released")

    # -- approvals --------------------------------------------------------------------------

    def pause(self, session_key: str, token: str, approval: PendingApproval, state: dict[str, Any]) -> bool:
        self._call(
            self._messages.put_item,
            Item={
                "session_id": approval.session_id,
                "seq": _state_seq(approval.turn_id),
                "role": "turn_state",
                "turn_id": approval.turn_id,
                "content": json.dumps(state),
                "active": False,
            },
        )
        return self._update(
            session_key,
            "SET approval = :a, lease_expires_at = :exp",
            "#tok = :tok",
            {"#tok": "lease_token"},
            {":a": approval.to_dict(), ":exp": approval.expires_at, ":tok": token},
        )

    def answer(self, session_key: str, turn_id: str, decision: str, scope: str = "once") -> PendingApproval | None:
        self._update(
            session_key,
            "SET approval.decision = :d, approval.#scope = :s",
            "approval.turn_id = :turn AND attribute_not_exists(approval.decision)",
            {"#scope": "scope"},
            {":d": decision, ":s": scope, ":turn": turn_id},
        )
        raw = self._item(session_key).get("approval")
        if not raw or raw.get("turn_id") != turn_id or not raw.get("decision"):
            return None
        return PendingApproval.from_dict(raw)

    def paused_state(self, session_id: str, turn_id: str) -> dict[str, Any] | None:
        found = self._call(
            self._messages.get_item, Key={"session_id": session_id, "seq": _state_seq(turn_id)}, ConsistentRead=True
        )
        item = (found or {}).get("Item")
        return json.loads(item["content"]) if item else None

    def clear_approval(self, session_key: str, turn_id: str) -> None:
        self._update(session_key, "REMOVE approval", "approval.turn_id = :turn", {}, {":turn": turn_id})

    def set_yolo(self, session_key: str, on: bool) -> None:
        self._update(session_key, "SET yolo = :on", "attribute_exists(session_key)", {}, {":on": on})

    def approve_tool(self, session_key: str, tool: str, scope: str, session_id: str) -> None:
        if scope == "always":
            self._update(session_key, "ADD approved_tools :t", "attribute_exists(session_key)", {}, {":t": {tool}})
            return
        current = self.state(session_key).approved_session
        tools = sorted(set(current[1]) | {tool}) if current[0] == session_id else [tool]
        self._update(
            session_key,
            "SET approved_session = :s",
            "attribute_exists(session_key)",
            {},
            {":s": {"session_id": session_id, "tools": tools}},
        )
