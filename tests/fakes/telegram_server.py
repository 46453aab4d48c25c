"""A fake Telegram Bot API on a loopback port.

Use the `fake_telegram` fixture (register this module with
`pytest_plugins = ("tests.fakes.telegram_server",)`) or `FakeTelegram` as a context manager.
Point a `TelegramSender` (or `TELEGRAM_API_BASE_URL`) at `fake.base_url` with `fake.token`.
Further bots on the same fake: `FakeTelegram(other_tokens=(token, …))` accepts their tokens too.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `sendMessage` answers with message ids 1, 2, 3, …; `fake.sent` lists what was accepted, and
  `fake.sent_tokens` the bot token each of those sends used (same order).
- `editMessageText` changes a sent message's text (`fake.text_of(message_id)`); each accepted
  edit is in `fake.edits` with its arrival time (`at`, time.monotonic), and `fake.posted_at` holds
  each sendMessage's. An edit to the text the message has answers "message is not modified", as
  Telegram does; one of an unknown message "message to edit not found".
- Other Bot API methods answer `{"ok": true, "result": true}`; `fake.chat_actions()` lists the
  `sendChatAction` bodies (the typing indicator). An answer scripted without `only` never goes
  to a chat action: `answer_next(..., only=is_chat_action)` scripts one for them.
- `fake.answer_next(status, body, times=n)` makes the next n requests fail (or hang, with `delay`);
  the module's `too_many_requests`, `CANT_PARSE_ENTITIES`, `BOT_BLOCKED` and `CHAT_NOT_FOUND`
  are Telegram's own error bodies.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from tests.fakes.loopback import LoopbackFake, Received, ScriptedAnswer
from tests.fakes.upload_server import FormField, form_fields

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
    raw: bytes = b""  # the body as it arrived (a multipart upload's)


@dataclass
class FakeTelegram(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-telegram"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST"})

    token: str = DEFAULT_TOKEN
    sent: list[dict[str, Any]] = field(default_factory=list)  # accepted sendMessage bodies + "message_id"
    _next_message_id: int = 1
    other_tokens: tuple[str, ...] = ()  # further bots' tokens this fake also accepts
    sent_tokens: list[str] = field(default_factory=list)  # the bot token of each send in `sent`
    edits: list[dict[str, Any]] = field(default_factory=list)  # accepted editMessageText bodies + "at"
    posted_at: list[float] = field(default_factory=list)  # each accepted sendMessage's arrival (monotonic)
    _texts: dict[int, str] = field(default_factory=dict)  # message id -> its text now

    def text_of(self, message_id: int) -> str | None:
        with self._lock:
            return self._texts.get(message_id)

    def calls(self, api_method: str) -> list[Any]:
        """The JSON bodies of every request to one Bot API method."""
        with self._lock:
            return [r.json for r in self.requests if r.api_method == api_method]

    def chat_actions(self) -> list[Any]:
        return self.calls("sendChatAction")

    def _scripted_by_default(self, request: RecordedRequest) -> bool:
        return not is_chat_action(request)

    def uploads(self, api_method: str | None = None) -> list[tuple[str, dict[str, FormField]]]:
        """The multipart sends of files (sendPhoto, sendDocument, ...): (method, their fields)."""
        with self._lock:
            return [
                (r.api_method, form_fields(r.headers["content-type"], r.raw))
                for r in self.requests
                if r.api_method in MEDIA_METHODS and (api_method is None or r.api_method == api_method)
            ]

    def _receive(self, received: Received) -> RecordedRequest:
        parts = received.path.split("/")
        api_method = parts[2] if len(parts) == 3 and parts[1].startswith("bot") else ""
        return RecordedRequest(
            received.http_method, received.path, api_method, received.body, received.headers, received.raw
        )

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        token = next((t for t in (self.token, *self.other_tokens) if request.path.startswith(f"/bot{t}/")), None)
        if token is None:
            return ScriptedAnswer(401, {"ok": False, "error_code": 401, "description": "Unauthorized"})
        if request.api_method in MEDIA_METHODS:
            return self._media_message()
        if request.api_method == "editMessageText":
            return self._edit(request.json if isinstance(request.json, dict) else {})
        if request.api_method != "sendMessage":
            return ScriptedAnswer(200, {"ok": True, "result": True})
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
        self.sent_tokens.append(token)
        self.posted_at.append(time.monotonic())
        self._texts[message_id] = text
        result = {"message_id": message_id, "date": int(time.time()), "chat": {"id": payload["chat_id"]}, "text": text}
        return ScriptedAnswer(200, {"ok": True, "result": result})

    def _edit(self, payload: dict[str, Any]) -> ScriptedAnswer:
        message_id, text = payload.get("message_id"), payload.get("text")
        if not isinstance(message_id, int) or message_id not in self._texts:
            return _bad_request("message to edit not found")
        if not isinstance(text, str) or not text.strip():
            return _bad_request("message text is empty")
        if len(text) > 4096:
            return _bad_request("MESSAGE_TOO_LONG")
        if self._texts[message_id] == text:
            return _bad_request(
                "message is not modified: specified new message content and reply markup are exactly the same"
            )
        self._texts[message_id] = text
        self.edits.append({**payload, "at": time.monotonic()})
        return ScriptedAnswer(200, {"ok": True, "result": {"message_id": message_id, "text": text}})

    def _media_message(self) -> ScriptedAnswer:
        message_id = self._next_message_id
        self._next_message_id += 1
        return ScriptedAnswer(200, {"ok": True, "result": {"message_id": message_id, "date": int(time.time())}})


MEDIA_METHODS = ("sendPhoto", "sendVoice", "sendAudio", "sendVideo", "sendDocument")


def is_chat_action(request: RecordedRequest) -> bool:
    return request.api_method == "sendChatAction"


def _bad_request(reason: str) -> ScriptedAnswer:
    return ScriptedAnswer(400, {"ok": False, "error_code": 400, "description": f"Bad Request: {reason}"})


@pytest.fixture
def fake_telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as fake:
        yield fake
