"""`Leases` on DynamoDB: the turn lease on the route item, and what waits on it.

A turn's whole life on the route is two writes: `begin` (lease, activity clock, transcript seqs,
the message counted, the event remembered: one UpdateItem conditioned on the revision read) and
`finish` (the turn's totals added and the lease released, or handed to the queued input: one
UpdateItem whose condition reads the lease and the queue, answered with the item on failure so
the hand-off needs no extra read). No heartbeat: a lease lasts the turn's time limit plus a margin.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_table import ConditionFailed, Update, condition
from hermes_gateway.adapters.session_tables import SESSION_TALLY, SessionTables, hidden_of
from hermes_gateway.domain.limits import Counted, periods
from hermes_gateway.domain.sessions import SessionEntry, SessionTally
from hermes_gateway.domain.turns import (
    Begun,
    Enqueued,
    Finished,
    NextTurn,
    QueuedInput,
    StopRequest,
    WaitingLease,
)
from hermes_gateway.errors import TransientError

_FINISH_ATTEMPTS = 8
Item = dict[str, Any]


def add_tally(update: Update, tally: SessionTally) -> Update:
    for attr, field_name in ri.TALLY_ATTRS.items():
        value = getattr(tally, field_name)
        if value:
            update.increment(attr, value)
    if tally.last_prompt_tokens is not None:
        update.set(ri.TALLY_PROMPT, tally.last_prompt_tokens)
    if tally.prompt_ratio is not None:
        update.set(ri.TALLY_RATIO, round(tally.prompt_ratio, 3))
    return update


def count_message(update: Update, entry: SessionEntry, counted: Counted | None) -> Update:
    """The message's user's counts, carried by the write that takes the message (domain/limits.py)."""
    if counted is not None:
        changes, added, gone = ri.counted(counted, entry.ledgers)
        update.set_many(changes)
        for attr, members in added.items():
            update.add(attr, members)  # a set: links another session makes at once stay too
        if gone:
            update.remove(*gone)
    return update


def released(update: Update) -> Update:
    """The lease and everything of the running turn removed."""
    return update.remove(*ri.LEASE_ATTRS, "stop_turn_id", "busy_acked")


class DynamoLeases:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables

    # -- a turn begins -----------------------------------------------------------------------

    def begin(
        self,
        entry: SessionEntry,
        turn_id: str,
        token: str,
        event_id: str,
        now: float,
        *,
        counted: Counted | None = None,
    ) -> Begun | None:
        base, hidden = entry.next_seq, entry.hidden
        if base is None:  # a route from before the seq counter: its transcript says where it is
            base = self.t.last_seq(entry.session_id)
            hidden = hidden_of(self.t.session(entry.session_id), None)
        user_seq, reply_seq = base + 1, base + 2
        took_over = entry.lease_token is not None and entry.lease_token != token
        update = Update().set_many(
            {
                "lease_token": token,
                "lease_turn_id": turn_id,
                "lease_started_at": now,
                "lease_expires_at": now + self.t.rules.lease_ttl_seconds,
                "lease_reply_seq": reply_seq,
                "next_seq": reply_seq,
                "recent": ri.remember(entry.recent_events, event_id),
                **ri.activity(entry.session_key, entry.platform, entry.chat_type, now, self.t.rules),
                **ri.heard(entry.platform, now),
            }
        )
        if hidden != entry.hidden:
            update.set("hidden", json.dumps([list(r) for r in hidden]))
        if took_over:  # the lease outlived a turn that was cut short (BEHAVIOUR §5)
            update.set_many(ri.failure(self._flags(entry), "lease_expired", now))
        update.increment("revision").increment("execution_generation").increment("n_msgs")
        count_message(update, entry, counted).remove("stop_turn_id", "busy_acked", *ri.LEGACY)
        try:
            fresh = self.t.routes.update(
                {"session_key": entry.session_key},
                update,
                condition(
                    update,
                    "{revision} = {:rev} AND (attribute_not_exists({lease_token}) OR {lease_token} = {:tok} "
                    "OR {lease_expires_at} < {:now})",
                    rev=entry.revision,
                    tok=token,
                    now=now,
                ),
                returns="ALL_NEW",
            )
        except ConditionFailed:
            return None
        assert fresh is not None
        return Begun(user_seq, reply_seq, ri.entry(fresh), took_over=took_over)

    @staticmethod
    def _flags(entry: SessionEntry) -> Item:
        return {"resume_pending": entry.resume_pending, "failed_recoveries": entry.failed_recoveries}

    def enqueue(
        self, entry: SessionEntry, item: QueuedInput, *, max_items: int, now: float, counted: Counted | None = None
    ) -> Enqueued:
        update = count_message(Update(), entry, counted)
        update.set_expression(
            f"{update.name('turn_queue')} = list_append(if_not_exists({update.name('turn_queue')}, "
            f"{update.value([])}), {update.value([item.to_dict()])})"
        )
        update.set_many(
            {
                "lease_shard": ri.WATCH_SHARD,  # the tick finds it if the running turn is lost
                "busy_acked": entry.lease_turn_id,
                "recent": ri.remember(entry.recent_events, item.event_id),
                **ri.activity(entry.session_key, entry.platform, entry.chat_type, now, self.t.rules),
                **ri.heard(entry.platform, now),
            }
        )
        update.add("turn_queue_ids", {item.event_id}).increment("revision")
        when = condition(
            update,
            "{lease_token} = {:tok} AND {lease_expires_at} > {:now} AND NOT contains({turn_queue_ids}, {:eid}) "
            "AND (attribute_not_exists({turn_queue}) OR size({turn_queue}) < {:max})",
            tok=entry.lease_token,
            now=now,
            eid=item.event_id,
            max=max_items,
        )
        try:
            old = self.t.routes.update(
                {"session_key": entry.session_key}, update, when, returns="ALL_OLD", old_on_failure=True
            )
        except ConditionFailed as exc:
            current = exc.item or {}
            if current.get("lease_token") != entry.lease_token or float(current.get("lease_expires_at") or 0) <= now:
                return Enqueued("not_busy")
            if item.event_id in (current.get("turn_queue_ids") or set()):
                return Enqueued("duplicate", current.get("lease_turn_id"))
            return Enqueued("full", current.get("lease_turn_id"))
        told = (old or {}).get("busy_acked")
        return Enqueued("queued", entry.lease_turn_id, first_notice=told != entry.lease_turn_id)

    # -- a turn finishes ---------------------------------------------------------------------

    def finish(
        self,
        session_key: str,
        session_id: str,
        token: str,
        plan: Callable[[list[QueuedInput], int], NextTurn],
        now: float,
        *,
        tally: SessionTally,
        succeeded: bool,
        recovery_failed: bool = False,
        spender: str | None = None,
    ) -> Finished:
        spent = self._spent(session_key, spender, tally, now)
        finished = self._finish(
            session_key, session_id, token, plan, now, tally=tally, succeeded=succeeded, spent=spent
        )
        if recovery_failed and finished.status != "lost":
            self.mark_failed(session_key, session_id, "recovery_failed", now)
        return finished

    def _finish(
        self,
        session_key: str,
        session_id: str,
        token: str,
        plan: Callable[[list[QueuedInput], int], NextTurn],
        now: float,
        *,
        tally: SessionTally,
        succeeded: bool,
        spent: dict[str, int | float],
    ) -> Finished:
        counted = True  # the tally still has to be added
        for _ in range(_FINISH_ATTEMPTS):
            update = self._outcome(Update(), tally if counted else SessionTally(), succeeded, now, spent)
            released(update).remove("handoff", "approval")
            when = condition(
                update,
                "{lease_token} = {:tok} AND {session_id} = {:sid} "
                "AND (attribute_not_exists({turn_queue}) OR size({turn_queue}) = {:zero})",
                tok=token,
                sid=session_id,
                zero=0,
            )
            try:
                self.t.routes.update({"session_key": session_key}, update, when, old_on_failure=True)
                return Finished("released")
            except ConditionFailed as exc:
                item = exc.item
            if item is None:
                return Finished("lost")
            if item.get("lease_token") != token:
                return self._repeat(item, token)
            if item.get("session_id") != session_id:
                # The route moved to another session while the turn ran (a forced reset): the
                # turn's totals belong to its own session's record, not to the new route.
                self._count_on_record(session_id, tally if counted else SessionTally(), now)
                counted, session_id = False, str(item["session_id"])
                continue
            handed = self._hand_off(item, token, plan, tally if counted else SessionTally(), succeeded, now, spent)
            if handed is not None:
                return handed
        raise TransientError("the turn queue kept changing while the lease was released")

    def _spent(self, session_key: str, spender: str | None, tally: SessionTally, now: float) -> dict[str, int | float]:
        """What the turn adds to its user's counters on the route, in the days of the route's rules."""
        if spender is None:
            return {}
        p = periods(now, self.t.rules.for_key(session_key).time_zone)
        return ri.spending(spender, tally.total_tokens, tally.cost_usd, p)

    def _outcome(
        self, update: Update, tally: SessionTally, succeeded: bool, now: float, spent: dict[str, int | float]
    ) -> Update:
        # The user's counters go on the route whichever session it points at now: they are the
        # user's. Only the attempt whose write succeeds adds them.
        for attr, value in spent.items():
            update.increment(attr, value)
        add_tally(update, tally).set("updated_at", now).increment("revision")
        if succeeded:
            update.set_many({"resume_pending": False, "failed_recoveries": 0, "is_fresh_reset": False})
            update.remove("resume_reason", "resume_marked_at")
        return update

    def _repeat(self, item: Item, token: str) -> Finished:
        """A repeated finish: the same hand-off again when this token made it, else lost."""
        handoff = item.get("handoff") or {}
        if handoff.get("from_token") == token and handoff.get("turn"):
            control = ri.control(item)
            return Finished("handed_off", control.handoff_turn, ri.handoff_queued(item))
        return Finished("lost")

    def _hand_off(
        self,
        item: Item,
        token: str,
        plan: Callable[[list[QueuedInput], int], NextTurn],
        tally: SessionTally,
        succeeded: bool,
        now: float,
        spent: dict[str, int | float],
    ) -> Finished | None:
        queue = [QueuedInput.from_dict(q) for q in item.get("turn_queue") or ()]
        base = int(item.get("next_seq") or 0)
        nxt = plan(queue, base + 1)
        taken, rest = queue[: nxt.taken], queue[nxt.taken :]
        turn = nxt.turn
        assert turn.reply_seq is not None and turn.lease_token is not None
        # The queued messages the next turn takes are counted with this turn's tally (one SET
        # clause per attribute: DynamoDB refuses two paths on the same attribute).
        counted = dataclasses.replace(tally, message_count=tally.message_count + len(taken))
        update = self._outcome(Update(), counted, succeeded, now, spent)
        update.set_many(
            {
                "lease_token": turn.lease_token,
                "lease_turn_id": turn.turn_id,
                "lease_started_at": now,
                "lease_expires_at": now + self.t.rules.lease_ttl_seconds,
                "lease_reply_seq": turn.reply_seq,
                "next_seq": turn.reply_seq,
                "turn_queue": [q.to_dict() for q in rest],
                "handoff": {
                    "from_token": token,
                    "turn": json.dumps(turn.to_json()),
                    "queued": json.dumps([q.to_dict() for q in taken]),
                },
                "lease_shard": ri.WATCH_SHARD if rest else None,
            }
        )
        update.increment("execution_generation")
        update.delete("turn_queue_ids", {q.event_id for q in taken}).remove("stop_turn_id", "busy_acked")
        when = condition(update, "{lease_token} = {:tok} AND size({turn_queue}) = {:n}", tok=token, n=len(queue))
        try:
            self.t.routes.update({"session_key": item["session_key"]}, update, when)
        except ConditionFailed:
            return None  # a message was queued meanwhile: plan again
        return Finished("handed_off", turn, tuple(taken))

    def _count_on_record(self, session_id: str, tally: SessionTally, now: float) -> None:
        update = Update()
        for attr, field_name in SESSION_TALLY.items():
            value = getattr(tally, field_name)
            if value:
                update.increment(attr, value)
        if not update.expression():
            return
        with contextlib.suppress(ConditionFailed):  # the session was deleted: nothing to count on
            self.t.sessions.update(
                {"session_id": session_id}, update, condition(update, "attribute_exists({session_id})")
            )

    def mark_failed(self, session_key: str, session_id: str, reason: str, now: float) -> bool:
        """A turn was cut short (BEHAVIOUR §5): resume_pending, or a failed recovery. True when
        the session is now suspended."""
        for _ in range(_FINISH_ATTEMPTS):
            item = self.t.route(session_key)
            if item is None or item.get("session_id") != session_id:
                return False
            changes = ri.failure(item, reason, now)
            update = Update().set_many(changes).set("updated_at", now).increment("revision")
            try:
                self.t.routes.update(
                    {"session_key": session_key},
                    update,
                    condition(update, "{revision} = {:rev}", rev=item.get("revision", 1)),
                )
            except ConditionFailed:
                continue
            return bool(changes.get("suspended"))
        raise TransientError("the route kept changing while a failed turn was recorded")

    # -- stop, seqs, recovery ----------------------------------------------------------------

    def extend(self, session_key: str, token: str, until: float) -> bool:
        update = Update().set("lease_expires_at", until)
        try:
            self.t.routes.update(
                {"session_key": session_key}, update, condition(update, "{lease_token} = {:tok}", tok=token)
            )
        except ConditionFailed:
            return False
        return True

    def request_stop(self, session_key: str, now: float) -> StopRequest | None:
        update = Update()
        update.set_expression(f"{update.name('stop_turn_id')} = {update.name('lease_turn_id')}")
        update.set("updated_at", now).increment("revision")
        try:
            fresh = self.t.routes.update(
                {"session_key": session_key},
                update,
                condition(update, "attribute_exists({lease_turn_id})"),
                returns="ALL_NEW",
            )
        except ConditionFailed:
            return None
        assert fresh is not None
        reply = fresh.get("lease_reply_seq")
        return StopRequest(str(fresh["lease_turn_id"]), str(fresh["session_id"]), int(reply) if reply else None)

    def allocate(self, session_key: str, session_id: str, count: int, now: float) -> int | None:
        item = self.t.route(session_key)
        if item is None or item.get("session_id") != session_id:
            return None
        update = Update().set("updated_at", now).increment("revision").increment("n_msgs", count)
        if item.get("next_seq") is None:
            base = self.t.last_seq(session_id)
            update.set("next_seq", base + count)
            when = condition(update, "{session_id} = {:sid} AND attribute_not_exists({next_seq})", sid=session_id)
        else:
            update.increment("next_seq", count)
            when = condition(update, "{session_id} = {:sid}", sid=session_id)
        try:
            fresh = self.t.routes.update({"session_key": session_key}, update, when, returns="UPDATED_NEW")
        except ConditionFailed:
            return self.allocate(session_key, session_id, count, now)  # another writer first: again
        return int((fresh or {})["next_seq"]) - count + 1

    def waiting(self, now: float, limit: int = 100) -> list[WaitingLease]:
        found = []
        for item in self.t.routes.query(
            condition(None, "{lease_shard} = {:s} AND {lease_expires_at} < {:now}", s=ri.WATCH_SHARD, now=now),
            index="by_lease_expiry",
            limit=limit,
        ):
            if item.get("lease_token"):
                found.append(
                    WaitingLease(
                        str(item["session_key"]),
                        str(item["lease_token"]),
                        item.get("lease_turn_id"),
                        float(item["lease_expires_at"]),
                    )
                )
            if len(found) >= limit:
                break
        return found

    def expire(self, lease: WaitingLease, now: float) -> bool:
        item = self.t.route(lease.session_key)
        if item is None or item.get("lease_token") != lease.lease_token:
            return False
        update = Update().set_many(ri.failure(item, "lease_expired", now)).set("updated_at", now)
        update.increment("revision")
        released(update)
        when = condition(
            update, "{lease_token} = {:tok} AND {lease_expires_at} < {:now}", tok=lease.lease_token, now=now
        )
        try:
            self.t.routes.update({"session_key": lease.session_key}, update, when)
        except ConditionFailed:
            return False
        return True

    def recover(self, session_key: str, token: str, turn_id: str, now: float) -> bool:
        update = Update().set_many(
            {
                "lease_token": token,
                "lease_turn_id": turn_id,
                "lease_started_at": now,
                "lease_expires_at": now + self.t.rules.lease_ttl_seconds,
            }
        )
        update.increment("revision").increment("execution_generation")
        when = condition(
            update,
            "attribute_exists({session_key}) AND (attribute_not_exists({lease_token}) OR {lease_token} = {:tok} "
            "OR {lease_expires_at} < {:now})",
            tok=token,
            now=now,
        )
        try:
            self.t.routes.update({"session_key": session_key}, update, when)
        except ConditionFailed:
            return False
        return True
