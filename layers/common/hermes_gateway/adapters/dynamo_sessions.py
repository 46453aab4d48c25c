"""DynamoDB adapter for the session store, the session sweep and the turn lease (pynamodb).

Single flight is a transaction whose route put is conditioned on `attribute_not_exists`; a loser
reads the winner's item. Replacing a session, and every fenced mutation, is a transaction
conditioned on the `revision` (and `execution_generation`) that was read. Every route write bumps
`revision`. Condition failures become `Conflict` (or a retry) here and nowhere else.

Soft deletes (undo, rewind) are recorded atomically as hidden seq ranges on the session item,
inside the fenced transaction; the rows' own `active` flags are cleared right after (a crash in
between leaves the rows flagged active but still hidden: reads honour both).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import DeleteError, DoesNotExist, TransactWriteError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.transactions import TransactWrite

from hermes_gateway.adapters.dynamo_errors import (
    CONDITION_FAILED,
    TRANSACTION_CONFLICT,
    backoff,
    cancellation_codes,
    condition_failed,
    throttling_is_transient,
    throttling_is_transient_everywhere,
)
from hermes_gateway.adapters.models import (
    LEASE_ATTRS,
    LEASE_SHARD,
    ROUTE_SHARDS,
    BoundModels,
    MessageModelBase,
    RouteModelBase,
    SessionModelBase,
    dynamodb_endpoint,
    marker_seq,
)
from hermes_gateway.domain.cost import estimate_cost, session_cost_status
from hermes_gateway.domain.reset_policy import RouteState, SessionRules, next_deadline, route_decision
from hermes_gateway.domain.sessions import (
    MAX_FAILED_RECOVERIES,
    AutoContinue,
    ExpiredLease,
    Fence,
    InvalidSessionRequest,
    ModelOverride,
    SearchHit,
    SessionEntry,
    SessionInfo,
    SessionNotFound,
    TokenUsage,
    TranscriptRow,
    UndoResult,
    hide_after,
    is_hidden,
    new_session_id,
    normalize_title,
    profile_of_key,
    search_hit,
    undo_point,
)
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import Conflict, TransientError
from hermes_gateway.resources import Bindings

_MAX_ATTEMPTS = 8
_APPEND_ATTEMPTS = 25  # appends to one session race only when many writers share it
_CHAIN_LIMIT = 20  # compression continuations followed when healing a route


def _stale() -> Conflict:
    return Conflict("the session changed since it was read")


def _lost_race(exc: TransactWriteError) -> bool:
    """Another writer got there first (its condition held, or its transaction held the item)."""
    codes = cancellation_codes(exc)
    if TRANSACTION_CONFLICT in codes:
        backoff(1)
    return CONDITION_FAILED in codes or TRANSACTION_CONFLICT in codes


class _OrderedWrite(TransactWrite):  # type: ignore[type-arg]
    """A TransactWrite that remembers the order its operations were written in. DynamoDB gives a
    cancelled transaction's reasons in the order of the items sent, and pynamodb sends condition
    checks, then deletes, then puts, then updates, whatever order they were written in."""

    _SENT_ORDER = ("condition_check", "delete", "save", "update")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.written: list[str] = []

    def condition_check(self, *args: Any, **kwargs: Any) -> None:
        self.written.append("condition_check")
        super().condition_check(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> None:
        self.written.append("delete")
        super().delete(*args, **kwargs)

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.written.append("save")
        super().save(*args, **kwargs)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.written.append("update")
        super().update(*args, **kwargs)

    def written_index_of_sent(self) -> list[int]:
        """For each item as sent, the index of the operation as written."""
        return sorted(range(len(self.written)), key=lambda i: self._SENT_ORDER.index(self.written[i]))


def _shard(session_key: str) -> str:
    return str(int(hashlib.sha256(session_key.encode()).hexdigest()[:8], 16) % ROUTE_SHARDS)


def _titles_partition(profile: str) -> str:
    """Title claims live in the messages table, one partition per profile, keyed by the title."""
    return f"titles|{profile}"


def _override(raw: str | None) -> ModelOverride | None:
    if not raw:
        return None
    data = json.loads(raw)
    return ModelOverride(data["model"], data.get("provider"), data.get("base_url"))


def _ranges(raw: str | None) -> list[tuple[int, int]]:
    return [(int(lo), int(hi)) for lo, hi in json.loads(raw)] if raw else []


def _num(value: Any) -> float | None:
    return float(value) if value is not None else None


def _oldest_first(index: Any, condition: Any, attribute: str, limit: int) -> list[RouteModelBase]:
    """A sparse routes index spread over ROUTE_SHARDS partitions, read oldest first: up to `limit`
    from each partition, merged by `attribute`."""
    found = [item for shard in range(ROUTE_SHARDS) for item in index.query(str(shard), condition, limit=limit)]
    found.sort(key=lambda r: float(getattr(r, attribute)))
    return found


def _entry(route: RouteModelBase, **extra: Any) -> SessionEntry:
    return SessionEntry(
        session_key=route.session_key,
        session_id=route.session_id,
        revision=int(route.revision),
        execution_generation=int(route.execution_generation),
        created_at=float(route.created_at),
        updated_at=float(route.updated_at),
        platform=route.platform,
        chat_type=route.chat_type,
        suspended=bool(route.suspended),
        resume_pending=bool(route.resume_pending),
        lease_token=route.lease_token,
        lease_turn_id=route.lease_turn_id,
        lease_expires_at=_num(route.lease_expires_at),
        display_name=route.display_name,
        origin=json.loads(route.origin) if route.origin else None,
        last_activity_at=_num(route.last_activity_at),
        resume_reason=route.resume_reason,
        resume_marked_at=_num(route.resume_marked_at),
        failed_recoveries=int(route.failed_recoveries or 0),
        expiry_finalized=bool(route.expiry_finalized),
        is_fresh_reset=bool(route.is_fresh_reset),
        was_auto_reset=bool(route.was_auto_reset),
        auto_reset_reason=route.auto_reset_reason,
        reset_had_activity=bool(route.reset_had_activity),
        model_override=_override(route.model_override),
        lease_started_at=_num(route.lease_started_at),
        stop_turn_id=route.stop_turn_id,
        policy_deadline=_num(route.policy_deadline),
        prev_session_id=extra.pop("prev_session_id", route.prev_session_id),
        **extra,
    )


def _info(item: SessionModelBase) -> SessionInfo:
    return SessionInfo(
        session_id=item.session_id,
        session_key=item.session_key,
        profile=item.profile or profile_of_key(item.session_key),
        platform=item.platform,
        started_at=float(item.started_at),
        ended_at=_num(item.ended_at),
        end_reason=item.end_reason,
        title=item.title,
        source_label=item.source_label,
        parent_session_id=item.parent_session_id,
        continued_in=item.continued_in,
        message_count=int(item.message_count or 0),
        input_tokens=int(item.input_tokens or 0),
        output_tokens=int(item.output_tokens or 0),
        cache_read_tokens=int(item.cache_read_tokens or 0),
        cache_write_tokens=int(item.cache_write_tokens or 0),
        last_prompt_tokens=int(item.last_prompt_tokens or 0),
        estimated_cost_usd=round(float(item.cost_usd or 0), 8),
        cost_status=session_cost_status(
            int(item.estimated_turns or 0), int(item.unknown_turns or 0), int(item.included_turns or 0)
        ),
    )


def _row(item: MessageModelBase, active: bool = True) -> TranscriptRow:
    return TranscriptRow(
        seq=int(item.seq),
        role=item.role or "user",
        content=item.content or "",
        created_at=float(item.created_at or 0),
        sender_name=item.sender_name,
        turn_id=item.turn_id,
        platform_message_id=item.platform_message_id,
        active=active,
    )


@throttling_is_transient_everywhere
class DynamoSessionStore:
    """`SessionStore`, `SessionSweepStore` and `TurnLease` on the routes, sessions and messages tables."""

    def __init__(self, bindings: Bindings, region: str | None = None, rules: SessionRules | None = None) -> None:
        self._region = region
        self._host = dynamodb_endpoint()
        self.models = BoundModels(bindings, region, self._host)
        self.rules = rules or SessionRules()

    @cached_property
    def _connection(self) -> Connection:
        # One connection (one botocore client, which is thread-safe) for every transaction.
        return Connection(region=self._region, host=self._host)

    # -- helpers ----------------------------------------------------------------------------

    def _route(self, session_key: str) -> RouteModelBase | None:
        try:
            return self.models.route.get(session_key, consistent_read=True)
        except DoesNotExist:
            return None

    def _session_item(self, session_id: str) -> SessionModelBase | None:
        try:
            return self.models.session.get(session_id, consistent_read=True)
        except DoesNotExist:
            return None

    def _require_session(self, session_id: str) -> SessionModelBase:
        item = self._session_item(session_id)
        if item is None:
            raise SessionNotFound("no such session")
        return item

    def _deadline_actions(self, session_key: str, platform: str, chat_type: str, last: float) -> list[Action]:
        """The route's place in the activity and policy-deadline indexes after activity at `last`."""
        Route = self.models.route
        rules = self.rules.for_key(session_key)  # a named profile's key: that profile's policies
        deadline = next_deadline(rules.policy_for(platform, chat_type), last, rules.time_zone)
        actions: list[Action] = [Route.last_activity_at.set(last), Route.activity_shard.set(_shard(session_key))]
        if deadline is None:
            actions += [Route.policy_shard.remove(), Route.policy_deadline.remove()]
        else:
            actions += [Route.policy_shard.set(_shard(session_key)), Route.policy_deadline.set(deadline)]
        return actions

    def _bump(self, now: float) -> list[Action]:
        Route = self.models.route
        return [Route.revision.set(Route.revision + 1), Route.updated_at.set(now)]

    def _fence_condition(self, fence: Fence, *, generation: bool) -> Condition:
        Route = self.models.route
        if generation and fence.execution_generation is None:
            raise InvalidSessionRequest("this change needs the execution_generation that was read")
        condition = Route.revision == fence.revision
        if generation:
            condition &= Route.execution_generation == fence.execution_generation
        return condition

    def _fenced_route(self, session_key: str, fence: Fence, *, generation: bool) -> RouteModelBase:
        """Read the route and check the fence early (the transaction checks it again)."""
        self._fence_condition(fence, generation=generation)
        route = self._route(session_key)
        if route is None:
            raise SessionNotFound("the session has no routing entry")
        stale_generation = generation and int(route.execution_generation) != fence.execution_generation
        if int(route.revision) != fence.revision or stale_generation:
            raise _stale()
        return route

    def _transact(self, write: Callable[[TransactWrite], None], errors: Sequence[Exception | None]) -> None:
        """Run one transaction; a failed condition on the i-th operation `write` wrote raises
        `errors[i]` (None: not expected)."""
        for attempt in range(_MAX_ATTEMPTS):
            tx = _OrderedWrite(connection=self._connection)
            try:
                with throttling_is_transient(), tx:
                    write(tx)
                return
            except TransactWriteError as exc:
                codes = cancellation_codes(exc)
                for code, written in zip(codes, tx.written_index_of_sent(), strict=False):
                    error = errors[written] if written < len(errors) else None
                    if code == CONDITION_FAILED and error is not None:
                        raise error from None
                if TRANSACTION_CONFLICT in codes:
                    backoff(attempt)
                    continue
                raise
        raise TransientError("the session change met other writers too often; try again")

    def _cas_route(
        self, session_key: str, change: Callable[[RouteModelBase], list[Action] | None], guard: Condition | None = None
    ) -> RouteModelBase | None:
        """Read-modify-write on the route's revision, retried while the change still applies
        (`change` returns None when it no longer does)."""
        Route = self.models.route
        for attempt in range(_MAX_ATTEMPTS):
            route = self._route(session_key)
            if route is None:
                return None
            actions = change(route)
            if actions is None:
                return None
            condition = Route.revision == route.revision
            if guard is not None:
                condition &= guard
            try:
                route.update(actions=actions, condition=condition)
            except UpdateError as exc:
                if not condition_failed(exc):
                    raise
                backoff(attempt)
                continue
            return route
        raise TransientError(f"the routing entry did not settle after {_MAX_ATTEMPTS} attempts")

    # -- sessions ---------------------------------------------------------------------------

    def get_route(self, session_key: str) -> SessionEntry | None:
        route = self._route(session_key)
        return _entry(route) if route is not None else None

    def get_or_create(
        self,
        source: SessionSource,
        session_key: str,
        now: float,
        *,
        force_new: bool = False,
        touch_activity: bool = True,
    ) -> SessionEntry:
        for _ in range(_MAX_ATTEMPTS):
            route = self._route(session_key)
            if route is None:
                created = self._create(source, session_key, now)
                if created is not None:
                    return created
                continue  # lost the race: read the winner's entry
            session = self._session_item(route.session_id)
            if session is not None and session.ended_at is not None and session.continued_in:
                healed = self._heal_to_continuation(route, now)
                if healed:
                    continue  # read the healed entry
            last = float(route.last_activity_at if route.last_activity_at is not None else route.updated_at)
            lease_held = route.lease_token is not None and float(route.lease_expires_at or 0) > now
            state = RouteState(
                platform=route.platform,
                chat_type=route.chat_type,
                last_activity_at=last,
                suspended=bool(route.suspended),
                resume_pending=bool(route.resume_pending),
                resume_marked_at=_num(route.resume_marked_at),
                lease_held=lease_held,
                session_ended=session is None or session.ended_at is not None,
            )
            decision = route_decision(state, self.rules.for_key(session_key), now)
            reason = "forced" if force_new else decision.reason
            if reason is None:
                if touch_activity and not self._touch(route, now):
                    continue  # the route moved to another session meanwhile
                auto = None
                if decision.auto_continue and route.resume_pending:
                    auto = AutoContinue(
                        route.resume_reason or "interrupted",
                        float(route.resume_marked_at if route.resume_marked_at is not None else last),
                        int(route.failed_recoveries or 0),
                    )
                return _entry(route, auto_continue=auto)
            had_activity = session is not None and int(session.message_count or 0) > 0
            ended = session is None or session.ended_at is not None
            replaced = self._replace(
                source,
                route,
                now,
                reason,
                auto_reset=decision.auto_reset and not force_new,
                had_activity=had_activity,
                end_old=not ended,
            )
            if replaced is not None:
                return replaced
            if force_new:
                # Someone else replaced it concurrently; their new session is the one to use.
                fresh = self._route(session_key)
                if fresh is not None:
                    return _entry(fresh)
        raise TransientError(f"session routing did not settle after {_MAX_ATTEMPTS} attempts")

    def _touch(self, route: RouteModelBase, now: float) -> bool:
        Route = self.models.route
        actions = self._bump(now) + self._deadline_actions(route.session_key, route.platform, route.chat_type, now)
        try:
            route.update(actions=actions, condition=Route.session_id == route.session_id)
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            return False
        return True

    def _newest_continuation(self, session_id: str) -> str | None:
        current = session_id
        for _ in range(_CHAIN_LIMIT):
            item = self._session_item(current)
            if item is None:
                return None
            if item.ended_at is None:
                return current if current != session_id else None
            if not item.continued_in:
                return None
            current = item.continued_in
        return None

    def _heal_to_continuation(self, route: RouteModelBase, now: float) -> bool:
        Route = self.models.route
        newest = self._newest_continuation(route.session_id)
        if newest is None:
            return False
        try:
            route.update(
                actions=[
                    *self._bump(now),
                    Route.session_id.set(newest),
                    Route.execution_generation.set(Route.execution_generation + 1),
                ],
                condition=Route.revision == route.revision,
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
        return True

    def _new_session_item(
        self,
        session_key: str,
        now: float,
        platform: str,
        label: str | None,
        *,
        parent: str | None = None,
        title: str | None = None,
        message_count: int = 0,
    ) -> SessionModelBase:
        return self.models.session(
            new_session_id(now),
            session_key=session_key,
            started_at=now,
            platform=platform,
            source_label=label,
            profile=profile_of_key(session_key),
            parent_session_id=parent,
            title=title,
            message_count=message_count,
        )

    def _create(self, source: SessionSource, session_key: str, now: float) -> SessionEntry | None:
        Route, Session = self.models.route, self.models.session
        session = self._new_session_item(session_key, now, source.platform, source.description)
        rules = self.rules.for_key(session_key)
        deadline = next_deadline(rules.policy_for(source.platform, source.chat_type), now, rules.time_zone)
        route = Route(
            session_key,
            session_id=session.session_id,
            revision=1,
            execution_generation=0,
            created_at=now,
            updated_at=now,
            platform=source.platform,
            chat_type=source.chat_type,
            display_name=source.description,
            origin=json.dumps(source.to_dict(), sort_keys=True),
            last_activity_at=now,
            activity_shard=_shard(session_key),
            policy_shard=_shard(session_key) if deadline is not None else None,
            policy_deadline=deadline,
        )
        try:
            with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                tx.save(route, condition=Route.session_key.does_not_exist())
                tx.save(session, condition=Session.session_id.does_not_exist())
        except TransactWriteError as exc:
            if _lost_race(exc):
                return None
            raise
        return _entry(route, created=True)

    def _replace(
        self,
        source: SessionSource | None,
        old: RouteModelBase,
        now: float,
        reason: str,
        *,
        auto_reset: bool,
        had_activity: bool,
        end_old: bool,
        fence: Condition | None = None,
    ) -> SessionEntry | None:
        """Point the route at a new session (fenced on the revision read, or on `fence`); the old
        session ends with `reason`. None when another writer changed the route first."""
        Route, Session = self.models.route, self.models.session
        platform = source.platform if source else old.platform
        chat_type = source.chat_type if source else old.chat_type
        label = source.description if source else old.display_name
        origin = json.dumps(source.to_dict(), sort_keys=True) if source else old.origin
        session = self._new_session_item(old.session_key, now, platform, label)
        actions: list[Action] = [
            *self._bump(now),
            *self._deadline_actions(old.session_key, platform, chat_type, now),
            Route.session_id.set(session.session_id),
            Route.execution_generation.set(Route.execution_generation + 1),
            Route.platform.set(platform),
            Route.chat_type.set(chat_type),
            Route.suspended.set(False),
            Route.resume_pending.set(False),
            Route.resume_reason.remove(),
            Route.resume_marked_at.remove(),
            Route.failed_recoveries.set(0),
            Route.expiry_finalized.set(False),
            Route.is_fresh_reset.set(True),
            Route.was_auto_reset.set(auto_reset),
            Route.reset_had_activity.set(had_activity),
            Route.prev_session_id.set(old.session_id),
            Route.stop_turn_id.remove(),
        ]
        actions.append(Route.auto_reset_reason.set(reason) if auto_reset else Route.auto_reset_reason.remove())
        actions.append(Route.display_name.set(label) if label else Route.display_name.remove())
        if origin:
            actions.append(Route.origin.set(origin))
        condition = fence if fence is not None else Route.revision == old.revision
        try:
            with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                tx.update(Route(old.session_key), actions=actions, condition=condition)
                tx.save(session, condition=Session.session_id.does_not_exist())
                if end_old:
                    tx.update(
                        Session(old.session_id),
                        actions=[Session.ended_at.set(now), Session.end_reason.set(reason)],
                        condition=Session.session_id.exists() & Session.ended_at.does_not_exist(),
                    )
        except TransactWriteError as exc:
            if _lost_race(exc):  # a fenced caller (reset) reports None as stale
                return None
            raise
        fresh = self._route(old.session_key)
        if fresh is None:
            return None  # deleted right after: the caller reads again (or reports a conflict)
        if fresh.session_id != session.session_id:
            return _entry(fresh)  # replaced again already: the newer session is the one to use
        return _entry(fresh, created=True, reset_reason=reason)

    def get_session(self, session_id: str) -> SessionInfo | None:
        item = self._session_item(session_id)
        return _info(item) if item is not None else None

    def list_sessions(self, profile: str, *, limit: int = 20, before: float | None = None) -> list[SessionInfo]:
        Session = self.models.session
        condition = Session.started_at < before if before is not None else None
        items = Session.by_profile.query(  # type: ignore[attr-defined]
            profile, condition, scan_index_forward=False, limit=limit
        )
        return [_info(item) for item in items][:limit]

    def find_session_by_title(self, profile: str, title: str) -> SessionInfo | None:
        _, key = normalize_title(title)
        try:
            claim = self.models.message.get(_titles_partition(profile), marker_seq(key), consistent_read=True)
        except DoesNotExist:
            return None
        item = self._session_item(claim.content or "")
        return _info(item) if item is not None and (item.title or "").casefold() == key else None

    def search(self, profile: str, query: str, *, limit: int = 20, sessions: int = 50) -> list[SearchHit]:
        needle = query.strip().casefold()
        if not needle:
            raise InvalidSessionRequest("search for at least one character")
        Message = self.models.message
        hits: list[SearchHit] = []
        for info in self.list_sessions(profile, limit=sessions):
            item = self._session_item(info.session_id)
            hidden = _ranges(item.hidden_ranges if item else None)
            for row in Message.query(info.session_id, Message.seq > 0, scan_index_forward=False):
                if not row.active or is_hidden(int(row.seq), hidden):
                    continue
                hit = search_hit(info, _row(row), needle)
                if hit is not None:
                    hits.append(hit)
                    if len(hits) >= limit:
                        return hits
        return hits

    # -- transcript -------------------------------------------------------------------------

    def _last_seq(self, session_id: str) -> int:
        Message = self.models.message
        for row in Message.query(session_id, Message.seq > 0, consistent_read=True, scan_index_forward=False, limit=1):
            return int(row.seq)
        return 0

    def append_message(
        self,
        session_id: str,
        role: str,
        content: str,
        now: float,
        *,
        dedupe_key: str | None = None,
        turn_id: str | None = None,
        sender_name: str | None = None,
        platform_message_id: str | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> int:
        Message, Session = self.models.message, self.models.session
        for attempt in range(_APPEND_ATTEMPTS):
            seq = self._last_seq(session_id) + 1
            row = Message(
                session_id,
                seq,
                role=role,
                content=content,
                created_at=now,
                active=True,
                turn_id=turn_id,
                sender_name=sender_name,
                platform_message_id=platform_message_id,
                dedupe_key=dedupe_key,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
            )
            try:
                with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                    tx.save(row, condition=Message.seq.does_not_exist())
                    if dedupe_key:
                        marker = Message(session_id, marker_seq(dedupe_key), dedupe_key=dedupe_key, role="marker")
                        marker.content = str(seq)
                        tx.save(marker, condition=Message.seq.does_not_exist())
                    # Token usage rides in the same transaction, so a repeated append counts nothing twice.
                    counters: list[Action] = [Session.message_count.add(1)]
                    if input_tokens:
                        counters.append(Session.input_tokens.add(input_tokens))
                    if output_tokens:
                        counters.append(Session.output_tokens.add(output_tokens))
                    tx.update(Session(session_id), actions=counters, condition=Session.session_id.exists())
            except TransactWriteError as exc:
                codes = cancellation_codes(exc)
                if dedupe_key and len(codes) > 1 and codes[1] == CONDITION_FAILED:
                    existing = Message.get(session_id, marker_seq(dedupe_key), consistent_read=True)
                    return int(existing.content or 0)
                if codes and codes[-1] == CONDITION_FAILED:
                    raise SessionNotFound("no such session (deleted?)") from None
                if (codes and codes[0] == CONDITION_FAILED) or TRANSACTION_CONFLICT in codes:
                    backoff(attempt)  # another writer took this seq (or holds the item); read the tail again
                    continue
                raise
            return seq
        raise Conflict(f"could not append to the transcript after {_APPEND_ATTEMPTS} attempts")

    def turn_started(self, session_id: str, dedupe_key: str) -> bool:
        try:
            marker = self.models.message.get(session_id, marker_seq(dedupe_key), consistent_read=True)
        except DoesNotExist:
            return False
        return marker.turn_id is not None

    def mark_turn_started(self, session_id: str, dedupe_key: str, turn_id: str) -> None:
        Message = self.models.message
        Message(session_id, marker_seq(dedupe_key)).update(
            actions=[Message.turn_id.set(turn_id)], condition=Message.dedupe_key == dedupe_key
        )

    def transcript(
        self, session_id: str, *, upto_seq: int | None = None, limit: int | None = None
    ) -> list[TranscriptRow]:
        hidden = _ranges(self._require_session(session_id).hidden_ranges)
        return self._active_rows(session_id, hidden, upto_seq=upto_seq, limit=limit)

    def _active_rows(
        self, session_id: str, hidden: list[tuple[int, int]], *, upto_seq: int | None = None, limit: int | None = None
    ) -> list[TranscriptRow]:
        Message = self.models.message
        condition = Message.seq.between(1, upto_seq) if upto_seq is not None else Message.seq > 0
        rows: list[TranscriptRow] = []
        for item in Message.query(session_id, condition, consistent_read=True, scan_index_forward=False):
            if not item.active or is_hidden(int(item.seq), hidden):
                continue
            rows.append(_row(item))
            if limit is not None and len(rows) >= limit:
                break
        rows.reverse()
        return rows

    # -- usage and recovery -----------------------------------------------------------------

    def record_usage(
        self,
        session_id: str,
        turn_id: str,
        usage: TokenUsage,
        now: float,
        *,
        model: str | None = None,
        provider: str | None = None,
    ) -> bool:
        Message, Session = self.models.message, self.models.session
        cost = estimate_cost(usage, model, provider)
        marker = Message(
            session_id,
            marker_seq(f"usage|{turn_id}"),
            role="usage",
            turn_id=turn_id,
            created_at=now,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            prompt_tokens=usage.prompt_tokens,
            cost_usd=cost.usd,
            cost_status=cost.status,
        )
        counter = {"estimated": Session.estimated_turns, "unknown": Session.unknown_turns}.get(
            cost.status, Session.included_turns
        )
        actions: list[Action] = [
            Session.input_tokens.add(usage.input_tokens),
            Session.output_tokens.add(usage.output_tokens),
            Session.cache_read_tokens.add(usage.cache_read_tokens),
            Session.cache_write_tokens.add(usage.cache_write_tokens),
            Session.cost_usd.add(cost.usd),
            counter.add(1),
        ]
        if usage.prompt_tokens is not None:
            actions.append(Session.last_prompt_tokens.set(usage.prompt_tokens))
        duplicate = Conflict("already recorded")

        def write(tx: TransactWrite) -> None:
            tx.save(marker, condition=Message.seq.does_not_exist())
            tx.update(Session(session_id), actions=actions, condition=Session.session_id.exists())

        try:
            self._transact(write, [duplicate, SessionNotFound("no such session")])
        except Conflict as exc:
            if exc is duplicate:
                return False
            raise
        return True

    def turn_usage(self, session_id: str, turn_id: str) -> TokenUsage | None:
        try:
            m = self.models.message.get(session_id, marker_seq(f"usage|{turn_id}"), consistent_read=True)
        except DoesNotExist:
            return None
        return TokenUsage(
            int(m.input_tokens or 0),
            int(m.output_tokens or 0),
            int(m.cache_read_tokens or 0),
            int(m.cache_write_tokens or 0),
            int(m.prompt_tokens) if m.prompt_tokens is not None else None,
        )

    def turn_succeeded(self, session_key: str, session_id: str, now: float) -> None:
        Route = self.models.route

        def change(route: RouteModelBase) -> list[Action] | None:
            if route.session_id != session_id:
                return None
            if not (route.resume_pending or route.failed_recoveries or route.is_fresh_reset):
                return None
            return [
                *self._bump(now),
                Route.resume_pending.set(False),
                Route.resume_reason.remove(),
                Route.resume_marked_at.remove(),
                Route.failed_recoveries.set(0),
                Route.is_fresh_reset.set(False),
            ]

        self._cas_route(session_key, change)

    def _lease_cleared(self) -> list[Action]:
        """The route's lease released: its attributes, and a stop asked of its turn, removed."""
        Route = self.models.route
        return [getattr(Route, name).remove() for name in (*LEASE_ATTRS, "stop_turn_id")]

    def _failure_actions(self, route: RouteModelBase, reason: str, now: float) -> list[Action]:
        Route = self.models.route
        failures = int(route.failed_recoveries or 0) + 1 if route.resume_pending else 0
        actions = [
            *self._bump(now),
            Route.resume_pending.set(True),
            Route.resume_reason.set(reason),
            Route.resume_marked_at.set(now),
            Route.failed_recoveries.set(failures),
        ]
        if failures >= MAX_FAILED_RECOVERIES:
            actions.append(Route.suspended.set(True))
        return actions

    def turn_failed(self, session_key: str, session_id: str, reason: str, now: float) -> bool:
        def change(route: RouteModelBase) -> list[Action] | None:
            return self._failure_actions(route, reason, now) if route.session_id == session_id else None

        route = self._cas_route(session_key, change)
        return bool(route is not None and route.suspended)

    def request_stop(self, session_key: str, now: float) -> str | None:
        Route = self.models.route
        route = self._route(session_key)
        if route is None or not route.lease_turn_id:
            return None
        turn_id = route.lease_turn_id
        try:
            route.update(
                actions=[*self._bump(now), Route.stop_turn_id.set(turn_id)],
                condition=Route.lease_turn_id == turn_id,
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return None  # that turn ended meanwhile
            raise
        return turn_id

    def stop_requested(self, session_key: str, turn_id: str) -> bool:
        route = self._route(session_key)
        return route is not None and route.stop_turn_id == turn_id

    # -- fenced mutations -------------------------------------------------------------------

    def _route_update(
        self, tx: TransactWrite, session_key: str, fence: Fence, *, generation: bool, actions: list[Action]
    ) -> None:
        Route = self.models.route
        tx.update(Route(session_key), actions=actions, condition=self._fence_condition(fence, generation=generation))

    def rename(self, session_id: str, title: str, *, fence: Fence, now: float) -> SessionInfo:
        text, key = normalize_title(title)
        Message, Session = self.models.message, self.models.session
        session = self._require_session(session_id)
        self._fenced_route(session.session_key, fence, generation=False)
        profile = session.profile or profile_of_key(session.session_key)
        partition = _titles_partition(profile)
        old_key = (session.title or "").casefold()

        def write(tx: TransactWrite) -> None:
            self._route_update(tx, session.session_key, fence, generation=False, actions=self._bump(now))
            tx.update(Session(session_id), actions=[Session.title.set(text)], condition=Session.session_id.exists())
            if old_key != key:
                claim = Message(partition, marker_seq(key), role="title", content=session_id, dedupe_key=key)
                tx.save(claim, condition=Message.seq.does_not_exist() | (Message.content == session_id))
                if old_key:
                    tx.delete(
                        Message(partition, marker_seq(old_key)),
                        condition=Message.seq.does_not_exist() | (Message.content == session_id),
                    )

        self._transact(
            write, [_stale(), SessionNotFound("no such session"), Conflict("another session has that title"), None]
        )
        return _info(self._require_session(session_id))

    def delete_session(self, session_id: str, *, fence: Fence, now: float) -> None:
        Route, Message, Session = self.models.route, self.models.message, self.models.session
        session = self._require_session(session_id)
        key = session.session_key
        route = self._fenced_route(key, fence, generation=True)
        title_key = (session.title or "").casefold()
        profile = session.profile or profile_of_key(key)

        def write(tx: TransactWrite) -> None:
            condition = self._fence_condition(fence, generation=True)
            if route.session_id == session_id:
                tx.delete(Route(key), condition=condition & (Route.session_id == session_id))
            else:
                tx.update(Route(key), actions=self._bump(now), condition=condition)
            tx.delete(Session(session_id), condition=Session.session_id.exists())
            if title_key:
                tx.delete(
                    Message(_titles_partition(profile), marker_seq(title_key)),
                    condition=Message.seq.does_not_exist() | (Message.content == session_id),
                )

        self._transact(write, [_stale(), SessionNotFound("no such session"), None])
        # The transcript goes after its session: a crash here leaves rows no read can reach.
        with Message.batch_write() as batch:
            for item in Message.query(session_id, attributes_to_get=["session_id", "seq"]):
                batch.delete(item)

    def _hide(
        self,
        session: SessionModelBase,
        to_seq: int,
        first: TranscriptRow | None,
        fence: Fence,
        now: float,
        *,
        generation: bool,
        removed: list[TranscriptRow],
    ) -> UndoResult:
        Session, Message = self.models.session, self.models.message
        session_id = session.session_id
        hidden = hide_after(_ranges(session.hidden_ranges), to_seq, self._last_seq(session_id))
        previous = session.hidden_ranges

        def write(tx: TransactWrite) -> None:
            self._route_update(tx, session.session_key, fence, generation=generation, actions=self._bump(now))
            same = Session.hidden_ranges.does_not_exist() if previous is None else Session.hidden_ranges == previous
            tx.update(
                Session(session_id),
                actions=[Session.hidden_ranges.set(json.dumps(hidden))],
                condition=Session.session_id.exists() & same,
            )

        self._transact(write, [_stale(), _stale()])
        for row in removed:  # the rows' own flags (the hidden ranges already hide them)
            Message(session_id, row.seq).update(actions=[Message.active.set(False)])
        route = self._route(session.session_key)
        if route is None:
            raise SessionNotFound("the session has no routing entry")
        return UndoResult(len(removed), to_seq, first.content if first else None, _entry(route))

    def rewind(self, session_id: str, to_seq: int, *, fence: Fence, now: float) -> UndoResult:
        if to_seq < 0:
            raise InvalidSessionRequest("rewind to a seq of 0 or more")
        session = self._require_session(session_id)
        self._fenced_route(session.session_key, fence, generation=True)
        rows = self._active_rows(session_id, _ranges(session.hidden_ranges))
        removed = [r for r in rows if r.seq > to_seq]
        return self._hide(session, to_seq, None, fence, now, generation=True, removed=removed)

    def undo(self, session_id: str, turns: int, *, fence: Fence, now: float) -> UndoResult:
        session = self._require_session(session_id)
        route = self._fenced_route(session.session_key, fence, generation=False)
        rows = self._active_rows(session_id, _ranges(session.hidden_ranges))
        to_seq, first = undo_point(rows, turns)
        if first is None:
            return UndoResult(0, to_seq, None, _entry(route))
        removed = [r for r in rows if r.seq > to_seq]
        return self._hide(session, to_seq, first, fence, now, generation=False, removed=removed)

    def retry(self, session_id: str, *, fence: Fence, now: float) -> UndoResult:
        return self.undo(session_id, 1, fence=fence, now=now)

    def reset(self, session_key: str, *, fence: Fence, now: float, reason: str = "forced") -> SessionEntry:
        route = self._fenced_route(session_key, fence, generation=True)
        session = self._session_item(route.session_id)
        replaced = self._replace(
            None,
            route,
            now,
            reason,
            auto_reset=False,
            had_activity=session is not None and int(session.message_count or 0) > 0,
            end_old=session is not None and session.ended_at is None,
            fence=self._fence_condition(fence, generation=True),
        )
        if replaced is None:
            raise _stale()
        return replaced

    def _point_actions(self, route: RouteModelBase, session_id: str, now: float) -> list[Action]:
        Route = self.models.route
        return [
            *self._bump(now),
            *self._deadline_actions(route.session_key, route.platform, route.chat_type, now),
            Route.session_id.set(session_id),
            Route.execution_generation.set(Route.execution_generation + 1),
            Route.prev_session_id.set(route.session_id),
            Route.resume_pending.set(False),
            Route.resume_reason.remove(),
            Route.resume_marked_at.remove(),
            Route.failed_recoveries.set(0),
            Route.expiry_finalized.set(False),
            Route.suspended.set(False),
        ]

    def _copy_rows(self, child_id: str, rows: list[TranscriptRow]) -> None:
        """Rows of a child session, written before the session item that makes them reachable."""
        Message = self.models.message
        with Message.batch_write() as batch:
            for seq, row in enumerate(rows, start=1):
                batch.save(
                    Message(
                        child_id,
                        seq,
                        role=row.role,
                        content=row.content,
                        created_at=row.created_at,
                        active=True,
                        turn_id=row.turn_id,
                        sender_name=row.sender_name,
                        platform_message_id=row.platform_message_id,
                    )
                )

    def branch(self, session_id: str, *, fence: Fence, now: float, title: str | None = None) -> SessionEntry:
        Route, Message, Session = self.models.route, self.models.message, self.models.session
        parent = self._require_session(session_id)
        key = parent.session_key
        route = self._fenced_route(key, fence, generation=True)
        normalized = normalize_title(title) if title else None
        rows = self._active_rows(session_id, _ranges(parent.hidden_ranges))
        child = self._new_session_item(
            key,
            now,
            parent.platform,
            parent.source_label,
            parent=session_id,
            title=normalized[0] if normalized else None,
            message_count=len(rows),
        )
        self._copy_rows(child.session_id, rows)
        profile = parent.profile or profile_of_key(key)

        def write(tx: TransactWrite) -> None:
            self._route_update(
                tx, key, fence, generation=True, actions=self._point_actions(route, child.session_id, now)
            )
            tx.save(child, condition=Session.session_id.does_not_exist())
            if normalized:
                claim = Message(
                    _titles_partition(profile),
                    marker_seq(normalized[1]),
                    role="title",
                    content=child.session_id,
                    dedupe_key=normalized[1],
                )
                tx.save(claim, condition=Message.seq.does_not_exist())

        self._transact(write, [_stale(), None, Conflict("another session has that title")])
        return _entry(Route.get(key, consistent_read=True), created=True)

    def compress(self, session_id: str, summary: str, *, fence: Fence, now: float, keep_last: int = 0) -> SessionEntry:
        if not summary.strip():
            raise InvalidSessionRequest("a compression summary may not be empty")
        Route, Session = self.models.route, self.models.session
        parent = self._require_session(session_id)
        if parent.ended_at is not None:
            raise Conflict("the session has already ended")
        key = parent.session_key
        route = self._fenced_route(key, fence, generation=True)
        kept = self._active_rows(session_id, _ranges(parent.hidden_ranges))[-keep_last:] if keep_last > 0 else []
        rows = [TranscriptRow(1, "system", summary, now), *kept]
        child = self._new_session_item(
            key, now, parent.platform, parent.source_label, parent=session_id, message_count=len(rows)
        )
        self._copy_rows(child.session_id, rows)
        moves_route = route.session_id == session_id

        def write(tx: TransactWrite) -> None:
            actions = self._point_actions(route, child.session_id, now) if moves_route else self._bump(now)
            self._route_update(tx, key, fence, generation=True, actions=actions)
            tx.save(child, condition=Session.session_id.does_not_exist())
            tx.update(
                Session(session_id),
                actions=[
                    Session.ended_at.set(now),
                    Session.end_reason.set("compressed"),
                    Session.continued_in.set(child.session_id),
                ],
                condition=Session.session_id.exists() & Session.ended_at.does_not_exist(),
            )

        self._transact(write, [_stale(), None, Conflict("the session has already ended")])
        return _entry(Route.get(key, consistent_read=True), created=moves_route)

    def set_model_override(
        self, session_key: str, override: ModelOverride | None, *, fence: Fence, now: float
    ) -> SessionEntry:
        Route = self.models.route
        self._fenced_route(session_key, fence, generation=True)
        value = Route.model_override.set(json.dumps(override.to_dict())) if override else Route.model_override.remove()

        def write(tx: TransactWrite) -> None:
            self._route_update(tx, session_key, fence, generation=True, actions=[*self._bump(now), value])

        self._transact(write, [_stale()])
        return _entry(Route.get(session_key, consistent_read=True))

    def switch_session(self, session_key: str, session_id: str, *, fence: Fence, now: float) -> SessionEntry:
        Route, Session = self.models.route, self.models.session
        target = self._require_session(session_id)
        if (target.profile or profile_of_key(target.session_key)) != profile_of_key(session_key):
            raise SessionNotFound("no such session")  # another profile's sessions do not exist here
        if target.ended_at is not None and target.continued_in:
            raise Conflict("the session was continued in another one")
        route = self._fenced_route(session_key, fence, generation=True)
        current = self._session_item(route.session_id) if route.session_id != session_id else None

        def write(tx: TransactWrite) -> None:
            self._route_update(
                tx, session_key, fence, generation=True, actions=self._point_actions(route, session_id, now)
            )
            tx.update(
                Session(session_id),
                actions=[Session.session_key.set(session_key), Session.ended_at.remove(), Session.end_reason.remove()],
                condition=Session.session_id.exists() & Session.continued_in.does_not_exist(),
            )
            if current is not None and current.ended_at is None:
                tx.update(
                    Session(current.session_id),
                    actions=[Session.ended_at.set(now), Session.end_reason.set("switched")],
                    condition=Session.ended_at.does_not_exist(),
                )

        self._transact(write, [_stale(), Conflict("the session was continued in another one"), _stale()])
        return _entry(Route.get(session_key, consistent_read=True), created=True)

    def end_session(self, session_id: str, reason: str, now: float) -> bool:
        Session = self.models.session
        try:
            Session(session_id).update(
                actions=[Session.ended_at.set(now), Session.end_reason.set(reason)],
                condition=Session.session_id.exists() & Session.ended_at.does_not_exist(),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def mark_memory_flushed(self, session_id: str, now: float) -> None:
        Session = self.models.session
        try:
            Session(session_id).update(
                actions=[Session.memory_flushed_at.set(now)], condition=Session.session_id.exists()
            )
        except UpdateError as exc:
            if not condition_failed(exc):  # a deleted session has nobody waiting on it
                raise

    def memory_flushed(self, session_id: str) -> bool:
        item = self._session_item(session_id)
        return item is not None and item.memory_flushed_at is not None

    # -- the sweep --------------------------------------------------------------------------

    def due_for_expiry(self, now: float, limit: int = 100) -> list[SessionEntry]:
        Route = self.models.route
        due = _oldest_first(Route.by_policy_deadline, Route.policy_deadline < now, "policy_deadline", limit)  # type: ignore[attr-defined]
        return [_entry(r) for r in due if not r.expiry_finalized][:limit]

    def claim_expiry(self, entry: SessionEntry, now: float) -> SessionEntry | None:
        Route = self.models.route
        route = Route(entry.session_key)
        try:
            route.update(
                actions=[
                    *self._bump(now),
                    Route.expiry_finalized.set(True),
                    Route.policy_shard.remove(),
                    Route.policy_deadline.remove(),
                ],
                condition=(Route.revision == entry.revision)
                & (Route.expiry_finalized.does_not_exist() | (Route.expiry_finalized == False)),  # noqa: E712
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return None
            raise
        return _entry(route)

    def release_expiry_claim(self, entry: SessionEntry, now: float) -> bool:
        """Undo a claim whose flush could not start (`entry` is the claimed entry), so the next
        sweep tries again."""
        Route = self.models.route
        last = entry.last_activity_at if entry.last_activity_at is not None else entry.updated_at
        try:
            Route(entry.session_key).update(
                actions=[
                    *self._bump(now),
                    Route.expiry_finalized.set(False),
                    *self._deadline_actions(entry.session_key, entry.platform, entry.chat_type, last),
                ],
                condition=(Route.revision == entry.revision) & (Route.expiry_finalized == True),  # noqa: E712
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def idle_routes(self, idle_before: float, limit: int = 100) -> list[SessionEntry]:
        Route = self.models.route
        idle = _oldest_first(Route.by_activity, Route.last_activity_at < idle_before, "last_activity_at", limit)  # type: ignore[attr-defined]
        return [_entry(r) for r in idle[:limit]]

    def prune_route(self, entry: SessionEntry) -> bool:
        Route = self.models.route
        try:
            Route(entry.session_key).delete(
                condition=(Route.revision == entry.revision) & Route.lease_token.does_not_exist()
            )
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    # -- the turn lease ---------------------------------------------------------------------

    def acquire(self, session_key: str, turn_id: str, token: str, now: float, ttl_seconds: int) -> bool:
        Route = self.models.route
        try:
            Route(session_key).update(
                actions=[
                    Route.lease_token.set(token),
                    Route.lease_turn_id.set(turn_id),
                    Route.lease_started_at.set(now),
                    Route.lease_expires_at.set(now + ttl_seconds),
                    Route.lease_shard.set(LEASE_SHARD),
                    Route.execution_generation.set(Route.execution_generation + 1),
                    Route.revision.set(Route.revision + 1),
                ],
                condition=Route.session_key.exists()
                & (Route.lease_token.does_not_exist() | (Route.lease_token == token)),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def release(self, session_key: str, token: str) -> bool:
        Route = self.models.route
        try:
            Route(session_key).update(
                actions=[*self._lease_cleared(), Route.revision.set(Route.revision + 1)],
                condition=Route.lease_token == token,
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def expired(self, now: float, limit: int = 100) -> list[ExpiredLease]:
        Route = self.models.route
        found: list[ExpiredLease] = []
        for item in Route.by_lease_expiry.query(  # type: ignore[attr-defined]
            LEASE_SHARD, Route.lease_expires_at < now, limit=limit
        ):
            if item.lease_token:
                found.append(
                    ExpiredLease(item.session_key, item.lease_token, item.lease_turn_id, float(item.lease_expires_at))
                )
        return found

    def expire(self, lease: ExpiredLease, now: float) -> bool:
        """Clear the lease by its token and count the cut-short turn (see `turn_failed`)."""
        Route = self.models.route

        def change(route: RouteModelBase) -> list[Action] | None:
            if route.lease_token != lease.lease_token or float(route.lease_expires_at or 0) >= now:
                return None
            return [
                *self._failure_actions(route, "lease_expired", now),
                *self._lease_cleared(),
            ]

        guard = (Route.lease_token == lease.lease_token) & (Route.lease_expires_at < now)
        return self._cas_route(lease.session_key, change, guard) is not None
