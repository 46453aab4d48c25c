"""In-memory `TurnControl` over a `FakeSessionStore`'s routes and leases, with the DynamoDB
adapter's rules: enqueue only while a lease is held, one busy notice per turn, release-or-hand-off
in one step (and the same hand-off again for a repeat by the same token)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hermes_gateway.domain.turns import (
    ControlState,
    Enqueued,
    Finished,
    NextTurn,
    PendingApproval,
    QueuedInput,
)
from tests.fakes.sessions import FakeSessionStore


class FakeTurnControl:
    def __init__(self, store: FakeSessionStore) -> None:
        self.store = store
        self.extra: dict[str, dict[str, Any]] = {}  # session_key -> the entry's turn attributes
        self.paused: dict[tuple[str, str], dict[str, Any]] = {}

    def _x(self, key: str) -> dict[str, Any]:
        return self.extra.setdefault(key, {"queue": [], "ids": set()})

    def _lease(self, key: str) -> dict[str, Any] | None:
        return self.store.leases.get(key)

    def state(self, session_key: str) -> ControlState:
        with self.store._lock:
            lease = self._lease(session_key)
            x = self._x(session_key)
            route = self.store.routes.get(session_key)
            approval = x.get("approval")
            return ControlState(
                lease_token=lease["token"] if lease else None,
                lease_turn_id=lease["turn_id"] if lease else None,
                queue=tuple(x["queue"]),
                stop_turn_id=getattr(route, "stop_turn_id", None) if route else None,
                approval=approval,
                yolo=bool(x.get("yolo")),
                approved_always=frozenset(x.get("always", ())),
                approved_session=(x.get("session_id"), frozenset(x.get("session_tools", ()))),
                handoff_from=x.get("handoff_from"),
                handoff_turn=copy.deepcopy(x.get("handoff_turn")),
            )

    def enqueue(self, session_key: str, item: QueuedInput, *, max_items: int) -> Enqueued:
        with self.store._lock:
            lease = self._lease(session_key)
            x = self._x(session_key)
            if lease is None:
                return Enqueued("not_busy")
            if item.event_id in x["ids"]:
                return Enqueued("duplicate", lease["turn_id"])
            if len(x["queue"]) >= max_items:
                return Enqueued("full", lease["turn_id"])
            x["queue"].append(item)
            x["ids"].add(item.event_id)
            return Enqueued("queued", lease["turn_id"])

    def mark_busy_acknowledged(self, session_key: str, turn_id: str) -> bool:
        with self.store._lock:
            x = self._x(session_key)
            if x.get("acked") == turn_id:
                return False
            x["acked"] = turn_id
            return True

    def extend(self, session_key: str, token: str, until: float) -> ControlState | None:
        with self.store._lock:
            lease = self._lease(session_key)
            if lease is None or lease["token"] != token:
                return None
            lease["expires_at"] = until
        return self.state(session_key)

    def take_steering(self, session_key: str, token: str) -> list[QueuedInput]:
        with self.store._lock:
            lease = self._lease(session_key)
            if lease is None or lease["token"] != token:
                return []
            x = self._x(session_key)
            taken = [q for q in x["queue"] if q.mode == "steer"]
            x["queue"] = [q for q in x["queue"] if q.mode != "steer"]
            return taken

    def finish(
        self, session_key: str, token: str, plan: Callable[[list[QueuedInput]], NextTurn], ttl_seconds: int, now: float
    ) -> Finished:
        with self.store._lock:
            lease = self._lease(session_key)
            x = self._x(session_key)
            if lease is None or lease["token"] != token:
                if x.get("handoff_from") == token:
                    return Finished("handed_off", copy.deepcopy(x["handoff_turn"]))
                return Finished("lost")
            self._clear_stop(session_key)
            if not x["queue"]:
                del self.store.leases[session_key]
                return Finished("released")
            nxt = plan(list(x["queue"]))
            x["queue"] = x["queue"][nxt.taken :]
            self.store.leases[session_key] = {
                "token": nxt.token,
                "turn_id": nxt.turn_id,
                "expires_at": now + ttl_seconds,
            }
            x["handoff_from"], x["handoff_turn"] = token, copy.deepcopy(nxt.turn)
            x.pop("acked", None)
            return Finished("handed_off", copy.deepcopy(nxt.turn))

    def _clear_stop(self, key: str) -> None:
        route = self.store.routes.get(key)
        if route is not None and getattr(route, "stop_turn_id", None):
            self.store.routes[key] = replace(route, stop_turn_id=None)

    def pause(self, session_key: str, token: str, approval: PendingApproval, state: dict[str, Any]) -> bool:
        with self.store._lock:
            lease = self._lease(session_key)
            if lease is None or lease["token"] != token:
                return False
            self.paused[(approval.session_id, approval.turn_id)] = copy.deepcopy(state)
            self._x(session_key)["approval"] = approval
            lease["expires_at"] = approval.expires_at
            return True

    def answer(self, session_key: str, turn_id: str, decision: str, scope: str = "once") -> PendingApproval | None:
        with self.store._lock:
            x = self._x(session_key)
            current: PendingApproval | None = x.get("approval")
            if current is None or current.turn_id != turn_id:
                return None
            if current.decision is None:
                current = replace(current, decision=decision, scope=scope)
                x["approval"] = current
            return current

    def paused_state(self, session_id: str, turn_id: str) -> dict[str, Any] | None:
        found = self.paused.get((session_id, turn_id))
        return copy.deepcopy(found) if found is not None else None

    def clear_approval(self, session_key: str, turn_id: str) -> None:
        with self.store._lock:
            x = self._x(session_key)
            current = x.get("approval")
            if current is not None and current.turn_id == turn_id:
                del x["approval"]

    def set_yolo(self, session_key: str, on: bool) -> None:
        self._x(session_key)["yolo"] = on

    def approve_tool(self, session_key: str, tool: str, scope: str, session_id: str) -> None:
        x = self._x(session_key)
        if scope == "always":
            x.setdefault("always", set()).add(tool)
        elif scope == "session":
            if x.get("session_id") != session_id:
                x["session_id"], x["session_tools"] = session_id, set()
            x["session_tools"].add(tool)
