"""Memory notes on DynamoDB (the `memory` table, keyed `scope` + `entry`).

Per scope (`profile#user-hash`):
- `#count`: how many notes the scope holds (`note_count`);
- `note#<id>`: one note (`text`, `created_at`, `updated_at`).

Adding a note and counting it are one transaction whose condition is the limit, so two turns of
the same user that add at once cannot pass it; the note's own condition (`attribute_not_exists`)
makes a repeated add of the same id a no-op that returns the stored note.
"""

from __future__ import annotations

from functools import cached_property, lru_cache

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.connection import Connection
from pynamodb.exceptions import DoesNotExist, TransactWriteError, UpdateError
from pynamodb.models import Model
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
from hermes_gateway.adapters.models import dynamodb_endpoint, table_meta
from hermes_gateway.errors import TransientError
from hermes_gateway.resources import Bindings
from hermes_gateway.tools.memory import Note, NotebookFull

COUNT_ENTRY = "#count"
NOTE_PREFIX = "note#"
CONTENTION_ATTEMPTS = 5


class MemoryItem(Model):
    scope = UnicodeAttribute(hash_key=True)
    entry = UnicodeAttribute(range_key=True)
    text = UnicodeAttribute(null=True)
    created_at = NumberAttribute(null=True)
    updated_at = NumberAttribute(null=True)
    note_count = NumberAttribute(null=True)


@lru_cache(maxsize=8)
def bind_memory(table: str, region: str | None, host: str | None = None) -> type[MemoryItem]:
    return type("Memory", (MemoryItem,), {"Meta": table_meta(table, region, host), "__module__": __name__})


def _note(item: MemoryItem) -> Note:
    return Note(
        note_id=item.entry.removeprefix(NOTE_PREFIX),
        text=item.text or "",
        created_at=float(item.created_at or 0),
        updated_at=float(item.updated_at or item.created_at or 0),
    )


@throttling_is_transient_everywhere
class DynamoNoteStore:
    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        self._region = region
        self._host = dynamodb_endpoint()
        self.model = bind_memory(bindings.table("memory"), region, self._host)

    @cached_property
    def _connection(self) -> Connection:
        return Connection(region=self._region, host=self._host)

    def list_notes(self, scope: str) -> list[Note]:
        items = self.model.query(scope, self.model.entry.startswith(NOTE_PREFIX))
        return sorted((_note(item) for item in items), key=lambda n: (n.created_at, n.note_id))

    def add_note(self, scope: str, note_id: str, text: str, now: float, max_notes: int) -> Note:
        model = self.model
        note = model(scope, NOTE_PREFIX + note_id, text=text, created_at=now, updated_at=now)
        counter = model(scope, COUNT_ENTRY)
        for attempt in range(CONTENTION_ATTEMPTS):
            try:
                with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                    tx.save(note, condition=model.entry.does_not_exist())
                    tx.update(
                        counter,
                        actions=[model.note_count.add(1)],
                        condition=model.note_count.does_not_exist() | (model.note_count < max_notes),
                    )
            except TransactWriteError as exc:
                # pynamodb sends puts before updates: reason 0 is the note, reason 1 the counter
                codes = cancellation_codes(exc)
                if codes[:1] == [CONDITION_FAILED]:  # this id was added before: a retried call
                    stored = self._get(scope, note_id)
                    if stored is not None:
                        return stored
                    continue  # removed in between; add it again
                if codes[1:2] == [CONDITION_FAILED]:
                    raise NotebookFull(scope) from None
                if TRANSACTION_CONFLICT in codes:
                    backoff(attempt)
                    continue
                raise
            return _note(note)
        raise TransientError("the memory notes are contended; try again")

    def replace_note(self, scope: str, note_id: str, text: str, now: float) -> Note | None:
        model = self.model
        item = model(scope, NOTE_PREFIX + note_id)
        try:
            item.update(
                actions=[model.text.set(text), model.updated_at.set(now)],
                condition=model.entry.exists(),
            )
        except UpdateError as exc:
            if condition_failed(exc):
                return None
            raise
        return _note(item)

    def remove_note(self, scope: str, note_id: str) -> bool:
        model = self.model
        for attempt in range(CONTENTION_ATTEMPTS):
            try:
                with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                    tx.delete(model(scope, NOTE_PREFIX + note_id), condition=model.entry.exists())
                    tx.update(model(scope, COUNT_ENTRY), actions=[model.note_count.add(-1)])
            except TransactWriteError as exc:
                codes = cancellation_codes(exc)  # deletes go before updates: reason 0 is the note
                if codes[:1] == [CONDITION_FAILED]:
                    return False
                if TRANSACTION_CONFLICT in codes:
                    backoff(attempt)
                    continue
                raise
            return True
        raise TransientError("the memory notes are contended; try again")

    def clear(self, scope: str) -> int:
        items = list(self.model.query(scope, consistent_read=True))
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return sum(1 for item in items if item.entry.startswith(NOTE_PREFIX))

    def _get(self, scope: str, note_id: str) -> Note | None:
        try:
            return _note(self.model.get(scope, NOTE_PREFIX + note_id, consistent_read=True))
        except DoesNotExist:
            return None
