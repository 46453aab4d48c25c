"""`Transcript` on DynamoDB: rows at the seqs their route allocated, read in bounded windows.

No transaction and no de-duplication marker per row: the route allocates each seq once (in the
write that begins a turn, hands the lease on, or takes steering input), so a row is a conditional
put, and writing the same row again (a retried task) finds its seq taken and changes nothing. A
turn reads the newest rows it needs (its prompt's window), never the whole session; a read that
fails raises, never an empty history.
"""

from __future__ import annotations

import contextlib
from typing import Any

from hermes_gateway.adapters.dynamo_table import Condition, ConditionFailed, condition
from hermes_gateway.adapters.session_tables import SessionTables, row, visible
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.errors import Conflict

STOPPED = "stopped"  # the role of /stop's marker at a turn's answer seq


class DynamoTranscript:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables

    def put(self, session_id: str, transcript_row: TranscriptRow) -> bool:
        try:
            self.t.messages.put(
                self.t.row_item(session_id, transcript_row), condition(None, "attribute_not_exists({seq})")
            )
        except ConditionFailed:
            return False
        return True

    def withdraw(self, session_id: str, seq: int) -> None:
        with contextlib.suppress(ConditionFailed):  # no user row there: nothing to take back
            self.t.messages.delete({"session_id": session_id, "seq": seq}, condition(None, "{role} = {:u}", u="user"))

    def put_reply(self, session_id: str, transcript_row: TranscriptRow) -> str:
        try:
            self.t.messages.put(
                self.t.row_item(session_id, transcript_row),
                condition(None, "attribute_not_exists({seq})"),
                old_on_failure=True,
            )
        except ConditionFailed as exc:
            existing = exc.item or self.t.messages.get({"session_id": session_id, "seq": transcript_row.seq}) or {}
            if existing.get("role") == STOPPED:
                return "stopped"
            if existing.get("turn_id") == transcript_row.turn_id:
                return "repeated"
            raise Conflict(f"seq {transcript_row.seq} of the transcript holds another row") from None
        return "written"

    def mark_stopped(self, session_id: str, seq: int, turn_id: str) -> bool:
        item: dict[str, Any] = {
            "session_id": session_id,
            "seq": seq,
            "role": STOPPED,
            "turn_id": turn_id,
            "active": False,
        }
        try:
            self.t.messages.put(item, condition(None, "attribute_not_exists({seq})"))
        except ConditionFailed:
            return False
        return True

    def window(
        self, session_id: str, *, upto_seq: int | None, limit: int, hidden: tuple[tuple[int, int], ...] = ()
    ) -> list[TranscriptRow]:
        if upto_seq is not None:
            key = condition(
                None, "{session_id} = {:s} AND {seq} BETWEEN {:lo} AND {:hi}", s=session_id, lo=1, hi=upto_seq
            )
        else:
            key = condition(None, "{session_id} = {:s} AND {seq} > {:z}", s=session_id, z=0)
        # A chat turn's window ends at its own message: an eventually consistent read (half the
        # read units) that already holds that row is as good as a consistent one, since a replica
        # applies a partition's writes in order. One that lags is read again, consistently.
        if upto_seq is not None:
            found = self._window(key, limit, hidden, consistent=False)
            if found[1] == upto_seq:
                return found[0]
        return self._window(key, limit, hidden, consistent=True)[0]

    def _window(
        self, key: Condition, limit: int, hidden: tuple[tuple[int, int], ...], *, consistent: bool
    ) -> tuple[list[TranscriptRow], int | None]:
        """The newest `limit` visible rows (oldest first) and the newest seq the read saw."""
        rows: list[TranscriptRow] = []
        newest: int | None = None
        # A page a little larger than the window: undone rows and markers are skipped.
        for item in self.t.messages.query(key, newest_first=True, limit=limit + 8, consistent=consistent):
            newest = int(item["seq"]) if newest is None else newest
            if visible(item, hidden):
                rows.append(row(item))
                if len(rows) >= limit:
                    break
        rows.reverse()
        return rows, newest

    def rows(self, session_id: str, hidden: tuple[tuple[int, int], ...] = ()) -> list[TranscriptRow]:
        key = condition(None, "{session_id} = {:s} AND {seq} > {:z}", s=session_id, z=0)
        return [row(item) for item in self.t.messages.query(key, consistent=True) if visible(item, hidden)]
