"""The deployment's memory providers: which tools they offer (known from settings alone, since a
turn's tool list is decided before any provider is built), and the manager that holds them."""

from __future__ import annotations

from hermes_gateway.memory.builtin import BuiltinMemory
from hermes_gateway.memory.honcho import HONCHO_TOOL_SPECS, HonchoMemory
from hermes_gateway.memory.manager import MemoryManager, MemoryProvider
from hermes_gateway.providers.base import ToolSpec
from hermes_gateway.settings import Settings
from hermes_gateway.tools.memory import NoteLimits, NoteStore, memory_spec


def memory_tool_specs(settings: Settings) -> list[ToolSpec]:
    """The built-in `memory` tool, then the enabled external provider's tools."""
    specs = [memory_spec(settings.memory.max_note_chars)]
    if settings.memory.external == "honcho":
        specs += HONCHO_TOOL_SPECS
    return specs


def build_memory_manager(settings: Settings, notes: NoteStore, honcho_api_key: str | None = None) -> MemoryManager:
    """A fresh manager for one turn step: providers hold the turn's session once initialized, so
    one is never shared between turns (the stores behind them are)."""
    providers: list[MemoryProvider] = [
        BuiltinMemory(notes, NoteLimits(settings.memory.max_notes, settings.memory.max_note_chars))
    ]
    if settings.memory.external == "honcho":
        providers.append(
            HonchoMemory(settings.memory.honcho_base_url, settings.memory.honcho_workspace, honcho_api_key)
        )
    return MemoryManager(providers)
