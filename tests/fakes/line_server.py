"""A fake LINE Messaging API on a loopback port: reply, push and the webhook endpoint.

Use `FakeLine` as a context manager (or a fixture in the test module). Point a `LineSender` (or
`LINE_API_BASE_URL`) at `fake.base_url` with `fake.token`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `POST /v2/bot/message/reply` accepts a token from `fake.issue_reply_token()` once; any other
  (or a second use) gets LINE's 400 "Invalid reply token".
- `POST /v2/bot/message/push` answers 200; both answer `{"sentMessages": [{"id", "quoteToken"}]}`
  with ids "100001", "100002", …; `fake.sent` lists (endpoint, body) of accepted sends.
- `PUT`/`GET /v2/bot/channel/webhook/endpoint` set and read `fake.endpoint` (https only).
- A wrong bearer token gets 401; `fake.answer_next(...)` scripts any other answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_TOKEN = "fake-line-channel-access-token/AbC+dEf="
INVALID_REPLY_TOKEN = {"message": "Invalid reply token"}


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    json: Any
    headers: dict[str, str]


@dataclass
class FakeLine(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-line"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST", "PUT"})

    token: str = DEFAULT_TOKEN
    endpoint: str = ""
    sent: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reply_tokens: set[str] = field(default_factory=set)
    _next_id: int = 100001

    def issue_reply_token(self) -> str:
        with self._lock:
            token = f"reply-token-{len(self.reply_tokens) + 1}"
            self.reply_tokens.add(token)
            return token

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(http_method, path, body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return ScriptedAnswer(401, {"message": "Authentication failed. Confirm that the access token is valid."})
        body = request.json if isinstance(request.json, dict) else {}
        route = (request.http_method, request.path)
        if route == ("POST", "/v2/bot/message/reply"):
            if body.get("replyToken") not in self.reply_tokens:
                return ScriptedAnswer(400, INVALID_REPLY_TOKEN)
            self.reply_tokens.discard(body["replyToken"])
            return self._sent("reply", body)
        if route == ("POST", "/v2/bot/message/push"):
            if not body.get("to"):
                return ScriptedAnswer(400, {"message": "The property, 'to', in the request body is invalid"})
            return self._sent("push", body)
        if route == ("PUT", "/v2/bot/channel/webhook/endpoint"):
            if not str(body.get("endpoint", "")).startswith("https://"):
                return ScriptedAnswer(400, {"message": "Invalid webhook endpoint URL"})
            self.endpoint = body["endpoint"]
            return ScriptedAnswer(200, {})
        if route == ("GET", "/v2/bot/channel/webhook/endpoint"):
            return ScriptedAnswer(200, {"endpoint": self.endpoint, "active": bool(self.endpoint)})
        return ScriptedAnswer(404, {"message": "Not found"})

    def _sent(self, endpoint: str, body: dict[str, Any]) -> ScriptedAnswer:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or len(messages) > 5:
            return ScriptedAnswer(400, {"message": "The request body has 1 error(s)"})
        self.sent.append((endpoint, body))
        ids = []
        for _ in messages:
            ids.append({"id": str(self._next_id), "quoteToken": f"quote-{self._next_id}"})
            self._next_id += 1
        return ScriptedAnswer(200, {"sentMessages": ids})
