"""The tool port: what a tool is, what it may reach, and how one call is run.

A tool is stateless; everything it touches comes through the `ToolContext` the engine builds for
one turn (the stores and queues as ports, so tests hand in fakes). `execute` runs one call and
never raises for the tool's sake: an unknown tool, bad arguments or a failing tool become an error
result the model reads, so a tool can never crash a turn.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from hermes_gateway.domain.ports import Deliveries
from hermes_gateway.domain.reach import TurnReach
from hermes_gateway.domain.source import user_handle
from hermes_gateway.domain.targets import Directory, ResolvedTarget
from hermes_gateway.observability import hash_id, logger
from hermes_gateway.providers.base import INVALID_ARGUMENTS, ToolCall, ToolSpec
from hermes_gateway.tools.schema import SchemaError, check_arguments

TurnKind = Literal["chat", "cron", "flush"]
MAX_RESULT_CHARS = 8000  # a result longer than this is cut: the model's context is the budget


def user_hash(platform: str, user_id: str | None) -> str | None:
    """The sender's handle for per-user memory (`domain.source.user_handle`)."""
    return user_handle(platform, user_id)


class ToolError(Exception):
    """A failure the model should read and can act on (a bad id, a full notebook, an unknown target)."""


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False


class MemoryRouter(Protocol):
    """The memory manager as tools see it: it owns the memory tools' calls."""

    def handle_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


@dataclass(frozen=True)
class ToolContext:
    """One turn's view for its tools. Ports a turn kind does not need may be None; a tool that
    needs a missing port answers with an error result."""

    kind: TurnKind
    turn_id: str
    profile: str
    now: float
    sends_as: str | None = None  # the named profile whose bots send a push (None: the deployment's own)
    session_id: str | None = None
    session_key: str | None = None
    user_hash: str | None = None  # `user_hash(platform, user id)` of the sender: the memory scope
    source: dict[str, Any] | None = None  # the SessionSource dict of the message being answered
    origin: ResolvedTarget | None = None  # where `origin` points (the turn's reply target)
    home_channels: dict[str, str] = field(default_factory=dict)
    time_zone: str = "UTC"  # for schedules
    correlation_id: str | None = None  # the inbound event id, carried into delivery logs
    call_id: str = ""  # the tool call being run; set by `execute`
    sessions: Any = None  # SessionStore with `search` (domain/sessions.py)
    delivery: Deliveries | None = None
    directory: Directory | None = None
    jobs: Any = None  # JobStore (domain/cron.py)
    memory: MemoryRouter | None = None
    # What the turn may reach (BEHAVIOUR §11); None reaches nothing beyond the call itself
    reach: TurnReach | None = None

    @property
    def memory_scope(self) -> str:
        """`profile#user-hash`: notes are per user and profile, shared across their chats."""
        if not self.user_hash:
            raise ToolError("memory needs a known user, and this turn has none")
        return f"{self.profile}#{self.user_hash}"

    def require(self, port: str) -> Any:
        value = getattr(self, port)
        if value is None:
            raise ToolError(f"this tool is not available in a {self.kind} turn")
        return value


class Tool(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def spec(self) -> ToolSpec: ...

    @property
    def needs_approval(self) -> bool: ...

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        """The result text for the model. Raise ToolError for a failure the model should read."""
        ...

    def beyond_reach(self, arguments: dict[str, Any], ctx: ToolContext) -> str | None:
        """Why this call reaches past the turn's user and chat (a send to another chat), so an
        admin or approver must approve it whatever the settings say; None: it stays inside."""
        ...


Gate = Callable[[dict[str, Any], ToolContext], "str | None"]


@dataclass(frozen=True)
class SpecTool:
    """A tool made of its spec and a function; `needs_approval` comes from settings, `gate`
    (the tool's own) says which calls reach past the turn (`Tool.beyond_reach`)."""

    spec: ToolSpec
    handler: Callable[[dict[str, Any], ToolContext], str]
    needs_approval: bool = False
    gate: Gate | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def run(self, arguments: dict[str, Any], ctx: ToolContext) -> str:
        return self.handler(arguments, ctx)

    def beyond_reach(self, arguments: dict[str, Any], ctx: ToolContext) -> str | None:
        return self.gate(arguments, ctx) if self.gate is not None else None

    def with_approval(self, needed: bool) -> SpecTool:
        return dataclasses.replace(self, needs_approval=needed)


def execute(call: ToolCall, tools: Sequence[Tool], ctx: ToolContext) -> ToolResult:
    """Run one tool call. Never raises: every failure is a result with `is_error`."""
    tool = next((t for t in tools if t.name == call.name), None)
    detail = {"tool": call.name[:64], "turn_id": ctx.turn_id, "session": hash_id(ctx.session_key)}
    if tool is None:
        known = ", ".join(t.name for t in tools) or "none"
        logger.info("tool call refused: unknown tool", extra=detail)
        return ToolResult(f"error: there is no tool named {call.name[:64]!r} here (tools: {known})", True)
    if INVALID_ARGUMENTS in call.arguments:
        logger.info("tool call refused: unreadable arguments", extra=detail)
        return ToolResult(f"error: the arguments for {tool.name} were not a JSON object; send them again as one", True)
    try:
        check_arguments(tool.spec.parameters, call.arguments)
    except SchemaError as exc:
        logger.info("tool call refused: bad arguments", extra=detail)
        return ToolResult(f"error: bad arguments for {tool.name}: {exc}", True)
    try:
        content = tool.run(call.arguments, dataclasses.replace(ctx, call_id=call.id))
    except ToolError as exc:
        logger.info("tool call failed", extra={**detail, "reason": "tool_error"})
        return ToolResult(f"error: {_cut(str(exc))}", True)
    except Exception as exc:  # noqa: BLE001 - a tool's failure goes to the model, never up the turn
        logger.warning("tool call crashed", extra={**detail, "error": type(exc).__name__})
        return ToolResult(f"error: {tool.name} failed ({type(exc).__name__}); try again later or do without it", True)
    logger.info("tool call done", extra=detail)
    return ToolResult(_cut(content))


def result_text(value: Any) -> str:
    """A structured result as compact JSON, the way models read it best."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _cut(text: str) -> str:
    if len(text) <= MAX_RESULT_CHARS:
        return text
    return text[: MAX_RESULT_CHARS - 40] + f"… [cut: {len(text) - MAX_RESULT_CHARS + 40} more characters]"
