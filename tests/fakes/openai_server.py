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

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import pytest

DEFAULT_REPLY = "fake reply"


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    headers: dict[str, str]  # lower-cased names
    json: Any  # None when the body was not JSON


@dataclass(frozen=True)
class _Scripted:
    status: int
    body: Any  # a dict is sent as JSON, str or bytes as they are
    headers: dict[str, str]
    delay: float


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
class FakeOpenAI:
    requests: list[RecordedRequest] = field(default_factory=list)
    _errors: list[_Scripted] = field(default_factory=list)
    _replies: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the fake is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def reply_next(self, text: str, **usage: Any) -> None:
        """Script one successful completion; keyword arguments as for `completion`."""
        with self._lock:
            self._replies.append(completion(text, **usage))

    def answer_next(
        self,
        status: int,
        body: Any,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        with self._lock:
            self._errors.extend(_Scripted(status, body, dict(headers or {}), delay) for _ in range(times))

    def start(self) -> FakeOpenAI:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.fake = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-openai", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def _answer(self, request: RecordedRequest) -> _Scripted:
        with self._lock:
            self.requests.append(request)
            if self._errors:
                return self._errors.pop(0)
            if request.path != "/v1/chat/completions":
                return _Scripted(404, {"error": {"message": "Not found", "type": "invalid_request_error"}}, {}, 0.0)
            body = self._replies.pop(0) if self._replies else completion(DEFAULT_REPLY)
            return _Scripted(200, body, {}, 0.0)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        fake: FakeOpenAI = self.server.fake  # type: ignore[attr-defined]
        answer = fake._answer(RecordedRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        if answer.delay:
            time.sleep(answer.delay)
        if isinstance(answer.body, bytes):
            payload, content_type = answer.body, "application/octet-stream"
        elif isinstance(answer.body, str):
            payload, content_type = answer.body.encode(), "text/plain"
        else:
            payload, content_type = json.dumps(answer.body).encode(), "application/json"
        try:
            self.send_response(answer.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is no place for a request log."""


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake
