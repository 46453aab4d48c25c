"""The outbox on DynamoDB: each reply chunk is recorded, and claimed for sending, before it is sent."""

from __future__ import annotations

import json
import zlib
from typing import Any

from pynamodb.exceptions import DoesNotExist, UpdateError
from pynamodb.expressions.update import Action

from hermes_gateway.adapters.aws import is_throttle
from hermes_gateway.adapters.dynamo_errors import (
    call_condition_failed,
    condition_failed,
    throttling_is_transient_everywhere,
)
from hermes_gateway.adapters.models import OutboxModelBase, bind_outbox, dynamodb_endpoint
from hermes_gateway.domain.outbox import QUEUED, OutboxEntry, QueuedLetter
from hermes_gateway.errors import TransientError
from hermes_gateway.resources import Bindings

RETENTION_SECONDS = 30 * 24 * 3600
SEND_CLAIM_SECONDS = 60  # a claim older than this belongs to a worker that stopped mid-send


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
        media=json.loads(item.media) if item.media else None,
    )


def _letter_fields(letter: dict[str, Any]) -> dict[str, Any]:
    """A letter's attributes: its JSON, zlib-compressed when that saves a tenth or more (a 2,000
    character reply is two write units instead of three, on both of its writes)."""
    raw = json.dumps(letter, separators=(",", ":"))
    packed = zlib.compress(raw.encode("utf-8"), 6)
    return {"letter_z": packed} if len(packed) <= len(raw.encode("utf-8")) * 0.9 else {"letter": raw}


def _letter_of(item: OutboxModelBase) -> dict[str, Any]:
    raw = zlib.decompress(bytes(item.letter_z)).decode("utf-8") if item.letter_z else item.letter or "{}"
    found: dict[str, Any] = json.loads(raw)
    return found


@throttling_is_transient_everywhere
class DynamoOutbox:
    def __init__(self, bindings: Bindings, region: str | None = None, *, keep_seconds: int = RETENTION_SECONDS) -> None:
        self.model = bind_outbox(bindings.table("outbox"), region, dynamodb_endpoint())
        # A row holds a reply's text (a preview deployed): it goes by TTL after this long
        self._keep_seconds = keep_seconds

    def record_claimed(
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
        media: list[dict[str, str]] | None = None,
        status: str = "sending",
        platform_message_id: str | None = None,
        mailbox: tuple[str, dict[str, Any]] | None = None,
    ) -> tuple[OutboxEntry, bool]:
        """Write the chunk claimed for sending (`sending` at `now`) unless it exists: one write, which
        on a repeated job returns the stored row with its failed condition (no read). What is
        stored, and True when this call wrote it. `mailbox`: (its name, the letter): the chunk is
        posted to a forwarder's mailbox instead, `queued`, in the same write."""
        Outbox = self.model
        if mailbox is not None:
            status = QUEUED
        item = Outbox(
            delivery_id,
            platform=platform,
            chat_id=chat_id,
            thread_id=thread_id,
            text=text,
            turn_id=turn_id,
            chunk=chunk,
            chunks=chunks,
            status=status,
            attempts=0,
            platform_message_id=platform_message_id,
            created_at=now,
            updated_at=now,
            expires_at=int(now + self._keep_seconds),
            buttons=json.dumps(buttons) if buttons else None,
            media=json.dumps(media) if media else None,
            mailbox=mailbox[0] if mailbox else None,
            queued_at=now if mailbox else None,
            **(_letter_fields(mailbox[1]) if mailbox else {}),
        )
        # pynamodb's put drops the item a failed condition returns, so the call is botocore's
        # (through the model's own connection: same endpoint, same client).
        client = Outbox._get_connection().connection.client
        try:
            client.put_item(
                TableName=Outbox.Meta.table_name,
                Item=item.serialize(null_check=True),
                ConditionExpression="attribute_not_exists(delivery_id)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as exc:
            if call_condition_failed(exc):
                # (the item is absent only from an endpoint that ignores ReturnValuesOnConditionCheckFailure)
                stored = getattr(exc, "response", {}).get("Item")
                found = Outbox.from_raw_data(stored) if stored else Outbox.get(delivery_id, consistent_read=True)
                return _entry(found), False
            if is_throttle(exc):
                raise TransientError("DynamoDB is throttling the outbox") from exc
            raise
        return _entry(item), True

    def claim(self, delivery_id: str, now: float, reopen: bool = False) -> bool:
        """Take the chunk for sending. False while another worker holds it, or once its fate is
        settled: two deliveries of one job (a queue may hand it over twice) never both send.
        `reopen` (a redriven job): a `dead_lettered` chunk may be taken too."""
        Outbox = self.model
        claimable = ("pending", "failed", "dead_lettered") if reopen else ("pending", "failed")
        try:
            Outbox(delivery_id).update(
                actions=[Outbox.status.set("sending"), Outbox.updated_at.set(now)],
                condition=Outbox.status.is_in(*claimable),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def complete_stream(self, delivery_id: str, now: float, *, text: str) -> OutboxEntry | None:
        """A streamed answer's row, `streaming`, marked `sent` with the text its message shows by
        one conditional write, which returns the row as it is now; None when it is not `streaming`
        (sent already, or absent)."""
        Outbox = self.model
        item = Outbox(delivery_id)
        try:
            item.update(
                actions=[
                    Outbox.status.set("sent"),
                    Outbox.updated_at.set(now),
                    Outbox.attempts.add(1),
                    Outbox.text.set(text),
                ],
                condition=Outbox.status == "streaming",
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return None
            raise
        return _entry(item)

    def mark_dead_lettered(self, delivery_id: str, now: float) -> bool:
        """A `failed` chunk whose job is on the dead letters: `dead_lettered`, which only a redriven
        job claims again. One conditional write; False when the chunk is no longer `failed`."""
        Outbox = self.model
        try:
            Outbox(delivery_id).update(
                actions=[Outbox.status.set("dead_lettered"), Outbox.updated_at.set(now)],
                condition=Outbox.status == "failed",
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
        text: str | None = None,
    ) -> None:
        Outbox = self.model
        actions: list[Action] = [Outbox.status.set(status), Outbox.updated_at.set(now), Outbox.attempts.add(1)]
        if platform_message_id is not None:
            actions.append(Outbox.platform_message_id.set(platform_message_id))
        if error is not None:
            actions.append(Outbox.error.set(error[:500]))
        if text is not None:  # a streamed answer's row: the text its message ends with
            actions.append(Outbox.text.set(text))
        Outbox(delivery_id).update(actions=actions)

    def fail_sent(self, delivery_id: str, *, platform: str, platform_message_id: str, error: str, now: float) -> str:
        """Mark a chunk the platform accepted and later reported failed: `failed`, with the error.
        Only this platform's row, and only while it is that message (sent with this id), or one
        whose fate was left open (`unknown`, or a claim its worker abandoned). One conditional
        write; the row is read only when the condition fails. Returns "marked", else the row's
        status ("missing" when there is none)."""
        Outbox = self.model
        sent_as_this = (Outbox.status == "sent") & (Outbox.platform_message_id == platform_message_id)
        left_open = (Outbox.status == "unknown") | (
            (Outbox.status == "sending") & (Outbox.updated_at < now - SEND_CLAIM_SECONDS)
        )
        try:
            Outbox(delivery_id).update(
                actions=[
                    Outbox.status.set("failed"),
                    Outbox.updated_at.set(now),
                    Outbox.error.set(error[:500]),
                    Outbox.platform_message_id.set(platform_message_id),
                ],
                condition=Outbox.delivery_id.exists() & (Outbox.platform == platform) & (sent_as_this | left_open),
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            found = self.get(delivery_id)
            return found.status if found is not None else "missing"
        return "marked"

    def collect(self, mailbox: str, limit: int) -> list[QueuedLetter]:
        """The oldest `limit` letters waiting in the mailbox, oldest first: a query of the sparse,
        keys-only index (an empty mailbox costs half a read unit), then the letters by key, read
        consistently (the index may still list a letter settled a moment ago: it is left out)."""
        Outbox = self.model
        keys = [
            item.delivery_id
            for item in Outbox.by_mailbox.query(mailbox, scan_index_forward=True, limit=limit)  # type: ignore[attr-defined]
        ]
        if not keys:
            return []
        found = {item.delivery_id: item for item in Outbox.batch_get(keys, consistent_read=True)}
        letters = [
            QueuedLetter(key, _letter_of(found[key]), float(found[key].queued_at))
            for key in keys
            if key in found and found[key].status == QUEUED and found[key].mailbox == mailbox
        ]
        return sorted(letters, key=lambda letter: letter.queued_at)

    def oldest(self, mailbox: str) -> float | None:
        """When the mailbox's oldest waiting letter was posted: one query of one index key (the
        index may still list a letter settled a moment ago: a minute's check can take that)."""
        Outbox = self.model
        for item in Outbox.by_mailbox.query(mailbox, scan_index_forward=True, limit=1):  # type: ignore[attr-defined]
            return float(item.queued_at)
        return None

    def settle(
        self,
        delivery_id: str,
        mailbox: str,
        status: str,
        now: float,
        *,
        platform_message_id: str | None = None,
        error: str | None = None,
    ) -> str:
        """The forwarder's word on a letter of its mailbox: `sent` with the platform's id, or
        `failed`, `gone` or `unknown` with the error; the row leaves the mailbox (and the index).
        One conditional write, only on a row still waiting in this mailbox; the row is read when
        the condition fails. "settled"; "already" for a report repeated with the same outcome (the
        forwarder retries a report it got no answer to); else the row's status ("missing")."""
        Outbox = self.model
        actions: list[Action] = [
            Outbox.status.set(status),
            Outbox.updated_at.set(now),
            Outbox.attempts.add(1),
            Outbox.mailbox.remove(),
            Outbox.queued_at.remove(),
            Outbox.letter.remove(),
            Outbox.letter_z.remove(),
        ]
        if platform_message_id is not None:
            actions.append(Outbox.platform_message_id.set(platform_message_id))
        if error is not None:
            actions.append(Outbox.error.set(error[:500]))
        try:
            Outbox(delivery_id).update(
                actions=actions, condition=(Outbox.mailbox == mailbox) & (Outbox.status == QUEUED)
            )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            found = self.get(delivery_id)
            if found is None:
                return "missing"
            repeated = found.status == status and found.platform_message_id == platform_message_id
            return "already" if repeated else found.status
        return "settled"

    def get(self, delivery_id: str, *, consistent: bool = True) -> OutboxEntry | None:
        try:
            return _entry(self.model.get(delivery_id, consistent_read=consistent))
        except DoesNotExist:
            return None

    def get_many(self, delivery_ids: list[str]) -> list[OutboxEntry]:
        """The rows of these ids that exist, in one BatchGetItem (eventually consistent: half a
        read unit each; at most 100 ids)."""
        return [_entry(item) for item in self.model.batch_get(list(dict.fromkeys(delivery_ids))[:100])]

    def recent(self, limit: int = 200) -> list[OutboxEntry]:
        """Newest last. A scan: used by local mode's outbox view only, never on a hot path."""
        rows = [_entry(item) for item in self.model.scan()]
        rows.sort(key=lambda e: (e.created_at, e.delivery_id))
        return rows[-limit:]
