"""The senders' edits (platforms.base.Editor) a streamed answer makes, against the fakes on loopback."""

from __future__ import annotations

import pytest

from hermes_gateway.errors import PermanentError, RateLimited, TargetGone
from hermes_gateway.platforms.base import Target, editor_of
from hermes_gateway.platforms.discord import DiscordSender
from hermes_gateway.platforms.feishu import FeishuSender
from hermes_gateway.platforms.matrix import MatrixSender
from hermes_gateway.platforms.mattermost import MattermostSender
from hermes_gateway.platforms.slack import SlackSender
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.platforms.whatsapp import WhatsAppSender
from tests.fakes.discord_server import INVALID_WEBHOOK_TOKEN, FakeDiscord
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.mattermost_server import FakeMattermost
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram, too_many_requests

pytest_plugins = ("tests.fakes.discord_server",)

CHANNEL = "1300000000000000002"
TOKEN = "aW50ZXJhY3Rpb246MTMwMDAwMDAwMDAwMDAwMDA5OTpzZWNyZXQtdG9rZW4tdmFsdWU"


def test_telegram_edits_with_edit_message_text_and_an_unchanged_text_is_no_error(fake_telegram: FakeTelegram) -> None:
    telegram = TelegramSender(fake_telegram.base_url, fake_telegram.token)
    target = Target("telegram", "99", "7")
    message_id = telegram.send(target, "Hel")
    telegram.edit(target, message_id, "Hello")
    telegram.edit(target, message_id, "Hello")  # "message is not modified"
    assert fake_telegram.text_of(int(message_id)) == "Hello"
    assert fake_telegram.calls("editMessageText")[0] == {"chat_id": 99, "message_id": 1, "text": "Hello"}
    fake_telegram.answer_next(429, too_many_requests(3))
    with pytest.raises(RateLimited):
        telegram.edit(target, message_id, "Hello there")
    with pytest.raises(PermanentError):
        telegram.edit(target, "42", "no such message")


def test_discord_edits_an_interaction_answer_through_its_webhook(fake_discord: FakeDiscord) -> None:
    fake_discord.defer(TOKEN, CHANNEL)
    discord = DiscordSender(fake_discord.base_url, bot_token=None, application_id=fake_discord.application_id)
    target = Target(
        "discord", CHANNEL, None, {"interaction_token": TOKEN, "application_id": fake_discord.application_id}
    )
    message_id = discord.send(target, "Hel")  # replaces the "thinking…" message
    discord.edit(target, message_id, "Hello")
    assert fake_discord.channel_texts(CHANNEL) == ["Hello"]
    (edit,) = fake_discord.calls("PATCH", f"/webhooks/{fake_discord.application_id}/{TOKEN}/messages/{message_id}")
    assert edit.json["content"] == "Hello"
    # an expired token and no bot token: out of reach
    fake_discord.expired_tokens.add(TOKEN)
    with pytest.raises(TargetGone):
        discord.edit(target, message_id, "Hello there")


def test_discord_edits_a_channel_message_with_the_bot_token(fake_discord: FakeDiscord) -> None:
    discord = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id=None)
    target = Target("discord", CHANNEL)
    message_id = discord.send(target, "Hel")
    discord.edit(target, message_id, "Hello")
    assert fake_discord.channel_texts(CHANNEL) == ["Hello"]
    with pytest.raises(TargetGone):  # 404 Unknown Message
        discord.edit(target, "1300000000000000999", "gone")


def test_discord_an_expired_interaction_token_edits_in_the_channel(fake_discord: FakeDiscord) -> None:
    fake_discord.defer(TOKEN, CHANNEL)
    discord = DiscordSender(fake_discord.base_url, bot_token=fake_discord.token, application_id=None)
    target = Target(
        "discord", CHANNEL, None, {"interaction_token": TOKEN, "application_id": fake_discord.application_id}
    )
    message_id = discord.send(target, "Hel")
    fake_discord.answer_next(401, INVALID_WEBHOOK_TOKEN)
    discord.edit(target, message_id, "Hello")
    assert fake_discord.channel_texts(CHANNEL) == ["Hello"]


def test_slack_edits_with_chat_update() -> None:
    with FakeSlack() as fake:
        slack = SlackSender(fake.base_url, fake.token)
        target = Target("slack", "C1", "1700000000.000100")
        ts = slack.send(target, "Hel")
        slack.edit(target, ts, "Hello")
        assert fake.text_of(ts) == "Hello" and fake.calls("chat.update")[0] == {
            "channel": "C1",
            "ts": ts,
            "text": "Hello",
        }
        with pytest.raises(PermanentError):
            slack.edit(target, "1.2", "no such message")


def test_mattermost_edits_with_a_post_patch() -> None:
    with FakeMattermost() as fake:
        mattermost = MattermostSender(fake.base_url, fake.token)
        target = Target("mattermost", "chan1")
        post_id = mattermost.send(target, "Hel")
        mattermost.edit(target, post_id, "Hello")
        assert fake.text_of(post_id) == "Hello"
        with pytest.raises(TargetGone):  # 404: the post was deleted
            mattermost.edit(target, "post" + "9" * 22, "gone")


def test_matrix_edits_with_an_m_replace_event() -> None:
    with FakeMatrix() as fake:
        matrix = MatrixSender(fake.base_url, fake.as_token, fake.bot_user_id)
        target = Target("matrix", "!room:example.org", "$thread")
        event_id = matrix.send(target, "Hel")
        matrix.edit(target, event_id, "Hello")
        assert fake.shown_texts("!room:example.org") == ["Hello"]
        replacement = fake.sent[-1]
        assert replacement["m.relates_to"] == {"rel_type": "m.replace", "event_id": event_id}
        assert replacement["m.new_content"] == {"msgtype": "m.text", "body": "Hello"}
        assert replacement["body"] == "* Hello"


def test_a_platform_without_edits_is_no_editor() -> None:
    assert editor_of(WhatsAppSender("https://graph.example", "token", "555")) is None
    assert editor_of(TelegramSender("https://api.example", "123:abc")) is not None


def test_feishu_edits_with_a_message_put_and_says_how_many_edits_it_allows() -> None:
    with FakeFeishu() as fake:
        feishu = FeishuSender(fake.base_url, fake.app_id, fake.app_secret)
        target = Target("feishu", "oc_p2p")
        message_id = feishu.send(target, "Hel")
        feishu.edit(target, message_id, "Hello")
        assert fake.text_of(message_id) == "Hello" and feishu.max_edits == 20
        (put,) = [r for r in fake.requests if r.http_method == "PUT"]
        assert put.path == f"/im/v1/messages/{message_id}" and put.json["msg_type"] == "text"
