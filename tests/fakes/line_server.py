"""A fake LINE Messaging API on a loopback port: reply, push and the webhook endpoint.

Use `FakeLine` as a context manager (or a fixture in the test module). Point a `LineSender` (or
`LINE_API_BASE_URL`) at `fake.base_url` with `fake.token`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `POST /v2/bot/message/reply` accepts a token from `fake.issue_reply_token()` once; any other
  (or a second use) gets LINE's 400 "Invalid reply token".
- `POST /v2/bot/message/push` answers 200; both answer `{"sentMessages": [{"id", "quoteToken"}]}`
  with ids "100001", "100002", …; `fake.sent` lists (endpoint, body) of accepted sends.
- A push with an `X-Line-Retry-Key` already accepted is not sent again: 409 with
  `x-line-accepted-request-id` and the first answer's `sentMessages`, as LINE answers a retry
  (a retry key on a reply is refused 400). `fake.push_answer_delay` holds back the answer of
  each accepted push (a client that gives up first has the message posted all the same).
- `PUT`/`GET /v2/bot/channel/webhook/endpoint` set and read `fake.endpoint` (https only).
- `POST /v2/bot/chat/loading/start` (the loading animation) answers 202 for a user id with
  `loadingSeconds` a multiple of 5 up to 60, 400 otherwise; `fake.loading` lists the bodies. An
  answer scripted without `only` never goes to it (`only=is_loading` scripts one for it).
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
    accepted_retry_keys: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    push_answer_delay: float = 0.0
    loading: list[dict[str, Any]] = field(default_factory=list)
    _next_id: int = 100001

    def _scripted_by_default(self, request: RecordedRequest) -> bool:
        return not is_loading(request)

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
        retry_key = request.headers.get("x-line-retry-key")
        if route == ("POST", "/v2/bot/message/reply"):
            if retry_key is not None:
                return ScriptedAnswer(400, {"message": "The retry key is not supported by this API"})
            if body.get("replyToken") not in self.reply_tokens:
                return ScriptedAnswer(400, INVALID_REPLY_TOKEN)
            self.reply_tokens.discard(body["replyToken"])
            return self._sent("reply", body)
        if route == ("POST", "/v2/bot/message/push"):
            if not body.get("to"):
                return ScriptedAnswer(400, {"message": "The property, 'to', in the request body is invalid"})
            if retry_key in self.accepted_retry_keys:
                first = self.accepted_retry_keys[retry_key]
                return ScriptedAnswer(
                    409,
                    {"message": "The retry key is already accepted", "sentMessages": first},
                    headers={"x-line-accepted-request-id": f"request-{retry_key}"},
                )
            answer = self._sent("push", body)
            if retry_key is not None and answer.status == 200:
                self.accepted_retry_keys[retry_key] = answer.body["sentMessages"]
            return ScriptedAnswer(answer.status, answer.body, delay=self.push_answer_delay)
        if is_loading(request):
            return self._loading(body)
        return self._webhook_endpoint(route, body)

    def _webhook_endpoint(self, route: tuple[str, str], body: dict[str, Any]) -> ScriptedAnswer:
        if route == ("PUT", "/v2/bot/channel/webhook/endpoint"):
            if not str(body.get("endpoint", "")).startswith("https://"):
                return ScriptedAnswer(400, {"message": "Invalid webhook endpoint URL"})
            self.endpoint = body["endpoint"]
            return ScriptedAnswer(200, {})
        if route == ("GET", "/v2/bot/channel/webhook/endpoint"):
            return ScriptedAnswer(200, {"endpoint": self.endpoint, "active": bool(self.endpoint)})
        return ScriptedAnswer(404, {"message": "Not found"})

    def _loading(self, body: dict[str, Any]) -> ScriptedAnswer:
        seconds = body.get("loadingSeconds", 20)
        if not str(body.get("chatId", "")).startswith("U"):
            return ScriptedAnswer(400, {"message": "The property, 'chatId', in the request body is invalid"})
        if not isinstance(seconds, int) or not 5 <= seconds <= 60 or seconds % 5:
            return ScriptedAnswer(400, {"message": "The property, 'loadingSeconds', in the request body is invalid"})
        self.loading.append(body)
        return ScriptedAnswer(202, {})

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


def is_loading(request: RecordedRequest) -> bool:
    return (request.http_method, request.path) == ("POST", "/v2/bot/chat/loading/start")
