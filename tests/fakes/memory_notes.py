"""The NoteStore port in memory, with DynamoNoteStore's rules: the limit counted per scope, a
repeated add of the same id returns the stored note, replace and remove only what exists."""

from __future__ import annotations

import threading
from dataclasses import replace

from hermes_gateway.tools.memory import Note, NotebookFull


class FakeNoteStore:
    def __init__(self) -> None:
        self.notes: dict[str, dict[str, Note]] = {}
        self._lock = threading.Lock()

    def list_notes(self, scope: str) -> list[Note]:
        with self._lock:
            return sorted(self.notes.get(scope, {}).values(), key=lambda n: (n.created_at, n.note_id))

    def add_note(self, scope: str, note_id: str, text: str, now: float, max_notes: int) -> Note:
        with self._lock:
            notes = self.notes.setdefault(scope, {})
            if note_id in notes:
                return notes[note_id]
            if len(notes) >= max_notes:
                raise NotebookFull(scope)
            notes[note_id] = Note(note_id, text, now, now)
            return notes[note_id]

    def replace_note(self, scope: str, note_id: str, text: str, now: float) -> Note | None:
        with self._lock:
            notes = self.notes.get(scope, {})
            if note_id not in notes:
                return None
            notes[note_id] = replace(notes[note_id], text=text, updated_at=now)
            return notes[note_id]

    def remove_note(self, scope: str, note_id: str) -> bool:
        with self._lock:
            return self.notes.get(scope, {}).pop(note_id, None) is not None

    def clear(self, scope: str) -> int:
        with self._lock:
            return len(self.notes.pop(scope, {}))
