"""A fake OpenAI-compatible chat-completions server on a loopback port.

Use the `fake_openai` fixture (register this module with
`pytest_plugins = ("tests.fakes.openai_server",)`) or `FakeOpenAI` as a context manager, and point
`OpenAICompatProvider` (or `OPENAI_BASE_URL`) at `fake.base_url` (it ends in `/v1`).

- Every request is recorded in `fake.requests` (path, lower-cased headers, JSON body).
- `fake.reply_next(text, ...)` scripts the next successful completion; unscripted requests get
  `DEFAULT_REPLY`. `fake.call_tools_next(("memory", {"action": "list"}), ...)` scripts a completion
  that asks for tool calls (ids `call_<n>_<i>`, n counting the scripted tool replies).
- `fake.throttle_next(retry_after=..., times=n)` and `fake.fail_next(status=500, times=n)` script
  429s and 5xx before the next answers.
- `fake.answer_next(status, body, times=n, headers=..., delay=...)` scripts raw answers (errors,
  bodies that are not JSON, slow answers); these go first.
- A request with `stream: true` gets its completion as server-sent events (`stream_events`):
  the text in pieces of `fake.stream_piece` characters, tool calls in two pieces each, then the
  usage when `stream_options.include_usage` asks for it, then `[DONE]`.
- `fake.pace = ModelPace(first_token_seconds, tokens_per_second)` makes it write as a model does:
  a streamed answer token by token (`paced_events`), a plain one whole once all its tokens would
  have been written. `fake.answer_with(request_json)` chooses the completion of a request nothing
  was scripted for (None: the default reply).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from tests.fakes.loopback import LoopbackFake, Paced, ScriptedAnswer

DEFAULT_REPLY = "fake reply"


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any  # None when the body was not JSON


def completion(
    text: str | None,
    *,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    cached_tokens: int | None = None,
    finish_reason: str = "stop",
    model: str = "fake-model",
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A chat-completions response body as OpenAI shapes it."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": usage,
    }


def tool_call(call_id: str, name: str, arguments: dict[str, Any] | str) -> dict[str, Any]:
    """One entry of `message.tool_calls`; a str is sent as the raw arguments (to test bad JSON)."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


@dataclass(frozen=True)
class ModelPace:
    """How fast a model writes: its first token after `first_token_seconds`, then `tokens_per_second`."""

    first_token_seconds: float
    tokens_per_second: float

    def seconds(self, tokens: int) -> float:
        """How long an answer of `tokens` tokens takes to write, to its last token."""
        return self.first_token_seconds + max(0, tokens - 1) / self.tokens_per_second


_TOKEN = re.compile(r"\S+\s*|\s+")
ARGUMENT_CHARS_PER_TOKEN = 4


def text_tokens(text: str) -> list[str]:
    """The text as a model writes it: a word with the space after it is one token."""
    return _TOKEN.findall(text)


def completion_tokens(body: dict[str, Any]) -> int:
    """The tokens a completion's text and tool calls take to write."""
    message = body["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    arguments = sum(math.ceil(len(c["function"]["arguments"]) / ARGUMENT_CHARS_PER_TOKEN) for c in calls)
    return len(text_tokens(message.get("content") or "")) + arguments + len(calls)


@dataclass
class FakeOpenAI(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-openai"
    url_suffix: ClassVar[str] = "/v1"

    _replies: list[dict[str, Any]] = field(default_factory=list)
    _tool_replies: int = 0
    stream_piece: int = 8
    pace: ModelPace | None = None  # None: every answer at once
    answer_with: Callable[[Any], dict[str, Any] | None] | None = None  # request JSON -> its completion

    def reply_next(self, text: str, **usage: Any) -> None:
        """Script one successful completion; keyword arguments as for `completion`."""
        with self._lock:
            self._replies.append(completion(text, **usage))

    def call_tools_next(self, *calls: tuple[str, dict[str, Any] | str], text: str | None = None, **usage: Any) -> None:
        """Script one completion that asks for tool calls, each given as (name, arguments)."""
        with self._lock:
            number = self._tool_replies
            self._tool_replies += 1
            wire = [tool_call(f"call_{number}_{i}", name, args) for i, (name, args) in enumerate(calls)]
            self._replies.append(completion(text, tool_calls=wire, finish_reason="tool_calls", **usage))

    def throttle_next(self, *, retry_after: float | None = None, times: int = 1) -> None:
        """Script 429s, with a Retry-After header when `retry_after` is given."""
        headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else {}
        body = {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}
        self.answer_next(429, body, times=times, headers=headers)

    def fail_next(self, *, status: int = 500, times: int = 1) -> None:
        """Script server errors."""
        self.answer_next(status, {"error": {"message": "The server had an error", "type": "server_error"}}, times=times)

    def sent_messages(self, index: int = -1) -> list[dict[str, Any]]:
        """The `messages` of one recorded completion request (the last by default)."""
        return list(self.requests[index].json["messages"])

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(path, headers, body)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.path != "/v1/chat/completions":
            return ScriptedAnswer(404, {"error": {"message": "Not found", "type": "invalid_request_error"}})
        chosen = self.answer_with(request.json) if self.answer_with is not None and not self._replies else None
        body = chosen or (self._replies.pop(0) if self._replies else completion(DEFAULT_REPLY))
        wanted = request.json if isinstance(request.json, dict) else {}
        if wanted.get("stream") is True:
            usage = bool((wanted.get("stream_options") or {}).get("include_usage"))
            streamed: bytes | Paced = (
                stream_events(body, piece=self.stream_piece, usage=usage)
                if self.pace is None
                else paced_events(body, self.pace, usage=usage)
            )
            return ScriptedAnswer(200, streamed, headers={"Content-Type": "text/event-stream"})
        delay = self.pace.seconds(completion_tokens(body)) if self.pace is not None else 0.0
        return ScriptedAnswer(200, body, delay=delay)


def stream_events(body: dict[str, Any], *, piece: int = 8, usage: bool = True) -> bytes:
    """A completion as OpenAI streams it: chunks of `chat.completion.chunk`, then `[DONE]`."""
    choice = body["choices"][0]
    message = choice["message"]
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    chunks += [chunk({"content": text[i : i + piece]}) for i in range(0, len(text), piece)]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        half = len(arguments) // 2
        first = {"index": index, "id": call["id"], "type": "function"}
        chunks.append(
            chunk(
                {
                    "tool_calls": [
                        {**first, "function": {"name": call["function"]["name"], "arguments": arguments[:half]}}
                    ]
                }
            )
        )
        chunks.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]}))
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def paced_events(body: dict[str, Any], pace: ModelPace, *, usage: bool = True) -> Paced:
    """A completion streamed as a model writes it: the role and the first token after the first
    token's wait, then a token every 1 / tokens_per_second (a tool call's arguments counted at
    ARGUMENT_CHARS_PER_TOKEN characters a token), then the finish, the usage and `[DONE]` at once."""
    choice = body["choices"][0]
    message = choice["message"]
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}

    def event(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
        data = {**base, "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps({**data, **extra}).encode() + b"\n\n"

    gap = 1.0 / pace.tokens_per_second
    deltas: list[dict[str, Any]] = [{"content": token} for token in text_tokens(message.get("content") or "")]
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        deltas.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                       "function": {"name": call["function"]["name"], "arguments": ""}}]})  # fmt: skip
        step = ARGUMENT_CHARS_PER_TOKEN
        deltas += [
            {"tool_calls": [{"index": index, "function": {"arguments": arguments[i : i + step]}}]}
            for i in range(0, len(arguments), step)
        ]
    first = event({"role": "assistant", "content": ""})
    pieces: list[tuple[float, bytes]] = [(pace.first_token_seconds, first + (event(deltas[0]) if deltas else b""))]
    pieces += [(gap, event(delta)) for delta in deltas[1:]]
    tail = event({}, choice["finish_reason"])
    if usage:
        tail += event(None, usage=body["usage"])
    pieces.append((0.0, tail + b"data: [DONE]\n\n"))
    return Paced(tuple(pieces))


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake
