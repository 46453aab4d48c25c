"""The registry: which tools a kind of turn gets.

- chat: memory (and the tools of any other enabled memory provider), session_search, send_message,
  cronjob;
- cron: the same without cronjob (a job may not schedule jobs);
- flush: only memory (the memory-only turn before a session ends).

Which tools need approval is a setting (`tools.needs_approval`), never the tool's own choice.
"""

from __future__ import annotations

from hermes_gateway.memory.manager import MemoryTool
from hermes_gateway.memory.registry import memory_tool_specs
from hermes_gateway.settings import Settings
from hermes_gateway.tools.base import SpecTool, Tool, TurnKind
from hermes_gateway.tools.cronjob import CRONJOB
from hermes_gateway.tools.memory import memory_spec
from hermes_gateway.tools.send_message import SEND_MESSAGE
from hermes_gateway.tools.session_search import SESSION_SEARCH

KINDS: tuple[TurnKind, ...] = ("chat", "cron", "flush")


def tools_for(kind: TurnKind, settings: Settings) -> list[Tool]:
    if kind not in KINDS:
        raise ValueError(f"unknown turn kind {kind!r}")
    approval = set(settings.tools.needs_approval)
    if kind == "flush":
        return [MemoryTool(memory_spec(settings.memory.max_note_chars), needs_approval="memory" in approval)]
    chosen: list[Tool] = [
        MemoryTool(spec, needs_approval=spec.name in approval) for spec in memory_tool_specs(settings)
    ]
    builtins: list[SpecTool] = [SESSION_SEARCH, SEND_MESSAGE]
    if kind == "chat":
        builtins.append(CRONJOB)
    chosen += [tool.with_approval(tool.name in approval) for tool in builtins if tool.name in settings.tools.enabled]
    return chosen
