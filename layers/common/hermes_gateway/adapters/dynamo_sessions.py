"""DynamoDB adapter for the session store and the turn lease (pynamodb).

Single flight is a transaction whose route put is conditioned on `attribute_not_exists`; a loser
reads the winner's item. Replacing a session is a transaction conditioned on the `revision` that
was read. Every condition failure becomes `Conflict` (or a retry) here and nowhere else.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
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
from hermes_gateway.adapters.models import LEASE_SHARD, BoundModels, RouteModelBase, dynamodb_endpoint
from hermes_gateway.domain.sessions import ExpiredLease, SessionEntry, TranscriptRow, new_session_id
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import Conflict, TransientError
from hermes_gateway.resources import Bindings

_MAX_ATTEMPTS = 8
_APPEND_ATTEMPTS = 25  # appends to one session race only when many writers share it


def _lost_race(exc: TransactWriteError) -> bool:
    """Another writer got there first (its condition held, or its transaction held the item)."""
    codes = cancellation_codes(exc)
    if TRANSACTION_CONFLICT in codes:
        backoff(1)
    return CONDITION_FAILED in codes or TRANSACTION_CONFLICT in codes


def _dedupe_seq(dedupe_key: str) -> int:
    """Markers sit at negative sort keys in the session's own partition (48 bits of a hash)."""
    return -(int(hashlib.sha256(dedupe_key.encode()).hexdigest()[:12], 16) + 1)


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
        lease_expires_at=float(route.lease_expires_at) if route.lease_expires_at is not None else None,
        **extra,
    )


@throttling_is_transient_everywhere
class DynamoSessionStore:
    """`SessionStore` and `TurnLease` on the routes, sessions and messages tables."""

    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        self._region = region
        self._host = dynamodb_endpoint()
        self.models = BoundModels(bindings, region, self._host)

    @cached_property
    def _connection(self) -> Connection:
        # One connection (one botocore client, which is thread-safe) for every transaction.
        return Connection(region=self._region, host=self._host)

    # -- sessions ---------------------------------------------------------------------------

    def get_route(self, session_key: str) -> SessionEntry | None:
        try:
            return _entry(self.models.route.get(session_key, consistent_read=True))
        except DoesNotExist:
            return None

    def get_or_create(
        self,
        source: SessionSource,
        session_key: str,
        now: float,
        *,
        force_new: bool = False,
        touch_activity: bool = True,
    ) -> SessionEntry:
        Route = self.models.route
        for _ in range(_MAX_ATTEMPTS):
            try:
                route = Route.get(session_key, consistent_read=True)
            except DoesNotExist:
                created = self._create(source, session_key, now)
                if created is not None:
                    return created
                continue  # lost the race: read the winner's entry
            reason = "forced" if force_new else self._reset_reason(route)
            if reason is None:
                if touch_activity:
                    self._touch(route, now)
                return _entry(route)
            replaced = self._replace(source, route, now, reason)
            if replaced is not None:
                return replaced
            if force_new:
                # Someone else replaced it concurrently; their new session is the one to use.
                return _entry(Route.get(session_key, consistent_read=True))
        raise TransientError(f"session routing did not settle after {_MAX_ATTEMPTS} attempts")

    def _reset_reason(self, route: RouteModelBase) -> str | None:
        if route.suspended:
            return "suspended"
        try:
            session = self.models.session.get(route.session_id, consistent_read=True)
        except DoesNotExist:
            return "stale_route"
        if session.ended_at is not None:
            return "stale_route"
        return None

    def _touch(self, route: RouteModelBase, now: float) -> None:
        Route = self.models.route
        try:
            route.update(actions=[Route.updated_at.set(now)], condition=Route.session_id == route.session_id)
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def _new_items(self, source: SessionSource, session_key: str, now: float) -> tuple[Any, Any]:
        session_id = new_session_id(now)
        route = self.models.route(
            session_key,
            session_id=session_id,
            revision=1,
            execution_generation=0,
            created_at=now,
            updated_at=now,
            platform=source.platform,
            chat_type=source.chat_type,
            display_name=source.description,
        )
        session = self.models.session(
            session_id,
            session_key=session_key,
            started_at=now,
            platform=source.platform,
            source_label=source.description,
        )
        return route, session

    def _create(self, source: SessionSource, session_key: str, now: float) -> SessionEntry | None:
        Route, Session = self.models.route, self.models.session
        route, session = self._new_items(source, session_key, now)
        try:
            with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                tx.save(route, condition=Route.session_key.does_not_exist())
                tx.save(session, condition=Session.session_id.does_not_exist())
        except TransactWriteError as exc:
            if _lost_race(exc):
                return None
            raise
        return _entry(route, created=True)

    def _replace(self, source: SessionSource, old: RouteModelBase, now: float, reason: str) -> SessionEntry | None:
        Route, Session = self.models.route, self.models.session
        fresh, session = self._new_items(source, old.session_key, now)
        try:
            with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                tx.update(
                    old,
                    actions=[
                        Route.session_id.set(fresh.session_id),
                        Route.revision.set(Route.revision + 1),
                        Route.execution_generation.set(Route.execution_generation + 1),
                        Route.updated_at.set(now),
                        Route.suspended.set(False),
                        Route.resume_pending.set(False),
                        Route.resume_reason.remove(),
                        Route.resume_marked_at.remove(),
                    ],
                    condition=Route.revision == old.revision,
                )
                tx.save(session, condition=Session.session_id.does_not_exist())
                if reason != "stale_route":
                    tx.update(
                        Session(old.session_id),
                        actions=[Session.ended_at.set(now), Session.end_reason.set(reason)],
                        condition=Session.session_id.exists() & Session.ended_at.does_not_exist(),
                    )
        except TransactWriteError as exc:
            if _lost_race(exc):
                return None
            raise
        # What this call wrote (a re-read could already show a later replacement).
        fresh.revision = int(old.revision) + 1
        fresh.execution_generation = int(old.execution_generation) + 1
        fresh.created_at = old.created_at
        return _entry(fresh, created=True, reset_reason=reason, prev_session_id=old.session_id)

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
                        marker = Message(session_id, _dedupe_seq(dedupe_key), dedupe_key=dedupe_key, role="marker")
                        marker.content = str(seq)
                        tx.save(marker, condition=Message.seq.does_not_exist())
                    # Token usage rides in the same transaction, so a repeated append counts nothing twice.
                    counters: list[Action] = [Session.message_count.add(1)]
                    if input_tokens:
                        counters.append(Session.input_tokens.add(input_tokens))
                    if output_tokens:
                        counters.append(Session.output_tokens.add(output_tokens))
                    tx.update(Session(session_id), actions=counters)
            except TransactWriteError as exc:
                codes = cancellation_codes(exc)
                if dedupe_key and len(codes) > 1 and codes[1] == CONDITION_FAILED:
                    existing = Message.get(session_id, _dedupe_seq(dedupe_key), consistent_read=True)
                    return int(existing.content or 0)
                if (codes and codes[0] == CONDITION_FAILED) or TRANSACTION_CONFLICT in codes:
                    backoff(attempt)  # another writer took this seq (or holds the item); read the tail again
                    continue
                raise
            return seq
        raise Conflict(f"could not append to the transcript after {_APPEND_ATTEMPTS} attempts")

    def turn_started(self, session_id: str, dedupe_key: str) -> bool:
        try:
            marker = self.models.message.get(session_id, _dedupe_seq(dedupe_key), consistent_read=True)
        except DoesNotExist:
            return False
        return marker.turn_id is not None

    def mark_turn_started(self, session_id: str, dedupe_key: str, turn_id: str) -> None:
        Message = self.models.message
        Message(session_id, _dedupe_seq(dedupe_key)).update(
            actions=[Message.turn_id.set(turn_id)], condition=Message.dedupe_key == dedupe_key
        )

    def transcript(
        self, session_id: str, *, upto_seq: int | None = None, limit: int | None = None
    ) -> list[TranscriptRow]:
        Message = self.models.message
        condition = Message.seq.between(1, upto_seq) if upto_seq is not None else Message.seq > 0
        rows: list[TranscriptRow] = []
        for item in Message.query(session_id, condition, consistent_read=True, scan_index_forward=False):
            if not item.active:
                continue
            rows.append(
                TranscriptRow(
                    seq=int(item.seq),
                    role=item.role or "user",
                    content=item.content or "",
                    created_at=float(item.created_at or 0),
                    sender_name=item.sender_name,
                    turn_id=item.turn_id,
                    platform_message_id=item.platform_message_id,
                )
            )
            if limit is not None and len(rows) >= limit:
                break
        rows.reverse()
        return rows

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
                actions=[
                    Route.lease_token.remove(),
                    Route.lease_turn_id.remove(),
                    Route.lease_started_at.remove(),
                    Route.lease_expires_at.remove(),
                    Route.lease_shard.remove(),
                ],
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
        Route = self.models.route
        try:
            Route(lease.session_key).update(
                actions=[
                    Route.lease_token.remove(),
                    Route.lease_turn_id.remove(),
                    Route.lease_started_at.remove(),
                    Route.lease_expires_at.remove(),
                    Route.lease_shard.remove(),
                    Route.resume_pending.set(True),
                    Route.resume_reason.set("lease_expired"),
                    Route.resume_marked_at.set(now),
                ],
                condition=(Route.lease_token == lease.lease_token) & (Route.lease_expires_at < now),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True
