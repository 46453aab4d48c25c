"""The three session tables (routes, sessions, messages) as the session storage adapters share them.

Each adapter (`dynamo_routes`, `dynamo_leases`, `dynamo_turns`, `dynamo_transcript`,
`dynamo_catalogue`, `dynamo_edits`, `dynamo_sweep`) serves one port of `domain.ports` and is
built on one `SessionTables`: the tables, the rules, and how a session record and a transcript
row read. A function granted only some tables never names the others (each is bound when first
used).
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_table import Table, Tx, Update, condition, dynamodb_client
from hermes_gateway.adapters.models import dynamodb_endpoint
from hermes_gateway.adapters.route_item import TALLY_ATTRS, TALLY_PROMPT, ranges
from hermes_gateway.domain.cost import session_cost_status
from hermes_gateway.domain.media import Attachment, attachments_of
from hermes_gateway.domain.reset_policy import SessionRules
from hermes_gateway.domain.retention import is_expired, row_expiry
from hermes_gateway.domain.sessions import (
    SessionInfo,
    SessionTally,
    TranscriptRow,
    hide_after,
    is_hidden,
    new_session_id,
    profile_of_key,
)
from hermes_gateway.resources import Bindings

Item = dict[str, Any]
# Session record attribute -> SessionTally field (the totals a session had when its route left it).
SESSION_TALLY = {
    "message_count": "message_count",
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "cache_read_tokens": "cache_read_tokens",
    "cache_write_tokens": "cache_write_tokens",
    "cost_usd": "cost_usd",
    "estimated_turns": "estimated_turns",
    "unknown_turns": "unknown_turns",
    "included_turns": "included_turns",
}


class SessionTables:
    """The routes, sessions and messages tables of one deployment, with its session rules."""

    def __init__(
        self,
        bindings: Bindings,
        region: str | None = None,
        rules: SessionRules | None = None,
        *,
        client: Any = None,
    ) -> None:
        self._bindings = bindings
        self._region = region
        self._client = client  # the unit tests' in-memory DynamoDB (tests/fakes/dynamo.py)
        self.rules = rules or SessionRules()

    @cached_property
    def client(self) -> Any:
        return self._client or dynamodb_client(self._region, dynamodb_endpoint())

    @cached_property
    def routes(self) -> Table:
        return Table(self.client, self._bindings.table("routes"))

    @cached_property
    def sessions(self) -> Table:
        return Table(self.client, self._bindings.table("sessions"))

    @cached_property
    def messages(self) -> Table:
        return Table(self.client, self._bindings.table("messages"))

    def tx(self) -> Tx:
        return Tx(self.client)

    def row_item(self, session_id: str, transcript_row: TranscriptRow) -> Item:
        """A transcript row as stored: with its TTL (`expires_at`) when rows are kept
        `sessions.retention_days` (domain/retention.py); a copied row keeps its own time, so
        its copy expires with it."""
        item = row_item(session_id, transcript_row)
        expires_at = row_expiry(transcript_row.created_at, self.rules.retention_seconds)
        if expires_at is not None:
            item["expires_at"] = expires_at
        return item

    # -- reading ------------------------------------------------------------------------------

    def route(self, session_key: str, *, consistent: bool = True) -> Item | None:
        return self.routes.get({"session_key": session_key}, consistent=consistent)

    def session(self, session_id: str) -> Item | None:
        return self.sessions.get({"session_id": session_id})

    def last_seq(self, session_id: str) -> int:
        """The newest transcript row's seq (0: none), for a route that predates its seq counter."""
        for item in self.messages.query(
            condition(None, "{session_id} = {:s} AND {seq} > {:z}", s=session_id, z=0),
            newest_first=True,
            limit=1,
            consistent=True,
            projection=("seq",),
        ):
            return int(item["seq"])
        return 0

    # -- writing --------------------------------------------------------------------------------

    def new_session(
        self,
        session_key: str,
        now: float,
        platform: str,
        label: str | None,
        *,
        parent: str | None = None,
        title: str | None = None,
        message_count: int = 0,
        reach: str | None = None,
    ) -> Item:
        """A session record; `reach` (domain/reach.py) puts it in the `by_reach` index, where a
        turn's search finds it (a record without one is found by a profile-wide search only)."""
        item: Item = {
            "session_id": new_session_id(now),
            "session_key": session_key,
            "started_at": now,
            "platform": platform,
            "source_label": label,
            "profile": profile_of_key(session_key),
            "parent_session_id": parent,
            "title": title,
            "message_count": message_count,
        }
        if reach:
            item["reach"] = reach  # an index key is a string or absent, never null
        return item

    def archive(
        self, tx: Tx, route: Mapping[str, Any], session: Mapping[str, Any], *, end: tuple[str, float] | None = None
    ) -> bool:
        """The route leaves its session: the session record (`session`, as read) takes the totals
        and undo ranges the route kept for it and, with `end`, ends with that reason unless it
        has ended already. False when there was nothing to write (no operation added)."""
        update = Update()
        for attr, field_name in TALLY_ATTRS.items():
            value = route.get(attr)
            if value:
                update.increment(_SESSION_ATTR[field_name], value)
        if route.get(TALLY_PROMPT) is not None:
            update.set("last_prompt_tokens", route[TALLY_PROMPT])
        if route.get("hidden"):
            update.set("hidden_ranges", json.dumps(hidden_of(session, route)))
        guard = "attribute_exists({session_id})"
        if end is not None and session.get("ended_at") is None:
            reason, at = end
            update.set_many({"ended_at": at, "end_reason": reason})
            guard += " AND attribute_not_exists({ended_at})"
        if not update.expression():
            return False
        tx.update(self.sessions, {"session_id": route["session_id"]}, update, condition(update, guard))
        return True


_SESSION_ATTR = {field_name: attr for attr, field_name in SESSION_TALLY.items()}


def self_hidden(route: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    return ranges(route.get("hidden"))


def merge_ranges(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted([*a, *b]):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def hidden_of(session: Mapping[str, Any] | None, route: Mapping[str, Any] | None) -> tuple[tuple[int, int], ...]:
    """A session's undone seqs: its record's, plus its route's while the route points at it."""
    own = ranges((session or {}).get("hidden_ranges"))
    live = self_hidden(route) if route and session and route.get("session_id") == session.get("session_id") else ()
    return tuple(merge_ranges(own, live))


def session_tally(item: Mapping[str, Any]) -> SessionTally:
    values: dict[str, Any] = {field_name: item.get(attr) or 0 for attr, field_name in SESSION_TALLY.items()}
    values["cost_usd"] = float(values["cost_usd"])
    prompt = item.get("last_prompt_tokens")
    values["last_prompt_tokens"] = int(prompt) if prompt is not None else None
    return SessionTally(**values)


def info(item: Mapping[str, Any], route: Mapping[str, Any] | None = None) -> SessionInfo:
    """A session record as SessionInfo; its `route`, while it points at the session, adds the
    live totals and undo ranges."""
    live = route if route is not None and route.get("session_id") == item.get("session_id") else None
    total = session_tally(item) + ri.tally(live) if live is not None else session_tally(item)
    return SessionInfo(
        session_id=str(item["session_id"]),
        session_key=str(item["session_key"]),
        profile=str(item.get("profile") or profile_of_key(str(item["session_key"]))),
        platform=str(item.get("platform") or ""),
        started_at=float(item.get("started_at") or 0),
        ended_at=float(item["ended_at"]) if item.get("ended_at") is not None else None,
        end_reason=item.get("end_reason"),
        title=item.get("title"),
        source_label=item.get("source_label"),
        parent_session_id=item.get("parent_session_id"),
        continued_in=item.get("continued_in"),
        message_count=total.message_count,
        input_tokens=total.input_tokens,
        output_tokens=total.output_tokens,
        cache_read_tokens=total.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens,
        last_prompt_tokens=total.last_prompt_tokens or 0,
        estimated_cost_usd=round(total.cost_usd, 8),
        cost_status=session_cost_status(total.estimated_turns, total.unknown_turns, total.included_turns),
        hidden=hidden_of(item, live),
    )


ROW_ROLES = frozenset({"user", "assistant", "tool", "system"})


# A row's text past this many bytes is stored zlib-compressed (`content_z`) when that saves a
# tenth or more: a 1-2 KB reply is one write unit instead of two, and reads of the window shrink
# alike. Every reader goes through `row`, so search and the window see the text as written.
COMPRESS_ABOVE_BYTES = 900


def content_fields(text: str) -> Item:
    """The item attributes that hold a row's text: `content`, or `content_z` when compressed."""
    raw = text.encode("utf-8")
    if len(raw) > COMPRESS_ABOVE_BYTES:
        packed = zlib.compress(raw, 6)
        if len(packed) <= len(raw) * 0.9:
            return {"content_z": packed}
    return {"content": text}


def content_of(item: Mapping[str, Any]) -> str:
    packed = item.get("content_z")
    if packed is not None:
        return zlib.decompress(bytes(packed)).decode("utf-8")
    return str(item.get("content") or "")


def row(item: Mapping[str, Any]) -> TranscriptRow:
    return TranscriptRow(
        seq=int(item["seq"]),
        role=str(item.get("role") or "user"),
        content=content_of(item),
        created_at=float(item.get("created_at") or 0),
        sender_name=item.get("sender_name"),
        turn_id=item.get("turn_id"),
        platform_message_id=item.get("platform_message_id"),
        active=item.get("active") is not False,
        attachments=attachments_of(json.loads(item["media"])) if item.get("media") else (),
        sender=item.get("sender"),
        quote=item.get("quote"),
        quote_id=item.get("quote_id"),
    )


def media_fields(attachments: tuple[Attachment, ...]) -> Item:
    """A row's attachments as one compact JSON attribute (references only: a few hundred bytes)."""
    if not attachments:
        return {}
    return {"media": json.dumps([a.to_dict() for a in attachments], separators=(",", ":"), ensure_ascii=False)}


def quote_fields(transcript_row: TranscriptRow) -> Item:
    """The message a user row answers, where it answers one (no attribute otherwise)."""
    found = {"quote": transcript_row.quote, "quote_id": transcript_row.quote_id}
    return {k: v for k, v in found.items() if v}


def row_item(session_id: str, transcript_row: TranscriptRow) -> Item:
    return {
        "session_id": session_id,
        "seq": transcript_row.seq,
        "role": transcript_row.role,
        **content_fields(transcript_row.content),
        "created_at": transcript_row.created_at,
        "sender_name": transcript_row.sender_name,
        "turn_id": transcript_row.turn_id,
        "platform_message_id": transcript_row.platform_message_id,
        **media_fields(transcript_row.attachments),
        **({"sender": transcript_row.sender} if transcript_row.sender else {}),
        **quote_fields(transcript_row),
    }


def visible(item: Mapping[str, Any], hidden: tuple[tuple[int, int], ...]) -> bool:
    """A transcript row a reader sees: a message (not a marker), active, not undone, and not past
    its retention (TTL deletes it only eventually, up to a few days later)."""
    return (
        item.get("role") in ROW_ROLES
        and item.get("active") is not False
        and not is_hidden(int(item["seq"]), list(hidden))
        and not is_expired(item.get("expires_at"), time.time())
    )


def marker_seq(key: str) -> int:
    """The sort key of a marker row in the messages table (a title claim, a paused turn's state):
    negative, so it never meets a transcript row (48 bits of a hash)."""
    return -(int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) + 1)


def titles_partition(profile: str) -> str:
    """Title claims live in the messages table, one partition per profile, keyed by the title."""
    return f"titles|{profile}"


__all__ = ["SessionTables", "hidden_of", "hide_after", "info", "marker_seq", "merge_ranges", "row", "row_item"]
