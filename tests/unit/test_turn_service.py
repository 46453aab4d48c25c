"""One agent turn (services/turn.py): prepare → call_model → deliver → commit, and fail.

The state machine is Express, so any task may run more than once; each must be idempotent on the
turn id.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import PermanentError
from hermes_gateway.observability import hash_id
from hermes_gateway.providers.base import Provider
from hermes_gateway.providers.echo import EchoProvider
from hermes_gateway.services.router import Access, route_message
from hermes_gateway.services.turn import APOLOGY, LeaseLost, TurnDeps, run_step
from hermes_gateway.settings import Settings
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, ScriptedProvider, make_settings
from tests.fakes.sessions import FakeSessionStore
from tests.fakes.turns import FakeTurnControl

NOW = 1_764_400_000.0
DM = SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Alice", message_id="5")
GROUP_CHAT = "-1001234567667"


class World:
    """A session store, a starter and a delivery queue, with a message routed into a turn."""

    def __init__(self, settings: Settings | None = None, provider: Provider | None = None) -> None:
        self.settings = settings or make_settings({"TELEGRAM_ALLOW_ALL_USERS": "true"})
        self.store = FakeSessionStore()
        self.control = FakeTurnControl(self.store)
        self.events = FakeEvents()
        self.starter = FakeStarter()
        self.delivery = FakeDeliveryQueue()
        self.provider = provider or EchoProvider()
        self.provider_builds = 0
        self.clock = NOW

    def _build_provider(self) -> Provider:
        self.provider_builds += 1
        return self.provider

    @property
    def deps(self) -> TurnDeps:
        return TurnDeps(
            settings=self.settings,
            store=self.store,
            lease=self.store,
            provider=self._build_provider,
            delivery=self.delivery,
            now=lambda: self.clock,
            control=self.control,
            starter=self.starter,
            events=self.events,
        )

    def route(self, text: str, source: SessionSource = DM, event: str = "telegram:default:1") -> dict[str, Any]:
        """Route a message and return the turn the state machine was started with."""
        msg = InboundMessage(source=source, text=text, event_id=event, received_at=self.clock)
        access = Access(
            pairing=FakePairingStore(), replies=FakeDeliveryQueue(), events=FakeEvents(), control=self.control
        )
        outcome = route_message(
            msg,
            settings=self.settings,
            store=self.store,
            lease=self.store,
            starter=self.starter,
            access=access,
            now=self.clock,
        )
        assert outcome.status == "started"
        return self.starter.started[outcome.turn_id]  # type: ignore[index]

    def step(self, name: str, turn: dict[str, Any]) -> dict[str, Any]:
        # Between tasks the state travels as JSON, as in Step Functions.
        return json.loads(json.dumps(run_step(name, json.loads(json.dumps(turn)), self.deps)))

    def run_until_commit(self, turn: dict[str, Any]) -> dict[str, Any]:
        state = turn
        for name in ("prepare", "call_model", "deliver"):
            state = self.step(name, state)
        return state

    def lease_token(self, session_key: str) -> str | None:
        entry = self.store.get_route(session_key)
        return entry.lease_token if entry else None


def test_a_turn_replies_with_the_echo_and_queues_it_to_the_fixed_target() -> None:
    # Given a routed DM
    world = World()
    turn = world.route("hello there")

    # When the turn runs to its end
    state = world.run_until_commit(turn)
    world.clock += 2
    result = world.step("commit", state)

    # Then one reply was queued, under the turn's id, to the chat the message came from
    assert world.delivery.bodies == [
        {
            "delivery_id": turn["turn_id"],
            "turn_id": turn["turn_id"],
            "target": {"platform": "telegram", "chat_id": "99", "thread_id": None},
            "text": "Echo: hello there",
            "correlation_id": turn["event_id"],
            "session": hash_id(turn["session_key"]),
        }
    ]
    # And the transcript reads user then assistant, the lease is free
    rows = world.store.transcript(turn["session_id"])
    assert [(r.role, r.content) for r in rows] == [("user", "hello there"), ("assistant", "Echo: hello there")]
    assert rows[1].turn_id == turn["turn_id"]
    assert world.lease_token(turn["session_key"]) is None
    assert result == {"turn_id": turn["turn_id"], "delivery": "queued", "released": "released", "status": "ok"}


def test_the_target_comes_from_the_turn_not_from_the_session() -> None:
    # Given a turn whose fixed target differs from its source (e.g. a thread the reply must go to)
    world = World()
    turn = world.route("hi")
    turn["reply_to"] = {"platform": "telegram", "chat_id": "99", "thread_id": "topic-9"}

    world.run_until_commit(turn)

    assert world.delivery.bodies[0]["target"] == {"platform": "telegram", "chat_id": "99", "thread_id": "topic-9"}


def test_prepare_adds_the_system_prompt_and_keeps_the_turn() -> None:
    world = World()
    turn = world.route("hi")

    state = world.step("prepare", turn)

    assert {k: v for k, v in state.items() if k not in ("system", "loop", "next")} == turn
    assert state["next"] == "model" and state["loop"]["iterations"] == 0
    assert "You are Hermes" in state["system"]
    assert turn["session_id"] in state["system"]


def test_commit_twice_appends_once_counts_tokens_once_and_releases_once() -> None:
    # Given a turn up to commit
    world = World(provider=ScriptedProvider("fine", input_tokens=11, output_tokens=4))
    turn = world.route("how are you")
    state = world.run_until_commit(turn)

    # When Express runs the commit task twice
    first = world.step("commit", state)
    second = world.step("commit", state)

    # Then one assistant row, tokens counted once, the lease released by the first run only
    rows = world.store.transcript(turn["session_id"])
    assert [r.role for r in rows] == ["user", "assistant"]
    session = world.store.sessions[turn["session_id"]]
    assert (session["input_tokens"], session["output_tokens"]) == (11, 4)
    assert (first["released"], second["released"]) == ("released", "lost")
    assert world.lease_token(turn["session_key"]) is None


def test_a_repeated_deliver_task_queues_the_same_delivery_id() -> None:
    # The delivery queue may see the reply twice; the outbox dedupes by delivery id, so the id must not change.
    world = World()
    state = world.step("call_model", world.step("prepare", world.route("x")))

    world.step("deliver", state)
    world.step("deliver", state)

    ids = [b["delivery_id"] for b in world.delivery.bodies]
    assert ids == [state["turn_id"], state["turn_id"]]


def test_a_commit_that_runs_late_does_not_release_the_next_turns_lease() -> None:
    # Given a first turn whose lease was released, and a second turn now holding the session
    world = World()
    first = world.route("one", event="telegram:default:1")
    state = world.run_until_commit(first)
    world.step("commit", state)
    second = world.route("two", event="telegram:default:2")

    # When the first commit is repeated
    again = world.step("commit", state)

    # Then the second turn keeps its lease
    assert again["released"] == "lost"
    assert world.lease_token(second["session_key"]) == second["lease_token"]


@pytest.mark.parametrize("silent", ["[SILENT]", "NO_REPLY", "  NO_REPLY\n"])
def test_a_silent_reply_is_stored_not_sent(silent: str) -> None:
    world = World(provider=ScriptedProvider(silent))
    turn = world.route("stay quiet")

    state = world.run_until_commit(turn)
    result = world.step("commit", state)

    assert world.delivery.bodies == []
    assert state["delivery"] == "silent" and result["delivery"] == "silent"
    rows = world.store.transcript(turn["session_id"])
    assert (rows[-1].role, rows[-1].content) == ("assistant", silent)
    assert result["released"] == "released"


def test_a_reply_that_only_mentions_silent_is_sent() -> None:
    world = World(provider=ScriptedProvider("I will stay [SILENT] no more"))

    world.run_until_commit(world.route("x"))

    assert len(world.delivery.bodies) == 1


def test_prepare_raises_lease_lost_when_the_lease_is_no_longer_held() -> None:
    # Given a turn whose lease expired and was swept away before prepare ran
    world = World()
    turn = world.route("hi")
    assert world.store.release(turn["session_key"], turn["lease_token"])

    # When prepare runs, Then it refuses to go on
    with pytest.raises(LeaseLost):
        world.step("prepare", turn)
    assert world.provider_builds == 0


def test_prepare_raises_lease_lost_when_another_turn_holds_the_lease() -> None:
    world = World()
    stale = world.route("one", event="telegram:default:1")
    world.store.release(stale["session_key"], stale["lease_token"])
    world.route("two", event="telegram:default:2")

    with pytest.raises(LeaseLost):
        world.step("prepare", stale)


def test_lease_lost_is_a_permanent_error() -> None:
    # The state machine retries only TransientError: a lost lease must not be retried.
    assert issubclass(LeaseLost, PermanentError)


def test_fail_queues_the_apology_and_releases_the_lease() -> None:
    # Given a turn whose model call failed
    world = World()
    turn = world.route("hi")
    failed = {**world.step("prepare", turn), "error": {"Error": "TransientError", "Cause": "model timed out"}}

    # When the Fail task runs
    result = world.step("fail", failed)

    # Then the user is told once, under a delivery id of its own, and the session is free
    assert world.delivery.bodies == [
        {
            "delivery_id": f"{turn['turn_id']}-failed",
            "turn_id": turn["turn_id"],
            "target": turn["reply_to"],
            "text": APOLOGY,
            "correlation_id": turn["event_id"],
            "session": hash_id(turn["session_key"]),
        }
    ]
    assert world.lease_token(turn["session_key"]) is None
    assert result == {"turn_id": turn["turn_id"], "failed": "TransientError", "released": "released", "told": "apology"}


def test_fail_without_an_error_record_still_apologises_and_releases() -> None:
    world = World()
    turn = world.route("hi")

    result = world.step("fail", turn)

    assert result["failed"] == "unknown"
    assert [b["delivery_id"] for b in world.delivery.bodies] == [f"{turn['turn_id']}-failed"]
    assert world.lease_token(turn["session_key"]) is None


def test_fail_after_lease_lost_sends_no_apology_and_leaves_the_new_holder_alone() -> None:
    # Given a turn that lost its lease to a newer turn
    world = World()
    stale = world.route("one", event="telegram:default:1")
    world.store.release(stale["session_key"], stale["lease_token"])
    newer = world.route("two", event="telegram:default:2")

    # When the stale turn's Fail task runs with LeaseLost
    result = world.step("fail", {**stale, "error": {"Error": "LeaseLost", "Cause": "..."}})

    # Then nothing is sent and the newer turn keeps the lease
    assert world.delivery.bodies == []
    assert result == {"turn_id": stale["turn_id"], "failed": "LeaseLost", "released": "lost", "told": "none"}
    assert world.lease_token(newer["session_key"]) == newer["lease_token"]


def test_a_failure_after_the_reply_was_queued_sends_no_apology() -> None:
    world = World()
    state = world.run_until_commit(world.route("hi"))

    world.step("fail", {**state, "error": {"Error": "TransientError", "Cause": "commit failed"}})

    assert [b["text"] for b in world.delivery.bodies] == ["Echo: hi"]


def test_shared_group_sessions_prefix_user_turns_with_the_sender_name() -> None:
    # Given a group with one session for everyone, where two people spoke
    provider = ScriptedProvider("noted")
    world = World(
        make_settings({"TELEGRAM_ALLOW_ALL_USERS": "true", "GATEWAY_GROUP_SESSIONS_PER_USER": "false"}), provider
    )
    alice = SessionSource("telegram", chat_id=GROUP_CHAT, chat_type="group", user_id="1", user_name="Alice")
    bob = SessionSource("telegram", chat_id=GROUP_CHAT, chat_type="group", user_id="2", user_name="Bob")
    world.step("commit", world.run_until_commit(world.route("hi all", alice, "telegram:default:1")))

    # When Bob's turn reaches the model
    world.run_until_commit(world.route("hello Alice", bob, "telegram:default:2"))

    # Then user turns carry their sender, assistant turns do not
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

    world.run_until_commit(world.route("hi", source))

    system, messages = provider.requests[-1]
    assert [m.content for m in messages] == ["hi"]
    assert "Shared session: no" in system


def test_a_forum_topic_is_shared_by_default() -> None:
    provider = ScriptedProvider("ok")
    world = World(provider=provider)
    source = SessionSource(
        "telegram", chat_id=GROUP_CHAT, chat_type="group", thread_id="17585", user_id="1", user_name="Alice"
    )

    world.run_until_commit(world.route("hi", source))

    assert [m.content for m in provider.requests[-1][1]] == ["[Alice] hi"]


def test_the_system_prompt_hashes_telegram_chat_ids() -> None:
    # Given a Telegram group message
    provider = ScriptedProvider("ok")
    world = World(provider=provider)
    source = SessionSource("telegram", chat_id=GROUP_CHAT, chat_type="group", user_id="4242424242", user_name="Alice")

    # When the turn reaches the model
    world.run_until_commit(world.route("hi", source))

    # Then the model sees a stable handle, never the raw chat or user id
    system, _ = provider.requests[-1]
    assert GROUP_CHAT not in system
    assert "4242424242" not in system
    assert f"telegram:{hash_id(GROUP_CHAT)}" in system


def test_the_model_sees_at_most_max_history_messages() -> None:
    provider = ScriptedProvider("ok")
    world = World(make_settings({"TELEGRAM_ALLOW_ALL_USERS": "true", "GATEWAY_MAX_HISTORY_MESSAGES": "3"}), provider)
    for n in range(1, 4):
        world.step("commit", world.run_until_commit(world.route(f"m{n}", event=f"telegram:default:{n}")))

    messages = provider.requests[-1][1]
    assert [m.content for m in messages] == ["m2", "ok", "m3"]


def test_the_provider_is_built_only_by_the_model_step() -> None:
    world = World()
    turn = world.route("hi")

    state = world.step("prepare", turn)
    assert world.provider_builds == 0
    state = world.step("call_model", state)
    assert world.provider_builds == 1
    world.step("commit", world.step("deliver", state))
    assert world.provider_builds == 1


def test_the_reply_and_its_usage_are_recorded_in_the_state() -> None:
    world = World(provider=ScriptedProvider("answer", input_tokens=9, output_tokens=2))

    state = world.step("call_model", world.step("prepare", world.route("q")))

    assert state["reply"] == {
        "text": "answer",
        "model": "scripted",
        "input_tokens": 9,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "prompt_tokens": 9,
        "stop_reason": "stop",
    }
    assert state["next"] == "reply" and state["loop"]["iterations"] == 1


@pytest.mark.parametrize("step", ["plan", "", "Prepare"])
def test_an_unknown_step_is_a_permanent_error(step: str) -> None:
    world = World()

    with pytest.raises(PermanentError, match="unknown turn step"):
        run_step(step, world.route("hi"), world.deps)
