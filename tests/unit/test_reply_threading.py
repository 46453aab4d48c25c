"""Replies threaded to the user's message (`<PLATFORM>_REPLY_TO_MODE`): which chunks of a reply the
delivery service sends as replies, seen on the wire of the fake Telegram."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import Turn, TurnKind
from hermes_gateway.platforms.base import Sender
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from hermes_gateway.services.turn.respond import reply_job
from tests.fakes.engine import ALICE
from tests.fakes.services import FakeOutbox
from tests.fakes.telegram_server import FakeTelegram

NOW = 1_764_400_000.0
THREE_CHUNKS = "\n\n".join(f"{n}. " + " ".join(f"word{i}" for i in range(60)) for n in range(25))


def job(text: str, *, kind: str = "reply", reply_to: str | None = "5") -> DeliveryJob:
    data: dict[str, Any] = {
        "delivery_id": "turn-abc",
        "turn_id": "turn-abc",
        "target": {"platform": "telegram", "chat_id": "99", "thread_id": None},
        "text": text,
        "kind": kind,
    }
    if reply_to is not None:
        data["reply_to_message_id"] = reply_to
    return DeliveryJob.from_dict(data)


def delivered(fake: FakeTelegram, delivery: DeliveryJob, mode: str) -> list[dict[str, Any] | None]:
    sender: Sender = TelegramSender(fake.base_url, fake.token)
    deps = DeliveryDeps(
        outbox=FakeOutbox(), sender_for=lambda platform, via: sender, now=lambda: NOW, reply_to_mode=lambda p: mode
    )
    deliver(delivery, deps)
    return [m.get("reply_parameters") for m in fake.sent]


REPLY = {"message_id": 5, "allow_sending_without_reply": True}


def test_first_threads_the_first_chunk_only(fake_telegram: FakeTelegram) -> None:
    assert delivered(fake_telegram, job(THREE_CHUNKS), "first") == [REPLY, None, None]


def test_all_threads_every_chunk(fake_telegram: FakeTelegram) -> None:
    assert delivered(fake_telegram, job(THREE_CHUNKS), "all") == [REPLY, REPLY, REPLY]


def test_off_sends_as_before(fake_telegram: FakeTelegram) -> None:
    assert delivered(fake_telegram, job(THREE_CHUNKS), "off") == [None, None, None]


@pytest.mark.parametrize("mode", ["first", "all"])
def test_a_push_never_replies(fake_telegram: FakeTelegram, mode: str) -> None:
    assert delivered(fake_telegram, job("a reminder", kind="push"), mode) == [None]


def test_a_job_for_no_message_replies_to_nothing(fake_telegram: FakeTelegram) -> None:
    assert delivered(fake_telegram, job("hello", reply_to=None), "all") == [None]


def test_the_delivery_service_threads_nothing_unless_told() -> None:
    deps = DeliveryDeps(outbox=FakeOutbox(), sender_for=lambda platform, via: None, now=lambda: NOW)
    assert deps.reply_to_mode("telegram") == "off"


def test_a_turns_answer_names_the_users_message_an_approval_question_does_not() -> None:
    source = replace(ALICE, message_id="5")
    turn = Turn("turn-abc", TurnKind.CHAT, NOW, source=source, reply_to=ReplyTarget("telegram", "99"))

    assert reply_job(turn, "turn-abc", "hi")["reply_to_message_id"] == "5"
    assert "reply_to_message_id" not in reply_job(turn, "turn-abc-ask1", "may I?", threaded=False)
    assert "reply_to_message_id" not in reply_job(replace(turn, source=ALICE), "turn-abc", "hi")
