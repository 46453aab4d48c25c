"""A fake Telegram Bot API on a loopback port.

Use the `fake_telegram` fixture (register this module with
`pytest_plugins = ("tests.fakes.telegram_server",)`) or `FakeTelegram` as a context manager.
Point a `TelegramSender` (or `TELEGRAM_API_BASE_URL`) at `fake.base_url` with `fake.token`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `sendMessage` answers with message ids 1, 2, 3, …; `fake.sent` lists what was accepted.
- Other Bot API methods answer `{"ok": true, "result": true}`.
- `fake.answer_next(status, body, times=n)` makes the next n requests fail (or hang, with `delay`);
  the module's `too_many_requests`, `CANT_PARSE_ENTITIES`, `BOT_BLOCKED` and `CHAT_NOT_FOUND`
  are Telegram's own error bodies.
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

DEFAULT_TOKEN = "123456:TEST-fake-token-value"
CANT_PARSE_ENTITIES = {
    "ok": False,
    "error_code": 400,
    "description": "Bad Request: can't parse entities: Can't find end of the entity starting at byte offset 4",
}
BOT_BLOCKED = {"ok": False, "error_code": 403, "description": "Forbidden: bot was blocked by the user"}
CHAT_NOT_FOUND = {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
SERVER_ERROR = {"ok": False, "error_code": 500, "description": "Internal Server Error"}


def too_many_requests(retry_after: int) -> dict[str, Any]:
    return {
        "ok": False,
        "error_code": 429,
        "description": f"Too Many Requests: retry after {retry_after}",
        "parameters": {"retry_after": retry_after},
    }


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    api_method: str  # the Bot API method, e.g. "sendMessage"; "" when the path is not /bot<token>/<method>
    json: Any  # the parsed body; None when it was empty or not JSON
    headers: dict[str, str]  # lower-cased names


@dataclass(frozen=True)
class _Scripted:
    status: int
    body: Any  # a dict is sent as JSON, str or bytes as they are
    headers: dict[str, str]
    delay: float


@dataclass
class FakeTelegram:
    token: str = DEFAULT_TOKEN
    requests: list[RecordedRequest] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)  # accepted sendMessage bodies + "message_id"
    _script: list[_Scripted] = field(default_factory=list)
    _next_message_id: int = 1
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the fake is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

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
            self._script.extend(_Scripted(status, body, dict(headers or {}), delay) for _ in range(times))

    def calls(self, api_method: str) -> list[Any]:
        """The JSON bodies of every request to one Bot API method."""
        with self._lock:
            return [r.json for r in self.requests if r.api_method == api_method]

    def start(self) -> FakeTelegram:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.fake = self  # type: ignore[attr-defined]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-telegram", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeTelegram:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def _answer(self, request: RecordedRequest) -> _Scripted:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.pop(0)
            return self._default_answer(request)

    def _default_answer(self, request: RecordedRequest) -> _Scripted:
        if not request.path.startswith(f"/bot{self.token}/"):
            return _Scripted(401, {"ok": False, "error_code": 401, "description": "Unauthorized"}, {}, 0.0)
        if request.api_method != "sendMessage":
            return _Scripted(200, {"ok": True, "result": True}, {}, 0.0)
        payload = request.json if isinstance(request.json, dict) else {}
        if not payload.get("chat_id"):
            return _bad_request("chat_id is empty")
        text = payload.get("text")
        if not isinstance(text, str) or not text.strip():
            return _bad_request("message text is empty")
        if len(text) > 4096:
            return _bad_request("message is too long")
        message_id = self._next_message_id
        self._next_message_id += 1
        self.sent.append({**payload, "message_id": message_id})
        result = {"message_id": message_id, "date": int(time.time()), "chat": {"id": payload["chat_id"]}, "text": text}
        return _Scripted(200, {"ok": True, "result": result}, {}, 0.0)


def _bad_request(reason: str) -> _Scripted:
    return _Scripted(400, {"ok": False, "error_code": 400, "description": f"Bad Request: {reason}"}, {}, 0.0)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def _handle(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        parts = self.path.split("/")
        api_method = parts[2] if len(parts) == 3 and parts[1].startswith("bot") else ""
        fake: FakeTelegram = self.server.fake  # type: ignore[attr-defined]
        answer = fake._answer(
            RecordedRequest(self.command, self.path, api_method, body, {k.lower(): v for k, v in self.headers.items()})
        )
        if answer.delay:
            time.sleep(answer.delay)
        _write(self, answer)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is no place for a request log."""


def _write(handler: BaseHTTPRequestHandler, answer: _Scripted) -> None:
    if isinstance(answer.body, bytes):
        payload, content_type = answer.body, "application/octet-stream"
    elif isinstance(answer.body, str):
        payload, content_type = answer.body.encode(), "text/plain"
    else:
        payload, content_type = json.dumps(answer.body).encode(), "application/json"
    try:
        handler.send_response(answer.status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(payload)))
        for name, value in answer.headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the client gave up (a timeout test); nothing to answer


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake
