"""Memory providers behind one manager.

A memory provider is a small plugin: it is initialized with the session, adds context before a
model call (`prefetch`), learns from each finished turn (`sync_turn`), may offer tools of its own,
and sees the transcript when a session ends. The built-in provider keeps notes in DynamoDB; an
external one (Honcho) can be enabled beside it.

The manager routes each memory tool call to the provider that owns it and keeps every provider's
failure away from the turn: a provider that fails is logged, skipped for context, and its tools
answer with an error result the model can read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from hermes_gateway.observability import logger
from hermes_gateway.providers.base import ChatMessage, ToolSpec
from hermes_gateway.tools.base import ToolContext, ToolError, ToolResult

MAX_PREFETCH_CHARS = 6000  # the memory context a model call may carry, all providers together
_FAILED = object()


class MemoryProvider(Protocol):
    @property
    def name(self) -> str: ...

    def initialize(self, session_id: str, ctx: ToolContext) -> None:
        """Bind to one session and user before anything else is called."""
        ...

    def prefetch(self, query: str) -> str:
        """Context for the next model call ("" for none); `query` is the user's latest text."""
        ...

    def sync_turn(self, user: str, assistant: str) -> None:
        """Learn from one finished exchange."""
        ...

    def tools(self) -> list[ToolSpec]:
        """The tools this provider answers; the manager offers them to the model."""
        ...

    def handle_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> str:
        """Run one of this provider's tools; `ctx` is the call's (its `call_id` makes writes
        idempotent). Raise ToolError for a failure the model should read."""
        ...

    def on_session_end(self, transcript: list[ChatMessage]) -> None:
        """The session is ending (reset or expiry): keep what is worth keeping."""
        ...


@dataclass(frozen=True)
class MemoryTool:
    """A memory tool as the registry lists it: its calls go through the turn's memory manager."""

    spec: ToolSpec
    needs_approval: bool = False

    @property
    def name(self) -> str:
        return self.spec.name

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        result = ctx.require("memory").handle_tool(self.name, arguments, ctx)
        if result.is_error:
            raise ToolError(result.content.removeprefix("error: "))
        return str(result.content)

    def beyond_reach(self, arguments: dict[str, Any], ctx: ToolContext) -> str | None:
        return None  # memory is the user's own (its scope is theirs)


class MemoryManager:
    """The turn's memory: every provider behind one door, none able to fail the turn."""

    def __init__(self, providers: Sequence[MemoryProvider]) -> None:
        self._providers = list(providers)
        self._failed: set[str] = set()
        self._owners: dict[str, MemoryProvider] = {}
        for provider in self._providers:
            for spec in self._specs(provider):
                self._owners.setdefault(spec.name, provider)

    def initialize(self, session_id: str, ctx: ToolContext) -> None:
        self._failed.clear()
        for provider in self._providers:
            if self._guard(provider, "initialize", provider.initialize, session_id, ctx) is _FAILED:
                self._failed.add(provider.name)

    def prefetch(self, query: str) -> str:
        """Every live provider's context, in provider order, within MAX_PREFETCH_CHARS."""
        blocks: list[str] = []
        for provider in self._live():
            block = self._guard(provider, "prefetch", provider.prefetch, query)
            if isinstance(block, str) and block.strip():
                blocks.append(block.strip())
        text = "\n\n".join(blocks)
        return text if len(text) <= MAX_PREFETCH_CHARS else text[: MAX_PREFETCH_CHARS - 1] + "…"

    def sync_turn(self, user: str, assistant: str) -> None:
        for provider in self._live():
            self._guard(provider, "sync_turn", provider.sync_turn, user, assistant)

    def on_session_end(self, transcript: list[ChatMessage]) -> None:
        for provider in self._live():
            self._guard(provider, "on_session_end", provider.on_session_end, transcript)

    def handle_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        provider = self._owners.get(name)
        if provider is None:
            return ToolResult(f"error: no memory provider offers {name[:64]!r}", True)
        if provider.name in self._failed:
            return ToolResult(f"error: the {provider.name} memory is unavailable in this turn", True)
        try:
            return ToolResult(provider.handle_tool(name, arguments, ctx))
        except ToolError as exc:
            return ToolResult(f"error: {exc}", True)
        except Exception as exc:  # noqa: BLE001 - a provider's failure is the model's to read, not the turn's
            logger.warning(
                "memory provider failed",
                extra={"provider": provider.name, "call": "handle_tool", "error": type(exc).__name__},
            )
            return ToolResult(f"error: the {provider.name} memory failed ({type(exc).__name__}); try again later", True)

    def _live(self) -> list[MemoryProvider]:
        return [p for p in self._providers if p.name not in self._failed]

    @staticmethod
    def _specs(provider: MemoryProvider) -> list[ToolSpec]:
        try:
            return list(provider.tools())
        except Exception as exc:  # noqa: BLE001 - a provider that cannot list tools offers none
            logger.warning(
                "memory provider failed",
                extra={"provider": provider.name, "call": "tools", "error": type(exc).__name__},
            )
            return []

    @staticmethod
    def _guard(provider: MemoryProvider, call: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run one provider call; a failure is logged and comes back as _FAILED."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - isolation is the point
            logger.warning(
                "memory provider failed", extra={"provider": provider.name, "call": call, "error": type(exc).__name__}
            )
            return _FAILED
