"""Quick-reply buttons (an approval's Approve/Deny): rendered by the senders that have them, and a
press arrives back as the presser's own message carrying the button's reply."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest

from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import BadRequest
from hermes_gateway.platforms import slack, telegram
from hermes_gateway.platforms.base import Button, Target
from hermes_gateway.platforms.discord import DiscordSender, message_body
from hermes_gateway.platforms.slack import SlackSender, parse_interaction
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, handle_webhook
from tests.fakes import platforms
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.services import FakeEnqueue, make_settings
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram

NOW = 1_764_400_000.0
APPROVAL = (Button("Approve", "/approve"), Button("Deny", "/deny"))


def test_buttons_are_read_from_a_delivery_job_leaving_out_malformed_ones() -> None:
    raw = [{"label": "Approve", "reply": "/approve"}, {"label": "", "reply": "/x"}, {"label": "No reply"}, "junk"]
    assert Button.parse_all(raw) == (Button("Approve", "/approve"),)
    assert Button.parse_all(None) == ()


# --- Telegram -------------------------------------------------------------------------------------


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake


def test_telegram_sends_an_inline_keyboard_whose_callback_data_is_the_reply(fake_telegram: FakeTelegram) -> None:
    sender = TelegramSender(fake_telegram.base_url, fake_telegram.token, timeout=2.0)
    too_long = Button("Long", "/approve " + "x" * 70)  # over Telegram's 64-byte callback data

    sender.send(Target("telegram", "4242", buttons=(*APPROVAL, too_long)), "Run the tool?")
    sender.send(Target("telegram", "4242"), "no buttons")

    first, second = fake_telegram.calls("sendMessage")
    assert first["reply_markup"] == {
        "inline_keyboard": [
            [{"text": "Approve", "callback_data": "/approve"}, {"text": "Deny", "callback_data": "/deny"}]
        ]
    }
    assert "reply_markup" not in second


def _press(data: str | None = "/approve", *, chat: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    message = {
        "message_id": 77,
        "date": 1_764_400_000,
        "chat": chat or {"id": -100123, "type": "supergroup", "title": "Team"},
        "from": {"id": 999, "is_bot": True, "first_name": "Hermes"},
        "text": "Run the tool?",
    }
    press = {"id": "cbq-1", "from": {"id": 4242, "is_bot": False, "first_name": "Alice"}, "message": message}
    if data is not None:
        press["data"] = data
    return {"update_id": 5005, "callback_query": {**press, **fields}}


def test_a_telegram_press_is_the_pressers_message_in_the_buttons_chat() -> None:
    parsed = telegram.parse_update(_press(), received_at=NOW)

    assert isinstance(parsed, InboundMessage)
    assert parsed.text == "/approve"
    assert parsed.event_id == "telegram:default:5005"
    assert (parsed.source.chat_id, parsed.source.chat_type) == ("-100123", "group")
    assert (parsed.source.user_id, parsed.source.user_name, parsed.source.is_bot) == ("4242", "Alice", False)


@pytest.mark.parametrize(
    "update",
    [_press(None), _press("  "), _press(message={"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}})],
)
def test_a_press_without_data_or_an_accessible_message_is_ignored(update: dict[str, Any]) -> None:
    assert isinstance(telegram.parse_update(update, received_at=NOW), telegram.Ignored)


def _telegram_call(update: dict[str, Any], enqueue: FakeEnqueue) -> HttpResponse:
    settings = make_settings({"TELEGRAM_ENABLED": "true"})
    request = HttpRequest(
        "POST",
        "/webhooks/telegram",
        {"x-telegram-bot-api-secret-token": "s3cret"},
        json.dumps(update).encode(),
    )
    adapters = platforms.adapters(settings, {"TELEGRAM_WEBHOOK_SECRET": "s3cret"}, lambda: NOW)
    return handle_webhook(
        "telegram", request, settings=settings, adapters=adapters, enqueue_once=enqueue, received_at=NOW
    )


def test_a_telegram_press_is_enqueued_and_answered_in_the_webhook_response() -> None:
    enqueue = FakeEnqueue()

    response = _telegram_call(_press(), enqueue)

    assert response.status == 200
    assert response.body == {"method": "answerCallbackQuery", "callback_query_id": "cbq-1"}
    assert [e["text"] for e in enqueue.sent] == ["/approve"]


def test_an_unusable_press_still_stops_the_buttons_spinner() -> None:
    enqueue = FakeEnqueue()
    response = _telegram_call(_press(None), enqueue)
    assert response.body == {"method": "answerCallbackQuery", "callback_query_id": "cbq-1"}
    assert enqueue.calls == 0


# --- Slack ----------------------------------------------------------------------------------------


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def test_slack_sends_blocks_with_buttons_and_keeps_the_text_as_fallback(fake_slack: FakeSlack) -> None:
    sender = SlackSender(fake_slack.base_url, fake_slack.token, timeout=2.0)

    sender.send(Target("slack", "C123", buttons=APPROVAL), "Run the tool?")
    sender.send(Target("slack", "C123", buttons=APPROVAL), "x" * 3001)  # too long for a section: text only

    first, second = fake_slack.calls("chat.postMessage")
    assert first["text"] == "Run the tool?"
    section, actions = first["blocks"]
    assert section["text"]["text"] == "Run the tool?"
    assert [(e["text"]["text"], e["value"]) for e in actions["elements"]] == [
        ("Approve", "/approve"),
        ("Deny", "/deny"),
    ]
    assert all(e["action_id"].startswith(slack.BUTTON_ACTION_PREFIX) for e in actions["elements"])
    assert "blocks" not in second


def block_actions(value: str = "/deny", action_id: str = "hermes_reply_1", **fields: Any) -> dict[str, Any]:
    payload = {
        "type": "block_actions",
        "team": {"id": "T1", "domain": "acme"},
        "user": {"id": "UALICE01", "username": "alice", "name": "alice", "team_id": "T1"},
        "container": {"type": "message", "message_ts": "1764400000.000200", "channel_id": "C123"},
        "channel": {"id": "C123", "name": "general"},
        "message": {"ts": "1764400000.000200", "thread_ts": "1764400000.000100", "text": "Run the tool?"},
        "actions": [{"action_id": action_id, "value": value, "type": "button", "action_ts": "1764400001.5"}],
    }
    return {**payload, **fields}


def test_a_slack_press_is_the_pressers_message_in_the_thread() -> None:
    parsed = parse_interaction(block_actions(), received_at=NOW)

    assert isinstance(parsed, InboundMessage)
    assert parsed.text == "/deny"
    assert parsed.event_id == "slack:T1:C123:action:1764400001.5"
    source = parsed.source
    assert (source.chat_id, source.thread_id, source.user_id, source.scope_id) == (
        "C123",
        "1764400000.000100",
        "UALICE01",
        "T1",
    )


def test_other_interactions_and_foreign_buttons_are_ignored() -> None:
    assert parse_interaction(block_actions(action_id="someone_elses"), received_at=NOW).__class__.__name__ == "Ignored"
    assert parse_interaction({"type": "view_submission"}, received_at=NOW).__class__.__name__ == "Ignored"
    with pytest.raises(BadRequest):
        parse_interaction(block_actions(user={}), received_at=NOW)


def _slack_form(payload: Any, secret: str = "slack-signing") -> HttpRequest:
    body = urlencode({"payload": json.dumps(payload)}).encode()
    timestamp = str(int(NOW))
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": timestamp,
        "x-slack-signature": slack.signature(secret, timestamp, body),
    }
    return HttpRequest("POST", "/webhooks/slack", headers, body)


def _slack_call(request: HttpRequest, enqueue: FakeEnqueue) -> HttpResponse:
    settings = make_settings({"SLACK_ENABLED": "true"})
    adapters = platforms.adapters(settings, {"SLACK_SIGNING_SECRET": "slack-signing"}, lambda: NOW)
    return handle_webhook("slack", request, settings=settings, adapters=adapters, enqueue_once=enqueue, received_at=NOW)


def test_a_signed_slack_press_is_enqueued_and_a_forged_one_refused() -> None:
    enqueue = FakeEnqueue()

    assert _slack_call(_slack_form(block_actions(), secret="forged"), enqueue).status == 401
    assert enqueue.calls == 0
    assert _slack_call(_slack_form(block_actions()), enqueue).status == 200
    assert [e["text"] for e in enqueue.sent] == ["/deny"]


def test_a_malformed_slack_form_is_400() -> None:
    enqueue = FakeEnqueue()
    request = _slack_form(block_actions())
    body = b"payload=%7Bnot-json"
    timestamp = request.headers["x-slack-request-timestamp"]
    headers = {**request.headers, "x-slack-signature": slack.signature("slack-signing", timestamp, body)}
    assert _slack_call(HttpRequest("POST", "/webhooks/slack", headers, body), enqueue).status == 400
    assert enqueue.calls == 0


# --- Discord --------------------------------------------------------------------------------------


def test_discord_buttons_are_one_action_row_of_hermes_components() -> None:
    too_long = Button("Long", "/approve " + "x" * 100)
    body = message_body("Run the tool?", (*APPROVAL, too_long))

    (row,) = body["components"]
    assert row["type"] == 1
    assert [(c["label"], c["custom_id"]) for c in row["components"]] == [
        ("Approve", "hermes:/approve"),
        ("Deny", "hermes:/deny"),
    ]
    assert "components" not in message_body("plain", ())


@pytest.fixture
def fake_discord() -> Iterator[FakeDiscord]:
    with FakeDiscord() as fake:
        yield fake


def test_a_discord_channel_message_carries_the_buttons(fake_discord: FakeDiscord) -> None:
    sender = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id="1", timeout=2.0)
    sender.send(Target("discord", "222222222222222222", buttons=APPROVAL), "Run the tool?")
    (request,) = fake_discord.requests
    assert request.json["components"][0]["components"][0]["custom_id"] == "hermes:/approve"
