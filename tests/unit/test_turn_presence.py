"""The typing indicator while a turn's model works (services/turn/presence.py): shown before the
model answers, renewed while it works, no longer once it is done, and never a cost to the answer."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import CronRun, Turn, TurnKind
from hermes_gateway.errors import TransientError
from hermes_gateway.platforms import telegram
from hermes_gateway.platforms.base import Presence, Target
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolSpec
from hermes_gateway.services.turn.presence import STOP_WAIT_SECONDS, typing_shown
from tests.fakes.engine import ALICE, NOW, Engine, ToolModel
from tests.fakes.telegram_server import SERVER_ERROR, FakeTelegram, is_chat_action

SOURCE = replace(ALICE, message_id="5")
REFRESH = 0.1


class SlowModel(ToolModel):
    """Answers once `ready()` holds (or after `limit` s), so the test sees what happened meanwhile."""

    def __init__(self, ready: Any, limit: float = 5.0, fail: Exception | None = None) -> None:
        super().__init__()
        self.ready, self.limit, self.error = ready, limit, fail
        self.took = 0.0

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        started = time.monotonic()
        while not self.ready() and time.monotonic() - started < self.limit:
            time.sleep(0.01)
        self.took = time.monotonic() - started
        if self.error is not None:
            raise self.error
        return super().complete(system, messages, tools)


def engine(fake: FakeTelegram, model: ToolModel, env: dict[str, str] | None = None) -> Engine:
    sender = TelegramSender(fake.base_url, fake.token)
    sender.typing_refresh_seconds = REFRESH  # type: ignore[misc]
    world = Engine(env, model=model)
    world.overrides["presence"] = lambda platform, via: sender if platform == "telegram" else None
    return world


def test_typing_is_shown_before_the_answer_and_renewed_while_the_model_works(fake_telegram: FakeTelegram) -> None:
    # Given a model that takes until the chat has been shown typing three times
    model = SlowModel(lambda: len(fake_telegram.chat_actions()) >= 3)
    world = engine(fake_telegram, model)

    # When a message is answered
    world.send("hello", "ev-1", SOURCE)
    assert world.pump() == ["ok"]

    # Then the chat saw typing (renewed) while the model worked, and the answer came after it
    assert model.took < 4
    actions = fake_telegram.chat_actions()
    assert actions[0] == {"chat_id": 99, "action": "typing"}
    assert world.texts() == ["re: hello"]
    # and nothing more once the model was done
    time.sleep(3 * REFRESH)
    assert len(fake_telegram.chat_actions()) == len(actions)


def test_a_failing_typing_endpoint_costs_the_answer_nothing(fake_telegram: FakeTelegram) -> None:
    # Given a Bot API whose chat actions always fail
    fake_telegram.answer_next(500, SERVER_ERROR, times=50, only=is_chat_action)
    model = SlowModel(lambda: len(fake_telegram.chat_actions()) >= 2)
    world = engine(fake_telegram, model)

    # When a message is answered, the indicator was tried again (a 500 is transient) and the answer came
    world.send("hello", "ev-1", SOURCE)
    assert world.pump() == ["ok"]
    assert world.texts() == ["re: hello"]
    assert len(fake_telegram.chat_actions()) >= 2


def test_a_hanging_typing_endpoint_does_not_delay_the_answer(
    fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a Bot API that holds every chat action for 3 s (longer than the presence timeout, 2 s)
    monkeypatch.setattr(telegram, "PRESENCE_TIMEOUT_SECONDS", 2.0)
    fake_telegram.answer_next(200, {"ok": True, "result": True}, times=5, delay=3.0, only=is_chat_action)
    model = SlowModel(lambda: len(fake_telegram.chat_actions()) >= 1)
    world = engine(fake_telegram, model)

    # When a message is answered
    world.send("hello", "ev-1", SOURCE)
    started = time.monotonic()
    assert world.pump() == ["ok"]

    # Then the turn waited for the indicator's request at most STOP_WAIT_SECONDS, not its 2 s
    assert world.texts() == ["re: hello"]
    assert time.monotonic() - started < model.took + STOP_WAIT_SECONDS + 1.0


def test_a_model_failure_stops_the_indicator(fake_telegram: FakeTelegram) -> None:
    model = SlowModel(lambda: len(fake_telegram.chat_actions()) >= 1, fail=TransientError("the model is down"))
    world = engine(fake_telegram, model)

    world.send("hello", "ev-1", SOURCE)
    world.pump()

    shown = len(fake_telegram.chat_actions())
    time.sleep(3 * REFRESH)
    assert shown >= 1 and len(fake_telegram.chat_actions()) == shown


def test_typing_indicator_off_sends_none(fake_telegram: FakeTelegram) -> None:
    model = SlowModel(lambda: False, limit=4 * REFRESH)
    world = engine(fake_telegram, model, {"TELEGRAM_TYPING_INDICATOR": "false"})

    world.send("hello", "ev-1", SOURCE)
    assert world.pump() == ["ok"]

    assert world.texts() == ["re: hello"]
    assert fake_telegram.requests == []


class Recorder:
    """A presence that records each indication."""

    typing_refresh_seconds = REFRESH

    def __init__(self) -> None:
        self.shown: list[Target] = []

    def typing(self, target: Target) -> bool:
        self.shown.append(target)
        return True


def shown_for(turn: Turn) -> list[Target]:
    recorder = Recorder()
    assert isinstance(recorder, Presence)
    world = Engine()
    world.overrides["presence"] = lambda platform, via: recorder
    with typing_shown(turn, world.deps):
        time.sleep(2 * REFRESH)
    return recorder.shown


def test_only_a_chat_turn_answering_a_message_shows_typing() -> None:
    target = ReplyTarget("telegram", "99", "17")
    chat = Turn("turn-1", TurnKind.CHAT, NOW, source=SOURCE, reply_to=target)
    cron = Turn("turn-2", TurnKind.CRON, NOW, source=SOURCE, reply_to=target, cron=CronRun("job-1", "run-1", "hi"))
    flush = Turn("turn-3", TurnKind.FLUSH, NOW, source=SOURCE, reply_to=target)

    shown = shown_for(chat)
    assert shown and shown[0] == Target("telegram", "99", "17", reply_to="5")  # WhatsApp needs the message id
    assert shown_for(cron) == [] and shown_for(flush) == []
    assert shown_for(replace(chat, source=None)) == []


def test_a_sender_that_cannot_be_built_shows_nothing_and_fails_nothing() -> None:
    def unbuildable(platform: str, via: str) -> Presence | None:
        raise RuntimeError("the bot token could not be read")

    world = Engine()
    world.overrides["presence"] = unbuildable
    turn = Turn("turn-1", TurnKind.CHAT, NOW, source=SOURCE, reply_to=ReplyTarget("telegram", "99"))
    done = threading.Event()
    with typing_shown(turn, world.deps):
        done.set()
    assert done.is_set()
