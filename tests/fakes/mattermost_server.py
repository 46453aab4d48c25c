"""A fake Mattermost server (REST API v4, posts only) on a loopback port.

Use the `fake_mattermost` fixture defined in the test module, or `FakeMattermost` as a context
manager. Point a `MattermostSender` (or `MATTERMOST_API_BASE_URL`) at `fake.base_url`, the server
URL, with `fake.token`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `POST /api/v4/posts` with the right bearer token answers 201 with the created post; `fake.sent`
  lists what was accepted. Channels in `fake.forbidden_channels` answer 403 (the bot is not a
  member, or the channel does not exist), those in `fake.archived_channels` answer 400
  `can_not_post_to_deleted`, a wrong token answers 401: Mattermost's own error bodies
  (`app_error`) are used throughout.
- A post whose body carries `pending_post_id` seen in the last 30 seconds is not created again: the
  server answers 201 with the post it created then, as Mattermost's `deduplicateCreatePost` does.
- `PUT /api/v4/posts/{id}/patch` changes a post's message (`fake.text_of(post_id)`); each accepted
  edit is in `fake.edits` with its arrival time (`at`, time.monotonic), each post's in `fake.posted_at`.
- `fake.answer_next(status, body, times=n, headers=...)` scripts the next answers; `RATE_LIMITED`
  and `rate_limit_headers` reproduce Mattermost's limiter (plain-text body, seconds in headers).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_TOKEN = "fakemattermostbottoken0000a"  # 26 characters, like a Mattermost access token
RATE_LIMITED = "limit exceeded\n"  # Mattermost's limiter answers with http.Error's text body
PENDING_POST_IDS_TTL = 30.0  # seconds Mattermost keeps a pending post id (app/post.go)


def app_error(error_id: str, message: str, status: int) -> dict[str, Any]:
    return {"id": error_id, "message": message, "detailed_error": "", "request_id": "r" * 26, "status_code": status}


def rate_limit_headers(seconds: int) -> dict[str, str]:
    return {
        "X-RateLimit-Limit": "10",
        "X-RateLimit-Remaining": "0",
        "X-RateLimit-Reset": str(seconds),
        "Retry-After": str(seconds),
    }


FORBIDDEN = app_error("api.context.permissions.app_error", "You do not have the appropriate permissions.", 403)
ARCHIVED = app_error("api.post.create_post.can_not_post_to_deleted.error", "Can not post to deleted channel.", 400)
SESSION_EXPIRED = app_error(
    "api.context.session_expired.app_error", "Invalid or expired session, please login again.", 401
)


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    json: Any  # the parsed body; None when it was empty or not JSON
    headers: dict[str, str]  # lower-cased names


@dataclass
class FakeMattermost(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-mattermost"

    token: str = DEFAULT_TOKEN
    sent: list[dict[str, Any]] = field(default_factory=list)  # accepted post bodies + "id"
    forbidden_channels: set[str] = field(default_factory=set)
    archived_channels: set[str] = field(default_factory=set)
    _next_post: int = 1
    http_methods: ClassVar[frozenset[str]] = frozenset({"POST", "PUT"})
    edits: list[dict[str, Any]] = field(default_factory=list)
    posted_at: list[float] = field(default_factory=list)
    _texts: dict[str, str] = field(default_factory=dict)
    _pending: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict)  # pending_post_id -> post, when

    def text_of(self, post_id: str) -> str | None:
        with self._lock:
            return self._texts.get(post_id)

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(http_method, path, body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        segments = request.path.strip("/").split("/")
        if request.http_method == "PUT" and len(segments) == 5 and segments[:3] == ["api", "v4", "posts"]:
            return self._patch(request, segments[3]) if segments[4] == "patch" else ScriptedAnswer(404, {})
        if request.path != "/api/v4/posts" or request.http_method != "POST":
            return ScriptedAnswer(
                404, app_error("api.context.404.app_error", "Sorry, we could not find the page.", 404)
            )
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return ScriptedAnswer(401, SESSION_EXPIRED)
        payload = request.json if isinstance(request.json, dict) else {}
        channel_id = payload.get("channel_id")
        if not isinstance(channel_id, str) or not channel_id:
            return ScriptedAnswer(
                400, app_error("api.context.invalid_param.app_error", "Invalid channel_id parameter.", 400)
            )
        if channel_id in self.forbidden_channels:
            return ScriptedAnswer(403, FORBIDDEN)
        if channel_id in self.archived_channels:
            return ScriptedAnswer(400, ARCHIVED)
        pending = payload.get("pending_post_id")
        if isinstance(pending, str) and pending in self._pending:
            earlier, at = self._pending[pending]
            if time.monotonic() - at < PENDING_POST_IDS_TTL:
                return ScriptedAnswer(201, earlier)
        post_id = f"post{self._next_post:022d}"
        self._next_post += 1
        self.sent.append({**payload, "id": post_id})
        self.posted_at.append(time.monotonic())
        self._texts[post_id] = str(payload.get("message", ""))
        post = {
            "id": post_id,
            "create_at": 1_700_000_000_000,
            "channel_id": channel_id,
            "root_id": payload.get("root_id", ""),
            "message": payload.get("message", ""),
            "user_id": "bot" + "0" * 23,
        }
        if isinstance(pending, str) and pending:
            self._pending[pending] = (post, time.monotonic())
        return ScriptedAnswer(201, post)

    def _patch(self, request: RecordedRequest, post_id: str) -> ScriptedAnswer:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return ScriptedAnswer(401, SESSION_EXPIRED)
        if post_id not in self._texts:
            return ScriptedAnswer(404, app_error("app.post.get.app_error", "Unable to get the post.", 404))
        message = (request.json or {}).get("message") if isinstance(request.json, dict) else None
        if not isinstance(message, str):
            return ScriptedAnswer(400, app_error("api.context.invalid_body_param.app_error", "Invalid post.", 400))
        self._texts[post_id] = message
        self.edits.append({"id": post_id, "message": message, "at": time.monotonic()})
        return ScriptedAnswer(200, {"id": post_id, "message": message})
