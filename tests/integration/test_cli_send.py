"""`hermes-gateway send` on moto: a target is resolved (home channel, #name, explicit, local) before
anything is sent, and the push handed to the delivery function (an asynchronous invoke) is
delivered, mirrored, and skipped once the chat is gone."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hermes_cli.send import heard_from_routes, queue_message
from hermes_gateway import wiring
from hermes_gateway.adapters.aws import LambdaDeliveries
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.targets import Channel, UnresolvableTarget
from hermes_gateway.errors import OutsideWindow
from hermes_gateway.resources import function
from hermes_local.aws import install_lambda_dispatch
from hermes_local.runtime import LambdaContext, load_handler_module
from tests.fakes.services import make_settings
from tests.fakes.sessions import seed
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.integration


INVOKED: list[dict[str, Any]] = []  # the events the delivery function was invoked with


@pytest.fixture
def env(aws: Any, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> Any:
    from moto.awslambda_simple.models import LambdaSimpleBackend

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    monkeypatch.setattr(LambdaSimpleBackend, "invoke", LambdaSimpleBackend.invoke)  # restored afterwards
    INVOKED.clear()
    delivery = aws.bindings.function("delivery").rsplit(":", 1)[-1]  # this deployment's only, not a leftover's

    def record(event: dict[str, Any], context: Any) -> None:
        INVOKED.append(event)

    install_lambda_dispatch(lambda name: record if name == delivery else None, lambda name: None)
    wiring.reset()
    return aws


def deliver_queued(env: Any) -> list[str]:
    """Run the delivery function on what it was handed; each job's outcome."""
    arn = "arn:aws:lambda:us-east-1:1:function:delivery"
    context = LambdaContext("delivery", 256, arn, deadline=time.time() + 30)
    handler = load_handler_module(function("delivery")).lambda_handler
    outcomes = [handler(event, context)["status"] for event in INVOKED]
    INVOKED.clear()
    return outcomes


def send(env: Any, target: str, text: str, **settings_env: str) -> Any:
    return queue_message(
        target,
        text,
        settings=make_settings(settings_env),
        directory=wiring.directory(),
        queue=LambdaDeliveries(env.bindings.function("delivery")),
    )


def test_a_home_channel_push_is_delivered_and_mirrored(env: Any, fake_telegram: FakeTelegram) -> None:
    source = SessionSource("telegram", chat_id="4242", chat_type="dm", user_id="4242")
    stores = wiring.session_stores()
    session_id = seed(stores, source, build_session_key(source), "hi", now=time.time())
    wiring.directory().set_home("telegram", "4242", None, "admin", time.time())

    target, *_ = send(env, "telegram", "Daily digest")
    assert target.chat_id == "4242"
    assert deliver_queued(env) == ["sent"]
    assert [m["text"] for m in fake_telegram.sent] == ["Daily digest"]
    rows = stores.transcript.rows(session_id)
    assert (rows[-1].role, rows[-1].content) == ("assistant", "Daily digest")


def test_names_and_config_homes_resolve_and_unknown_targets_send_nothing(env: Any) -> None:
    wiring.directory().remember(Channel("telegram", "-1009", None, "Ops", "group"), time.time())
    assert send(env, "#ops", "x")[0].chat_id == "-1009"
    assert send(env, "telegram", "x", TELEGRAM_HOME_CHANNEL="-100:7")[0].thread_id == "7"
    for bad in ("#nowhere", "fax:1", "telegram"):
        with pytest.raises(UnresolvableTarget):
            send(env, bad, "x")
    assert [event["target"]["chat_id"] for event in INVOKED] == ["-1009", "-100"]


def test_a_push_to_a_gone_chat_is_skipped(env: Any, fake_telegram: FakeTelegram) -> None:
    wiring.directory().mark_gone("telegram", "-1009", None, "bot was kicked", time.time())
    send(env, "telegram:-1009", "anyone there?")
    assert deliver_queued(env) == ["skipped"]
    assert fake_telegram.calls("sendMessage") == []


def test_the_local_target_is_recorded_not_sent(env: Any, fake_telegram: FakeTelegram) -> None:
    send(env, "local", "note to self")
    assert deliver_queued(env) == ["recorded"]
    assert fake_telegram.calls("sendMessage") == []
    (row,) = wiring.outbox().recent()
    assert (row.platform, row.status, row.text) == ("local", "recorded", "note to self")


def test_a_whatsapp_user_silent_for_a_day_is_refused_before_anything_is_queued(env: Any) -> None:
    # Given a WhatsApp user whose last message (their route's clock) is two days old
    source = SessionSource("whatsapp", chat_id="15551234567", chat_type="dm", user_id="15551234567")
    seed(wiring.session_stores(), source, build_session_key(source), "hi", now=time.time() - 2 * 24 * 3600)
    settings = make_settings({})
    # When the operator sends to them, the command refuses with the reason, and nothing is queued
    with pytest.raises(OutsideWindow, match="reengage_template"):
        queue_message(
            "whatsapp:15551234567", "weekly digest", settings=settings, directory=wiring.directory(),
            queue=LambdaDeliveries(env.bindings.function("delivery")), heard=heard_from_routes(env.bindings, settings),
        )  # fmt: skip
    assert INVOKED == []
