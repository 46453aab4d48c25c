"""A fake Matrix homeserver client-server API on a loopback port (sending only).

Use the `fake_matrix` fixture defined in tests/unit/test_platform_matrix.py, or `FakeMatrix` as a
context manager. Point a `MatrixSender` (or `MATRIX_API_BASE_URL`) at `fake.base_url` with
`fake.as_token` and `fake.bot_user_id`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `PUT /_matrix/client/v3/rooms/{roomId}/send/m.room.message/{txnId}` answers `{"event_id": "$1"}`,
  `"$2"`, … for a room in `fake.joined`; a repeated txnId answers the event it created (as a
  homeserver de-duplicates); a room the bot is not in answers 403 M_FORBIDDEN.
- A wrong token answers 401 M_UNKNOWN_TOKEN; a `user_id` outside the bot answers 403 M_FORBIDDEN.
- An event relating to another as `m.replace` (an edit) is sent like any other;
  `fake.shown_texts(room)` is what a client shows, replacements applied, and `fake.posted_at` /
  `fake.edit_times` the arrival times (time.monotonic) of the messages and of the edits.
- `fake.answer_next(status, body, times=n, headers=...)` scripts the next answers.
"""

from __future__ import annotations

import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_AS_TOKEN = "as-token-for-tests-30c05ae90a248a41"
DEFAULT_BOT = "@hermes:example.org"
SEND_PREFIX = "/_matrix/client/v3/rooms/"


def limit_exceeded(retry_after_ms: int) -> dict[str, Any]:
    return {"errcode": "M_LIMIT_EXCEEDED", "error": "Too many requests", "retry_after_ms": retry_after_ms}


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str  # without the query string
    query: dict[str, str]
    room_id: str  # URL-decoded; "" when the path is not a send
    txn_id: str
    json: Any
    headers: dict[str, str]  # lower-cased names


@dataclass
class FakeMatrix(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-matrix"
    http_methods: ClassVar[frozenset[str]] = frozenset({"PUT", "GET", "POST"})

    as_token: str = DEFAULT_AS_TOKEN
    bot_user_id: str = DEFAULT_BOT
    joined: set[str] = field(default_factory=lambda: {"!room:example.org"})
    sent: list[dict[str, Any]] = field(default_factory=list)  # accepted contents + "room_id", "event_id"
    _by_txn: dict[str, str] = field(default_factory=dict)
    _next: int = 1
    posted_at: list[float] = field(default_factory=list)
    edit_times: list[float] = field(default_factory=list)

    def shown_texts(self, room_id: str) -> list[str]:
        """The room's messages as a client shows them: each with its latest replacement's text."""
        with self._lock:
            shown: dict[str, str] = {}
            for event in self.sent:
                relates = event.get("m.relates_to") or {}
                if event["room_id"] != room_id:
                    continue
                if relates.get("rel_type") == "m.replace" and relates.get("event_id") in shown:
                    shown[relates["event_id"]] = event["m.new_content"]["body"]
                else:
                    shown[event["event_id"]] = event["body"]
            return list(shown.values())

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        parts = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        room, txn = "", ""
        if parts.path.startswith(SEND_PREFIX):
            rest = parts.path[len(SEND_PREFIX) :].split("/")
            if len(rest) == 4 and rest[1:3] == ["send", "m.room.message"]:
                room, txn = urllib.parse.unquote(rest[0]), rest[3]
        return RecordedRequest(http_method, parts.path, query, room, txn, body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.headers.get("authorization") != f"Bearer {self.as_token}":
            return ScriptedAnswer(401, {"errcode": "M_UNKNOWN_TOKEN", "error": "Unknown access token"})
        if request.query.get("user_id", self.bot_user_id) != self.bot_user_id:
            return ScriptedAnswer(403, {"errcode": "M_FORBIDDEN", "error": "not in the AS namespace"})
        if request.http_method != "PUT" or not request.room_id:
            return ScriptedAnswer(404, {"errcode": "M_UNRECOGNIZED", "error": "Unrecognized request"})
        if request.room_id not in self.joined:
            return ScriptedAnswer(403, {"errcode": "M_FORBIDDEN", "error": "User is not in the room"})
        content = request.json if isinstance(request.json, dict) else {}
        if not isinstance(content.get("body"), str) or not content.get("msgtype"):
            return ScriptedAnswer(400, {"errcode": "M_BAD_JSON", "error": "missing body or msgtype"})
        key = f"{request.room_id}/{request.txn_id}"
        if key not in self._by_txn:
            self._by_txn[key] = f"${self._next}"
            self._next += 1
            self.sent.append({**content, "room_id": request.room_id, "event_id": self._by_txn[key]})
            replacing = (content.get("m.relates_to") or {}).get("rel_type") == "m.replace"
            (self.edit_times if replacing else self.posted_at).append(time.monotonic())
        return ScriptedAnswer(200, {"event_id": self._by_txn[key]})
