"""The memory manager (routing, prefetch, failure isolation), the built-in notes provider, and the
Honcho provider against a fake Honcho on loopback."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.memory import honcho as honcho_module
from hermes_gateway.memory.builtin import BuiltinMemory
from hermes_gateway.memory.honcho import HonchoMemory
from hermes_gateway.memory.manager import MAX_PREFETCH_CHARS, MemoryManager, MemoryTool
from hermes_gateway.memory.registry import build_memory_manager
from hermes_gateway.observability import hash_id
from hermes_gateway.providers.base import ChatMessage, ToolCall, ToolSpec
from hermes_gateway.tools.base import ToolContext, ToolError, ToolResult, execute
from hermes_gateway.tools.registry import tools_for
from tests.fakes.honcho_server import FakeHoncho
from tests.fakes.memory_notes import FakeNoteStore
from tests.fakes.services import make_settings

pytest_plugins = ("tests.fakes.honcho_server",)

USER = hash_id("42")
assert USER is not None


def _ctx(manager: MemoryManager | None = None, **changes: Any) -> ToolContext:
    values: dict[str, Any] = {
        "kind": "chat",
        "turn_id": "turn-1",
        "profile": "default",
        "now": 1_795_000_000.0,
        "session_id": "20261129_084501_3f9a1c2b",
        "session_key": "agent:main:telegram:dm:99",
        "user_hash": USER,
        "memory": manager,
        **changes,
    }
    return ToolContext(**values)


@dataclass
class Probe:
    """A memory provider that records its calls and fails where told."""

    name: str = "probe"
    fail_in: set[str] = field(default_factory=set)
    context: str = "probe context"
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def _maybe_fail(self, call: str) -> None:
        if call in self.fail_in:
            raise ConnectionError(f"{self.name} is down")

    def initialize(self, session_id: str, ctx: ToolContext) -> None:
        self.calls.append(("initialize", session_id))
        self._maybe_fail("initialize")

    def prefetch(self, query: str) -> str:
        self.calls.append(("prefetch", query))
        self._maybe_fail("prefetch")
        return self.context

    def sync_turn(self, user: str, assistant: str) -> None:
        self.calls.append(("sync_turn", (user, assistant)))
        self._maybe_fail("sync_turn")

    def tools(self) -> list[ToolSpec]:
        self._maybe_fail("tools")
        return [ToolSpec(f"{self.name}_recall", "recall", {"type": "object"})]

    def handle_tool(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> str:
        self.calls.append(("handle_tool", name))
        self._maybe_fail("handle_tool")
        if arguments.get("bad"):
            raise ToolError("that is not something I remember")
        return f"{self.name} answers {name}"

    def on_session_end(self, transcript: list[ChatMessage]) -> None:
        self.calls.append(("on_session_end", len(transcript)))
        self._maybe_fail("on_session_end")


# --- the manager ---------------------------------------------------------------------------------


def test_tool_calls_go_to_the_provider_that_owns_them() -> None:
    first, second = Probe("alpha"), Probe("beta")
    manager = MemoryManager([first, second])
    manager.initialize("s-1", _ctx())

    assert manager.handle_tool("alpha_recall", {}, _ctx()).content == "alpha answers alpha_recall"
    assert manager.handle_tool("beta_recall", {}, _ctx()).content == "beta answers beta_recall"
    assert ("handle_tool", "beta_recall") not in first.calls
    assert ("handle_tool", "alpha_recall") not in second.calls


def test_an_unowned_tool_is_an_error_result() -> None:
    result = MemoryManager([Probe()]).handle_tool("nobody", {}, _ctx())
    assert result.is_error
    assert "no memory provider offers 'nobody'" in result.content


def test_prefetch_joins_every_providers_context_in_order() -> None:
    manager = MemoryManager([Probe("a", context="A knows"), Probe("b", context=""), Probe("c", context="C knows")])
    manager.initialize("s-1", _ctx())
    assert manager.prefetch("what do I like?") == "A knows\n\nC knows"


def test_prefetch_is_bounded() -> None:
    manager = MemoryManager([Probe("a", context="x" * (MAX_PREFETCH_CHARS + 500))])
    assert len(manager.prefetch("q")) == MAX_PREFETCH_CHARS


@pytest.mark.parametrize("call", ["prefetch", "sync_turn", "on_session_end"])
def test_a_failing_provider_never_fails_the_turn(call: str) -> None:
    broken = Probe("broken", fail_in={call}, context="broken context")
    healthy = Probe("healthy", context="healthy context")
    manager = MemoryManager([broken, healthy])
    manager.initialize("s-1", _ctx())

    context = manager.prefetch("q")
    manager.sync_turn("hi", "hello")
    manager.on_session_end([ChatMessage("user", "hi")])

    assert context == ("healthy context" if call == "prefetch" else "broken context\n\nhealthy context")
    assert ("sync_turn", ("hi", "hello")) in healthy.calls
    assert ("on_session_end", 1) in healthy.calls


def test_a_provider_that_failed_to_initialize_sits_the_turn_out() -> None:
    broken, healthy = Probe("broken", fail_in={"initialize"}, context="stale"), Probe("healthy", context="fresh")
    manager = MemoryManager([broken, healthy])
    manager.initialize("s-1", _ctx())

    assert manager.prefetch("q") == "fresh"
    result = manager.handle_tool("broken_recall", {}, _ctx())
    assert result.is_error
    assert "unavailable in this turn" in result.content
    assert not [c for c in broken.calls if c[0] in ("prefetch", "handle_tool")]

    # a later turn tries it again
    broken.fail_in.clear()
    manager.initialize("s-2", _ctx())
    assert manager.prefetch("q") == "stale\n\nfresh"


def test_a_crashing_tool_is_an_error_result_without_internals() -> None:
    manager = MemoryManager([Probe("alpha", fail_in={"handle_tool"})])
    result = manager.handle_tool("alpha_recall", {}, _ctx())
    assert result.is_error
    assert "ConnectionError" in result.content
    assert "is down" not in result.content


def test_a_tool_error_from_a_provider_reaches_the_model() -> None:
    manager = MemoryManager([Probe("alpha")])
    tool = MemoryTool(ToolSpec("alpha_recall", "recall", {"type": "object"}))  # as the registry lists it
    result = execute(ToolCall("c1", "alpha_recall", {"bad": True}), [tool], _ctx(manager))
    assert result == ToolResult("error: that is not something I remember", is_error=True)


def test_a_provider_that_cannot_list_tools_offers_none() -> None:
    manager = MemoryManager([Probe("broken", fail_in={"tools"}), Probe("ok")])
    assert "no memory provider offers 'broken_recall'" in manager.handle_tool("broken_recall", {}, _ctx()).content
    assert manager.handle_tool("ok_recall", {}, _ctx()).content == "ok answers ok_recall"


# --- the built-in provider ----------------------------------------------------------------------


def test_builtin_prefetch_shows_the_users_notes_with_their_ids() -> None:
    notes = FakeNoteStore()
    manager = MemoryManager([BuiltinMemory(notes)])
    ctx = _ctx(manager)
    manager.initialize(ctx.session_id or "", ctx)
    assert manager.prefetch("q") == ""

    add = ToolCall("c1", "memory", {"action": "add", "text": "likes green tea"})
    execute(add, tools_for("chat", make_settings()), ctx)

    context = manager.prefetch("q")
    (note,) = notes.list_notes(f"default#{USER}")
    assert context.splitlines() == [
        "Notes you saved about this user (memory tool; ids in brackets):",
        f"- [{note.note_id}] likes green tea",
    ]


def test_builtin_prefetch_without_a_user_is_empty() -> None:
    manager = MemoryManager([BuiltinMemory(FakeNoteStore())])
    manager.initialize("s", _ctx(user_hash=None))
    assert manager.prefetch("q") == ""


def test_build_memory_manager_follows_settings(fake_honcho: FakeHoncho) -> None:
    plain = build_memory_manager(make_settings(), FakeNoteStore())
    ask = ("honcho_ask", {"question": "anything?"}, _ctx())
    assert "no memory provider offers 'honcho_ask'" in plain.handle_tool(*ask).content
    assert not fake_honcho.requests

    honcho = {"GATEWAY_MEMORY_PROVIDER": "honcho", "HONCHO_BASE_URL": fake_honcho.base_url}
    with_honcho = build_memory_manager(make_settings(honcho), FakeNoteStore(), "hk")
    assert not with_honcho.handle_tool(*ask).is_error
    assert [r.path for r in fake_honcho.requests if r.path.endswith("/chat")]
    assert not with_honcho.handle_tool("memory", {"action": "list"}, _ctx(with_honcho)).is_error  # built-in notes too


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"GATEWAY_MEMORY_PROVIDER": "mem0"}, "memory.external"),
        ({"GATEWAY_MEMORY_MAX_NOTES": "0"}, "memory.max_notes"),
        ({"GATEWAY_MEMORY_MAX_NOTE_CHARS": "99999"}, "memory.max_note_chars"),
        ({"GATEWAY_MEMORY_PROVIDER": "honcho", "HONCHO_BASE_URL": "ftp://x"}, "memory.honcho_base_url"),
        ({"HONCHO_WORKSPACE": "a/b"}, "memory.honcho_workspace"),
        ({"GATEWAY_PROVIDER_MAX_ATTEMPTS": "0"}, "provider.max_attempts"),
        ({"GATEWAY_PROVIDER_RETRY_BUDGET_SECONDS": "500"}, "provider.retry_budget_seconds"),
    ],
)
def test_bad_memory_and_retry_settings_are_refused(env: dict[str, str], reason: str) -> None:
    with pytest.raises(ConfigError, match=reason):
        make_settings(env)


# --- Honcho -------------------------------------------------------------------------------------

API_KEY = "hch-test-0123456789"


@pytest.fixture(autouse=True)
def _forget_made_sessions() -> None:
    honcho_module._ensured.clear()


def _honcho(fake: FakeHoncho, ctx: ToolContext | None = None) -> HonchoMemory:
    memory = HonchoMemory(fake.base_url, "hermes", API_KEY, timeout=2.0)
    memory.initialize("20261129_084501_3f9a1c2b", ctx or _ctx())
    return memory


def test_honcho_sync_makes_workspace_and_session_once_then_adds_the_exchange(fake_honcho: FakeHoncho) -> None:
    memory = _honcho(fake_honcho)

    memory.sync_turn("I moved to Lisbon", "Noted, Lisbon!")
    memory.sync_turn("and I have a dog", "Nice.")

    user = f"default-user-{USER}"
    assert fake_honcho.messages[("hermes", "20261129_084501_3f9a1c2b")] == [
        {"peer_id": user, "content": "I moved to Lisbon"},
        {"peer_id": "hermes-default", "content": "Noted, Lisbon!"},
        {"peer_id": user, "content": "and I have a dog"},
        {"peer_id": "hermes-default", "content": "Nice."},
    ]
    paths = [r.path for r in fake_honcho.requests]
    assert paths.count("/v3/workspaces") == 1  # made once, then remembered
    assert all(r.headers["authorization"] == f"Bearer {API_KEY}" for r in fake_honcho.requests)
    assert "42" not in user  # the raw user id never leaves the gateway


def test_honcho_prefetch_reads_the_users_card(fake_honcho: FakeHoncho) -> None:
    memory = _honcho(fake_honcho)
    assert memory.prefetch("q") == ""  # an unknown peer (404) has no card

    fake_honcho.cards[f"default-user-{USER}"] = ["Lives in Lisbon", "Has a dog"]
    assert memory.prefetch("q").splitlines() == [
        "What the long-term user model (Honcho) knows about this user:",
        "- Lives in Lisbon",
        "- Has a dog",
    ]


def test_honcho_ask_tool_answers_through_the_manager(fake_honcho: FakeHoncho) -> None:
    memory = _honcho(fake_honcho)
    memory.sync_turn("my favourite colour is teal", "Teal it is.")
    manager = MemoryManager([memory])
    tools = tools_for("chat", make_settings({"GATEWAY_MEMORY_PROVIDER": "honcho"}))

    result = execute(ToolCall("c1", "honcho_ask", {"question": "favourite colour?"}), tools, _ctx(manager))

    assert result == ToolResult("The user said: my favourite colour is teal")
    chat = [r for r in fake_honcho.requests if r.path.endswith("/chat")]
    assert chat[0].json == {"query": "favourite colour?"}


def test_honcho_outage_is_isolated_by_the_manager(fake_honcho: FakeHoncho) -> None:
    notes = FakeNoteStore()
    manager = MemoryManager([BuiltinMemory(notes), _honcho(fake_honcho)])
    ctx = _ctx(manager)
    manager.initialize(ctx.session_id or "", ctx)
    fake_honcho.answer_next(503, {"detail": "down"}, times=10)

    manager.sync_turn("hello", "hi")  # logged, not raised
    assert manager.prefetch("q") == ""
    result = manager.handle_tool("honcho_ask", {"question": "anything?"}, ctx)
    assert result.is_error
    assert "Honcho is unavailable (honcho: HTTP 503)" in result.content
    assert not manager.handle_tool("memory", {"action": "list"}, ctx).is_error  # the built-in notes still work


def test_honcho_unreachable_is_transient_and_isolated() -> None:
    with FakeHoncho() as fake:
        url = fake.base_url
    memory = HonchoMemory(url, "hermes", None, timeout=1.0)
    manager = MemoryManager([memory])
    manager.initialize("s-1", _ctx())
    manager.sync_turn("a", "b")
    assert manager.prefetch("q") == ""


def test_honcho_refuses_a_base_url_that_is_not_http() -> None:
    with pytest.raises(ConfigError):
        HonchoMemory("file:///etc", "hermes", None)


# --- the pieces together, without a model ----------------------------------------------------


def test_remember_in_one_session_and_recall_in_the_next_with_echo() -> None:
    from hermes_gateway.providers.echo import EchoProvider

    notes = FakeNoteStore()
    settings = make_settings()
    tools = tools_for("chat", settings)
    provider = EchoProvider()

    # Given a first session where the user asks (through echo's tool syntax) to remember something
    manager = build_memory_manager(settings, notes)
    ctx = _ctx(manager, session_id="s-1")
    manager.initialize("s-1", ctx)
    history = [ChatMessage("user", 'echo-tool:memory {"action": "add", "text": "prefers metric units"}')]
    asked = provider.complete("sys", history, [tool.spec for tool in tools])
    (call,) = asked.tool_calls
    result = execute(call, tools, ctx)
    history += [asked.as_message(), ChatMessage("tool", result.content, tool_call_id=call.id, name=call.name)]
    final = provider.complete("sys", history, [tool.spec for tool in tools])
    assert final.text.startswith('Echo: [memory] {"added"')

    # When the user starts a new session (a new manager, a new session id)
    later = build_memory_manager(settings, notes)
    later.initialize("s-2", _ctx(later, session_id="s-2", turn_id="turn-2"))

    # Then the note is in the context the model gets before its first call
    assert "prefers metric units" in later.prefetch("what units do I like?")
