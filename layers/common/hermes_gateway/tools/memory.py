"""The `memory` tool: durable notes per user and profile (add, replace, remove, list).

The notes live behind the `NoteStore` port (adapters/dynamo_memory.py; an in-memory fake in
tests/fakes/memory.py). A note added by a tool call gets an id derived from the turn and the call,
so a task that runs twice adds the note once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.providers.base import ToolSpec
from hermes_gateway.tools.base import ToolError, result_text

MAX_NOTE_CHARS = 1000
MAX_NOTES = 100


def memory_spec(max_note_chars: int = MAX_NOTE_CHARS) -> ToolSpec:
    """The tool's schema; a note may be as long as the deployment's `memory.max_note_chars`."""
    return ToolSpec(
        name=MEMORY_SPEC.name,
        description=MEMORY_SPEC.description,
        parameters={
            **MEMORY_SPEC.parameters,
            "properties": {
                **MEMORY_SPEC.parameters["properties"],
                "text": {"type": "string", "minLength": 1, "maxLength": max_note_chars},
            },
        },
    )


MEMORY_SPEC = ToolSpec(
    name="memory",
    description=(
        "Durable notes about the user you are talking to, kept across sessions and chats. "
        "Save what will matter later (preferences, facts about the user, ongoing projects); "
        "not chit-chat. action=add needs text; replace needs id and text; remove needs id; "
        "list shows every note with its id. Notes you saved are shown to you at the start of each turn."
    ),
    parameters={
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["add", "replace", "remove", "list"]},
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_NOTE_CHARS},
            "id": {"type": "string", "minLength": 1, "maxLength": 40},
        },
        "required": ["action"],
        "additionalProperties": False,
    },
)


@dataclass(frozen=True)
class Note:
    note_id: str
    text: str
    created_at: float
    updated_at: float


class NotebookFull(Exception):
    """The scope already holds its maximum number of notes."""


class NoteStore(Protocol):
    """Notes per scope (`profile#user-hash`). The count limit is enforced in the store, atomically."""

    def list_notes(self, scope: str) -> list[Note]:
        """Every note of the scope, oldest first."""
        ...

    def add_note(self, scope: str, note_id: str, text: str, now: float, max_notes: int) -> Note:
        """Add a note under a new id. The same id again returns the stored note unchanged (a
        retried call); NotebookFull when the scope holds `max_notes` already."""
        ...

    def replace_note(self, scope: str, note_id: str, text: str, now: float) -> Note | None:
        """None when there is no such note."""
        ...

    def remove_note(self, scope: str, note_id: str) -> bool:
        """False when there was no such note."""
        ...

    def clear(self, scope: str) -> int:
        """Delete every note of the scope and its count (forget); how many notes there were."""
        ...


@dataclass(frozen=True)
class NoteLimits:
    max_notes: int = MAX_NOTES
    max_note_chars: int = MAX_NOTE_CHARS


def note_id_for(turn_id: str, call_id: str) -> str:
    """Stable across a retried task: the same turn and call give the same id."""
    return "n" + hashlib.sha256(f"{turn_id}\n{call_id}".encode()).hexdigest()[:9]


def run_memory(
    store: NoteStore,
    scope: str,
    arguments: dict[str, Any],
    *,
    note_id: str,
    now: float,
    limits: NoteLimits,
) -> str:
    """One memory action; the result text for the model. Raises ToolError for what it can fix."""
    action = arguments.get("action")
    if action == "list":
        notes = store.list_notes(scope)
        return result_text({"notes": [{"id": n.note_id, "text": n.text} for n in notes], "count": len(notes)})
    if action == "add":
        text = _text(arguments, limits)
        try:
            note = store.add_note(scope, note_id, text, now, limits.max_notes)
        except NotebookFull:
            raise ToolError(
                f"the notebook is full ({limits.max_notes} notes): replace or remove a note first"
            ) from None
        return result_text({"added": {"id": note.note_id, "text": note.text}})
    if action == "replace":
        wanted = _id(arguments)
        replaced = store.replace_note(scope, wanted, _text(arguments, limits), now)
        if replaced is None:
            raise ToolError(f"there is no note {wanted!r}; use action=list to see the ids")
        return result_text({"replaced": {"id": replaced.note_id, "text": replaced.text}})
    if action == "remove":
        wanted = _id(arguments)
        if not store.remove_note(scope, wanted):
            raise ToolError(f"there is no note {wanted!r}; use action=list to see the ids")
        return result_text({"removed": wanted})
    raise ToolError("action must be add, replace, remove or list")


def format_notes(notes: list[Note]) -> str:
    """The notes as the model sees them before a turn."""
    if not notes:
        return ""
    lines = ["Notes you saved about this user (memory tool; ids in brackets):"]
    lines += [f"- [{n.note_id}] {n.text}" for n in notes]
    return "\n".join(lines)


def _text(arguments: dict[str, Any], limits: NoteLimits) -> str:
    text = arguments.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ToolError("text is required for this action")
    text = text.strip()
    if len(text) > limits.max_note_chars:
        raise ToolError(f"a note holds at most {limits.max_note_chars} characters; this one has {len(text)}")
    return text


def _id(arguments: dict[str, Any]) -> str:
    note_id = arguments.get("id")
    if not isinstance(note_id, str) or not note_id.strip():
        raise ToolError("id is required for this action; use action=list to see the ids")
    return note_id.strip()
