"""The memory flush: a memory-only turn over a session's transcript before the session is reset
or expires (BEHAVIOUR §3, §7). The turn engine runs it like any turn, with the prompt, history
and tools planned here, and delivers nothing.

The transcript goes to the model as one user message (the newest part, within a budget), so
roles need not alternate and old tool exchanges need no repair; the notes already saved are in
the system prompt, so the model replaces or skips instead of adding duplicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hermes_gateway.providers.base import ChatMessage
from hermes_gateway.settings import Settings
from hermes_gateway.tools.base import Tool
from hermes_gateway.tools.registry import tools_for

MAX_TRANSCRIPT_CHARS = 24_000
MAX_ROW_CHARS = 2_000
DONE = "DONE"

FLUSH_INSTRUCTIONS = """\
You are Hermes, an AI assistant that people reach through their chat apps. This conversation is \
about to end ({reason}). Before it does, decide what is worth remembering about the user for \
future conversations: lasting preferences, facts about them and their work, commitments and \
ongoing projects. Skip small talk and anything already in the notes below.

Use the memory tool to save each item as a short, self-contained note (action=add), or to update \
a note that changed (action=replace with its id). Do not remove notes unless the conversation \
shows they are wrong. When you are done, or if nothing is worth saving, answer only {done}."""


class TranscriptLine(Protocol):
    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


@dataclass(frozen=True)
class FlushPlan:
    system: str
    messages: list[ChatMessage]
    tools: list[Tool]

    @property
    def empty(self) -> bool:
        """Nothing was said: the engine can skip the model call."""
        return not self.messages


def plan_flush(
    transcript: Sequence[TranscriptLine], *, reason: str, memory_context: str, settings: Settings
) -> FlushPlan:
    system = FLUSH_INSTRUCTIONS.format(reason=reason or "the session ends", done=DONE)
    system += "\n\n" + (memory_context.strip() or "There are no saved notes yet.")
    lines = _transcript_lines(transcript)
    if not lines:
        return FlushPlan(system, [], tools_for("flush", settings))
    text = "The conversation so far (oldest first):\n\n" + "\n".join(lines)
    text += f"\n\nSave what is worth remembering with the memory tool, then answer {DONE}."
    return FlushPlan(system, [ChatMessage("user", text)], tools_for("flush", settings))


def _transcript_lines(transcript: Sequence[TranscriptLine]) -> list[str]:
    """The user and assistant lines, newest kept first when the budget runs out."""
    kept: list[str] = []
    used = 0
    for row in reversed(transcript):
        if row.role not in ("user", "assistant") or not row.content.strip():
            continue
        content = row.content.strip()
        if len(content) > MAX_ROW_CHARS:
            content = content[:MAX_ROW_CHARS] + " …"
        line = f"{row.role.upper()}: {content}"
        if used + len(line) > MAX_TRANSCRIPT_CHARS:
            kept.append("[earlier messages left out]")
            break
        kept.append(line)
        used += len(line) + 1
    return list(reversed(kept))
