"""Providers with tools: OpenAI-compatible (the fake on loopback), Bedrock (stubbed) and echo;
retries with backoff inside a budget; history repair."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.errors import PermanentError, RateLimited, TransientError
from hermes_gateway.providers import make_provider
from hermes_gateway.providers.base import INVALID_ARGUMENTS, ChatMessage, ToolCall, ToolSpec, repair_history
from hermes_gateway.providers.bedrock import BedrockProvider
from hermes_gateway.providers.echo import EchoProvider
from hermes_gateway.providers.openai_compat import OpenAICompatProvider
from hermes_gateway.providers.retry import RetryPolicy, call_with_retries, retry_after_seconds
from hermes_gateway.secrets import Secrets
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.services import make_settings

pytest_plugins = ("tests.fakes.openai_server",)

NOTE_TOOL = ToolSpec(
    "memory",
    "durable notes",
    {"type": "object", "properties": {"action": {"type": "string"}}, "required": ["action"]},
)
CALL = ToolCall("call_1", "memory", {"action": "add", "text": "likes tea"})
TOOL_TURN = [
    ChatMessage("user", "remember that I like tea"),
    ChatMessage("assistant", "", tool_calls=(CALL,)),
    ChatMessage("tool", '{"added":{"id":"n1"}}', tool_call_id="call_1", name="memory"),
]
FAST = RetryPolicy(max_attempts=3, budget_seconds=10, base_delay_seconds=0.01, max_delay_seconds=0.05)


def _openai(fake: FakeOpenAI, retry: RetryPolicy = FAST, timeout: float = 5.0) -> OpenAICompatProvider:
    return OpenAICompatProvider(fake.base_url, "sk-test-key-0123456789", "gpt-test", timeout, retry)


# --- OpenAI-compatible: tools ----------------------------------------------------------------


def test_openai_sends_tools_and_reads_tool_calls(fake_openai: FakeOpenAI) -> None:
    # Given a model that asks for two tool calls at once
    fake_openai.call_tools_next(("memory", {"action": "list"}), ("session_search", {"query": "tea"}))

    reply = _openai(fake_openai).complete("sys", [ChatMessage("user", "what do you know?")], [NOTE_TOOL])

    # Then the tools went out in the function format, and the calls came back parsed
    assert fake_openai.requests[0].json["tools"] == [
        {
            "type": "function",
            "function": {"name": "memory", "description": "durable notes", "parameters": NOTE_TOOL.parameters},
        }
    ]
    assert reply.tool_calls == (
        ToolCall("call_0_0", "memory", {"action": "list"}),
        ToolCall("call_0_1", "session_search", {"query": "tea"}),
    )
    assert (reply.text, reply.stop_reason) == ("", "tool_calls")


def test_openai_sends_tool_calls_and_results_back_in_its_format(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_next("Saved.")

    reply = _openai(fake_openai).complete("", TOOL_TURN, [NOTE_TOOL])

    assert reply.text == "Saved."
    assert fake_openai.sent_messages() == [
        {"role": "user", "content": "remember that I like tea"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "memory", "arguments": json.dumps(CALL.arguments)},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"added":{"id":"n1"}}'},
    ]


def test_openai_without_tools_sends_no_tools_field(fake_openai: FakeOpenAI) -> None:
    _openai(fake_openai).complete("", [ChatMessage("user", "hi")])
    assert "tools" not in fake_openai.requests[0].json


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]"])
def test_openai_unreadable_arguments_are_kept_for_the_tool_loop(fake_openai: FakeOpenAI, raw: str) -> None:
    fake_openai.call_tools_next(("memory", raw))

    reply = _openai(fake_openai).complete("", [ChatMessage("user", "x")], [NOTE_TOOL])

    assert reply.tool_calls[0].arguments == {INVALID_ARGUMENTS: raw}


def test_openai_usage_counts_cached_prompt_tokens_apart(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_next("ok", prompt_tokens=1000, completion_tokens=20, cached_tokens=768)

    reply = _openai(fake_openai).complete("", [ChatMessage("user", "x")])

    assert reply.usage.to_dict() == {
        "input_tokens": 232,
        "output_tokens": 20,
        "cache_read_tokens": 768,
        "cache_write_tokens": 0,
    }


def test_openai_tool_call_without_a_function_name_is_permanent(fake_openai: FakeOpenAI) -> None:
    body = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]}}]}
    fake_openai.answer_next(200, body)
    with pytest.raises(PermanentError, match="no function name"):
        _openai(fake_openai).complete("", [ChatMessage("user", "x")], [NOTE_TOOL])


# --- OpenAI-compatible: retries ------------------------------------------------------------------


def test_openai_retries_a_429_after_its_retry_after(fake_openai: FakeOpenAI) -> None:
    fake_openai.throttle_next(retry_after=0.3)
    fake_openai.reply_next("after the wait")
    slept: list[float] = []

    provider = _openai(fake_openai)
    reply = call_with_retries(
        lambda left: provider._attempt(json.dumps({"model": "m", "messages": []}).encode(), left),
        FAST,
        provider="openai",
        sleep=slept.append,
    )

    assert reply.text == "after the wait"
    assert slept == [0.3]  # the server's wait, not the backoff
    assert len(fake_openai.requests) == 2


def test_openai_retries_server_errors_then_answers(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(status=500)
    fake_openai.fail_next(status=503)
    fake_openai.reply_next("third time")

    assert _openai(fake_openai).complete("", [ChatMessage("user", "x")]).text == "third time"
    assert len(fake_openai.requests) == 3


def test_openai_gives_up_after_max_attempts_with_a_transient_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next(status=502, times=5)

    with pytest.raises(TransientError, match="HTTP 502"):
        _openai(fake_openai).complete("", [ChatMessage("user", "x")])
    assert len(fake_openai.requests) == 3


def test_openai_does_not_wait_past_its_budget(fake_openai: FakeOpenAI) -> None:
    # Given a Retry-After longer than what is left of the budget
    fake_openai.throttle_next(retry_after=30)

    with pytest.raises(RateLimited, match="retry after 30 s"):
        _openai(fake_openai, RetryPolicy(max_attempts=3, budget_seconds=10)).complete("", [ChatMessage("user", "x")])
    assert len(fake_openai.requests) == 1


def test_openai_retries_a_timeout(fake_openai: FakeOpenAI) -> None:
    fake_openai.answer_next(200, {"choices": []}, delay=0.6)
    fake_openai.reply_next("in time")

    assert _openai(fake_openai, timeout=0.2).complete("", [ChatMessage("user", "x")]).text == "in time"


def test_openai_does_not_retry_a_permanent_error(fake_openai: FakeOpenAI) -> None:
    fake_openai.answer_next(400, {"error": {"message": "bad request"}})
    with pytest.raises(PermanentError, match="bad request"):
        _openai(fake_openai).complete("", [ChatMessage("user", "x")])
    assert len(fake_openai.requests) == 1


def test_make_provider_takes_the_retry_settings(fake_openai: FakeOpenAI) -> None:
    settings = make_settings(
        {
            "GATEWAY_PROVIDER": "openai",
            "GATEWAY_MODEL": "m",
            "OPENAI_BASE_URL": fake_openai.base_url,
            "GATEWAY_PROVIDER_MAX_ATTEMPTS": "2",
        }
    )
    fake_openai.fail_next(status=500, times=3)

    with pytest.raises(TransientError):
        make_provider(settings.provider, Secrets(env={})).complete("", [ChatMessage("user", "x")])
    assert len(fake_openai.requests) == 2


# --- the retry loop itself -----------------------------------------------------------------------


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_backoff_grows_and_is_jittered() -> None:
    clock = _Clock()
    waits: list[float] = []

    def attempt(_left: float) -> str:
        raise TransientError("down")

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.sleep(seconds)

    policy = RetryPolicy(max_attempts=4, budget_seconds=100, base_delay_seconds=1, max_delay_seconds=3)
    with pytest.raises(TransientError):
        call_with_retries(attempt, policy, provider="t", sleep=sleep, clock=clock, rng=lambda: 1.0)
    assert waits == [1.0, 2.0, 3.0]  # doubled, then capped


def test_each_try_is_told_the_time_left() -> None:
    clock = _Clock()
    seen: list[float] = []

    def attempt(left: float) -> str:
        seen.append(left)
        clock.now += 5  # a slow failure
        raise TransientError("slow")

    policy = RetryPolicy(max_attempts=5, budget_seconds=13.5, base_delay_seconds=1, max_delay_seconds=1)
    with pytest.raises(TransientError):
        call_with_retries(attempt, policy, provider="t", sleep=clock.sleep, clock=clock, rng=lambda: 1.0)
    # 0 s: 13.5 left; 6 s: 7.5 left; a third try at 12 s would have 1.5 s (under 2), so it is not started
    assert seen == [13.5, 7.5]


@pytest.mark.parametrize(
    ("header", "expected"),
    [("20", 20.0), (" 1.5 ", 1.5), ("-3", 0.0), ("soon", None), (None, None), ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0)],
)
def test_retry_after_header_forms(header: str | None, expected: float | None) -> None:
    assert retry_after_seconds(header, now=1445412480.0) == expected


# --- history repair -------------------------------------------------------------------------------


def test_repair_drops_results_without_their_call_and_calls_without_results() -> None:
    orphan_result = ChatMessage("tool", "late", tool_call_id="gone")
    unanswered = ChatMessage("assistant", "let me check", tool_calls=(ToolCall("c9", "memory", {}),))
    history = [orphan_result, ChatMessage("user", "hi"), unanswered, ChatMessage("user", "again"), *TOOL_TURN]

    repaired = repair_history(history)

    assert repaired == [
        ChatMessage("user", "hi"),
        ChatMessage("assistant", "let me check"),
        ChatMessage("user", "again"),
        *TOOL_TURN,
    ]


def test_repair_keeps_one_result_per_call() -> None:
    duplicate = ChatMessage("tool", "again", tool_call_id="call_1", name="memory")
    assert repair_history([*TOOL_TURN, duplicate]) == TOOL_TURN


# --- Bedrock -----------------------------------------------------------------------------------

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


@pytest.fixture
def bedrock() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


def _converse(*blocks: dict[str, Any], stop: str = "end_turn", usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": list(blocks)}},
        "stopReason": stop,
        "usage": usage or {"inputTokens": 30, "outputTokens": 4, "totalTokens": 34},
        "metrics": {"latencyMs": 12},
    }


def test_bedrock_sends_tool_config_and_reads_tool_use(bedrock: tuple[Any, Stubber]) -> None:
    client, stub = bedrock
    expected = {
        "modelId": MODEL,
        "messages": [{"role": "user", "content": [{"text": "what do you know?"}]}],
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "memory",
                        "description": "durable notes",
                        "inputSchema": {"json": NOTE_TOOL.parameters},
                    }
                }
            ]
        },
    }
    use = {"toolUse": {"toolUseId": "tu-1", "name": "memory", "input": {"action": "list"}}}
    usage = {
        "inputTokens": 50,
        "outputTokens": 9,
        "totalTokens": 459,
        "cacheReadInputTokens": 400,
        "cacheWriteInputTokens": 0,
    }
    stub.add_response("converse", _converse({"text": "Let me look."}, use, stop="tool_use", usage=usage), expected)

    reply = BedrockProvider(MODEL, client=client).complete("", [ChatMessage("user", "what do you know?")], [NOTE_TOOL])

    assert reply.tool_calls == (ToolCall("tu-1", "memory", {"action": "list"}),)
    assert (reply.text, reply.stop_reason) == ("Let me look.", "tool_use")
    assert reply.usage.to_dict() == {
        "input_tokens": 50,
        "output_tokens": 9,
        "cache_read_tokens": 400,
        "cache_write_tokens": 0,
    }


def test_bedrock_sends_tool_use_and_results_in_its_format(bedrock: tuple[Any, Stubber]) -> None:
    client, stub = bedrock
    failed = ChatMessage("tool", "error: full", tool_call_id="call_2", name="memory", is_error=True)
    second = ToolCall("call_2", "memory", {"action": "add", "text": "x"})
    history = [
        *TOOL_TURN[:1],
        ChatMessage("assistant", "", tool_calls=(CALL, second)),
        TOOL_TURN[2],
        failed,
    ]
    expected_messages = [
        {"role": "user", "content": [{"text": "remember that I like tea"}]},
        {
            "role": "assistant",
            "content": [
                {"toolUse": {"toolUseId": "call_1", "name": "memory", "input": CALL.arguments}},
                {"toolUse": {"toolUseId": "call_2", "name": "memory", "input": second.arguments}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "call_1",
                        "content": [{"text": '{"added":{"id":"n1"}}'}],
                        "status": "success",
                    }
                },
                {"toolResult": {"toolUseId": "call_2", "content": [{"text": "error: full"}], "status": "error"}},
            ],
        },
    ]
    stub.add_response("converse", _converse({"text": "Saved one."}), {"modelId": MODEL, "messages": expected_messages})

    assert BedrockProvider(MODEL, client=client).complete("", history).text == "Saved one."


def test_bedrock_history_starting_inside_a_tool_exchange_starts_at_a_user_text(bedrock: tuple[Any, Stubber]) -> None:
    client, stub = bedrock
    history = [TOOL_TURN[1], TOOL_TURN[2], ChatMessage("assistant", "done"), ChatMessage("user", "next")]
    expected = {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": "next"}]}]}
    stub.add_response("converse", _converse({"text": "ok"}), expected)

    assert BedrockProvider(MODEL, client=client).complete("", history).text == "ok"


def test_bedrock_retries_throttling_then_answers(bedrock: tuple[Any, Stubber]) -> None:
    client, stub = bedrock
    stub.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    stub.add_response("converse", _converse({"text": "ok"}))

    assert BedrockProvider(MODEL, client=client, retry=FAST).complete("", [ChatMessage("user", "x")]).text == "ok"


def test_bedrock_gives_up_with_a_transient_error(bedrock: tuple[Any, Stubber]) -> None:
    client, stub = bedrock
    for _ in range(3):
        stub.add_client_error("converse", service_error_code="ServiceUnavailableException", http_status_code=503)

    with pytest.raises(TransientError, match="ServiceUnavailableException"):
        BedrockProvider(MODEL, client=client, retry=FAST).complete("", [ChatMessage("user", "x")])


# --- echo ------------------------------------------------------------------------------------------


def test_echo_asks_for_the_tools_its_user_names() -> None:
    text = 'please\necho-tool:memory {"action": "add", "text": "tea"}\necho-tool:session_search {"query": "tea"}'

    reply = EchoProvider().complete("", [ChatMessage("user", text)], [NOTE_TOOL])

    assert reply.tool_calls == (
        ToolCall("echo-0-0", "memory", {"action": "add", "text": "tea"}),
        ToolCall("echo-0-1", "session_search", {"query": "tea"}),
    )
    assert (reply.text, reply.stop_reason) == ("", "tool_calls")


def test_echo_echoes_the_tool_results_once_they_follow() -> None:
    reply = EchoProvider().complete("", TOOL_TURN, [NOTE_TOOL])
    assert reply.text == 'Echo: [memory] {"added":{"id":"n1"}}'
    assert not reply.tool_calls


def test_echo_without_tools_offered_only_echoes() -> None:
    reply = EchoProvider().complete("", [ChatMessage("user", "echo-tool:memory {}")])
    assert (reply.text, reply.tool_calls) == ("Echo: echo-tool:memory {}", ())


@pytest.mark.parametrize("line", ["echo-tool:memory {oops", "echo-tool:memory [1]", "echo-tool: {}"])
def test_echo_answers_a_bad_tool_line_in_text(line: str) -> None:
    reply = EchoProvider().complete("", [ChatMessage("user", line)], [NOTE_TOOL])
    assert reply.text.startswith("Echo: bad echo-tool line")
    assert not reply.tool_calls


def test_echo_tool_calls_are_deterministic() -> None:
    history = [ChatMessage("user", "a"), ChatMessage("assistant", "b"), ChatMessage("user", "echo-tool:memory {}")]
    first = EchoProvider().complete("s", history, [NOTE_TOOL])
    assert EchoProvider().complete("s", history, [NOTE_TOOL]) == first
    assert first.tool_calls[0].id == "echo-2-0"


# --- history repair, for any history ---------------------------------------------------------------

_IDS = st.sampled_from(["a", "b", "c"])
_MESSAGES = st.one_of(
    st.builds(ChatMessage, st.just("user"), st.sampled_from(["hi", ""])),
    st.builds(ChatMessage, st.just("assistant"), st.sampled_from(["ok", ""])),
    st.builds(
        lambda text, ids: ChatMessage("assistant", text, tool_calls=tuple(ToolCall(i, "memory", {}) for i in ids)),
        st.sampled_from(["", "checking"]),
        st.lists(_IDS, min_size=1, max_size=3, unique=True),
    ),
    st.builds(lambda i: ChatMessage("tool", "r", tool_call_id=i, name="memory"), _IDS),
)


@given(st.lists(_MESSAGES, max_size=12))
def test_a_repaired_history_pairs_every_call_with_exactly_one_result(history: list[ChatMessage]) -> None:
    repaired = repair_history(history)
    index = 0
    while index < len(repaired):
        message = repaired[index]
        index += 1
        assert message.role != "tool", "a result without its call right before it"
        if message.tool_calls:
            answered = []
            while index < len(repaired) and repaired[index].role == "tool":
                answered.append(repaired[index].tool_call_id)
                index += 1
            assert sorted(answered) == sorted(c.id for c in message.tool_calls)
    assert repair_history(repaired) == repaired  # repairing twice changes nothing
