"""The built-in memory: durable notes per user and profile (the `memory` tool), shown to the
model before each call. It needs no model of its own, so `sync_turn` and `on_session_end` keep
nothing: what is worth keeping the model saves with the tool, during a turn or in the flush turn
before a session ends."""

from __future__ import annotations

from typing import Any

from hermes_gateway.providers.base import ChatMessage, ToolSpec
from hermes_gateway.tools.base import ToolContext, ToolError
from hermes_gateway.tools.memory import (
    MEMORY_SPEC,
    NoteLimits,
    NoteStore,
    format_notes,
    note_id_for,
    run_memory,
)


class BuiltinMemory:
    name = "builtin"

    def __init__(self, store: NoteStore, limits: NoteLimits | None = None) -> None:
        self._store = store
        self._limits = limits or NoteLimits()
        self._ctx: ToolContext | None = None

    def initialize(self, session_id: str, ctx: ToolContext) -> None:
        self._ctx = ctx

    def prefetch(self, query: str) -> str:
        ctx = self._bound()
        if not ctx.user_hash:
            return ""
        return format_notes(self._store.list_notes(ctx.memory_scope))

    def sync_turn(self, user: str, assistant: str) -> None:
        """Nothing to learn on its own: the model saves notes with the tool."""

    def tools(self) -> list[ToolSpec]:
        return [MEMORY_SPEC]

    def handle_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> str:
        if name != MEMORY_SPEC.name:
            raise ToolError(f"the built-in memory has no tool {name!r}")
        return run_memory(
            self._store,
            ctx.memory_scope,
            arguments,
            note_id=note_id_for(ctx.turn_id, ctx.call_id),
            now=ctx.now,
            limits=self._limits,
        )

    def on_session_end(self, transcript: list[ChatMessage]) -> None:
        """Nothing to do here: the flush turn (services/turn.FLUSH_PROMPT) lets the model save what matters."""

    def _bound(self) -> ToolContext:
        if self._ctx is None:
            raise RuntimeError("the built-in memory was used before initialize")
        return self._ctx
