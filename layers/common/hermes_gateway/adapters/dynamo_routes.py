"""`Routes` on DynamoDB: read a route, open the live session of a key (create, reuse, replace).

Single flight is a transaction whose route put is conditioned on `attribute_not_exists`; a loser
reads the winner's item. Replacing a session is a transaction conditioned on the `revision` that
was read; the old session's record takes the totals the route kept for it (`SessionTables.archive`)
and ends with the reason. A route whose session was ended while it pointed there (`ended`) is
recreated (`stale_route`).
"""

from __future__ import annotations

import json
from typing import Any

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_table import ConditionFailed, TxCancelled, Update, condition
from hermes_gateway.adapters.session_tables import SessionTables
from hermes_gateway.domain.reach import session_reach
from hermes_gateway.domain.reset_policy import RouteState, route_decision
from hermes_gateway.domain.sessions import AutoContinue, SessionEntry, profile_of_key
from hermes_gateway.domain.source import SessionSource, compact_source
from hermes_gateway.errors import TransientError

_MAX_ATTEMPTS = 8
Item = dict[str, Any]


class DynamoRoutes:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables
        # The raw item behind the entries `get` returned, so `open(read=entry)` decides and
        # writes without reading the route a second time (its writes stay fenced on the revision).
        self._read: dict[tuple[str, int], Item] = {}

    def get(self, session_key: str) -> SessionEntry | None:
        item = self.t.route(session_key)
        if item is None:
            return None
        if len(self._read) > 256:
            self._read.clear()
        self._read[(session_key, int(item.get("revision") or 1))] = item
        return ri.entry(item)

    def open(
        self,
        source: SessionSource,
        session_key: str,
        now: float,
        *,
        read: SessionEntry | None = None,
        force_new: bool = False,
        touch_activity: bool = True,
    ) -> SessionEntry:
        item = self._item_of(read) if read is not None else None
        for _ in range(_MAX_ATTEMPTS):
            item = item if item is not None else self.t.route(session_key)
            if item is None:
                created = self._create(source, session_key, now)
                if created is not None:
                    return created
                continue  # lost the race: read the winner's route
            opened = self._reuse_or_replace(source, item, now, force_new=force_new, touch_activity=touch_activity)
            if opened is not None:
                return opened
            item = None  # the route moved meanwhile: read it again
        raise TransientError(f"session routing did not settle after {_MAX_ATTEMPTS} attempts")

    def _item_of(self, entry: SessionEntry) -> Item | None:
        """The item behind an entry this adapter read (None: read it)."""
        found = self._read.pop((entry.session_key, entry.revision), None)
        return dict(found) if found is not None else None

    def _reuse_or_replace(
        self, source: SessionSource, item: Item, now: float, *, force_new: bool, touch_activity: bool
    ) -> SessionEntry | None:
        entry = ri.entry(item)
        rules = self.t.rules.for_key(entry.session_key)
        last = entry.last_activity_at if entry.last_activity_at is not None else entry.updated_at
        state = RouteState(
            platform=entry.platform,
            chat_type=entry.chat_type,
            last_activity_at=last,
            suspended=entry.suspended,
            resume_pending=entry.resume_pending,
            resume_marked_at=entry.resume_marked_at,
            lease_held=entry.lease_held(now),
            session_ended=ri.ended(item),
        )
        decision = route_decision(state, rules, now)
        reason = "forced" if force_new else decision.reason
        if reason is None:
            if touch_activity and not self._touch(item, now):
                return None
            auto = None
            if decision.auto_continue and entry.resume_pending:
                marked = entry.resume_marked_at if entry.resume_marked_at is not None else last
                auto = AutoContinue(entry.resume_reason or "interrupted", marked, entry.failed_recoveries)
            return ri.entry(item, auto_continue=auto)
        return self.replace(source, item, now, reason, auto_reset=decision.auto_reset and not force_new)

    def _touch(self, item: Item, now: float) -> bool:
        update = Update().set_many(
            ri.activity(item["session_key"], item["platform"], item["chat_type"], now, self.t.rules)
        )
        update.increment("revision").remove(*ri.LEGACY)
        try:
            fresh = self.t.routes.update(
                {"session_key": item["session_key"]},
                update,
                condition(update, "{session_id} = {:sid}", sid=item["session_id"]),
                returns="ALL_NEW",
            )
        except ConditionFailed:
            return False
        item.clear()
        item.update(fresh or {})
        return True

    def _create(self, source: SessionSource, session_key: str, now: float) -> SessionEntry | None:
        reach = session_reach(profile_of_key(session_key), source)
        session = self.t.new_session(session_key, now, source.platform, source.description, reach=reach)
        route: Item = {
            "session_key": session_key,
            "session_id": session["session_id"],
            "revision": 1,
            "execution_generation": 0,
            "created_at": now,
            "platform": source.platform,
            "chat_type": source.chat_type,
            "display_name": source.description,
            "origin": ri.compact_json(compact_source(source)),
            "next_seq": 0,
            **ri.activity(session_key, source.platform, source.chat_type, now, self.t.rules),
        }
        tx = self.t.tx()
        tx.put(self.t.routes, route, condition(None, "attribute_not_exists({session_key})"))
        tx.put(self.t.sessions, session, condition(None, "attribute_not_exists({session_id})"))
        orphan = self._orphan(session_key)
        if orphan is not None:
            # A route idle past its TTL was deleted by DynamoDB with its session still open: the
            # key's next session closes it.
            end = Update().set_many({"ended_at": now, "end_reason": "pruned"})
            tx.update(
                self.t.sessions,
                {"session_id": orphan},
                end,
                condition(end, "attribute_exists({session_id}) AND attribute_not_exists({ended_at})"),
            )
        try:
            tx.commit()
        except TxCancelled as exc:
            if exc.failed(0):
                return None  # another caller created the route first
            if orphan is not None and exc.failed(2):
                return self._create(source, session_key, now)  # the orphan ended meanwhile
            raise
        return ri.entry({**route, "revision": 1}, created=True)

    def _orphan(self, session_key: str) -> str | None:
        """The key's newest session when it was never ended (its route expired under it)."""
        for found in self.t.sessions.query(
            condition(None, "{session_key} = {:k}", k=session_key), index="by_key", newest_first=True, limit=1
        ):
            return None if found.get("ended_at") is not None else str(found["session_id"])
        return None

    def replace(
        self,
        source: SessionSource | None,
        old: Item,
        now: float,
        reason: str,
        *,
        auto_reset: bool,
        fence: tuple[str, dict[str, Any]] | None = None,
    ) -> SessionEntry | None:
        """Point the route at a new session (fenced on the revision read, or on `fence`: a
        condition template and its values); the old session ends with `reason`. None when
        another writer changed the route first."""
        platform = source.platform if source else old["platform"]
        chat_type = source.chat_type if source else old["chat_type"]
        label = source.description if source else old.get("display_name")
        key = old["session_key"]
        session = self.t.new_session(key, now, platform, label, reach=_reach(key, source, old))
        previous = self.t.session(old["session_id"])
        had_activity = self.had_activity(old, previous)
        update = Update().set_many(
            {
                "session_id": session["session_id"],
                "platform": platform,
                "chat_type": chat_type,
                "display_name": label,
                "suspended": False,
                "resume_pending": False,
                "failed_recoveries": 0,
                "expiry_finalized": False,
                "is_fresh_reset": True,
                "was_auto_reset": auto_reset,
                "auto_reset_reason": reason if auto_reset else None,
                "reset_had_activity": had_activity,
                "prev_session_id": old["session_id"],
                "next_seq": 0,
                **ri.activity(key, platform, chat_type, now, self.t.rules),
            }
        )
        if source is not None:
            update.set("origin", ri.compact_json(compact_source(source)))
        update.increment("revision").increment("execution_generation").remove(*ri.RESET_CLEARED, *ri.LEGACY)
        template, values = fence or ("{revision} = {:rev}", {"rev": old.get("revision", 1)})
        tx = self.t.tx()
        tx.update(self.t.routes, {"session_key": key}, update, condition(update, template, **values))
        tx.put(self.t.sessions, session, condition(None, "attribute_not_exists({session_id})"))
        archived = previous is not None and self.t.archive(tx, old, previous, end=(reason, now))
        try:
            tx.commit()
        except TxCancelled as exc:
            if exc.failed(0) or (archived and exc.failed(2)):
                return None
            raise
        fresh = self.t.route(key)
        if fresh is None:
            return None
        if fresh["session_id"] != session["session_id"]:
            return ri.entry(fresh)  # replaced again already: the newer session is the one to use
        return ri.entry(fresh, created=True, reset_reason=reason)

    def had_activity(self, route: Item, session: Item | None) -> bool:
        """The session had at least one prompt: rows allocated on its route, or (a route from
        before the seq counter) on its record."""
        if route.get("next_seq") is not None:
            return int(route.get("next_seq") or 0) > 0 or int(route.get("n_msgs") or 0) > 0
        return session is not None and int(session.get("message_count") or 0) > 0


def _reach(session_key: str, source: SessionSource | None, route: Item) -> str | None:
    """A new session's reach: from the message that opens it, else from the chat's first one."""
    if source is None and route.get("origin"):
        source = SessionSource.from_dict(json.loads(route["origin"]))
    return session_reach(profile_of_key(session_key), source) if source is not None else None
