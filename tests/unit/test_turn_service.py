"""One agent turn, task by task: Respond -> Deliver -> Finish, and Fail.

The state machine is Express, so any task may run more than once; each must be idempotent on the
turn id. State travels between tasks as JSON (tests/fakes/engine.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import TurnState
from hermes_gateway.errors import LeaseLost, PermanentError
from hermes_gateway.observability import hash_id
from hermes_gateway.providers.base import Provider
from hermes_gateway.providers.echo import EchoProvider
from hermes_gateway.services.turn import APOLOGY, TurnDeps, run_step
from tests.fakes.engine import Engine, ToolModel, tool
from tests.fakes.services import ScriptedProvider

DM = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Alice", message_id="5")
GROUP_CHAT = "-1001234567667"


class World(Engine):
    """An engine whose model is a given provider, counting how often it is built."""

    def __init__(self, env: dict[str, str] | None = None, provider: Provider | None = None) -> None:
        super().__init__(env)
        self.provider = provider or EchoProvider()
        self.provider_builds = 0

    @property
    def deps(self) -> TurnDeps:
        deps = super().deps
        deps.provider = self._build
        return deps

    def _build(self) -> Provider:
        self.provider_builds += 1
        return self.provider

    def routed(self, text: str, source: SessionSource = DM, event: str = "telegram:default:1") -> dict[str, Any]:
        outcome = self.send(text, event, source)
        assert outcome.status == "started" and outcome.turn_id is not None
        return self.starter.started[outcome.turn_id]

    def until_finish(self, state: dict[str, Any]) -> dict[str, Any]:
        out = self.step("respond", state)
        return self.deliver_state(out) if out["next"] == "deliver" else out

    def lease(self) -> str | None:
        return self.route().lease_token


def test_a_turn_replies_with_the_echo_to_the_fixed_target() -> None:
    world = World()
    state = world.routed("hello there")
    turn = TurnState.from_json(state).turn

    world.step("finish", world.until_finish(state))

    assert world.delivered == [
        {
            "delivery_id": turn.turn_id,
            "turn_id": turn.turn_id,
            "target": {"platform": "telegram", "chat_id": "99", "thread_id": None},
            "text": "Echo: hello there",
            "correlation_id": turn.event_id,
            "session": hash_id(turn.session_key),
            "session_id": turn.session_id,
            "reply_to_message_id": "5",  # the user's message: shown as a reply to it (reply_to_mode)
        }
    ]
    assert world.transcript() == [("user", "hello there"), ("assistant", "Echo: hello there")]
    assert world.lease() is None


def test_the_target_comes_from_the_turn_not_from_the_session() -> None:
    world = World()
    state = TurnState.from_json(world.routed("hi"))
    moved = replace(state, turn=replace(state.turn, reply_to=ReplyTarget("telegram", "99", "topic-9")))

    world.until_finish(moved.to_json())

    assert world.delivered[0]["target"] == {"platform": "telegram", "chat_id": "99", "thread_id": "topic-9"}


def test_respond_adds_the_system_prompt_and_keeps_the_turn() -> None:
    world = World()
    state = world.routed("hi")

    out = world.step("respond", state)

    assert out["turn"] == state["turn"] and out["next"] == "deliver" and out["loop"]["iterations"] == 1
    assert "You are Hermes" in out["system"] and state["turn"]["session_id"] in out["system"]


def test_finish_twice_counts_tokens_once_and_releases_once() -> None:
    world = World(provider=ScriptedProvider("fine", input_tokens=11, output_tokens=4))
    state = world.until_finish(world.routed("how are you"))

    world.step("finish", state)
    world.step("finish", state)

    assert [r[0] for r in world.transcript()] == ["user", "assistant"]
    info = world.stores.catalogue.get_session(world.route().session_id)
    assert info is not None and (info.input_tokens, info.output_tokens, info.message_count) == (11, 4, 2)
    assert world.lease() is None


def test_a_repeated_respond_keeps_the_answer_once() -> None:
    world = World()
    state = world.routed("x")

    first, again = world.step("respond", state), world.step("respond", state)

    assert (
        first["deliveries"] == again["deliveries"] and first["deliveries"][0]["delivery_id"] == state["turn"]["turn_id"]
    )
    assert world.transcript() == [("user", "x"), ("assistant", "Echo: x")]


def test_a_finish_that_runs_late_does_not_release_the_next_turns_lease() -> None:
    world = World()
    state = world.until_finish(world.routed("one", event="telegram:default:1"))
    world.step("finish", state)
    second = world.routed("two", event="telegram:default:2")

    world.step("finish", state)

    assert world.lease() == second["turn"]["lease_token"]


@pytest.mark.parametrize("silent", ["[SILENT]", "NO_REPLY", "  NO_REPLY\n"])
def test_a_silent_reply_is_stored_not_sent(silent: str) -> None:
    world = World(provider=ScriptedProvider(silent))
    state = world.step("respond", world.routed("stay quiet"))

    assert state["next"] == "finish"
    world.step("finish", state)
    assert world.delivered == [] and world.deliveries.bodies == []
    assert world.transcript()[-1] == ("assistant", silent)
    assert world.lease() is None


def test_a_reply_that_only_mentions_silent_is_sent() -> None:
    world = World(provider=ScriptedProvider("I will stay [SILENT] no more"))

    world.until_finish(world.routed("x"))

    assert len(world.delivered) == 1


def test_the_tools_step_refuses_to_go_on_when_the_lease_is_lost() -> None:
    lookup = tool("lookup", lambda args, ctx: "found")
    world = World(provider=ToolModel([("lookup", {})]))  # type: ignore[arg-type]
    world.tools = [lookup]
    stale = world.step("respond", world.routed("one", event="telegram:default:1"))
    world.clock += 1000  # the lease expired; the next message takes it over
    world.routed("two", event="telegram:default:2")

    with pytest.raises(LeaseLost):
        world.step("tools", stale)


def test_lease_lost_is_a_permanent_error() -> None:
    assert issubclass(LeaseLost, PermanentError)  # the state machine retries only TransientError


def test_fail_sends_the_apology_and_releases_the_lease() -> None:
    world = World()
    state = world.routed("hi")
    turn = TurnState.from_json(state).turn
    failed = {**state, "error": {"Error": "TransientError", "Cause": "model timed out"}}

    world.step("fail", failed)

    assert world.deliveries.bodies == [
        {
            "delivery_id": f"{turn.turn_id}-failed",
            "turn_id": turn.turn_id,
            "target": turn.reply_to.to_dict() if turn.reply_to else None,
            "text": APOLOGY,
            "correlation_id": turn.event_id,
            "session": hash_id(turn.session_key),
            "session_id": turn.session_id,
            "reply_to_message_id": "5",  # an apology answers the message too
        }
    ]
    assert world.lease() is None


def test_fail_without_an_error_record_still_apologises_and_releases() -> None:
    world = World()
    state = world.routed("hi")

    world.step("fail", state)

    assert [b["delivery_id"] for b in world.deliveries.bodies] == [f"{state['turn']['turn_id']}-failed"]
    assert world.lease() is None


def test_fail_after_lease_lost_sends_nothing_and_leaves_the_new_holder_alone() -> None:
    world = World()
    stale = world.routed("one", event="telegram:default:1")
    world.clock += 1000
    newer = world.routed("two", event="telegram:default:2")

    world.step("fail", {**stale, "error": {"Error": "LeaseLost", "Cause": "..."}})

    assert world.deliveries.bodies == []
    assert world.lease() == newer["turn"]["lease_token"]


def test_a_failure_after_the_answer_was_kept_sends_the_answer_not_an_apology() -> None:
    world = World()
    state = world.until_finish(world.routed("hi"))

    world.step("fail", {**state, "error": {"Error": "TransientError", "Cause": "finish failed"}})

    assert [b["text"] for b in world.deliveries.bodies] == ["Echo: hi"]
    assert {b["delivery_id"] for b in world.sent()} == {state["turn"]["turn_id"]}


def test_shared_group_sessions_prefix_user_turns_with_the_sender_name() -> None:
    provider = ScriptedProvider("noted")
    world = World({"GATEWAY_GROUP_SESSIONS_PER_USER": "false"}, provider)
    alice = SessionSource("telegram", chat_id=GROUP_CHAT, chat_type="group", user_id="1", user_name="Alice")
    bob = SessionSource("telegram", chat_id=GROUP_CHAT, chat_type="group", user_id="2", user_name="Bob")
    world.step("finish", world.until_finish(world.routed("hi all", alice, "telegram:default:1")))

    world.until_finish(world.routed("hello Alice", bob, "telegram:default:2"))

    system, messages = provider.requests[-1]
    assert [(m.role, m.content) for m in messages] == [
        ("user", "[Alice] hi all"),
        ("assistant", "noted"),
        ("user", "[Bob] hello Alice"),
    ]
    assert "Shared session: yes" in system


def test_per_user_sessions_carry_no_name_prefix() -> None:
    provider = ScriptedProvider("ok")
    world = World(provider=provider)
    source = SessionSource("telegram", chat_id=GROUP_CHAT, chat_type="group", user_id="1", user_name="Alice")

    world.until_finish(world.routed("hi", source))

    system, messages = provider.requests[-1]
    assert [m.content for m in messages] == ["hi"] and "Shared session: no" in system


def test_a_forum_topic_is_shared_by_default() -> None:
    provider = ScriptedProvider("ok")
    world = World(provider=provider)
    source = SessionSource(
        "telegram", chat_id=GROUP_CHAT, chat_type="group", thread_id="17585", user_id="1", user_name="Alice"
    )

    world.until_finish(world.routed("hi", source))

    assert [m.content for m in provider.requests[-1][1]] == ["[Alice] hi"]


def test_the_system_prompt_hashes_telegram_chat_ids() -> None:
    provider = ScriptedProvider("ok")
    world = World(provider=provider)
    source = SessionSource("telegram", chat_id=GROUP_CHAT, chat_type="group", user_id="4242424242", user_name="Alice")

    world.until_finish(world.routed("hi", source))

    system, _ = provider.requests[-1]
    assert GROUP_CHAT not in system and "4242424242" not in system
    assert f"telegram:{hash_id(GROUP_CHAT)}" in system


def test_the_model_sees_at_most_max_history_messages_read_in_one_bounded_window() -> None:
    provider = ScriptedProvider("ok")
    world = World({"GATEWAY_MAX_HISTORY_MESSAGES": "3"}, provider)
    for n in range(1, 4):
        world.step("finish", world.until_finish(world.routed(f"m{n}", event=f"telegram:default:{n}")))

    assert [m.content for m in provider.requests[-1][1]] == ["m2", "ok", "m3"]


def test_the_provider_is_built_only_by_the_model_step() -> None:
    world = World()
    state = world.routed("hi")
    assert world.provider_builds == 0

    state = world.step("respond", state)
    assert world.provider_builds == 1
    world.step("finish", world.deliver_state(state))
    assert world.provider_builds == 1


def test_the_reply_and_its_usage_are_recorded_in_the_state() -> None:
    world = World(provider=ScriptedProvider("answer", input_tokens=9, output_tokens=2))

    state = world.step("respond", world.routed("q"))

    assert state["reply"] == {
        "text": "answer",
        "model": "scripted",
        "usage": {"input_tokens": 9, "output_tokens": 2, "cache_read_tokens": 0, "cache_write_tokens": 0},
        "prompt_tokens": 9,
        "stop_reason": "stop",
    }
    assert state["next"] == "deliver" and state["loop"]["iterations"] == 1


@pytest.mark.parametrize("step", ["plan", "", "Prepare", "commit"])
def test_an_unknown_step_is_a_permanent_error(step: str) -> None:
    world = World()
    with pytest.raises(PermanentError, match="unknown turn step"):
        run_step(step, world.routed("hi"), world.deps)
