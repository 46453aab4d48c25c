"""A fake Feishu / Lark Open API on a loopback port (token, IM sending and message resources).

Use the `fake_feishu` fixture defined in tests/unit/test_platform_feishu.py, or `FakeFeishu` as a
context manager. Point a `FeishuSender` (or `FEISHU_API_BASE_URL`) at `fake.base_url` (it ends in
`/open-apis`, as the real base URL does) with `fake.app_id` and `fake.app_secret`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `POST /auth/v3/tenant_access_token/internal` issues `t-fake-tenant-token-0001`, `…-0002`, … (expire `fake.expire`);
  `fake.revoke_tokens()` makes every issued token invalid (code 99991663), as an expiry would;
  `fake.tokens_work = False` refuses every token, new ones included.
- `POST /im/v1/messages?receive_id_type=chat_id` answers message ids `om_1`, `om_2`, … for a chat
  in `fake.chats`; another chat answers 230002 (the bot is not in it).
- `POST /im/v1/messages/{message_id}/reply` replies to a message the fake knows (sent, or listed in
  `fake.roots`); one in `fake.recalled` answers 230011.
- `GET /im/v1/messages/{message_id}/resources/{key}?type=image|file` answers `fake.resources`
  ("<message id>/<key>" → the file's ScriptedAnswer); another answers 234003 (not in the message).
- `PUT /im/v1/messages/{message_id}` edits a sent text message (`fake.text_of(message_id)`), at most
  20 times (then 230072, as Feishu's limit); each accepted edit's arrival time (time.monotonic) is
  in `fake.edit_times`, each send's in `fake.posted_at`.
- Feishu answers errors as HTTP 400 with a non-zero `code`; `fake.answer_next(...)` scripts others.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_APP_ID = "cli_a1b2c3d4e5f60718"
DEFAULT_APP_SECRET = "app-secret-for-tests-dskLLdkasdjlasdKK"
TOKEN_PATH = "/auth/v3/tenant_access_token/internal"
SEND_PATH = "/im/v1/messages"
RATE_LIMITED = {"code": 99991400, "msg": "request trigger frequency limit"}


def error(code: int, msg: str, status: int = 400) -> ScriptedAnswer:
    return ScriptedAnswer(status, {"code": code, "msg": msg})


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str  # relative to /open-apis, without the query string
    query: dict[str, str]
    json: Any
    headers: dict[str, str]  # lower-cased names


@dataclass
class FakeFeishu(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-feishu"
    url_suffix: ClassVar[str] = "/open-apis"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST", "PUT"})

    app_id: str = DEFAULT_APP_ID
    app_secret: str = DEFAULT_APP_SECRET
    expire: int = 7200
    chats: set[str] = field(default_factory=lambda: {"oc_group", "oc_p2p"})
    roots: set[str] = field(default_factory=lambda: {"om_root"})
    recalled: set[str] = field(default_factory=set)
    tokens_work: bool = True  # False: every issued token is refused (a token Feishu keeps rejecting)
    sent: list[dict[str, Any]] = field(default_factory=list)  # accepted bodies + "message_id", "reply_to"
    resources: dict[str, ScriptedAnswer] = field(default_factory=dict)  # "<message id>/<key>" → the file
    _issued: int = 0
    _valid: set[str] = field(default_factory=set)
    _next_message: int = 1
    posted_at: list[float] = field(default_factory=list)
    edit_times: list[float] = field(default_factory=list)
    _texts: dict[str, str] = field(default_factory=dict)
    _edits: dict[str, int] = field(default_factory=dict)
    _by_uuid: dict[str, str] = field(default_factory=dict)  # a send's uuid -> the message it created

    def text_of(self, message_id: str) -> str | None:
        with self._lock:
            return self._texts.get(message_id)

    def revoke_tokens(self) -> None:
        with self._lock:
            self._valid.clear()

    def calls(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        parts = urllib.parse.urlsplit(path)
        relative = parts.path.removeprefix(self.url_suffix)
        return RecordedRequest(http_method, relative, dict(urllib.parse.parse_qsl(parts.query)), body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        body = request.json if isinstance(request.json, dict) else {}
        if request.path == TOKEN_PATH:
            return self._token(body)
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if bearer not in self._valid or not self.tokens_work:
            return error(99991663, "Invalid access token for authorization. Please make a request with token attached.")
        if request.http_method == "GET":
            return self._resource(request)
        if request.path == SEND_PATH:
            if request.query.get("receive_id_type") != "chat_id":
                return error(99992402, "field validation failed")
            if body.get("receive_id") not in self.chats:
                return error(230002, "Bot/User can NOT be out of the chat.")
            return self._accept(body, None)
        parts = request.path.split("/")
        if request.http_method == "PUT" and len(parts) == 5 and parts[:4] == ["", "im", "v1", "messages"]:
            return self._edit(urllib.parse.unquote(parts[4]), body)
        if len(parts) == 6 and parts[:4] == ["", "im", "v1", "messages"] and parts[5] == "reply":
            root = urllib.parse.unquote(parts[4])
            if root in self.recalled:
                return error(230011, "The message is recalled.")
            if root not in self.roots:
                return error(230001, "Your request contains an invalid request parameter.")
            return self._accept(body, root)
        return ScriptedAnswer(404, "404 page not found")

    def _resource(self, request: RecordedRequest) -> ScriptedAnswer:
        parts = request.path.split("/")
        if len(parts) == 7 and parts[:4] == ["", "im", "v1", "messages"] and parts[5] == "resources":
            found = self.resources.get(f"{parts[4]}/{parts[6]}")
            if found is not None and request.query.get("type") in ("image", "file"):
                return found
            return error(234003, "File not in msg.")
        return ScriptedAnswer(404, "404 page not found")

    def _token(self, body: dict[str, Any]) -> ScriptedAnswer:
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return error(10014, "app secret invalid")
        self._issued += 1
        token = f"t-fake-tenant-token-{self._issued:04d}"
        self._valid.add(token)
        return ScriptedAnswer(200, {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": self.expire})

    def _accept(self, body: dict[str, Any], reply_to: str | None) -> ScriptedAnswer:
        if body.get("msg_type") != "text" or not isinstance(body.get("content"), str):
            return error(230001, "Your request contains an invalid request parameter.")
        once = body.get("uuid")
        if isinstance(once, str) and once in self._by_uuid:  # at most one message per uuid (an hour)
            return ScriptedAnswer(200, {"code": 0, "msg": "success", "data": {"message_id": self._by_uuid[once]}})
        message_id = f"om_{self._next_message}"
        self._next_message += 1
        if isinstance(once, str) and once:
            self._by_uuid[once] = message_id
        self.roots.add(message_id)
        self.sent.append({**body, "message_id": message_id, "reply_to": reply_to})
        self.posted_at.append(time.monotonic())
        self._texts[message_id] = str(json.loads(body["content"]).get("text", ""))
        return ScriptedAnswer(200, {"code": 0, "msg": "success", "data": {"message_id": message_id}})

    def _edit(self, message_id: str, body: dict[str, Any]) -> ScriptedAnswer:
        if message_id not in self._texts:
            return error(230001, "Your request contains an invalid request parameter.")
        if body.get("msg_type") != "text" or not isinstance(body.get("content"), str):
            return error(230001, "Your request contains an invalid request parameter.")
        if self._edits.get(message_id, 0) >= 20:
            return error(230072, "The message has reached the number of times it can be edited.")
        self._edits[message_id] = self._edits.get(message_id, 0) + 1
        self._texts[message_id] = str(json.loads(body["content"]).get("text", ""))
        self.edit_times.append(time.monotonic())
        return ScriptedAnswer(200, {"code": 0, "msg": "success", "data": {}})
