"""Streaming model calls: OpenAI-compatible server-sent events (a fake on loopback), Bedrock's
ConverseStream (a stand-in client), and the slow echo tests use."""

from __future__ import annotations

import time
from typing import Any

import pytest

from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.providers.base import ChatMessage, streaming_of
from hermes_gateway.providers.bedrock import BedrockProvider
from hermes_gateway.providers.echo import EchoProvider
from hermes_gateway.providers.openai_compat import OpenAICompatProvider
from hermes_gateway.providers.retry import RetryPolicy
from tests.fakes.openai_server import FakeOpenAI, ModelPace, completion

HISTORY = [ChatMessage("user", "hello")]
ONE_TRY = RetryPolicy(max_attempts=1)


def _openai(fake: FakeOpenAI) -> OpenAICompatProvider:
    return OpenAICompatProvider(fake.base_url, "sk-test", "gpt-test", 5.0, ONE_TRY)


def test_openai_streams_the_text_as_it_grows_and_counts_the_usage() -> None:
    seen: list[str] = []
    with FakeOpenAI() as fake:
        fake.stream_piece = 5
        fake.reply_next("The answer is forty-two.", prompt_tokens=20, completion_tokens=6, cached_tokens=4)
        reply = _openai(fake).stream("be brief", HISTORY, None, seen.append)
        body = fake.requests[-1].json
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert reply.text == "The answer is forty-two."
    assert seen[0] == "The a" and seen[-1] == reply.text and len(seen) == 5
    assert (reply.input_tokens, reply.output_tokens, reply.cache_read_tokens) == (16, 6, 4)
    assert reply.model == "fake-model" and reply.stop_reason == "stop"


def test_openai_streamed_tool_calls_are_put_together() -> None:
    with FakeOpenAI() as fake:
        fake.call_tools_next(
            ("memory", {"action": "add", "text": "likes tea"}), ("clock", {}), text="Let me note that."
        )
        reply = _openai(fake).stream("", HISTORY, None, lambda text: None)
    assert reply.text == "Let me note that."
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_0_0", "memory", {"action": "add", "text": "likes tea"}),
        ("call_0_1", "clock", {}),
    ]
    assert reply.stop_reason == "tool_calls"


def test_openai_a_server_that_answers_without_streaming_is_read_as_a_completion() -> None:
    seen: list[str] = []
    with FakeOpenAI() as fake:
        fake.answer_next(200, completion("plain"))
        reply = _openai(fake).stream("", HISTORY, None, seen.append)
    assert reply.text == "plain" and seen == []


def test_openai_stream_errors_are_classified() -> None:
    with FakeOpenAI() as fake:
        fake.fail_next(status=503)
        with pytest.raises(TransientError):
            _openai(fake).stream("", HISTORY, None, lambda text: None)
        error = b'data: {"error": {"message": "context too long"}}\n\n'
        fake.answer_next(200, error, headers={"Content-Type": "text/event-stream"})
        with pytest.raises(PermanentError, match="context too long"):
            _openai(fake).stream("", HISTORY, None, lambda text: None)


def test_an_exception_of_the_callback_ends_the_stream() -> None:
    class Enough(Exception):
        pass

    def stop(text: str) -> None:
        raise Enough

    with FakeOpenAI() as fake:
        fake.reply_next("a long answer " * 50)
        with pytest.raises(Enough):
            _openai(fake).stream("", HISTORY, None, stop)
        fake.reply_next("next")
        assert _openai(fake).complete("", HISTORY).text == "next"  # the pool is fine afterwards


class StreamingBedrock:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.requests: list[dict[str, Any]] = []

    def converse_stream(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        return {"stream": iter(self.events)}


def test_bedrock_converse_stream_adds_up_to_the_reply() -> None:
    client = StreamingBedrock(
        [
            {"messageStart": {"role": "assistant"}},
            {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Let me "}}},
            {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "check."}}},
            {"contentBlockStop": {"contentBlockIndex": 0}},
            {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "clock"}}}},
            {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"zone": '}}}},
            {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '"UTC"}'}}}},
            {"messageStop": {"stopReason": "tool_use"}},
            {"metadata": {"usage": {"inputTokens": 30, "outputTokens": 9}}},
        ]
    )
    seen: list[str] = []
    reply = BedrockProvider("m", client=client).stream("be brief", HISTORY, None, seen.append)
    assert seen == ["Let me ", "Let me check."]
    assert reply.text == "Let me check." and reply.stop_reason == "tool_use"
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [("t1", "clock", {"zone": "UTC"})]
    assert (reply.input_tokens, reply.output_tokens) == (30, 9)
    assert client.requests[0]["system"] == [{"text": "be brief"}]


def test_bedrock_a_stream_error_event_is_classified() -> None:
    client = StreamingBedrock([{"throttlingException": {"message": "slow down"}}])
    with pytest.raises(TransientError):
        BedrockProvider("m", client=client, retry=ONE_TRY).stream("", HISTORY, None, lambda text: None)
    client = StreamingBedrock([{"validationException": {"message": "bad"}}])
    with pytest.raises(PermanentError):
        BedrockProvider("m", client=client, retry=ONE_TRY).stream("", HISTORY, None, lambda text: None)


def test_the_echo_streams_only_when_slowed() -> None:
    assert streaming_of(EchoProvider()) is None
    waits: list[float] = []
    slow = EchoProvider(chunk_delay=0.5, sleep=waits.append)
    assert streaming_of(slow) is slow
    seen: list[str] = []
    reply = slow.stream("", [ChatMessage("user", "one two")], None, seen.append)
    assert seen == ["Echo: ", "Echo: one ", "Echo: one two"] and reply.text == "Echo: one two"
    assert waits == [0.5, 0.5, 0.5]


def test_a_paced_fake_writes_as_a_model_does_token_by_token_after_its_first_token() -> None:
    # Given a fake that writes its first token after 0.2 s, then 50 tokens a second
    arrivals: list[tuple[float, str]] = []
    with FakeOpenAI() as fake:
        fake.pace = ModelPace(first_token_seconds=0.2, tokens_per_second=50)
        fake.reply_next("one two three four five six seven eight nine ten", completion_tokens=10)
        started = time.monotonic()
        # When the provider streams its answer
        reply = _openai(fake).stream("", HISTORY, None, lambda text: arrivals.append((time.monotonic(), text)))
    # Then the text grows a token at a time, the first after the wait, the last about 9 gaps later
    assert reply.text == "one two three four five six seven eight nine ten"
    assert [text for _, text in arrivals][:2] == ["one ", "one two "] and len(arrivals) == 10
    assert arrivals[0][0] - started >= 0.2
    assert arrivals[-1][0] - arrivals[0][0] >= 9 / 50 * 0.9


def test_a_paced_fake_answers_a_plain_request_once_the_whole_answer_would_have_been_written() -> None:
    with FakeOpenAI() as fake:
        fake.pace = ModelPace(first_token_seconds=0.1, tokens_per_second=20)
        fake.answer_with = lambda request: completion("a b c d e")  # 5 tokens: 0.1 + 4 / 20 s
        started = time.monotonic()
        reply = _openai(fake).complete("", HISTORY)
    assert reply.text == "a b c d e" and time.monotonic() - started >= 0.3
    assert ModelPace(0.8, 40).seconds(300) == pytest.approx(0.8 + 299 / 40)
