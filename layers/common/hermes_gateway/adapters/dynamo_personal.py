"""`PersonalData` and `Retention` on DynamoDB: one person's sessions and rows (forget, export),
and the sessions idle past the retention (the expiry tick). BEHAVIOUR §11.

A person's DM sessions are one `by_reach` query per profile. Their rows in group sessions are
not indexed by sender (an index on every row would cost a write per message to serve a rare
request): `sender_rows` reads the messages table a page at a time with a Scan filtered on
`sender`, eventually consistent, so a GB of table costs 131,072 read units (0.016 USD at 0.125
USD per million); the caller paces the pages.

Erasing a session goes route, rows, title claim, record: a crash part way leaves the record, so
running the erasure again finds the session and finishes it (the other way round would leave
rows nothing can find).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_table import ConditionFailed, Update, condition
from hermes_gateway.adapters.session_tables import SessionTables, info, marker_seq, row, titles_partition
from hermes_gateway.domain.media import attachments_of
from hermes_gateway.domain.ports import AgedSession, ErasedSession, SenderPage, SenderRow
from hermes_gateway.domain.sessions import SessionInfo, TranscriptRow, profile_of_key
from hermes_gateway.errors import SessionBusy

Item = dict[str, Any]
_PASS_SEQ = 0  # a retention pass's state: seq 0 of its own partition (rows start at 1, markers below 0)


def _row_keys(items: list[Item]) -> list[str]:
    return [a.key for item in items if item.get("media") for a in attachments_of(json.loads(item["media"])) if a.key]


class DynamoPersonalData:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables

    # -- finding ------------------------------------------------------------------------------

    def sessions_reached(self, reach: str) -> list[SessionInfo]:
        key = condition(None, "{reach} = {:r}", r=reach)
        return self._records(self.t.sessions.query(key, index="by_reach", newest_first=True), reach)

    def unreached_sessions_keyed(self, session_key: str) -> list[SessionInfo]:
        key = condition(None, "{session_key} = {:k}", k=session_key)
        return self._records(self.t.sessions.query(key, index="by_key", newest_first=True), None)

    def _records(self, found: Any, reach: str | None) -> list[SessionInfo]:
        """The records behind index entries (the index is only eventually consistent, and
        `by_reach` holds keys only), each checked against what was asked of it."""
        sessions = []
        for entry in found:
            record = self.t.session(str(entry["session_id"]))
            if record is None or record.get("reach") != reach:
                continue
            sessions.append(info(record, self.t.route(record["session_key"])))
        return sessions

    def transcript(self, session_id: str) -> list[TranscriptRow]:
        key = condition(None, "{session_id} = {:s} AND {seq} > {:z}", s=session_id, z=0)
        return [row(item) for item in self.t.messages.query(key, consistent=True) if item.get("role") != "stopped"]

    def chat_of(self, session_key: str) -> str | None:
        route = self.t.route(session_key)
        return _origin_chat(route) if route is not None else None

    def sender_rows(self, sender: str, cursor: str | None) -> SenderPage:
        items, after = self.t.messages.scan_page(
            condition(None, "{sender} = {:h}", h=sender), start=json.loads(cursor) if cursor else None
        )
        rows = [SenderRow(str(item["session_id"]), row(item)) for item in items if int(item.get("seq") or 0) > 0]
        return SenderPage(rows, json.dumps(after, sort_keys=True) if after else None)

    # -- changing ----------------------------------------------------------------------------

    def redact(self, session_id: str, seq: int, sender: str, text: str) -> bool:
        update = Update().set("content", text).remove("content_z", "media", "sender", "sender_name")
        try:
            self.t.messages.update(
                {"session_id": session_id, "seq": seq}, update, condition(update, "{sender} = {:h}", h=sender)
            )
        except ConditionFailed:
            return False
        return True

    def erase_session(self, session_id: str, now: float, *, timed_rows: bool = True) -> ErasedSession:
        record = self.t.session(session_id)
        chat_id = self._drop_route(record, session_id, now) if record is not None else None
        keys = condition(None, "{session_id} = {:s}", s=session_id)
        items = list(self.t.messages.query(keys, projection=("session_id", "seq", "media", "expires_at")))
        doomed = [item for item in items if timed_rows or item.get("expires_at") is None]
        self.t.messages.batch_delete([{"session_id": session_id, "seq": item["seq"]} for item in doomed])
        if record is not None:
            title = str(record.get("title") or "").casefold()
            if title:
                partition = titles_partition(str(record.get("profile") or profile_of_key(record["session_key"])))
                with contextlib.suppress(ConditionFailed):  # another session holds the title now (or none)
                    self.t.messages.delete(
                        {"session_id": partition, "seq": marker_seq(title)},
                        condition(None, "{content} = {:sid}", sid=session_id),
                    )
            self.t.sessions.delete({"session_id": session_id})
        return ErasedSession(len(doomed), tuple(_row_keys(items)), chat_id)

    def _drop_route(self, record: Item, session_id: str, now: float) -> str | None:
        """Delete the session's route while it points at the session and no turn holds it; the
        chat it served (from its origin). SessionBusy while a turn runs there."""
        route = self.t.route(record["session_key"])
        if route is None or route.get("session_id") != session_id:
            return None
        if ri.entry(route).lease_held(now):
            raise SessionBusy("a turn is running in the session", retry_after=5)
        try:
            self.t.routes.delete(
                {"session_key": record["session_key"]},
                condition(
                    None,
                    "{session_id} = {:sid} AND (attribute_not_exists({lease_token}) OR {lease_expires_at} <= {:now})",
                    sid=session_id,
                    now=now,
                ),
            )
        except ConditionFailed:
            raise SessionBusy("the session's route changed while it was erased", retry_after=5) from None
        return _origin_chat(route)

    # -- retention ---------------------------------------------------------------------------

    def aged_sessions(
        self, namespace: str, started_before: float, after: str | None, limit: int
    ) -> tuple[list[AgedSession], str | None]:
        start = json.loads(after) if after else None
        lo = float(start["started_at"]) if start else 0.0
        key = condition(
            None, "{profile} = {:p} AND {started_at} BETWEEN {:lo} AND {:hi}", p=namespace, lo=lo, hi=started_before
        )
        found: list[AgedSession] = []
        cursor: str | None = None
        for record in self.t.sessions.query(key, index="by_profile"):
            if start and (record["started_at"], record["session_id"]) <= (start["started_at"], start["session_id"]):
                continue  # at or before where the pass stopped
            if len(found) >= limit:
                return found, cursor
            found.append(self._aged(record))
            position = {"started_at": record["started_at"], "session_id": record["session_id"]}
            cursor = json.dumps(position, sort_keys=True)
        return found, None

    def _aged(self, record: Item) -> AgedSession:
        session_id = str(record["session_id"])
        ended = record.get("ended_at")
        route_at = newest = None
        if ended is None:
            route = self.t.route(record["session_key"])
            if route is not None and route.get("session_id") == session_id:
                route_at = route.get("last_activity_at") or route.get("updated_at")
            keys = condition(None, "{session_id} = {:s} AND {seq} > {:z}", s=session_id, z=0)
            for item in self.t.messages.query(keys, newest_first=True, limit=1, projection=("created_at",)):
                newest = item.get("created_at")
        return AgedSession(
            session_id,
            float(record["started_at"]),
            float(ended) if ended is not None else None,
            float(route_at) if route_at is not None else None,
            float(newest) if newest is not None else None,
        )

    def pass_state(self, namespace: str) -> dict[str, Any]:
        item = self.t.messages.get({"session_id": _pass_partition(namespace), "seq": _PASS_SEQ}) or {}
        return {k: v for k, v in item.items() if k in ("after", "next_pass_at")}

    def save_pass_state(self, namespace: str, state: dict[str, Any]) -> None:
        self.t.messages.put({"session_id": _pass_partition(namespace), "seq": _PASS_SEQ, "role": "retention", **state})


def _origin_chat(route: Item) -> str | None:
    origin = json.loads(route["origin"]) if route.get("origin") else {}
    chat = origin.get("chat_id")
    return str(chat) if chat is not None else None


def _pass_partition(namespace: str) -> str:
    return f"retention|{namespace}"
