"""Send pacing on DynamoDB (adapters/dynamo_pacing.py, moto): a quiet chat's slot is one write;
concurrent senders to a busy chat each take a slot of their own, one interval apart; a slot past
what the caller waits is not taken; and through the delivery function a Telegram group's replies
are spaced while a private chat's are not."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.adapters.dynamo_pacing import DynamoPacing
from hermes_gateway.resources import function
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.aws_calls import aws_calls
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.integration


def test_a_quiet_chat_is_one_write_and_its_slot_is_now(aws: Any) -> None:
    pacing = DynamoPacing(aws.bindings)
    with aws_calls() as made:
        assert pacing.reserve("telegram##-1", 100.0, 2.0, 4.0, 5.0) == (100.0, True)
    assert made == [("dynamodb", "UpdateItem")]
    # Quiet again once its next send time has passed
    assert pacing.reserve("telegram##-1", 103.0, 2.0, 4.0, 5.0) == (103.0, True)


def test_a_busy_chat_hands_out_slots_one_interval_apart_and_refuses_one_too_far(aws: Any) -> None:
    pacing = DynamoPacing(aws.bindings)
    slots = [pacing.reserve("telegram##-2", 100.0, 2.0, 4.0, 5.0) for _ in range(6)]
    # a burst of three at once (the tolerance is two intervals), then 2 s apart up to 5 s ahead
    assert slots == [(100.0, True), (100.0, True), (100.0, True), (102.0, True), (104.0, True), (106.0, False)]
    assert pacing.reserve("telegram##-3", 100.0, 2.0, 4.0, 5.0) == (100.0, True)  # another chat: its own


def test_concurrent_senders_each_take_a_slot_of_their_own(aws: Any) -> None:
    pacing = DynamoPacing(aws.bindings)
    slots: list[tuple[float, bool]] = []
    barrier = threading.Barrier(6)

    def sender() -> None:
        barrier.wait()
        slots.append(pacing.reserve("telegram##-4", 100.0, 1.0, 0.0, 10.0))

    threads = [threading.Thread(target=sender) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(slots) == [(100.0 + n, True) for n in range(6)]


def test_a_telegram_groups_replies_are_spaced_and_a_private_chats_are_not(
    aws: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    monkeypatch.setenv("TELEGRAM_GROUP_SENDS_PER_MINUTE", "300")  # a burst of 3, then one every 0.217 s
    wiring.reset()
    module = load_handler_module(function("delivery"))

    def invoke(delivery_id: str, chat_id: str) -> str:
        event = {"delivery_id": delivery_id, "target": {"platform": "telegram", "chat_id": chat_id}, "text": "hi"}
        arn = "arn:aws:lambda:us-east-1:1:function:delivery"
        context = LambdaContext("delivery", 256, arn, deadline=time.time() + 30)
        return str(module.lambda_handler(event, context)["status"])

    before = time.monotonic()  # no slot is earlier than this: the k-th send's is k - 2 intervals later at least
    for n in range(6):
        assert invoke(f"g-{n}", "-100777") == "sent"
    for n in range(6):
        assert invoke(f"p-{n}", "777") == "sent"
    times = list(fake_telegram.posted_at)
    assert [m["chat_id"] for m in fake_telegram.sent] == [-100777] * 6 + [777] * 6
    group = times[:6]
    interval = 60 / 298 * 1.01
    # a burst of three at once, then the k-th (from 0) no sooner than k - 2 intervals after the first
    # slot, which was taken after `before` (measured from `before`, not from the first post: a post a
    # busy machine made late is followed by the next on its slot, sooner than an interval after it)
    assert all(group[k] - before >= (k - 2) * interval - 0.01 for k in range(3, 6)), (before, group)
    assert group[5] - before < 3 * interval + 10  # and they were paced, not held back
    # The private chat's sends took no slot: it has no pacing item, the group has one
    table = boto3.resource("dynamodb").Table(aws.bindings.table("directory"))
    assert "Item" not in table.get_item(Key={"pk": "pace#telegram#default#777", "sk": "-"})
    assert table.get_item(Key={"pk": "pace#telegram#default#-100777", "sk": "-"})["Item"]["expires_at"] > time.time()
