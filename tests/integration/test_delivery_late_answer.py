"""A send the platform took but answered only after the sender's timeout, end to end through the
delivery service and the DynamoDB outbox (moto) against fake platform servers: the chunk is
recorded failed and the job raises to be retried (BEHAVIOUR §6: timeouts retry). On a platform that
de-duplicates a send on a key of the client's (Matrix's transaction id, Discord's enforced nonce,
Google Chat's request id, Feishu's uuid, Mattermost's pending post id) the retry carries the same
key, and on Slack the retry finds the message by the key in its metadata, so the chat shows the
message once and the outbox records the id of the message the first try posted. Telegram's Bot
API has no such key and no history a bot may read: there the retry posts the message a second
time, the one duplicate the outbox cannot prevent (docs/architecture.md §3)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
from hermes_gateway.errors import TransientError
from hermes_gateway.platforms.base import Sender
from hermes_gateway.platforms.discord import DiscordSender
from hermes_gateway.platforms.feishu import FeishuSender
from hermes_gateway.platforms.google_chat import GoogleChatSender, ServiceAccount
from hermes_gateway.platforms.matrix import MatrixSender
from hermes_gateway.platforms.mattermost import MattermostSender
from hermes_gateway.platforms.slack import SlackSender
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.engine import NOW
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.google_server import FakeGoogle
from tests.fakes.loopback import LoopbackFake
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.mattermost_server import FakeMattermost
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.integration

TIMEOUT = 0.5  # the sender's
LATE = 1.5  # the platform's answer to the first try, after it posted the message
CHANNEL = "1300000000000000001"
CHANNEL_ID = "c1a2b3c4d5e6f7g8h9i0j1k2l3"  # a Mattermost channel id


@dataclass
class Platform:
    sender: Sender
    fake: LoopbackFake[Any]
    chat_id: str
    texts: Callable[[], list[str]]  # every message the chat shows


@pytest.fixture
def platforms() -> Iterator[dict[str, Platform]]:
    with ExitStack() as stack:
        matrix = stack.enter_context(FakeMatrix())
        discord = stack.enter_context(FakeDiscord())
        google = stack.enter_context(FakeGoogle())
        feishu = stack.enter_context(FakeFeishu())
        telegram = stack.enter_context(FakeTelegram())
        mattermost = stack.enter_context(FakeMattermost())
        slack = stack.enter_context(FakeSlack())
        account = ServiceAccount.from_json(google.service_account_json())
        yield {
            "matrix": Platform(
                MatrixSender(matrix.base_url, matrix.as_token, matrix.bot_user_id, timeout=TIMEOUT),
                matrix,
                "!room:example.org",
                lambda: matrix.shown_texts("!room:example.org"),
            ),
            "discord": Platform(
                DiscordSender(
                    discord.base_url, bot_token=discord.token, application_id=discord.application_id, timeout=TIMEOUT
                ),
                discord,
                CHANNEL,
                lambda: discord.channel_texts(CHANNEL),
            ),
            "google_chat": Platform(
                GoogleChatSender(account, api_base_url=google.api_base_url, timeout=TIMEOUT),
                google,
                "spaces/AAAA",
                lambda: [str(body["text"]) for _, _, body in google.messages],
            ),
            "feishu": Platform(
                FeishuSender(feishu.base_url, feishu.app_id, feishu.app_secret, timeout=TIMEOUT),
                feishu,
                "oc_p2p",
                lambda: [feishu.text_of(m["message_id"]) or "" for m in feishu.sent],
            ),
            "mattermost": Platform(
                MattermostSender(mattermost.base_url, mattermost.token, timeout=TIMEOUT),
                mattermost,
                CHANNEL_ID,
                lambda: [str(post["message"]) for post in mattermost.sent],
            ),
            "slack": Platform(
                SlackSender(slack.base_url, slack.token, timeout=TIMEOUT),
                slack,
                "C123",
                lambda: [str(message["text"]) for message in slack.sent],
            ),
            "telegram": Platform(
                TelegramSender(telegram.base_url, telegram.token, timeout=TIMEOUT),
                telegram,
                "99",
                lambda: [str(m["text"]) for m in telegram.sent],
            ),
        }


def _deliver_through_a_late_answer(aws: Any, platform: Platform, name: str) -> DynamoOutbox:
    outbox = DynamoOutbox(aws.bindings)
    deps = DeliveryDeps(outbox=outbox, sender_for=lambda p, via: platform.sender, now=lambda: NOW)
    job = {"delivery_id": "turn-1", "turn_id": "turn-1", "text": "the answer", "target": {"platform": name}}
    job["target"]["chat_id"] = platform.chat_id

    # Given a platform that posts the first try but answers it after the sender gave up (a token
    # fetch before it is answered at once)
    platform.fake.answer_late(LATE, only=lambda request: _is_the_send(request, name))
    # When the delivery runs: the chunk counts as failed, and the job is retried
    with pytest.raises(TransientError, match="timed out"):
        deliver(DeliveryJob.from_dict(job), deps)
    failed = outbox.get("turn-1#1")
    assert failed is not None and failed.status == "failed"
    deliver(DeliveryJob.from_dict(job), deps)
    return outbox


def _is_the_send(request: Any, name: str) -> bool:
    """The message send itself, not a token fetch or an upload."""
    path = str(getattr(request, "path", ""))
    return {
        "matrix": "/send/m.room.message/" in path,
        "discord": path.endswith(f"/channels/{CHANNEL}/messages"),
        "google_chat": "/messages" in path and "/token" not in path,
        "feishu": path.startswith("/im/v1/messages"),
        "mattermost": path == "/api/v4/posts",
        "slack": path.endswith("/chat.postMessage"),
        "telegram": path.endswith("/sendMessage"),
    }[name]


@pytest.mark.parametrize("name", ["matrix", "discord", "google_chat", "feishu", "mattermost", "slack"])
def test_a_retried_send_the_platform_had_taken_is_not_posted_twice(
    aws: Any, platforms: dict[str, Platform], name: str
) -> None:
    platform = platforms[name]
    outbox = _deliver_through_a_late_answer(aws, platform, name)
    # Then the chat shows the message once, and the outbox has the id the first try posted
    assert platform.texts() == ["the answer"]
    row = outbox.get("turn-1#1")
    assert row is not None and row.status == "sent" and row.platform_message_id
    assert row.attempts == 2


def test_telegram_has_no_key_to_de_duplicate_on_so_the_retry_posts_again(
    aws: Any, platforms: dict[str, Platform]
) -> None:
    platform = platforms["telegram"]
    outbox = _deliver_through_a_late_answer(aws, platform, "telegram")
    assert platform.texts() == ["the answer", "the answer"]
    row = outbox.get("turn-1#1")
    assert row is not None and row.status == "sent"
