"""Trusted in-process hooks (BEHAVIOUR §8): loaded from their folders by manifest or setting,
handed every event they observe after the bus, never blocking a message when they fail, and able
to switch a message's session from `message:pre_route`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.domain.events import Hook, HookedEvents, pre_route
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.hooks import HOOKS_DIR, load_hooks
from hermes_gateway.services.router import Access, route_message
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import memory_stores

KEY = "agent:main:telegram:dm:99"
DETAIL = {"platform": "telegram", "chat_type": "dm", "session": "abc"}


def write_hook(root: Path, name: str, events: Any, body: str, enabled: bool = True) -> None:
    folder = root / name
    folder.mkdir()
    (folder / "hook.json").write_text(json.dumps({"events": events, "enabled": enabled}))
    (folder / "handler.py").write_text(body)


def test_hooks_load_by_manifest_or_setting_and_broken_ones_are_skipped(tmp_path: Path) -> None:
    write_hook(tmp_path, "on_by_manifest", ["session:start"], "def handle(event, context):\n    return 1\n")
    write_hook(tmp_path, "off", ["session:start"], "def handle(event, context):\n    return 2\n", enabled=False)
    write_hook(tmp_path, "named", ["command:*"], "def handle(event, context):\n    return 3\n", enabled=False)
    write_hook(tmp_path, "bad_events", "session:start", "def handle(event, context):\n    pass\n")
    write_hook(tmp_path, "no_handle", ["session:start"], "x = 1\n")
    write_hook(tmp_path, "raises_on_import", ["session:start"], "raise RuntimeError('boom')\n")
    hooks = load_hooks(enabled=("named", "missing"), root=tmp_path)
    assert [h.name for h in hooks] == ["named", "on_by_manifest"]
    assert hooks[0].observes("command:new") and not hooks[0].observes("session:start")


def test_the_shipped_example_hook_is_disabled_by_default_and_loads_when_enabled() -> None:
    assert load_hooks() == []
    hooks = load_hooks(enabled=("log_events",))
    assert [h.name for h in hooks] == ["log_events"]
    assert hooks[0].observes("cron:ran") and hooks[0].observes("agent:end")
    assert hooks[0].handle({"name": "cron:ran", "detail": {"job_id": "j1"}}, {"hook": "log_events"}) is None
    assert (HOOKS_DIR / "log_events" / "hook.json").is_file()


def test_events_reach_the_bus_then_the_hooks_that_observe_them() -> None:
    bus, seen = FakeEvents(), []
    hook = Hook("h", ("session:*",), lambda event, context: seen.append((event, context["hook"], context["stage"])))
    events = HookedEvents(bus, [hook], {"stage": "dev"})
    events.emit("session:start", {"session": "abc"})
    events.emit("delivery:sent", {"delivery_id": "d"})
    assert [name for name, _ in bus.emitted] == ["session:start", "delivery:sent"]
    assert seen == [({"name": "session:start", "detail": {"session": "abc"}}, "h", "dev")]


def test_a_failing_hook_is_logged_and_never_blocks() -> None:
    def broken(event: dict[str, Any], context: dict[str, Any]) -> None:
        raise ValueError("hook bug")

    later: list[str] = []
    hooks = [Hook("broken", ("*",), broken), Hook("ok", ("*",), lambda e, c: later.append(e["name"]))]
    bus = FakeEvents()
    # When an event reaches a hook that raises, the next hook still runs and nothing is raised
    assert HookedEvents(bus, hooks, {}).run("agent:end", {}) == [None, None]
    HookedEvents(bus, hooks, {}).emit("agent:end", {})
    assert later == ["agent:end", "agent:end"] and len(bus.emitted) == 1


def test_pre_route_may_switch_the_session_within_its_namespace() -> None:
    def to_shared(event: dict[str, Any], context: dict[str, Any]) -> dict[str, str]:
        assert event["message"]["text"] == "hi" and event["session_key"] == KEY
        return {"session_key": "agent:main:shared:ops"}

    bus = FakeEvents()
    events = HookedEvents(bus, [Hook("router", ("message:pre_route",), to_shared)], {})
    assert pre_route(events, KEY, DETAIL, {"text": "hi"}) == "agent:main:shared:ops"
    # The bus got the event once, without the message
    assert bus.emitted == [("message:pre_route", DETAIL)]


@pytest.mark.parametrize(
    "answer",
    [{"session_key": "agent:other:x"}, {"session_key": "agent:main:../x"}, {"session_key": 5}, {"session_key": ""},
     {"session_key": "agent:main:"}, "agent:main:x", None],
)  # fmt: skip
def test_pre_route_ignores_an_unusable_answer(answer: Any) -> None:
    events = HookedEvents(FakeEvents(), [Hook("h", ("message:pre_route",), lambda e, c: answer)], {})
    assert pre_route(events, KEY, DETAIL, {"text": "hi"}) == KEY


def test_without_hooks_pre_route_only_publishes() -> None:
    bus = FakeEvents()
    assert pre_route(bus, KEY, DETAIL, {"text": "hi"}) == KEY
    assert bus.emitted == [("message:pre_route", DETAIL)]


def test_the_router_honours_a_session_switch() -> None:
    # Given a hook that routes every Telegram DM to one shared session
    stores, starter = memory_stores(), FakeStarter()
    hook = Hook("shared", ("message:pre_route",), lambda e, c: {"session_key": "agent:main:shared:all"})
    events = HookedEvents(FakeEvents(), [hook], {})
    access = Access(pairing=FakePairingStore(), replies=FakeDeliveryQueue(), events=events)
    source = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al", message_id="5")
    msg = InboundMessage(source=source, text="hello", event_id="telegram:default:1", received_at=1.0)
    # When a message is routed
    outcome = route_message(
        msg, settings=make_settings({"TELEGRAM_ALLOWED_USERS": "42"}), stores=stores, starter=starter,
        access=access, now=2.0,
    )  # fmt: skip
    # Then its turn runs in the session the hook chose
    assert outcome.status == "started"
    assert stores.routes.get("agent:main:shared:all") is not None and stores.routes.get(KEY) is None
    (turn,) = starter.started.values()
    assert turn["turn"]["session_key"] == "agent:main:shared:all"
