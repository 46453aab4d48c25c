"""`hermes-gateway send` on moto: a target is resolved (home channel, #name, explicit, local) before
anything is queued, and the queued push is delivered, mirrored, and skipped once the chat is gone."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from hermes_gateway import wiring
from hermes_gateway.adapters.aws import SqsQueue
from hermes_gateway.cli.send import queue_message
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.targets import Channel, UnresolvableTarget
from hermes_gateway.resources import function
from hermes_local import pollers
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.services import make_settings
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.integration


@pytest.fixture
def env(aws: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    wiring.reset()
    return aws


def deliver_queued(env: Any) -> dict[str, Any]:
    url = env.bindings.queue("delivery")
    messages = boto3.client("sqs").receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"]
    event = pollers.sqs_event(messages, "arn:aws:sqs:us-east-1:1:delivery", "us-east-1")
    context = LambdaContext("delivery", 256, "arn:aws:lambda:us-east-1:1:function:delivery", time.time() + 30)
    result: dict[str, Any] = load_handler_module(function("delivery")).lambda_handler(event, context)
    return result


def send(env: Any, target: str, text: str, **settings_env: str) -> Any:
    return queue_message(
        target,
        text,
        settings=make_settings(settings_env),
        directory=wiring.directory(),
        queue=SqsQueue(env.bindings.queue("delivery")),
    )


def test_a_home_channel_push_is_delivered_and_mirrored(env: Any, fake_telegram: FakeTelegram) -> None:
    source = SessionSource("telegram", chat_id="4242", chat_type="dm", user_id="4242")
    store = wiring.session_store()
    session = store.get_or_create(source, build_session_key(source), time.time())
    store.append_message(session.session_id, "user", "hi", time.time())
    wiring.directory().set_home("telegram", "4242", None, "admin", time.time())

    target, _ = send(env, "telegram", "Daily digest")
    assert target.chat_id == "4242"
    assert deliver_queued(env) == {"batchItemFailures": []}
    assert [m["text"] for m in fake_telegram.sent] == ["Daily digest"]
    rows = store.transcript(session.session_id)
    assert (rows[-1].role, rows[-1].content) == ("assistant", "Daily digest")


def test_names_and_config_homes_resolve_and_unknown_targets_queue_nothing(env: Any) -> None:
    wiring.directory().remember(Channel("telegram", "-1009", None, "Ops", "group"), time.time())
    assert send(env, "#ops", "x")[0].chat_id == "-1009"
    assert send(env, "telegram", "x", TELEGRAM_HOME_CHANNEL="-100:7")[0].thread_id == "7"
    for bad in ("#nowhere", "fax:1", "telegram"):
        with pytest.raises(UnresolvableTarget):
            send(env, bad, "x")
    assert SqsQueue(env.bindings.queue("delivery")).depth() == 2


def test_a_push_to_a_gone_chat_is_skipped(env: Any, fake_telegram: FakeTelegram) -> None:
    wiring.directory().mark_gone("telegram", "-1009", None, "bot was kicked", time.time())
    send(env, "telegram:-1009", "anyone there?")
    assert deliver_queued(env) == {"batchItemFailures": []}
    assert fake_telegram.calls("sendMessage") == []


def test_the_local_target_is_recorded_not_sent(env: Any, fake_telegram: FakeTelegram) -> None:
    send(env, "local", "note to self")
    assert deliver_queued(env) == {"batchItemFailures": []}
    assert fake_telegram.calls("sendMessage") == []
    (row,) = wiring.outbox().recent()
    assert (row.platform, row.status, row.text) == ("local", "recorded", "note to self")
