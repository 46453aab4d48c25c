"""Each platform's typing indicator and threaded reply, as the request reaches its loopback fake."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.platforms import discord, line, telegram, whatsapp
from hermes_gateway.platforms.base import Presence, Target, presence_of
from hermes_gateway.platforms.discord import DiscordSender
from hermes_gateway.platforms.line import LineSender
from hermes_gateway.platforms.slack import SlackSender
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.platforms.whatsapp import WhatsAppSender
from hermes_gateway.services.delivery import RecordOnly
from tests.fakes.discord_server import FakeDiscord, is_typing
from tests.fakes.line_server import FakeLine
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import SERVER_ERROR, FakeTelegram, is_chat_action
from tests.fakes.whatsapp_server import FakeWhatsApp

WAMID = "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBJDQjZCMzlEQUE4OTJBMTE4RTUA"


@pytest.fixture
def fake_discord() -> Iterator[FakeDiscord]:
    with FakeDiscord() as fake:
        yield fake


@pytest.fixture
def fake_whatsapp() -> Iterator[FakeWhatsApp]:
    with FakeWhatsApp() as fake:
        yield fake


@pytest.fixture
def fake_line() -> Iterator[FakeLine]:
    with FakeLine() as fake:
        yield fake


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


def test_the_senders_with_a_typing_indicator_are_presences() -> None:
    for sender in (
        TelegramSender("http://127.0.0.1:9", "t"),
        DiscordSender("http://127.0.0.1:9", bot_token="t", application_id=None),
        WhatsAppSender("http://127.0.0.1:9", "t", "1"),
        LineSender("http://127.0.0.1:9", "t"),
        SlackSender("http://127.0.0.1:9", "t"),
    ):
        found = presence_of(sender)
        assert isinstance(found, Presence) and found.typing_refresh_seconds > 0
    assert presence_of(RecordOnly()) is None and presence_of(None) is None


# -- Telegram --------------------------------------------------------------------------------


def test_telegram_typing_is_a_chat_action_in_the_topic(fake_telegram: FakeTelegram) -> None:
    sender = TelegramSender(fake_telegram.base_url, fake_telegram.token)

    assert sender.typing(Target("telegram", "-1001234", "17585")) is True

    assert fake_telegram.chat_actions() == [{"chat_id": -1001234, "action": "typing", "message_thread_id": 17585}]
    assert sender.typing_refresh_seconds < 5  # an action fades after 5 s


def test_telegram_typing_failures_raise_without_the_token(fake_telegram: FakeTelegram) -> None:
    sender = TelegramSender(fake_telegram.base_url, fake_telegram.token)
    fake_telegram.answer_next(500, SERVER_ERROR, only=is_chat_action)

    with pytest.raises(TransientError) as raised:
        sender.typing(Target("telegram", "99"))
    assert fake_telegram.token not in str(raised.value)


def test_telegram_typing_gives_up_soon_on_a_hanging_api(
    fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an API that answers a chat action only after 2 s, and a presence timeout of 0.3 s
    monkeypatch.setattr(telegram, "PRESENCE_TIMEOUT_SECONDS", 0.3)
    sender = TelegramSender(fake_telegram.base_url, fake_telegram.token, timeout=10.0)
    fake_telegram.answer_next(200, {"ok": True, "result": True}, delay=2.0, only=is_chat_action)

    started = time.monotonic()
    with pytest.raises(TransientError):
        sender.typing(Target("telegram", "99"))
    assert time.monotonic() - started < 1.5  # the presence timeout, not the sender's 10 s


@pytest.mark.parametrize("reply_to", [None, "not-a-number"])
def test_telegram_sends_no_reply_parameters_without_a_message_id(
    fake_telegram: FakeTelegram, reply_to: str | None
) -> None:
    TelegramSender(fake_telegram.base_url, fake_telegram.token).send(Target("telegram", "99", reply_to=reply_to), "hi")

    assert "reply_parameters" not in fake_telegram.sent[0]


def test_telegram_replies_to_the_users_message(fake_telegram: FakeTelegram) -> None:
    TelegramSender(fake_telegram.base_url, fake_telegram.token).send(Target("telegram", "99", reply_to="5"), "hi")

    assert fake_telegram.sent[0]["reply_parameters"] == {"message_id": 5, "allow_sending_without_reply": True}


# -- Discord ---------------------------------------------------------------------------------


def test_discord_typing_is_posted_to_the_thread_channel(fake_discord: FakeDiscord) -> None:
    sender = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id=None)

    assert sender.typing(Target("discord", "1100000000000000010", "1100000000000000011")) is True

    (request,) = fake_discord.requests
    assert (request.http_method, request.path) == ("POST", "/channels/1100000000000000011/typing")
    assert request.headers["authorization"] == f"Bot {fake_discord.token}"
    assert fake_discord.typing() == ["1100000000000000011"]
    assert sender.typing_refresh_seconds < 10


def test_discord_shows_no_typing_for_an_interaction_or_without_a_bot_token(fake_discord: FakeDiscord) -> None:
    # An interaction's deferred "thinking…" message already shows that the bot is at work.
    interaction = Target("discord", "1100000000000000010", context={"interaction_token": "tok", "application_id": "1"})
    with_token = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id=None)
    without = DiscordSender(fake_discord.base_url, bot_token=None, application_id=fake_discord.application_id)

    assert with_token.typing(interaction) is False
    assert without.typing(Target("discord", "1100000000000000010")) is False
    assert fake_discord.requests == []


def test_discord_typing_in_a_gone_channel_is_refused(fake_discord: FakeDiscord) -> None:
    fake_discord.gone_channels.add("1100000000000000010")
    sender = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id=None)

    with pytest.raises(PermanentError):
        sender.typing(Target("discord", "1100000000000000010"))


def test_discord_typing_failures_are_transient(fake_discord: FakeDiscord) -> None:
    fake_discord.answer_next(500, {"message": "500: Internal Server Error", "code": 0}, only=is_typing)
    sender = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id=None)

    with pytest.raises(TransientError):
        sender.typing(Target("discord", "1100000000000000010"))


def test_discord_channel_replies_reference_the_users_message(fake_discord: FakeDiscord) -> None:
    sender = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id=None)

    sender.send(Target("discord", "1100000000000000010", reply_to="1100000000000000099"), "hi")
    sender.send(Target("discord", "1100000000000000010"), "and more")

    first, second = (r.json for r in fake_discord.calls("POST", "/channels/1100000000000000010/messages"))
    assert first["message_reference"] == {"message_id": "1100000000000000099", "fail_if_not_exists": False}
    assert "message_reference" not in second


def test_discord_interaction_answers_carry_no_reference(fake_discord: FakeDiscord) -> None:
    fake_discord.defer("interaction-token", "1100000000000000010")
    sender = DiscordSender(fake_discord.base_url, bot_token=None, application_id=fake_discord.application_id)
    context = {"interaction_token": "interaction-token", "application_id": fake_discord.application_id}

    sender.send(Target("discord", "1100000000000000010", context=context, reply_to="1100000000000000099"), "hi")

    assert all("message_reference" not in (r.json or {}) for r in fake_discord.requests)


def test_discord_refresh_stays_below_the_expiry() -> None:
    assert discord.DiscordSender.typing_refresh_seconds < 10


# -- WhatsApp --------------------------------------------------------------------------------


def test_whatsapp_typing_is_a_read_receipt_with_the_indicator(fake_whatsapp: FakeWhatsApp) -> None:
    sender = WhatsAppSender(fake_whatsapp.base_url, fake_whatsapp.token, "106540352242922")

    assert sender.typing(Target("whatsapp", "15551234567", reply_to=WAMID)) is True

    (request,) = fake_whatsapp.requests
    assert (request.http_method, request.path) == ("POST", "/v21.0/106540352242922/messages")
    assert request.json == {
        "messaging_product": "whatsapp",
        "status": "read",
        "message_id": WAMID,
        "typing_indicator": {"type": "text"},
    }
    assert fake_whatsapp.sent == []  # no message was sent
    assert sender.typing_refresh_seconds < 25


def test_whatsapp_shows_no_typing_without_the_users_message(fake_whatsapp: FakeWhatsApp) -> None:
    sender = WhatsAppSender(fake_whatsapp.base_url, fake_whatsapp.token, "106540352242922")

    assert sender.typing(Target("whatsapp", "15551234567")) is False
    assert fake_whatsapp.requests == []


def test_whatsapp_replies_quote_the_users_message(fake_whatsapp: FakeWhatsApp) -> None:
    sender = WhatsAppSender(fake_whatsapp.base_url, fake_whatsapp.token, "106540352242922")

    sender.send(Target("whatsapp", "15551234567", reply_to=WAMID), "hi")
    sender.send(Target("whatsapp", "15551234567"), "and more")

    assert fake_whatsapp.sent[0]["context"] == {"message_id": WAMID}
    assert "context" not in fake_whatsapp.sent[1]


def test_whatsapp_refresh_stays_below_the_expiry() -> None:
    assert whatsapp.WhatsAppSender.typing_refresh_seconds < 25


# -- LINE ------------------------------------------------------------------------------------


def test_line_typing_is_the_loading_animation_in_a_one_to_one_chat(fake_line: FakeLine) -> None:
    sender = LineSender(fake_line.base_url, fake_line.token)

    assert sender.typing(Target("line", "U4af4980629")) is True

    assert fake_line.loading == [{"chatId": "U4af4980629", "loadingSeconds": line.LOADING_SECONDS}]
    assert sender.typing_refresh_seconds < line.LOADING_SECONDS


@pytest.mark.parametrize("chat_id", ["C4af4980629", "R4af4980629"])
def test_line_shows_no_animation_in_a_group_or_room(fake_line: FakeLine, chat_id: str) -> None:
    assert LineSender(fake_line.base_url, fake_line.token).typing(Target("line", chat_id)) is False
    assert fake_line.requests == []


# -- Slack -----------------------------------------------------------------------------------


def test_slack_sets_an_assistant_threads_status(fake_slack: FakeSlack) -> None:
    fake_slack.assistant_threads.add("1700000000.000100")
    sender = SlackSender(fake_slack.base_url, fake_slack.token)

    assert sender.typing(Target("slack", "D0123", "1700000000.000100")) is True

    assert fake_slack.statuses == [{"channel_id": "D0123", "thread_ts": "1700000000.000100", "status": "is thinking…"}]


@pytest.mark.parametrize("target", [Target("slack", "D0123"), Target("slack", "C0123", "1700000000.000100")])
def test_slack_asks_for_no_status_outside_a_dms_thread(fake_slack: FakeSlack, target: Target) -> None:
    assert SlackSender(fake_slack.base_url, fake_slack.token).typing(target) is False
    assert fake_slack.requests == []


def test_slack_refuses_a_status_in_a_thread_that_is_no_assistants(fake_slack: FakeSlack) -> None:
    with pytest.raises(PermanentError):
        SlackSender(fake_slack.base_url, fake_slack.token).typing(Target("slack", "D0123", "1700000000.000100"))
