"""The built-in tools, the registry by turn kind, and `execute` (errors become results, never raise)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from hermes_gateway.domain.cron import PAUSED, SCHEDULED
from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.reach import MediaReach, SendReach, TurnReach, search_scope
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource, compact_source, sender_of
from hermes_gateway.domain.targets import Channel, ResolvedTarget
from hermes_gateway.memory.builtin import BuiltinMemory
from hermes_gateway.memory.manager import MemoryManager
from hermes_gateway.observability import hash_id
from hermes_gateway.providers.base import INVALID_ARGUMENTS, ToolCall, ToolSpec
from hermes_gateway.tools.base import MAX_RESULT_CHARS, SpecTool, ToolContext, ToolError, ToolResult, execute
from hermes_gateway.tools.cronjob import CRONJOB, job_id_for
from hermes_gateway.tools.memory import NoteLimits
from hermes_gateway.tools.registry import tools_for
from hermes_gateway.tools.schema import SchemaError, check_arguments
from hermes_gateway.tools.send_message import SEND_MESSAGE, delivery_id_for
from tests.fakes.jobs import FakeJobStore
from tests.fakes.memory_notes import FakeNoteStore
from tests.fakes.services import FakeDeliveryQueue, FakeDirectory, make_settings
from tests.fakes.sessions import memory_stores, seed

NOW = 1_795_000_000.0  # 2026-11-18
ORIGIN = ResolvedTarget("telegram", "99", None, label="origin")
AL = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Al")
KEY = "agent:main:telegram:dm:99"


def _reach(source: SessionSource = AL, **changes: Any) -> TurnReach:
    base = TurnReach(
        search=search_scope("agent:main", source, scope="user", session_key=KEY),
        send=SendReach(ORIGIN),
        media=MediaReach(),
        files_session="s-1",
    )
    return replace(base, **changes)


def _ctx(**changes: Any) -> ToolContext:
    notes = FakeNoteStore()
    base = ToolContext(
        kind="chat",
        turn_id="turn-1",
        profile="default",
        now=NOW,
        session_id="s-1",
        session_key=KEY,
        user_hash=sender_of(AL),
        source=AL.to_dict(),
        reach=_reach(),
        origin=ORIGIN,
        home_channels={"slack": "C-home"},
        correlation_id="evt-1",
        sessions=memory_stores().catalogue,
        delivery=FakeDeliveryQueue(),
        directory=FakeDirectory(),
        jobs=FakeJobStore(),
        memory=MemoryManager([BuiltinMemory(notes, NoteLimits(max_notes=3, max_note_chars=50))]),
    )
    return replace(base, **changes)


def _run(ctx: ToolContext, name: str, arguments: dict[str, Any], call_id: str = "c1", kind: str = "chat") -> Any:
    result = execute(ToolCall(call_id, name, arguments), tools_for(kind, make_settings()), ctx)  # type: ignore[arg-type]
    assert not result.is_error, result.content
    return json.loads(result.content)


def _error(ctx: ToolContext, name: str, arguments: dict[str, Any], call_id: str = "c1") -> str:
    result = execute(ToolCall(call_id, name, arguments), tools_for("chat", make_settings()), ctx)
    assert result.is_error
    return result.content


# --- registry --------------------------------------------------------------------------------


def test_each_turn_kind_gets_its_tools() -> None:
    settings = make_settings()
    assert [t.name for t in tools_for("chat", settings)] == ["memory", "session_search", "send_message", "cronjob"]
    assert [t.name for t in tools_for("cron", settings)] == ["memory", "session_search", "send_message"]
    assert [t.name for t in tools_for("flush", settings)] == ["memory"]


def test_approval_and_enabled_tools_come_from_settings() -> None:
    settings = make_settings(
        {"GATEWAY_TOOLS_NEEDING_APPROVAL": "send_message,cronjob", "GATEWAY_TOOLS": "send_message"}
    )
    tools = {t.name: t for t in tools_for("chat", settings)}
    assert list(tools) == ["memory", "send_message"]
    assert tools["send_message"].needs_approval
    assert not tools["memory"].needs_approval


def test_an_enabled_external_memory_adds_its_tools() -> None:
    settings = make_settings({"GATEWAY_MEMORY_PROVIDER": "honcho"})
    assert [t.name for t in tools_for("chat", settings)][:2] == ["memory", "honcho_ask"]
    assert [t.name for t in tools_for("flush", settings)] == ["memory"]


def test_unknown_tool_names_in_settings_are_refused() -> None:
    from hermes_gateway.errors import ConfigError

    with pytest.raises(ConfigError, match=r"tools\.needs_approval.*unknown tool"):
        make_settings({"GATEWAY_TOOLS_NEEDING_APPROVAL": "rm_rf"})
    with pytest.raises(ConfigError, match=r"tools\.enabled"):
        make_settings({"GATEWAY_TOOLS": "memory"})  # memory is always on; not a switchable tool


def test_unknown_turn_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown turn kind"):
        tools_for("batch", make_settings())  # type: ignore[arg-type]


# --- execute ---------------------------------------------------------------------------------------


def _tool(handler: Any) -> SpecTool:
    spec = ToolSpec("probe", "a test tool", {"type": "object", "properties": {"n": {"type": "integer"}}})
    return SpecTool(spec, handler)


def test_an_unknown_tool_is_an_error_result() -> None:
    result = execute(ToolCall("c", "launch_rockets", {}), [_tool(lambda a, c: "ok")], _ctx())
    assert result.is_error
    assert "no tool named 'launch_rockets'" in result.content
    assert "probe" in result.content


def test_bad_arguments_are_an_error_result_and_the_tool_does_not_run() -> None:
    ran: list[Any] = []
    result = execute(ToolCall("c", "probe", {"n": "seven"}), [_tool(lambda a, c: ran.append(a))], _ctx())
    assert (result.is_error, ran) == (True, [])
    assert "arguments.n must be an integer" in result.content


def test_unreadable_json_arguments_are_an_error_result() -> None:
    call = ToolCall("c", "probe", {INVALID_ARGUMENTS: "{n: 1"})
    result = execute(call, [_tool(lambda a, c: "ok")], _ctx())
    assert result.is_error
    assert "not a JSON object" in result.content


def test_a_tool_error_is_a_result_the_model_reads() -> None:
    def fails(arguments: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolError("the id is wrong")

    result = execute(ToolCall("c", "probe", {}), [_tool(fails)], _ctx())
    assert result == ToolResult("error: the id is wrong", is_error=True)


def test_a_crashing_tool_never_raises_and_leaks_no_detail() -> None:
    def crashes(arguments: dict[str, Any], ctx: ToolContext) -> str:
        raise RuntimeError("secret internals /etc/passwd")

    result = execute(ToolCall("c", "probe", {}), [_tool(crashes)], _ctx())
    assert result.is_error
    assert "RuntimeError" in result.content
    assert "secret internals" not in result.content


def test_a_long_result_is_cut() -> None:
    result = execute(ToolCall("c", "probe", {}), [_tool(lambda a, c: "x" * 20_000)], _ctx())
    assert len(result.content) <= MAX_RESULT_CHARS
    assert result.content.endswith("more characters]")


def test_the_tool_sees_its_call_id() -> None:
    seen: list[str] = []
    execute(ToolCall("call-77", "probe", {}), [_tool(lambda a, c: seen.append(c.call_id) or "ok")], _ctx())
    assert seen == ["call-77"]


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        ({"type": "object", "required": ["a"]}, {}, "arguments.a is required"),
        ({"type": "object", "additionalProperties": False, "properties": {}}, {"x": 1}, "unknown field"),
        ({"type": "string", "enum": ["a", "b"]}, "c", "one of a, b"),
        ({"type": "string", "maxLength": 2}, "abc", "longer than 2"),
        ({"type": "integer", "minimum": 1}, 0, "at least 1"),
        ({"type": "integer"}, True, "must be an integer"),
        ({"type": "array", "items": {"type": "string"}}, ["a", 1], r"arguments\[1\] must be a string"),
    ],
)
def test_schema_errors_say_where_and_why(schema: dict[str, Any], value: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        check_arguments(schema, value)


# --- memory ---------------------------------------------------------------------------------------


def test_memory_add_list_replace_remove() -> None:
    ctx = _ctx()
    added = _run(ctx, "memory", {"action": "add", "text": "likes green tea"})["added"]
    assert added["text"] == "likes green tea"

    listed = _run(ctx, "memory", {"action": "list"})
    assert listed == {"notes": [added], "count": 1}

    _run(ctx, "memory", {"action": "replace", "id": added["id"], "text": "likes black tea"}, call_id="c2")
    assert _run(ctx, "memory", {"action": "list"})["notes"][0]["text"] == "likes black tea"

    assert _run(ctx, "memory", {"action": "remove", "id": added["id"]}) == {"removed": added["id"]}
    assert _run(ctx, "memory", {"action": "list"})["count"] == 0


def test_memory_add_run_twice_for_the_same_call_adds_once() -> None:
    ctx = _ctx()
    first = _run(ctx, "memory", {"action": "add", "text": "a"}, call_id="same")
    again = _run(ctx, "memory", {"action": "add", "text": "a"}, call_id="same")
    assert first == again
    assert _run(ctx, "memory", {"action": "list"})["count"] == 1


def test_memory_limits_are_clear_errors() -> None:
    ctx = _ctx()
    for i in range(3):
        _run(ctx, "memory", {"action": "add", "text": f"note {i}"}, call_id=f"c{i}")
    assert "the notebook is full (3 notes)" in _error(ctx, "memory", {"action": "add", "text": "one more"}, "c9")
    assert "at most 50 characters" in _error(ctx, "memory", {"action": "replace", "id": "x", "text": "y" * 60})
    assert "there is no note 'nope'" in _error(ctx, "memory", {"action": "remove", "id": "nope"})
    assert "text is required" in _error(ctx, "memory", {"action": "add"})
    assert "id is required" in _error(ctx, "memory", {"action": "replace", "text": "t"})


def test_memory_is_per_user_and_profile() -> None:
    ctx = _ctx()
    _run(ctx, "memory", {"action": "add", "text": "mine"})
    other_user = replace(ctx, user_hash=hash_id("43"))
    other_profile = replace(ctx, profile="coder")
    assert _run(other_user, "memory", {"action": "list"})["count"] == 0
    assert _run(other_profile, "memory", {"action": "list"})["count"] == 0


def test_memory_without_a_known_user_is_an_error() -> None:
    assert "needs a known user" in _error(_ctx(user_hash=None), "memory", {"action": "list"})


def test_memory_without_a_manager_is_an_error() -> None:
    assert "not available" in _error(_ctx(memory=None), "memory", {"action": "list"})


# --- session_search ----------------------------------------------------------------------------


def _session_with(
    stores: SessionStores, chat: str, texts: list[str], profile: str | None = None, user: str = "42"
) -> str:
    source = SessionSource("telegram", chat_id=chat, chat_type="dm", user_id=user, profile=profile)
    roles = tuple("user" for _ in texts)
    return seed(stores, source, build_session_key(source, profile=profile), *texts, now=NOW, roles=roles)


def test_session_search_finds_the_users_past_transcripts_and_no_one_elses() -> None:
    # Given Al's earlier DM session, Bo's DM session and Al's session with another profile's bot
    store = memory_stores()
    old = _session_with(store, "99", ["my cat is called Miso", "unrelated"])
    _session_with(store, "77", ["Bo's miso recipe"], user="43")
    _session_with(store, "99", ["miso soup in another profile"], profile="coder")

    # When Al's turn searches
    found = _run(_ctx(sessions=store.catalogue), "session_search", {"query": "  MISO "})

    # Then only his own session of this profile is read
    assert found["query"] == "MISO"
    assert found["searched"] == "this user's sessions (in a group: the group's)"
    assert [(h["session_id"], h["this_session"]) for h in found["hits"]] == [(old, False)]
    assert "Miso" in found["hits"][0]["snippet"]
    assert found["hits"][0]["date"].startswith("2026-11-")
    # and with the profile scope (an admin, or the operator's choice), Bo's too
    whole = _reach(search=search_scope("agent:main", AL, scope="profile"))
    found = _run(_ctx(sessions=store.catalogue, reach=whole), "session_search", {"query": "miso"})
    assert len(found["hits"]) == 2 and found["searched"] == "every session of this agent"


def test_session_search_in_a_cron_turn_searches_its_creators_sessions() -> None:
    store = memory_stores()
    mine = _session_with(store, "99", ["the budget is 5k"])
    _session_with(store, "77", ["Bo's budget is 9k"], user="43")
    ctx = _ctx(kind="cron", sessions=store.catalogue, session_key=None, session_id=None)
    assert [h["session_id"] for h in _run(ctx, "session_search", {"query": "budget"}, kind="cron")["hits"]] == [mine]


def test_session_search_without_a_known_reach_reads_only_its_own_chat() -> None:
    store = memory_stores()
    mine = _session_with(store, "99", ["the budget is 5k"])
    _session_with(store, "77", ["Bo's budget is 9k"], user="43")
    hits = _run(_ctx(sessions=store.catalogue, reach=None), "session_search", {"query": "budget"})["hits"]
    assert [h["session_id"] for h in hits] == [mine]
    assert (
        _run(_ctx(sessions=store.catalogue, reach=None, session_key=None), "session_search", {"query": "budget"})[
            "hits"
        ]
        == []
    )


def test_session_search_refuses_a_too_short_query() -> None:
    assert "at least 2" in _error(_ctx(), "session_search", {"query": " a "})


# --- send_message ----------------------------------------------------------------------------------


def test_send_message_queues_a_mirrored_push_to_the_resolved_target() -> None:
    ctx = _ctx()
    directory: FakeDirectory = ctx.directory  # type: ignore[assignment]
    directory.remember(Channel("slack", "C-ops", None, "ops", "group"), NOW)

    result = _run(ctx, "send_message", {"target": "#ops", "text": "deploy done"}, call_id="call-5")

    queue: FakeDeliveryQueue = ctx.delivery  # type: ignore[assignment]
    assert queue.bodies == [
        {
            "delivery_id": delivery_id_for("turn-1", "call-5"),
            "kind": "push",
            "mirror": True,
            "turn_id": "turn-1",
            "target": {"platform": "slack", "chat_id": "C-ops", "thread_id": None},
            "text": "deploy done",
            "correlation_id": "evt-1",
            "session": hash_id("agent:main:telegram:dm:99"),
            "session_id": "s-1",  # the turn's own session: the stored files it may attach
        }
    ]
    assert result == {"status": "queued for #ops", "delivery_id": delivery_id_for("turn-1", "call-5")}


@pytest.mark.parametrize(
    ("target", "listed", "beyond"),
    [
        ("origin", (), None),
        ("telegram:99", (), None),  # the turn's own chat, named by its id
        ("telegram:99:7", (), None),  # a thread of it
        ("slack", (), None),  # a home channel
        ("local", (), None),
        ("telegram:12345", (), "send a message to telegram:12345, outside this chat"),  # someone else's chat
        ("#ops", (), "send a message to #ops, outside this chat"),
        ("#ops", ("#ops",), None),
        ("#ops", ("slack:C-ops",), None),  # listed by its id
        ("telegram:-100:17", ("telegram:-100",), None),  # any thread of a listed chat
        ("telegram:-100:18", ("telegram:-100:17",), "send a message to telegram:-100:18, outside this chat"),
        ("#nowhere", (), None),  # unresolvable: the call's own error when it runs, nothing to approve
    ],
)
def test_send_message_beyond_the_turns_chat_needs_an_approval(
    target: str, listed: tuple[str, ...], beyond: str | None
) -> None:
    ctx = _ctx(reach=_reach(send=SendReach(ORIGIN, listed)))
    ctx.directory.remember(Channel("slack", "C-ops", None, "ops", "group"), NOW)  # type: ignore[union-attr]
    assert SEND_MESSAGE.beyond_reach({"target": target, "text": "hi"}, ctx) == beyond


def test_cronjob_delivering_beyond_the_turns_chat_needs_an_approval() -> None:
    ctx = _ctx()
    create = {"action": "create", "prompt": "p", "schedule": "every 1d"}
    assert CRONJOB.beyond_reach(create, ctx) is None
    assert CRONJOB.beyond_reach({**create, "deliver": ["origin", "slack"]}, ctx) is None
    assert CRONJOB.beyond_reach({**create, "deliver": ["origin", "telegram:555"]}, ctx) == (
        "schedule messages to telegram:555, outside this chat"
    )
    assert CRONJOB.beyond_reach({"action": "list"}, ctx) is None


def test_send_message_attaches_only_urls_the_turn_was_given_and_its_own_sessions_files() -> None:
    given = "https://files.example/report.pdf"
    ctx = _ctx(reach=_reach(media=MediaReach(frozenset({given}), ("cdn.example",))))
    made_up = "https://attacker.example/p.png?d=the-users-secret"
    assert "did not come from the user" in _error(
        ctx, "send_message", {"target": "origin", "text": "x", "media": [made_up]}
    )
    assert ctx.delivery.bodies == []  # type: ignore[union-attr]
    media = [given, "https://cdn.example/logo.png", "default/s-1/3-0"]
    _run(ctx, "send_message", {"target": "origin", "text": "x", "media": media})
    body = ctx.delivery.bodies[0]  # type: ignore[union-attr]
    assert [m["reference"] for m in body["media"]] == media and body["session_id"] == "s-1"
    # a turn that reaches nothing attaches nothing
    assert "did not come from the user" in _error(
        _ctx(reach=None), "send_message", {"target": "origin", "text": "x", "media": [given]}
    )


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("origin", {"platform": "telegram", "chat_id": "99", "thread_id": None}),
        ("slack", {"platform": "slack", "chat_id": "C-home", "thread_id": None}),
        ("telegram:-100:17", {"platform": "telegram", "chat_id": "-100", "thread_id": "17"}),
        ("local", {"platform": "local", "chat_id": "local", "thread_id": None}),
    ],
)
def test_send_message_target_forms(target: str, expected: dict[str, Any]) -> None:
    ctx = _ctx()
    _run(ctx, "send_message", {"target": target, "text": "hi"})
    assert ctx.delivery.bodies[0]["target"] == expected  # type: ignore[union-attr]


def test_send_message_ids_are_stable_per_call_and_distinct_between_calls() -> None:
    assert delivery_id_for("t", "a") == delivery_id_for("t", "a")
    assert delivery_id_for("t", "a") != delivery_id_for("t", "b")
    assert delivery_id_for("t", "a") != delivery_id_for("u", "a")


@pytest.mark.parametrize(
    ("target", "reason"),
    [("discord", "no home channel"), ("myspace:1", "unknown platform"), ("#nowhere", "no chat named")],
)
def test_send_message_to_an_unresolvable_target_is_an_error_and_queues_nothing(target: str, reason: str) -> None:
    ctx = _ctx()
    message = _error(ctx, "send_message", {"target": target, "text": "hi"})
    assert message.startswith("error: cannot send there:")
    assert reason in message
    assert ctx.delivery.bodies == []  # type: ignore[union-attr]


def test_send_message_origin_in_an_unattended_turn_is_an_error() -> None:
    assert "origin" in _error(_ctx(origin=None), "send_message", {"target": "origin", "text": "hi"})


# --- cronjob ---------------------------------------------------------------------------------------


def test_cronjob_create_list_pause_resume_remove() -> None:
    ctx = _ctx()
    created = _run(
        ctx, "cronjob", {"action": "create", "prompt": "Remind the user to stretch", "schedule": "every 2h"}
    )["created"]
    assert (created["id"], created["schedule"], created["deliver"]) == (
        job_id_for("turn-1", "c1"),
        "every 2h",
        ["origin"],
    )
    assert created["next_run_at"] == NOW + 7200
    assert "origin" not in created  # the chat's ids are not shown to the model
    stored = ctx.jobs.get(created["id"])  # type: ignore[union-attr]
    assert stored.origin == ORIGIN.to_dict()
    assert stored.profile == "default"

    assert [j["id"] for j in _run(ctx, "cronjob", {"action": "list"})["jobs"]] == [created["id"]]
    assert _run(ctx, "cronjob", {"action": "pause", "id": created["id"]})["paused"]["state"] == PAUSED
    later = replace(ctx, now=NOW + 100_000)
    resumed = _run(later, "cronjob", {"action": "resume", "id": created["id"]})["resumed"]
    assert resumed["state"] == SCHEDULED
    assert resumed["next_run_at"] > NOW + 100_000
    assert _run(ctx, "cronjob", {"action": "remove", "id": created["id"]}) == {"removed": created["id"]}
    assert _run(ctx, "cronjob", {"action": "list"})["count"] == 0


def test_cronjob_jobs_are_their_creators_and_an_admins() -> None:
    # Given a job Al made
    ctx = _ctx()
    made = _run(ctx, "cronjob", {"action": "create", "prompt": "p", "schedule": "every 1d"})["created"]
    assert ctx.jobs.get(made["id"]).creator == compact_source(AL)  # type: ignore[union-attr]
    # When Bo's turn lists or removes jobs, then he neither sees nor touches it
    bo = SessionSource("telegram", chat_id="77", chat_type="dm", user_id="43")
    bos = replace(ctx, user_hash=sender_of(bo), source=bo.to_dict(), reach=_reach(bo))
    assert _run(bos, "cronjob", {"action": "list"})["count"] == 0
    assert "there is no job" in _error(bos, "cronjob", {"action": "remove", "id": made["id"]})
    # an admin sees and may remove every job
    admin = replace(bos, reach=_reach(bo, admin=True))
    assert [j["id"] for j in _run(admin, "cronjob", {"action": "list"})["jobs"]] == [made["id"]]
    assert _run(admin, "cronjob", {"action": "remove", "id": made["id"]}) == {"removed": made["id"]}


def test_cronjob_a_one_shot_runs_once() -> None:
    created = _run(_ctx(), "cronjob", {"action": "create", "prompt": "p", "schedule": "in 30m", "repeat": 5})["created"]
    assert created["repeat"] == {"times": 1, "completed": 0}
    assert created["next_run_at"] == NOW + 1800


def test_cronjob_create_run_twice_for_the_same_call_creates_once() -> None:
    ctx = _ctx()
    arguments = {"action": "create", "prompt": "p", "schedule": "every 1d"}
    assert _run(ctx, "cronjob", arguments) == _run(ctx, "cronjob", arguments)
    assert len(ctx.jobs.jobs) == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ({"action": "create", "prompt": "p", "schedule": "whenever"}, "every 30m"),  # the accepted forms listed
        ({"action": "create", "prompt": " ", "schedule": "every 1d"}, "needs a prompt"),
        ({"action": "create", "prompt": "p", "schedule": "every 1d", "deliver": ["discord"]}, "cannot deliver to"),
        ({"action": "create", "prompt": "p", "schedule": "2020-01-01T09:00"}, "already passed"),
        ({"action": "pause", "id": "../../etc"}, "not a job id"),
        ({"action": "remove", "id": "j0123456789ab"}, "there is no job"),
    ],
)
def test_cronjob_bad_input_is_a_clear_error(arguments: dict[str, Any], reason: str) -> None:
    ctx = _ctx()
    assert reason in _error(ctx, "cronjob", arguments)
    assert ctx.jobs.jobs == {}  # type: ignore[union-attr]


def test_cronjob_never_touches_another_profiles_job() -> None:
    ctx = _ctx()
    created = _run(ctx, "cronjob", {"action": "create", "prompt": "p", "schedule": "every 1d"})["created"]
    other = replace(ctx, profile="coder")
    assert "there is no job" in _error(other, "cronjob", {"action": "remove", "id": created["id"]})
    assert _run(other, "cronjob", {"action": "list"})["count"] == 0


def test_cronjob_is_not_offered_in_a_cron_turn() -> None:
    result = execute(
        ToolCall("c", "cronjob", {"action": "list"}), tools_for("cron", make_settings()), _ctx(kind="cron")
    )
    assert result.is_error
    assert "no tool named 'cronjob'" in result.content


def test_the_memory_user_handle_differs_per_platform_and_hides_the_id() -> None:
    from hermes_gateway.tools.base import user_hash

    telegram, discord = user_hash("telegram", "42"), user_hash("discord", "42")
    assert telegram and discord and telegram != discord
    assert telegram == user_hash("telegram", "42")
    assert len(telegram) == 12  # a short digest, not the id
    assert user_hash("telegram", None) is None


def test_a_named_profiles_tools_send_through_its_own_bot() -> None:
    from hermes_gateway.services.cron import report_failure

    ctx = _ctx(profile="coder", sends_as="coder", session_key="agent:coder:telegram:dm:99")
    _run(ctx, "send_message", {"target": "telegram:55", "text": "hello"})
    [push] = ctx.delivery.bodies  # type: ignore[union-attr]
    assert push["target"] == {"platform": "telegram", "chat_id": "55", "thread_id": None, "profile": "coder"}
    created = _run(ctx, "cronjob", {"action": "create", "prompt": "stretch", "schedule": "every 2h"})["created"]
    stored = ctx.jobs.get(created["id"])  # type: ignore[union-attr]
    assert (stored.profile, stored.origin["profile"]) == ("coder", "coder")
    # a failed run's notice goes to the origin chat through the coder bot too
    notices = FakeDeliveryQueue()
    assert report_failure(notices, {**stored.turn_job("r1"), "name": "stretch"}, "boom")
    assert notices.bodies[0]["target"]["profile"] == "coder"


def test_the_memory_tool_takes_notes_as_long_as_the_setting_allows() -> None:
    long_note = "n" * 1500  # over the default 1000, within the configured 2000
    for kind in ("chat", "flush"):
        settings = make_settings({"GATEWAY_MEMORY_MAX_NOTE_CHARS": "2000"})
        ctx = _ctx(
            kind=kind,
            memory=MemoryManager([BuiltinMemory(FakeNoteStore(), NoteLimits(max_notes=3, max_note_chars=2000))]),
        )
        result = execute(ToolCall("c1", "memory", {"action": "add", "text": long_note}), tools_for(kind, settings), ctx)
        assert not result.is_error, result.content
    refused = execute(
        ToolCall("c2", "memory", {"action": "add", "text": long_note}), tools_for("chat", make_settings()), _ctx()
    )
    assert refused.is_error  # the default still holds a note to 1000 characters
