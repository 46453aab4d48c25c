"""`SessionEdits` on DynamoDB: the fenced changes from outside a turn (BEHAVIOUR §3).

Every change is one transaction (or one conditional write) conditioned on the route's `revision`
(and for identity changes its `execution_generation`) as the caller read it: a stale fence is
`Conflict` and nothing changes. A failed condition is matched with the operation that wrote it.
Undo and rewind record the undone seqs as ranges on the route (the live session's: the turn reads
them from there) or on the record of a session the route has left.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hermes_gateway.adapters import route_item as ri
from hermes_gateway.adapters.dynamo_routes import DynamoRoutes
from hermes_gateway.adapters.dynamo_table import TxCancelled, Update, condition
from hermes_gateway.adapters.session_tables import (
    SessionTables,
    hidden_of,
    info,
    marker_seq,
    row,
    titles_partition,
    visible,
)
from hermes_gateway.domain.sessions import (
    Fence,
    InvalidSessionRequest,
    ModelOverride,
    SessionEntry,
    SessionInfo,
    SessionNotFound,
    TranscriptRow,
    UndoResult,
    hide_after,
    normalize_title,
    profile_of_key,
    undo_point,
)
from hermes_gateway.errors import Conflict

Item = dict[str, Any]


def _stale() -> Conflict:
    return Conflict("the session changed since it was read")


def _fence(fence: Fence, *, generation: bool) -> tuple[str, dict[str, Any]]:
    if generation and fence.execution_generation is None:
        raise InvalidSessionRequest("this change needs the execution_generation that was read")
    if generation:
        return "{revision} = {:rev} AND {execution_generation} = {:gen}", {
            "rev": fence.revision,
            "gen": fence.execution_generation,
        }
    return "{revision} = {:rev}", {"rev": fence.revision}


class DynamoSessionEdits:
    def __init__(self, tables: SessionTables) -> None:
        self.t = tables
        self._routes = DynamoRoutes(tables)

    # -- reading what a change needs ---------------------------------------------------------

    def _session(self, session_id: str) -> Item:
        item = self.t.session(session_id)
        if item is None:
            raise SessionNotFound("no such session")
        return item

    def _fenced_route(self, session_key: str, fence: Fence, *, generation: bool) -> Item:
        """The route, checked against the fence early (the write checks it again)."""
        _fence(fence, generation=generation)
        route = self.t.route(session_key)
        if route is None:
            raise SessionNotFound("the session has no routing entry")
        stale_generation = generation and int(route.get("execution_generation") or 0) != fence.execution_generation
        if int(route.get("revision") or 1) != fence.revision or stale_generation:
            raise _stale()
        return route

    def _commit(self, tx: Any, errors: list[Exception | None]) -> None:
        try:
            tx.commit()
        except TxCancelled as exc:
            for index, error in enumerate(errors):
                if error is not None and exc.failed(index):
                    raise error from None
            raise

    def _route_change(self, key: str, fence: Fence, *, generation: bool, update: Update) -> Any:
        template, values = _fence(fence, generation=generation)
        update.increment("revision")
        return self.t.tx().update(self.t.routes, {"session_key": key}, update, condition(update, template, **values))

    def _entry(self, key: str, **extra: Any) -> SessionEntry:
        fresh = self.t.route(key)
        if fresh is None:
            raise SessionNotFound("the session has no routing entry")
        return ri.entry(fresh, **extra)

    # -- titles ------------------------------------------------------------------------------

    def rename(self, session_id: str, title: str, *, fence: Fence, now: float) -> SessionInfo:
        text, key = normalize_title(title)
        session = self._session(session_id)
        self._fenced_route(session["session_key"], fence, generation=False)
        partition = titles_partition(str(session.get("profile") or profile_of_key(session["session_key"])))
        old_key = str(session.get("title") or "").casefold()
        tx = self._route_change(session["session_key"], fence, generation=False, update=Update().set("updated_at", now))
        titled = Update().set("title", text)
        tx.update(
            self.t.sessions, {"session_id": session_id}, titled, condition(titled, "attribute_exists({session_id})")
        )
        errors: list[Exception | None] = [_stale(), SessionNotFound("no such session")]
        if old_key != key:
            claim = {
                "session_id": partition,
                "seq": marker_seq(key),
                "role": "title",
                "content": session_id,
                "dedupe_key": key,
            }
            mine = condition(None, "attribute_not_exists({seq}) OR {content} = {:sid}", sid=session_id)
            tx.put(self.t.messages, claim, mine)
            errors.append(Conflict("another session has that title"))
            if old_key:
                tx.delete(self.t.messages, {"session_id": partition, "seq": marker_seq(old_key)}, mine)
                errors.append(None)
        self._commit(tx, errors)
        return info(self._session(session_id), self.t.route(session["session_key"]))

    # -- delete ------------------------------------------------------------------------------

    def delete_session(self, session_id: str, *, fence: Fence, now: float) -> None:
        session = self._session(session_id)
        key = session["session_key"]
        route = self._fenced_route(key, fence, generation=True)
        template, values = _fence(fence, generation=True)
        tx = self.t.tx()
        if route.get("session_id") == session_id:
            tx.delete(
                self.t.routes,
                {"session_key": key},
                condition(None, template + " AND {session_id} = {:sid}", **values, sid=session_id),
            )
        else:
            bump = Update().set("updated_at", now).increment("revision")
            tx.update(self.t.routes, {"session_key": key}, bump, condition(bump, template, **values))
        tx.delete(self.t.sessions, {"session_id": session_id}, condition(None, "attribute_exists({session_id})"))
        errors: list[Exception | None] = [_stale(), SessionNotFound("no such session")]
        title_key = str(session.get("title") or "").casefold()
        if title_key:
            partition = titles_partition(str(session.get("profile") or profile_of_key(key)))
            tx.delete(
                self.t.messages,
                {"session_id": partition, "seq": marker_seq(title_key)},
                condition(None, "attribute_not_exists({seq}) OR {content} = {:sid}", sid=session_id),
            )
            errors.append(None)
        self._commit(tx, errors)
        # The transcript goes after its session: a crash here leaves rows no read can reach.
        keys = condition(None, "{session_id} = {:s}", s=session_id)
        rows = [
            {"session_id": session_id, "seq": item["seq"]}
            for item in self.t.messages.query(keys, projection=("session_id", "seq"))
        ]
        self.t.messages.batch_delete(rows)

    # -- undo, rewind, retry -----------------------------------------------------------------

    def _rows(self, session: Item, route: Item) -> list[TranscriptRow]:
        hidden = hidden_of(session, route)
        keys = condition(None, "{session_id} = {:s} AND {seq} > {:z}", s=session["session_id"], z=0)
        return [row(item) for item in self.t.messages.query(keys, consistent=True) if visible(item, hidden)]

    def _hide(
        self,
        session: Item,
        route: Item,
        to_seq: int,
        first: TranscriptRow | None,
        removed: int,
        fence: Fence,
        now: float,
        *,
        generation: bool,
    ) -> UndoResult:
        session_id = session["session_id"]
        live = route.get("session_id") == session_id
        last = (
            int(route.get("next_seq") or 0)
            if live and route.get("next_seq") is not None
            else self.t.last_seq(session_id)
        )
        ranges = hide_after(list(hidden_of(session, route)), to_seq, max(last, to_seq))
        update = Update().set("updated_at", now)
        if live:
            update.set("hidden", json.dumps([list(r) for r in ranges]))
        tx = self._route_change(session["session_key"], fence, generation=generation, update=update)
        errors: list[Exception | None] = [_stale()]
        if not live:
            previous = session.get("hidden_ranges")
            stored = Update().set("hidden_ranges", json.dumps([list(r) for r in ranges]))
            same = "attribute_not_exists({hidden_ranges})" if previous is None else "{hidden_ranges} = {:prev}"
            tx.update(
                self.t.sessions,
                {"session_id": session_id},
                stored,
                condition(
                    stored, "attribute_exists({session_id}) AND " + same, **({"prev": previous} if previous else {})
                ),
            )
            errors.append(_stale())
        self._commit(tx, errors)
        return UndoResult(
            removed,
            to_seq,
            first.content if first else None,
            self._entry(session["session_key"]),
            first.attachments if first else (),
        )

    def rewind(self, session_id: str, to_seq: int, *, fence: Fence, now: float) -> UndoResult:
        if to_seq < 0:
            raise InvalidSessionRequest("rewind to a seq of 0 or more")
        session = self._session(session_id)
        route = self._fenced_route(session["session_key"], fence, generation=True)
        removed = [r for r in self._rows(session, route) if r.seq > to_seq]
        return self._hide(session, route, to_seq, None, len(removed), fence, now, generation=True)

    def undo(self, session_id: str, turns: int, *, fence: Fence, now: float) -> UndoResult:
        session = self._session(session_id)
        route = self._fenced_route(session["session_key"], fence, generation=False)
        rows = self._rows(session, route)
        to_seq, first = undo_point(rows, turns)
        if first is None:
            return UndoResult(0, to_seq, None, ri.entry(route))
        removed = [r for r in rows if r.seq > to_seq]
        return self._hide(session, route, to_seq, first, len(removed), fence, now, generation=False)

    def retry(self, session_id: str, *, fence: Fence, now: float) -> UndoResult:
        return self.undo(session_id, 1, fence=fence, now=now)

    # -- identity changes --------------------------------------------------------------------

    def reset(self, session_key: str, *, fence: Fence, now: float, reason: str = "forced") -> SessionEntry:
        route = self._fenced_route(session_key, fence, generation=True)
        replaced = self._routes.replace(
            None, route, now, reason, auto_reset=False, fence=_fence(fence, generation=True)
        )
        if replaced is None:
            raise _stale()
        return replaced

    def _point(self, route: Item, session_id: str, next_seq: int, now: float, *, hidden: str | None = None) -> Update:
        """The route moved to `session_id` (branch, compress, switch): a fresh live tally."""
        update = Update().set_many(
            {
                "session_id": session_id,
                "prev_session_id": route["session_id"],
                "resume_pending": False,
                "failed_recoveries": 0,
                "expiry_finalized": False,
                "suspended": False,
                "next_seq": next_seq,
                "hidden": hidden,
                **ri.activity(route["session_key"], route["platform"], route["chat_type"], now, self.t.rules),
            }
        )
        update.remove("resume_reason", "resume_marked_at", "ended", ri.TALLY_PROMPT, *ri.TALLY_ATTRS, *ri.LEGACY)
        return update.increment("execution_generation")

    def _copy(self, child_id: str, rows: list[TranscriptRow], now: float) -> None:
        """Rows of a child session, written before the session item that makes them reachable."""
        self.t.messages.batch_put(
            [self.t.row_item(child_id, replace(r, seq=seq)) for seq, r in enumerate(rows, start=1)]
        )

    def branch(self, session_id: str, *, fence: Fence, now: float, title: str | None = None) -> SessionEntry:
        parent = self._session(session_id)
        key = parent["session_key"]
        route = self._fenced_route(key, fence, generation=True)
        normalized = normalize_title(title) if title else None
        rows = self._rows(parent, route)
        child = self.t.new_session(
            key, now, parent.get("platform") or route["platform"], parent.get("source_label"),
            parent=session_id, title=normalized[0] if normalized else None, message_count=len(rows),
            reach=parent.get("reach"),
        )  # fmt: skip
        self._copy(child["session_id"], rows, now)
        tx = self._route_change(
            key, fence, generation=True, update=self._point(route, child["session_id"], len(rows), now)
        )
        tx.put(self.t.sessions, child, condition(None, "attribute_not_exists({session_id})"))
        errors: list[Exception | None] = [_stale(), None]
        if route.get("session_id") == session_id and self.t.archive(tx, route, parent):
            errors.append(None)  # the parent stays open; its live totals went to its record
        if normalized:
            partition = titles_partition(str(parent.get("profile") or profile_of_key(key)))
            claim = {
                "session_id": partition,
                "seq": marker_seq(normalized[1]),
                "role": "title",
                "content": child["session_id"],
                "dedupe_key": normalized[1],
            }
            tx.put(self.t.messages, claim, condition(None, "attribute_not_exists({seq})"))
            errors.append(Conflict("another session has that title"))
        self._commit(tx, errors)
        return self._entry(key, created=True)

    def compress(
        self,
        session_id: str,
        summary: str,
        *,
        fence: Fence | None,
        now: float,
        keep_last: int = 0,
        lease_token: str | None = None,
    ) -> SessionEntry:
        if not summary.strip():
            raise InvalidSessionRequest("a compression summary may not be empty")
        parent = self._session(session_id)
        if parent.get("ended_at") is not None:
            raise Conflict("the session has already ended")
        key = parent["session_key"]
        if fence is None:
            route, fence = self._leased_route(key, lease_token)
        else:
            route = self._fenced_route(key, fence, generation=True)
        kept = self._rows(parent, route)[-keep_last:] if keep_last > 0 else []
        rows = [TranscriptRow(1, "system", summary, now), *kept]
        title = str(parent.get("title") or "") or None  # the session goes on in the child: so does its title
        child = self.t.new_session(
            key, now, parent.get("platform") or route["platform"], parent.get("source_label"),
            parent=session_id, title=title, message_count=len(rows), reach=parent.get("reach"),
        )  # fmt: skip
        self._copy(child["session_id"], rows, now)
        moves_route = route.get("session_id") == session_id
        update = Update().set("updated_at", now)
        if moves_route and lease_token is not None:
            # The turn that compresses goes on in the child: its answer takes the next seq there.
            update = self._point(route, child["session_id"], len(rows) + 1, now).set("lease_reply_seq", len(rows) + 1)
        elif moves_route:
            update = self._point(route, child["session_id"], len(rows), now)
        tx = self._route_change(key, fence, generation=True, update=update)
        tx.put(self.t.sessions, child, condition(None, "attribute_not_exists({session_id})"))
        ended = Update().set_many({"ended_at": now, "end_reason": "compressed", "continued_in": child["session_id"]})
        if title:
            ended.remove("title")
        if moves_route:
            for attr, value in self._archived(route, parent).items():
                ended.set(attr, value)
        tx.update(
            self.t.sessions,
            {"session_id": session_id},
            ended,
            condition(ended, "attribute_exists({session_id}) AND attribute_not_exists({ended_at})"),
        )
        errors: list[Exception | None] = [_stale(), None, Conflict("the session has already ended")]
        if title:
            # The title's claim (what /resume <title> and the title index find) moves to the child.
            partition = titles_partition(str(parent.get("profile") or profile_of_key(key)))
            moved = Update().set("content", child["session_id"])
            tx.update(
                self.t.messages,
                {"session_id": partition, "seq": marker_seq(title.casefold())},
                moved,
                condition(moved, "{content} = {:sid}", sid=session_id),
            )
            errors.append(Conflict("the session's title changed"))
        self._commit(tx, errors)
        return self._entry(key, created=moves_route)

    def _leased_route(self, session_key: str, lease_token: str | None) -> tuple[Item, Fence]:
        """The route and its fence for the turn holding the session's lease: the route as it
        reads now (the write checks it again), refused when another turn, or none, holds it."""
        route = self.t.route(session_key)
        if route is None:
            raise SessionNotFound("the session has no routing entry")
        if lease_token is None or route.get("lease_token") != lease_token:
            raise Conflict("the session's lease is not held by this turn")
        return route, Fence(int(route.get("revision") or 1), int(route.get("execution_generation") or 0))

    def _archived(self, route: Item, session: Item) -> dict[str, Any]:
        """The record's totals and undo ranges once the route's are added (for a write that
        already updates the record, where a second update of it in one transaction is refused)."""
        from hermes_gateway.adapters.session_tables import SESSION_TALLY, session_tally

        total = session_tally(session) + ri.tally(route)
        out: dict[str, Any] = {attr: getattr(total, field) for attr, field in SESSION_TALLY.items()}
        if total.last_prompt_tokens is not None:
            out["last_prompt_tokens"] = total.last_prompt_tokens
        ranges = hidden_of(session, route)
        if ranges:
            out["hidden_ranges"] = json.dumps([list(r) for r in ranges])
        return out

    def set_model_override(
        self, session_key: str, override: ModelOverride | None, *, fence: Fence, now: float
    ) -> SessionEntry:
        self._fenced_route(session_key, fence, generation=True)
        update = (
            Update().set("updated_at", now).set("model_override", json.dumps(override.to_dict()) if override else None)
        )
        self._commit(self._route_change(session_key, fence, generation=True, update=update), [_stale()])
        return self._entry(session_key)

    def switch_session(self, session_key: str, session_id: str, *, fence: Fence, now: float) -> SessionEntry:
        target = self._session(session_id)
        if str(target.get("profile") or profile_of_key(target["session_key"])) != profile_of_key(session_key):
            raise SessionNotFound("no such session")  # another profile's sessions do not exist here
        if target.get("ended_at") is not None and target.get("continued_in"):
            raise Conflict("the session was continued in another one")
        route = self._fenced_route(session_key, fence, generation=True)
        current = self.t.session(route["session_id"]) if route["session_id"] != session_id else None
        resumed = self.t.last_seq(session_id)
        tx = self._route_change(
            session_key, fence, generation=True, update=self._point(route, session_id, resumed, now)
        )
        reopen = Update().set("session_key", session_key).remove("ended_at", "end_reason")
        tx.update(
            self.t.sessions,
            {"session_id": session_id},
            reopen,
            condition(reopen, "attribute_exists({session_id}) AND attribute_not_exists({continued_in})"),
        )
        errors: list[Exception | None] = [_stale(), Conflict("the session was continued in another one")]
        if current is not None and self.t.archive(tx, route, current, end=("switched", now)):
            errors.append(_stale())
        self._commit(tx, errors)
        return self._entry(session_key, created=True)
