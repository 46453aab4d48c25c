"""`TurnControl` on DynamoDB: what a running turn reads and asks of its route item.

The queue is a list plus a string set of its event ids (a redelivered message is not queued
twice). A paused turn's state can be large, so it is kept in the messages table under a negative
sort key (a marker row, invisible to transcript reads; compressed) and only the question rides on
the route.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from typing import Any

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_table import ConditionFailed, Update, condition
from hermes_gateway.adapters.session_tables import SessionTables, marker_seq
from hermes_gateway.domain.turns import ControlState, PendingApproval, QueuedInput, Steering
from hermes_gateway.errors import TransientError

_ATTEMPTS = 8


def _state_seq(turn_id: str) -> int:
    return marker_seq(f"paused|{turn_id}")


class DynamoTurnControl:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables

    def _item(self, session_key: str) -> dict[str, Any]:
        return self.t.route(session_key) or {}

    def _update(self, session_key: str, update: Update, template: str, **values: Any) -> bool:
        try:
            self.t.routes.update({"session_key": session_key}, update, condition(update, template, **values))
        except ConditionFailed:
            return False
        return True

    def state(self, session_key: str, *, consistent: bool = True) -> ControlState:
        return ri.control(self.t.route(session_key, consistent=consistent) or {})

    def take_steering(self, session_key: str, token: str, turn_id: str, now: float) -> Steering:
        for _ in range(_ATTEMPTS):
            item = self._item(session_key)
            if item.get("lease_token") != token:
                return Steering()
            if item.get("stop_turn_id") == turn_id:
                return Steering(stopped=True)
            queue = [QueuedInput.from_dict(q) for q in item.get("turn_queue") or ()]
            steer = [q for q in queue if q.mode == "steer"]
            if not steer:
                return Steering()
            rest = [q for q in queue if q.mode != "steer"]
            base = int(item.get("next_seq") or 0)
            seqs = tuple(range(base + 1, base + 1 + len(steer)))
            reply_seq = base + len(steer) + 1
            update = Update().set_many(
                {
                    "turn_queue": [q.to_dict() for q in rest],
                    "next_seq": reply_seq,
                    "lease_reply_seq": reply_seq,
                    "updated_at": now,
                    "lease_shard": ri.WATCH_SHARD if rest or item.get("approval") else None,
                }
            )
            update.increment("revision").increment("n_msgs", len(steer))
            update.delete("turn_queue_ids", {q.event_id for q in steer})
            if self._update(
                session_key,
                update,
                "{lease_token} = {:tok} AND size({turn_queue}) = {:n} "
                "AND (attribute_not_exists({stop_turn_id}) OR {stop_turn_id} <> {:turn})",
                tok=token,
                n=len(queue),
                turn=turn_id,
            ):
                return Steering(tuple(steer), seqs, reply_seq)
        raise TransientError("the turn queue kept changing while steering input was taken")

    def pause(self, session_key: str, token: str, approval: PendingApproval, state: Mapping[str, Any]) -> bool:
        packed = base64.b64encode(zlib.compress(json.dumps(state).encode(), 6)).decode()
        self.t.messages.put(
            {
                "session_id": approval.session_id,
                "seq": _state_seq(approval.turn_id),
                "role": "turn_state",
                "turn_id": approval.turn_id,
                "content": packed,
                "active": False,
            }
        )
        update = Update().set_many(
            {"approval": approval.to_dict(), "lease_expires_at": approval.expires_at, "lease_shard": ri.WATCH_SHARD}
        )
        return self._update(session_key, update.increment("revision"), "{lease_token} = {:tok}", tok=token)

    def answer(self, session_key: str, turn_id: str, decision: str, scope: str = "once") -> PendingApproval | None:
        update = Update().set_many({"approval.decision": decision, "approval.scope": scope})
        self._update(
            session_key,
            update,
            "{approval.turn_id} = {:turn} AND attribute_not_exists({approval.decision})",
            turn=turn_id,
        )
        raw = self._item(session_key).get("approval")
        if not raw or raw.get("turn_id") != turn_id or not raw.get("decision"):
            return None
        return PendingApproval.from_dict(raw)

    def paused_state(self, session_id: str, turn_id: str) -> dict[str, Any] | None:
        item = self.t.messages.get({"session_id": session_id, "seq": _state_seq(turn_id)})
        if not item:
            return None
        content = str(item.get("content") or "")
        if content.startswith("{"):  # saved before states were compressed
            loaded: dict[str, Any] = json.loads(content)
            return loaded
        unpacked: dict[str, Any] = json.loads(zlib.decompress(base64.b64decode(content)))
        return unpacked

    def clear_approval(self, session_key: str, turn_id: str) -> None:
        item = self._item(session_key)
        update = Update().remove("approval")
        if not item.get("turn_queue"):
            update.remove("lease_shard")  # nothing else waits on the lease
        self._update(session_key, update, "{approval.turn_id} = {:turn}", turn=turn_id)

    def set_yolo(self, session_key: str, on: bool) -> None:
        self._update(session_key, Update().set("yolo", on), "attribute_exists({session_key})")

    def set_voice(self, session_key: str, mode: str) -> None:
        # Not fenced: one attribute no other write touches, so no revision is bumped and no
        # running turn's fenced write is disturbed; the next message's turn reads it.
        self._update(session_key, Update().set("voice", mode), "attribute_exists({session_key})")

    def approve_tool(self, session_key: str, tool: str, scope: str, session_id: str) -> None:
        if scope == "always":
            self._update(session_key, Update().add("approved_tools", {tool}), "attribute_exists({session_key})")
            return
        current = self.state(session_key).approved_session
        tools = sorted(set(current[1]) | {tool}) if current[0] == session_id else [tool]
        self._update(
            session_key,
            Update().set("approved_session", {"session_id": session_id, "tools": tools}),
            "attribute_exists({session_key})",
        )
