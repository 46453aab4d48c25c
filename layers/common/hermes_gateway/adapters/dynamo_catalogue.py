"""`Catalogue` on DynamoDB: sessions as records, listed by profile, found by title, searched.

A live session's totals are its record's plus its route's (the route counts each turn in the
write that ends it); these reads add the two, so a newcomer reading `get_session` sees the same
numbers as `/status`.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hermes_gateway.adapters.dynamo_table import ConditionFailed, Update, condition
from hermes_gateway.adapters.session_tables import SessionTables, info, marker_seq, row, titles_partition, visible
from hermes_gateway.domain.reach import SearchScope
from hermes_gateway.domain.sessions import (
    InvalidSessionRequest,
    SearchHit,
    SessionInfo,
    normalize_title,
    search_hit,
)


class DynamoCatalogue:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables

    def _live(self, item: dict[str, Any]) -> dict[str, Any] | None:
        """The route while it points at the session (None: not live)."""
        if item.get("ended_at") is not None:
            return None
        route = self.t.route(str(item["session_key"]))
        return route if route is not None and route.get("session_id") == item["session_id"] else None

    def get_session(self, session_id: str) -> SessionInfo | None:
        item = self.t.session(session_id)
        if item is None:
            return None
        return info(item, self._live(item))

    def list_sessions(self, profile: str, *, limit: int = 20, before: float | None = None) -> list[SessionInfo]:
        if before is not None:
            key = condition(None, "{profile} = {:p} AND {started_at} < {:b}", p=profile, b=before)
        else:
            key = condition(None, "{profile} = {:p}", p=profile)
        found = []
        for item in self.t.sessions.query(key, index="by_profile", newest_first=True, limit=limit):
            found.append(info(item, self._live(item)))
            if len(found) >= limit:
                break
        return found

    def find_session_by_title(self, profile: str, title: str) -> SessionInfo | None:
        _, key = normalize_title(title)
        claim = self.t.messages.get({"session_id": titles_partition(profile), "seq": marker_seq(key)})
        if claim is None:
            return None
        item = self.t.session(str(claim.get("content") or ""))
        if item is None or str(item.get("title") or "").casefold() != key:
            return None
        return info(item, self._live(item))

    def search(
        self, profile: str, query: str, *, limit: int = 20, sessions: int = 50, scope: SearchScope | None = None
    ) -> list[SearchHit]:
        needle = query.strip().casefold()
        if not needle:
            raise InvalidSessionRequest("search for at least one character")
        scope = scope or SearchScope(profile)
        if scope.namespace != profile:
            raise InvalidSessionRequest("a search scope belongs to one profile")
        hits: list[SearchHit] = []
        if scope.session_key is not None:
            key, index = condition(None, "{session_key} = {:k}", k=scope.session_key), "by_key"
        elif scope.reach is not None:
            key, index = condition(None, "{reach} = {:r}", r=scope.reach), "by_reach"
        else:
            key, index = condition(None, "{profile} = {:p}", p=profile), "by_profile"
        for item in self.t.sessions.query(key, index=index, newest_first=True, limit=sessions):
            record = self.t.session(str(item["session_id"]))  # the index copy is only eventually consistent
            if record is None or record.get("profile") != profile:
                continue
            session_info = info(record, self._live(record))
            hidden = session_info.hidden
            rows = condition(None, "{session_id} = {:s} AND {seq} > {:z}", s=record["session_id"], z=0)
            for found in self.t.messages.query(rows, newest_first=True):
                if not visible(found, hidden):
                    continue
                hit = search_hit(session_info, row(found), needle)
                if hit is not None:
                    hits.append(hit)
                    if len(hits) >= limit:
                        return hits
            sessions -= 1
            if sessions <= 0:
                break
        return hits

    def end_session(self, session_id: str, reason: str, now: float) -> bool:
        update = Update().set_many({"ended_at": now, "end_reason": reason})
        try:
            fresh = self.t.sessions.update(
                {"session_id": session_id},
                update,
                condition(update, "attribute_exists({session_id}) AND attribute_not_exists({ended_at})"),
                returns="ALL_NEW",
            )
        except ConditionFailed:
            return False
        key = str((fresh or {}).get("session_key") or "")
        if key:
            # The route that still points at it is stale now: the key's next message starts anew.
            flag = Update().set("ended", True).increment("revision")
            with contextlib.suppress(ConditionFailed):  # the route points elsewhere (or is gone)
                self.t.routes.update(
                    {"session_key": key}, flag, condition(flag, "{session_id} = {:sid}", sid=session_id)
                )
        return True

    def mark_memory_flushed(self, session_id: str, now: float) -> None:
        update = Update().set("memory_flushed_at", now)
        with contextlib.suppress(ConditionFailed):  # a deleted session has nobody waiting on it
            self.t.sessions.update(
                {"session_id": session_id}, update, condition(update, "attribute_exists({session_id})")
            )

    def memory_flushed(self, session_id: str) -> bool:
        item = self.t.session(session_id)
        return item is not None and item.get("memory_flushed_at") is not None
