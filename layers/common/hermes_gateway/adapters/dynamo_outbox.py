"""The outbox on DynamoDB: each reply chunk is recorded before it is sent."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError
from pynamodb.expressions.update import Action

from hermes_gateway.adapters.dynamo_errors import condition_failed, throttling_is_transient_everywhere
from hermes_gateway.adapters.models import OutboxModelBase, bind_outbox, dynamodb_endpoint
from hermes_gateway.resources import Bindings

RETENTION_SECONDS = 30 * 24 * 3600
SEND_CLAIM_SECONDS = 60  # a claim older than this belongs to a worker that stopped mid-send


@dataclass(frozen=True)
class OutboxEntry:
    delivery_id: str
    platform: str
    chat_id: str | None
    thread_id: str | None
    text: str
    turn_id: str | None
    chunk: int
    chunks: int
    status: str
    attempts: int
    platform_message_id: str | None
    error: str | None
    created_at: float
    updated_at: float
    # quick replies shown under the chunk ([{"label", "reply"}], the message's last chunk only)
    buttons: list[dict[str, str]] | None = None

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def _entry(item: OutboxModelBase) -> OutboxEntry:
    return OutboxEntry(
        delivery_id=item.delivery_id,
        platform=item.platform,
        chat_id=item.chat_id,
        thread_id=item.thread_id,
        text=item.text,
        turn_id=item.turn_id,
        chunk=int(item.chunk),
        chunks=int(item.chunks),
        status=item.status,
        attempts=int(item.attempts),
        platform_message_id=item.platform_message_id,
        error=item.error,
        created_at=float(item.created_at),
        updated_at=float(item.updated_at),
        buttons=json.loads(item.buttons) if item.buttons else None,
    )


@throttling_is_transient_everywhere
class DynamoOutbox:
    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        self.model = bind_outbox(bindings.table("outbox"), region, dynamodb_endpoint())

    def record(
        self,
        delivery_id: str,
        *,
        platform: str,
        chat_id: str | None,
        thread_id: str | None,
        text: str,
        turn_id: str | None,
        chunk: int,
        chunks: int,
        now: float,
        buttons: list[dict[str, str]] | None = None,
    ) -> OutboxEntry:
        """Write the chunk as pending unless it exists; either way return what is stored."""
        Outbox = self.model
        item = Outbox(
            delivery_id,
            platform=platform,
            chat_id=chat_id,
            thread_id=thread_id,
            text=text,
            turn_id=turn_id,
            chunk=chunk,
            chunks=chunks,
            status="pending",
            attempts=0,
            created_at=now,
            updated_at=now,
            expires_at=int(now + RETENTION_SECONDS),
            buttons=json.dumps(buttons) if buttons else None,
        )
        try:
            item.save(condition=Outbox.delivery_id.does_not_exist())
        except PutError as exc:
            if not condition_failed(exc):
                raise
            item = Outbox.get(delivery_id, consistent_read=True)
        return _entry(item)

    def claim(self, delivery_id: str, now: float) -> bool:
        """Take the chunk for sending. False while another worker holds it, or once its fate is
        settled: two deliveries of one job (a queue may hand it over twice) never both send."""
        Outbox = self.model
        try:
            Outbox(delivery_id).update(
                actions=[Outbox.status.set("sending"), Outbox.updated_at.set(now)],
                condition=Outbox.status.is_in("pending", "failed"),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def settle_stale(self, delivery_id: str, now: float, stale_after_seconds: float = SEND_CLAIM_SECONDS) -> bool:
        """A claim older than a send can take belongs to a worker that stopped mid-send: the
        platform may or may not have the chunk. It becomes `unknown` (never resent); True if so."""
        Outbox = self.model
        try:
            Outbox(delivery_id).update(
                actions=[
                    Outbox.status.set("unknown"),
                    Outbox.updated_at.set(now),
                    Outbox.error.set("the worker sending it stopped; the platform may have it"),
                ],
                condition=(Outbox.status == "sending") & (Outbox.updated_at < now - stale_after_seconds),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def reclaim(self, delivery_id: str, claimed_at: float, now: float) -> bool:
        """Take back a claim made at `claimed_at` by the caller, whose send failed for certain but
        could not be recorded: only while the chunk is exactly as that claim left it."""
        Outbox = self.model
        try:
            Outbox(delivery_id).update(
                actions=[Outbox.updated_at.set(now)],
                condition=(Outbox.status == "sending") & (Outbox.updated_at == claimed_at),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def mark(
        self,
        delivery_id: str,
        status: str,
        now: float,
        *,
        platform_message_id: str | None = None,
        error: str | None = None,
    ) -> None:
        Outbox = self.model
        actions: list[Action] = [Outbox.status.set(status), Outbox.updated_at.set(now), Outbox.attempts.add(1)]
        if platform_message_id is not None:
            actions.append(Outbox.platform_message_id.set(platform_message_id))
        if error is not None:
            actions.append(Outbox.error.set(error[:500]))
        Outbox(delivery_id).update(actions=actions)

    def get(self, delivery_id: str) -> OutboxEntry | None:
        try:
            return _entry(self.model.get(delivery_id, consistent_read=True))
        except DoesNotExist:
            return None

    def recent(self, limit: int = 200) -> list[OutboxEntry]:
        """Newest last. A scan: used by local mode's outbox view only, never on a hot path."""
        rows = [_entry(item) for item in self.model.scan()]
        rows.sort(key=lambda e: (e.created_at, e.delivery_id))
        return rows[-limit:]
