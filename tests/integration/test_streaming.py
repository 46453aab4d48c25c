"""A streamed answer end to end (services/turn/stream.py): a slow model's answer goes to fake
Telegram, Discord, Slack, Mattermost, Matrix and Feishu servers as one message, edited at the
configured pace to the exact final text, completed by the Deliver state through the DynamoDB
outbox (moto) and never posted twice; also when the Respond task fails after the first post and
its retry streams again."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.platforms.base import Sender
from hermes_gateway.platforms.discord import DiscordSender
from hermes_gateway.platforms.feishu import FeishuSender
from hermes_gateway.platforms.matrix import MatrixSender
from hermes_gateway.platforms.mattermost import MattermostSender
from hermes_gateway.platforms.slack import SlackSender
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.providers.base import ChatMessage, ModelReply, TextSoFar, ToolSpec
from hermes_gateway.providers.echo import EchoProvider
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from tests.fakes.aws_calls import aws_calls
from tests.fakes.discord_server import FakeDiscord
from tests.fakes.engine import NOW, Engine
from tests.fakes.feishu_server import FakeFeishu
from tests.fakes.matrix_server import FakeMatrix
from tests.fakes.mattermost_server import FakeMattermost
from tests.fakes.slack_server import FakeSlack
from tests.fakes.telegram_server import FakeTelegram

pytestmark = pytest.mark.integration

INTERVAL = 0.3
FIRST_AFTER = 0.2
WORDS = 24
DELAY = 0.05  # a word every 50 ms: 1.2 s of writing
QUESTION = " ".join(f"word{i}" for i in range(WORDS))
ANSWER = f"Echo: {QUESTION}"
CHANNEL = "1300000000000000001"

SOURCES = {
    "telegram": SessionSource("telegram", chat_id="99", chat_type="dm", user_id="42", message_id="5"),
    "discord": SessionSource("discord", chat_id=CHANNEL, chat_type="dm", user_id="1400000000000000001"),
    "slack": SessionSource("slack", chat_id="D0STREAM", chat_type="dm", user_id="U0ALICE"),
    "mattermost": SessionSource("mattermost", chat_id="chan0stream", chat_type="dm", user_id="user0alice"),
    "matrix": SessionSource("matrix", chat_id="!room:example.org", chat_type="dm", user_id="@alice:example.org"),
    "feishu": SessionSource("feishu", chat_id="oc_p2p", chat_type="dm", user_id="ou_alice"),
}


class Crash(Exception):
    """The Respond task failing after its first post (its Lambda invocation errs)."""


class CrashingEcho(EchoProvider):
    """The slow echo, failing once when `posted()` holds (the message is out)."""

    def __init__(self, posted: Callable[[], bool]) -> None:
        super().__init__(chunk_delay=DELAY)
        self.posted, self.crashes = posted, 1

    def stream(
        self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None, on_text: TextSoFar
    ) -> ModelReply:
        def watched(text: str) -> None:
            on_text(text)
            if self.crashes and self.posted():
                self.crashes -= 1
                raise Crash("the task failed mid-stream")

        return super().stream(system, messages, tools, watched)


@dataclass
class Platform:
    name: str
    sender: Sender
    posts: Callable[[], list[float]]  # each post's arrival time
    edits: Callable[[], list[float]]  # each edit's
    texts: Callable[[], list[str]]  # what the chat shows, every message


@pytest.fixture
def platforms() -> Iterator[dict[str, Platform]]:
    with ExitStack() as stack:
        telegram = stack.enter_context(FakeTelegram())
        discord = stack.enter_context(FakeDiscord())
        slack = stack.enter_context(FakeSlack())
        mattermost = stack.enter_context(FakeMattermost())
        matrix = stack.enter_context(FakeMatrix())
        feishu = stack.enter_context(FakeFeishu())
        yield {
            "telegram": Platform(
                "telegram",
                TelegramSender(telegram.base_url, telegram.token),
                lambda: telegram.posted_at,
                lambda: [e["at"] for e in telegram.edits],
                lambda: [telegram.text_of(int(m["message_id"])) or "" for m in telegram.sent],
            ),
            "discord": Platform(
                "discord",
                DiscordSender(discord.base_url, bot_token=discord.token, application_id=discord.application_id),
                lambda: discord.posted_at,
                lambda: [e["at"] for e in discord.edits],
                lambda: discord.channel_texts(CHANNEL),
            ),
            "slack": Platform(
                "slack",
                SlackSender(slack.base_url, slack.token),
                lambda: slack.posted_at,
                lambda: [e["at"] for e in slack.edits],
                lambda: [slack.text_of(m["ts"]) or "" for m in slack.sent],
            ),
            "mattermost": Platform(
                "mattermost",
                MattermostSender(mattermost.base_url, mattermost.token),
                lambda: mattermost.posted_at,
                lambda: [e["at"] for e in mattermost.edits],
                lambda: [mattermost.text_of(m["id"]) or "" for m in mattermost.sent],
            ),
            "matrix": Platform(
                "matrix",
                MatrixSender(matrix.base_url, matrix.as_token, matrix.bot_user_id),
                lambda: matrix.posted_at,
                lambda: matrix.edit_times,
                lambda: matrix.shown_texts("!room:example.org"),
            ),
            "feishu": Platform(
                "feishu",
                FeishuSender(feishu.base_url, feishu.app_id, feishu.app_secret),
                lambda: feishu.posted_at,
                lambda: feishu.edit_times,
                lambda: [feishu.text_of(m["message_id"]) or "" for m in feishu.sent],
            ),
        }


class StreamingWorld(Engine):
    """The engine with the agent's streaming wired (the platform's sender, the DynamoDB outbox)
    and a Deliver state that runs the delivery service against the same outbox and sender."""

    def __init__(self, platform: Platform, outbox: DynamoOutbox, model: EchoProvider) -> None:
        name = platform.name.upper()
        super().__init__(
            {
                f"{name}_ENABLED": "true",
                f"{name}_ALLOW_ALL_USERS": "true",
                f"{name}_STREAMING_EDIT_INTERVAL": str(INTERVAL),
                f"{name}_STREAMING_FIRST_AFTER": str(FIRST_AFTER),
            },
            model=model,  # type: ignore[arg-type]
        )
        self.platform, self.outbox = platform, outbox
        self.overrides.update(
            senders=lambda p, via: platform.sender if p == platform.name else None,
            outbox=outbox,
            sleep=__import__("time").sleep,
        )

    def _deliver(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.delivered.extend(payload["deliveries"])
        deps = DeliveryDeps(
            outbox=self.outbox, sender_for=lambda p, via: self.platform.sender, now=lambda: NOW, outbox_text_chars=None
        )
        for job in payload["deliveries"]:
            deliver(DeliveryJob.from_dict(job), deps)
        return {"sent": len(payload["deliveries"])}


def _at_respond(world: StreamingWorld, source: SessionSource) -> dict[str, Any]:
    world.send(QUESTION, "ev-1", source)
    ending, state = world.workflow.run(world.starter.started[world.first()], stop_before="Respond")
    assert ending == "before:Respond"
    return state


def _assert_streamed(platform: Platform, outbox: DynamoOutbox, turn_id: str) -> None:
    # one message, showing the exact answer: no second copy
    assert platform.texts() == [ANSWER]
    posts, edits = platform.posts(), platform.edits()
    assert len(posts) == 1
    # several edits, never closer together than the configured interval while the model writes; the
    # last one, once it is done, at once (a wait would be billed as the function's and the execution's)
    assert len(edits) >= 2
    times = [posts[0], *edits]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps[:-1]) >= INTERVAL * 0.95, gaps
    row = outbox.get(f"{turn_id}#1")
    assert row is not None and row.status == "sent" and row.platform_message_id


@pytest.mark.parametrize("name", ["telegram", "discord", "slack", "mattermost", "matrix", "feishu"])
def test_a_slow_answer_is_one_message_edited_at_the_pace_to_the_exact_text(
    aws: Any, platforms: dict[str, Platform], name: str
) -> None:
    platform, outbox = platforms[name], DynamoOutbox(aws.bindings)
    world = StreamingWorld(platform, outbox, EchoProvider(chunk_delay=DELAY))
    state = _at_respond(world, SOURCES[name])

    # When the Respond task streams the answer
    with aws_calls() as calls:
        after = world.workflow.task("Respond", state)
    assert isinstance(after, dict) and after["next"] == "deliver"
    # the stream cost one outbox read (an earlier try's message?) and one write (its row); the
    # session's stores are in memory here, so these are all the DynamoDB calls
    assert sorted(op for service, op in calls if service == "dynamodb") == ["GetItem", "PutItem"]
    assert after["deliveries"][0]["streamed"] == "shown"

    # Then the Deliver state completes the message without posting it again
    world.workflow.task("Deliver", after)
    _assert_streamed(platform, outbox, after["turn"]["turn_id"])


@pytest.mark.parametrize("name", ["telegram", "discord", "slack", "mattermost", "matrix", "feishu"])
def test_a_respond_task_that_fails_mid_stream_is_retried_into_the_same_message(
    aws: Any, platforms: dict[str, Platform], name: str
) -> None:
    platform, outbox = platforms[name], DynamoOutbox(aws.bindings)
    model = CrashingEcho(lambda: len(platform.posts()) >= 1)
    world = StreamingWorld(platform, outbox, model)
    state = _at_respond(world, SOURCES[name])

    # Given a Respond task that fails once its answer has been posted
    failed = world.workflow.task("Respond", state)
    assert isinstance(failed, tuple) and failed[1]["error"]["Error"] == "Crash"
    assert len(platform.posts()) == 1

    # When the task is tried again with the same input (as Step Functions retries it)
    after = world.workflow.task("Respond", state, retry=1)
    assert isinstance(after, dict) and after["next"] == "deliver"
    world.workflow.task("Deliver", after)

    # Then the retry streamed into the message the first try posted: still one message, exact text
    _assert_streamed(platform, outbox, after["turn"]["turn_id"])


def test_a_long_answer_streams_its_first_chunk_and_the_rest_follows_as_new_messages(
    aws: Any, platforms: dict[str, Platform]
) -> None:
    platform, outbox = platforms["discord"], DynamoOutbox(aws.bindings)  # 2000 characters a message
    world = StreamingWorld(platform, outbox, EchoProvider(chunk_delay=0.001))
    long_question = " ".join(f"w{i:04d}" for i in range(700))  # about 4200 characters
    world.send(long_question, "ev-1", replace(SOURCES["discord"]))
    _, state = world.workflow.run(world.starter.started[world.first()], stop_before="Respond")
    after = world.workflow.task("Respond", state)
    assert isinstance(after, dict)
    world.workflow.task("Deliver", after)

    texts = platform.texts()
    assert len(texts) == 3 and len(platform.posts()) == 3
    words = [w for t in texts for w in t.split() if not re.fullmatch(r"\(\d/3\)", w)]  # split's "(1/3)" marks
    assert words == f"Echo: {long_question}".split()
    assert all(len(t) <= 2000 for t in texts)
