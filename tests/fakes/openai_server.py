"""A fake OpenAI-compatible chat-completions server on a loopback port.

Use the `fake_openai` fixture (register this module with
`pytest_plugins = ("tests.fakes.openai_server",)`) or `FakeOpenAI` as a context manager, and point
`OpenAICompatProvider` (or `OPENAI_BASE_URL`) at `fake.base_url` (it ends in `/v1`).

- Every request is recorded in `fake.requests` (path, lower-cased headers, JSON body).
- `fake.reply_next(text, ...)` scripts the next successful completion; unscripted requests get
  `DEFAULT_REPLY`.
- `fake.answer_next(status, body, times=n, headers=..., delay=...)` scripts raw answers (errors,
  bodies that are not JSON, slow answers); these go first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_REPLY = "fake reply"


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any  # None when the body was not JSON


def completion(
    text: str,
    *,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    finish_reason: str = "stop",
    model: str = "fake-model",
) -> dict[str, Any]:
    """A chat-completions response body as OpenAI shapes it."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


@dataclass
class FakeOpenAI(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-openai"
    url_suffix: ClassVar[str] = "/v1"

    _replies: list[dict[str, Any]] = field(default_factory=list)

    def reply_next(self, text: str, **usage: Any) -> None:
        """Script one successful completion; keyword arguments as for `completion`."""
        with self._lock:
            self._replies.append(completion(text, **usage))

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(path, headers, body)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.path != "/v1/chat/completions":
            return ScriptedAnswer(404, {"error": {"message": "Not found", "type": "invalid_request_error"}})
        return ScriptedAnswer(200, self._replies.pop(0) if self._replies else completion(DEFAULT_REPLY))


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake
