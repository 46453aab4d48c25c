"""Model providers: echo, any OpenAI-compatible server (a fake on loopback), Bedrock (stubbed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from hermes_gateway.errors import ConfigError, PermanentError, TransientError
from hermes_gateway.providers import make_provider
from hermes_gateway.providers.base import ChatMessage
from hermes_gateway.providers.bedrock import BedrockProvider
from hermes_gateway.providers.echo import EchoProvider
from hermes_gateway.providers.openai_compat import OpenAICompatProvider
from hermes_gateway.providers.retry import RetryPolicy
from hermes_gateway.secrets import Secrets
from hermes_gateway.settings import ProviderSettings
from tests.fakes.openai_server import DEFAULT_REPLY, FakeOpenAI

API_KEY = "sk-test-0123456789abcdef"
SINGLE_ATTEMPT = RetryPolicy(max_attempts=1)  # the failure itself, without the retries around it
HISTORY = [
    ChatMessage("user", "hello"),
    ChatMessage("assistant", "hi there"),
    ChatMessage("user", "what is 2+2?"),
]


# --- echo ---------------------------------------------------------------------------------------


def test_echo_answers_the_last_user_message() -> None:
    reply = EchoProvider().complete("be brief", HISTORY)
    assert reply.text == "Echo: what is 2+2?"
    assert reply.model == "echo"
    assert reply.stop_reason == "stop"


def test_echo_is_deterministic() -> None:
    first = EchoProvider().complete("be brief", HISTORY)
    assert EchoProvider().complete("be brief", HISTORY) == first
    assert first.input_tokens > 0
    assert first.output_tokens > 0


def test_echo_without_a_user_message() -> None:
    assert EchoProvider().complete("", []).text == "Echo: "


# --- OpenAI-compatible ----------------------------------------------------------------------------


def _openai(fake: FakeOpenAI, api_key: str | None = API_KEY, timeout: float = 5.0) -> OpenAICompatProvider:
    # one try: these tests classify a single answer (retries are tested in test_provider_tools.py)
    return OpenAICompatProvider(fake.base_url, api_key, "gpt-test", timeout, SINGLE_ATTEMPT)


def test_openai_sends_system_and_history_with_the_key(fake_openai: FakeOpenAI) -> None:
    fake_openai.reply_next("4", prompt_tokens=21, completion_tokens=2, finish_reason="stop", model="gpt-test-0613")

    reply = _openai(fake_openai).complete("be brief", HISTORY)

    assert (reply.text, reply.model, reply.input_tokens, reply.output_tokens, reply.stop_reason) == (
        "4",
        "gpt-test-0613",
        21,
        2,
        "stop",
    )
    request = fake_openai.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi there"},
            {"role": "user", "content": "what is 2+2?"},
        ],
    }


@pytest.mark.parametrize("api_key", [None, ""])
def test_openai_without_a_key_sends_no_authorization(fake_openai: FakeOpenAI, api_key: str | None) -> None:
    reply = _openai(fake_openai, api_key=api_key).complete("", HISTORY[:1])

    assert reply.text == DEFAULT_REPLY
    assert "authorization" not in fake_openai.requests[0].headers
    assert fake_openai.requests[0].json["messages"] == [{"role": "user", "content": "hello"}]


def test_openai_reply_without_usage_counts_zero(fake_openai: FakeOpenAI) -> None:
    fake_openai.answer_next(200, {"choices": [{"message": {"role": "assistant", "content": "ok"}}]})
    reply = _openai(fake_openai).complete("", HISTORY)
    assert (reply.text, reply.model, reply.input_tokens, reply.output_tokens, reply.stop_reason) == (
        "ok",
        "gpt-test",
        0,
        0,
        "stop",
    )


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"Retry-After": "20"}, "HTTP 429; retry after 20 s"),
        (429, {}, "HTTP 429"),
        (500, {}, "HTTP 500"),
        (503, {"Retry-After": "5"}, "HTTP 503; retry after 5 s"),
    ],
)
def test_openai_throttling_and_server_errors_are_transient(
    fake_openai: FakeOpenAI, status: int, headers: dict[str, str], expected: str
) -> None:
    fake_openai.answer_next(status, {"error": {"message": "busy"}}, headers=headers)
    with pytest.raises(TransientError, match=expected):
        _openai(fake_openai).complete("", HISTORY)


def test_openai_timeout_is_transient(fake_openai: FakeOpenAI) -> None:
    fake_openai.answer_next(200, {"choices": []}, delay=1.0)
    with pytest.raises(TransientError, match="no answer within"):
        _openai(fake_openai, timeout=0.2).complete("", HISTORY)


def test_openai_unreachable_server_is_transient(fake_openai: FakeOpenAI) -> None:
    url = fake_openai.base_url
    fake_openai.stop()
    with pytest.raises(TransientError):
        OpenAICompatProvider(url, API_KEY, "gpt-test", 1.0, SINGLE_ATTEMPT).complete("", HISTORY)


def test_openai_rejected_key_is_permanent_and_never_echoed(fake_openai: FakeOpenAI) -> None:
    # Given a server that, like OpenAI, quotes the rejected key in its message
    body = {"error": {"message": f"Incorrect API key provided: {API_KEY}.", "type": "invalid_request_error"}}
    fake_openai.answer_next(401, body)

    with pytest.raises(PermanentError, match="HTTP 401") as caught:
        _openai(fake_openai).complete("", HISTORY)

    assert API_KEY not in str(caught.value)
    assert caught.value.__cause__ is None


def test_openai_other_client_errors_carry_the_server_message(fake_openai: FakeOpenAI) -> None:
    body = {"error": {"message": f"The model `gpt-test` does not exist ({API_KEY})", "code": "model_not_found"}}
    fake_openai.answer_next(404, body)

    with pytest.raises(PermanentError, match="does not exist") as caught:
        _openai(fake_openai).complete("", HISTORY)

    assert not isinstance(caught.value, TransientError)
    assert API_KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>not json</html>", "not JSON"),
        ({"choices": []}, "no choices"),
        ({"object": "error"}, "no choices"),
        ([1, 2], "no choices"),
        (
            {"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "content_filter"}]},
            "no text",
        ),
    ],
)
def test_openai_odd_responses_are_permanent(fake_openai: FakeOpenAI, body: Any, reason: str) -> None:
    fake_openai.answer_next(200, body)
    with pytest.raises(PermanentError, match=reason):
        _openai(fake_openai).complete("", HISTORY)


def test_openai_refuses_a_base_url_that_is_not_http() -> None:
    with pytest.raises(ConfigError):
        OpenAICompatProvider("file:///etc", None, "m", 1.0)


# --- Bedrock --------------------------------------------------------------------------------------


@pytest.fixture
def bedrock_client() -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def stubber(bedrock_client: Any) -> Iterator[Stubber]:
    with Stubber(bedrock_client) as stub:
        yield stub
        stub.assert_no_pending_responses()


def _converse_response(*blocks: dict[str, Any], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": list(blocks)}},
        "stopReason": stop,
        "usage": {"inputTokens": 30, "outputTokens": 4, "totalTokens": 34},
        "metrics": {"latencyMs": 12},
    }


MODEL = "anthropic.claude-3-haiku-20240307-v1:0"


def test_bedrock_maps_system_and_history_to_converse(bedrock_client: Any, stubber: Stubber) -> None:
    expected = {
        "modelId": MODEL,
        "system": [{"text": "be brief"}],
        "messages": [
            {"role": "user", "content": [{"text": "hello"}]},
            {"role": "assistant", "content": [{"text": "hi there"}]},
            {"role": "user", "content": [{"text": "what is 2+2?"}]},
        ],
    }
    stubber.add_response("converse", _converse_response({"text": "4"}), expected)

    reply = BedrockProvider(MODEL, client=bedrock_client).complete("be brief", HISTORY)

    assert (reply.text, reply.model, reply.input_tokens, reply.output_tokens, reply.stop_reason) == (
        "4",
        MODEL,
        30,
        4,
        "end_turn",
    )


def test_bedrock_repairs_a_trimmed_history(bedrock_client: Any, stubber: Stubber) -> None:
    # Given a history window that starts with the assistant and has two user turns in a row
    history = [
        ChatMessage("assistant", "earlier answer"),
        ChatMessage("user", "first"),
        ChatMessage("user", "second"),
        ChatMessage("assistant", ""),
        ChatMessage("user", "third"),
    ]
    expected = {
        "modelId": MODEL,
        "messages": [{"role": "user", "content": [{"text": "first"}, {"text": "second"}, {"text": "third"}]}],
    }
    stubber.add_response("converse", _converse_response({"text": "ok"}), expected)

    assert BedrockProvider(MODEL, client=bedrock_client).complete("", history).text == "ok"


def test_bedrock_reply_skips_reasoning_blocks(bedrock_client: Any, stubber: Stubber) -> None:
    reasoning = {"reasoningContent": {"reasoningText": {"text": "thinking…", "signature": "sig"}}}
    stubber.add_response("converse", _converse_response(reasoning, {"text": "answer"}, stop="max_tokens"))

    reply = BedrockProvider(MODEL, client=bedrock_client).complete("", HISTORY)

    assert (reply.text, reply.stop_reason) == ("answer", "max_tokens")


@pytest.mark.parametrize(
    "code",
    ["ThrottlingException", "ServiceUnavailableException", "ModelTimeoutException", "InternalServerException"],
)
def test_bedrock_throttling_and_outages_are_transient(bedrock_client: Any, stubber: Stubber, code: str) -> None:
    stubber.add_client_error("converse", service_error_code=code, service_message="slow down", http_status_code=429)
    with pytest.raises(TransientError, match=code):
        BedrockProvider(MODEL, client=bedrock_client, retry=SINGLE_ATTEMPT).complete("", HISTORY)


@pytest.mark.parametrize("code", ["ValidationException", "AccessDeniedException", "ResourceNotFoundException"])
def test_bedrock_other_client_errors_are_permanent(bedrock_client: Any, stubber: Stubber, code: str) -> None:
    stubber.add_client_error("converse", service_error_code=code, service_message="no", http_status_code=400)
    with pytest.raises(PermanentError, match=code):
        BedrockProvider(MODEL, client=bedrock_client).complete("", HISTORY)


def test_bedrock_reply_without_text_is_permanent(bedrock_client: Any, stubber: Stubber) -> None:
    stubber.add_response("converse", _converse_response(stop="content_filtered"))
    with pytest.raises(PermanentError, match="no text"):
        BedrockProvider(MODEL, client=bedrock_client).complete("", HISTORY)


# --- factory --------------------------------------------------------------------------------------


def _settings(name: str, base_url: str = "http://127.0.0.1:9/v1") -> ProviderSettings:
    return ProviderSettings(
        name=name, model="m-1", openai_base_url=base_url, timeout_seconds=30, max_history_messages=40
    )


def test_make_provider_echo() -> None:
    assert isinstance(make_provider(_settings("echo"), Secrets(env={})), EchoProvider)


@pytest.mark.parametrize(("env", "header"), [({"OPENAI_API_KEY": API_KEY}, f"Bearer {API_KEY}"), ({}, None)])
def test_make_provider_openai_reads_the_key_from_secrets(
    fake_openai: FakeOpenAI, env: dict[str, str], header: str | None
) -> None:
    provider = make_provider(_settings("openai", fake_openai.base_url), Secrets(env=env))

    assert provider.name == "openai"
    provider.complete("", HISTORY)
    assert fake_openai.requests[0].headers.get("authorization") == header
    assert fake_openai.requests[0].json["model"] == "m-1"


def test_make_provider_bedrock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    provider = make_provider(_settings("bedrock"), Secrets(env={}))
    assert isinstance(provider, BedrockProvider)


def test_make_provider_refuses_an_unknown_name() -> None:
    with pytest.raises(ConfigError, match="unknown provider"):
        make_provider(_settings("gpt5000"), Secrets(env={}))


def test_the_answer_reserve_is_sent_as_max_tokens(fake_openai: FakeOpenAI) -> None:
    settings = ProviderSettings(name="openai", model="m-1", openai_base_url=fake_openai.base_url, context_window=2_000)
    make_provider(settings, Secrets(env={})).complete("", HISTORY)
    assert fake_openai.requests[0].json["max_tokens"] == 500  # a quarter of the window
    OpenAICompatProvider(fake_openai.base_url, None, "m-1", 30).complete("", HISTORY)
    assert "max_tokens" not in fake_openai.requests[1].json  # built without one: none sent


def test_bedrock_sends_the_answer_reserve_as_max_tokens(bedrock_client: Any, stubber: Stubber) -> None:
    expected = {
        "modelId": MODEL,
        "messages": [
            {"role": "user", "content": [{"text": "hello"}]},
            {"role": "assistant", "content": [{"text": "hi there"}]},
            {"role": "user", "content": [{"text": "what is 2+2?"}]},
        ],
        "inferenceConfig": {"maxTokens": 300},
    }
    stubber.add_response("converse", _converse_response({"text": "4"}), expected)
    BedrockProvider(MODEL, client=bedrock_client, max_tokens=300).complete("", HISTORY)
