"""A fake Discord REST API (v10) on a loopback port.

Use the `fake_discord` fixture (register with `pytest_plugins = ("tests.fakes.discord_server",)`)
or `FakeDiscord` as a context manager, and point a sender (or `DISCORD_API_BASE_URL`) at
`fake.base_url`.

- `POST /channels/{id}/messages` needs `Authorization: Bot <fake.token>`; channels in
  `fake.gone_channels` answer 404 Unknown Channel, in `fake.forbidden_channels` 403 Missing Access.
  A `nonce` seen before with `enforce_nonce` answers the message it created, and posts nothing.
  `POST /channels/{id}/typing` (the typing indicator, `fake.typing()`) answers 204 the same way;
  an answer scripted without `only` never goes to it (`only=is_typing` scripts one for it).
- `fake.defer(token, channel_id)` stands for an interaction acknowledged with a deferred response:
  its original "thinking" message (flag LOADING) appears in the channel at once. The interaction
  webhook (`/webhooks/{application}/{token}`) then serves GET/PATCH `messages/@original` and
  follow-up POSTs; tokens in `fake.expired_tokens` answer 401 Invalid Webhook Token, unknown ones
  404 Unknown Webhook. Follow-ups always create a new message (the fake does not imitate Discord's
  deprecated "first follow-up edits the original" behaviour, so tests see the sender's own choice).
- `PATCH /channels/{id}/messages/{message}` (bot token) and `PATCH .../messages/{message}` of an
  interaction's webhook (its original or a follow-up) edit a message; each accepted edit is in
  `fake.edits` (`message_id`, `content`, `at`: time.monotonic), each post's time in `fake.posted_at`.
- `fake.channel_messages(channel_id)` / `channel_texts` is what a reader of the channel sees, top to bottom.
- `GET`/`PATCH /applications/@me` and `PUT /applications/{id}/commands` keep `fake.application`
  and `fake.commands`.
- Every request is recorded in `fake.requests`; `answer_next` scripts errors.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_TOKEN = "MTEwMDAwMDAwMDAwMDAwMDAwMQ.fake.discord-bot-token-value"
APPLICATION_ID = "1100000000000000001"
LOADING = 1 << 7
UNAUTHORIZED = {"message": "401: Unauthorized", "code": 0}
UNKNOWN_CHANNEL = {"message": "Unknown Channel", "code": 10003}
MISSING_ACCESS = {"message": "Missing Access", "code": 50001}
UNKNOWN_WEBHOOK = {"message": "Unknown Webhook", "code": 10015}
INVALID_WEBHOOK_TOKEN = {"message": "Invalid Webhook Token", "code": 50027}
SERVER_ERROR = {"message": "500: Internal Server Error", "code": 0}


def too_many_requests(retry_after: float, *, is_global: bool = False) -> dict[str, Any]:
    return {"message": "You are being rate limited.", "retry_after": retry_after, "global": is_global}


@dataclass(frozen=True)
class DiscordRequest:
    http_method: str
    path: str  # without the /api/v10 prefix and the query
    query: str
    json: Any
    headers: dict[str, str]


@dataclass
class FakeDiscord(LoopbackFake[DiscordRequest]):
    thread_name: ClassVar[str] = "fake-discord"
    url_suffix: ClassVar[str] = "/api/v10"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST", "PATCH", "PUT"})

    token: str = DEFAULT_TOKEN
    application_id: str = APPLICATION_ID
    gone_channels: set[str] = field(default_factory=set)
    forbidden_channels: set[str] = field(default_factory=set)
    expired_tokens: set[str] = field(default_factory=set)
    application: dict[str, Any] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)
    _channels: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _originals: dict[str, dict[str, Any]] = field(default_factory=dict)  # interaction token → message
    _next_id: int = 1_200_000_000_000_000_001
    _by_nonce: dict[str, dict[str, Any]] = field(default_factory=dict)  # an enforced nonce -> its message
    edits: list[dict[str, Any]] = field(default_factory=list)
    posted_at: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.application:
            self.application = {
                "id": self.application_id,
                "name": "Hermes",
                "verify_key": "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
                "interactions_endpoint_url": None,
            }

    def defer(self, token: str, channel_id: str) -> dict[str, Any]:
        """An interaction answered with DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: its thinking message."""
        with self._lock:
            message = self._post(channel_id, "", flags=LOADING)
            self._originals[token] = message
            return message

    def channel_messages(self, channel_id: str) -> list[dict[str, Any]]:
        """The channel's messages as a reader sees them, top to bottom."""
        with self._lock:
            return [dict(m) for m in self._channels.get(channel_id, [])]

    def channel_texts(self, channel_id: str) -> list[str]:
        return [m["content"] for m in self.channel_messages(channel_id)]

    def calls(self, http_method: str, path_prefix: str) -> list[DiscordRequest]:
        with self._lock:
            return [r for r in self.requests if r.http_method == http_method and r.path.startswith(path_prefix)]

    def typing(self) -> list[str]:
        """The channels a typing indicator was asked for, in order."""
        with self._lock:
            return [r.path.split("/")[2] for r in self.requests if is_typing(r)]

    def _scripted_by_default(self, request: DiscordRequest) -> bool:
        return not is_typing(request)

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> DiscordRequest:
        parts = urlsplit(path)
        return DiscordRequest(http_method, parts.path.removeprefix(self.url_suffix), parts.query, body, headers)

    def _default_answer(self, request: DiscordRequest) -> ScriptedAnswer:
        segments = request.path.strip("/").split("/")
        if segments[0] == "webhooks" and len(segments) >= 3:
            return self._webhook(request, segments)
        if request.headers.get("authorization") != f"Bot {self.token}":
            return ScriptedAnswer(401, UNAUTHORIZED)
        if segments[0] == "channels" and len(segments) == 3 and segments[2] == "messages":
            return self._channel_message(request, segments[1])
        if segments[0] == "channels" and len(segments) == 4 and segments[2] == "messages":
            if request.http_method != "PATCH":
                return ScriptedAnswer(405, {"message": "405: Method Not Allowed", "code": 0})
            return self._edit(request, segments[1], segments[3])
        if is_typing(request):
            return self._channel_typing(segments[1])
        if segments == ["applications", "@me"]:
            if request.http_method == "PATCH":
                self.application.update(request.json or {})
            return ScriptedAnswer(200, dict(self.application))
        if segments == ["applications", self.application_id, "commands"] and request.http_method == "PUT":
            self.commands = [{**c, "id": str(self._next_id + i)} for i, c in enumerate(request.json or [])]
            return ScriptedAnswer(200, self.commands)
        return ScriptedAnswer(404, {"message": "404: Not Found", "code": 0})

    def _channel_message(self, request: DiscordRequest, channel_id: str) -> ScriptedAnswer:
        if channel_id in self.gone_channels:
            return ScriptedAnswer(404, UNKNOWN_CHANNEL)
        if channel_id in self.forbidden_channels:
            return ScriptedAnswer(403, MISSING_ACCESS)
        invalid = _invalid_content(request.json)
        if invalid:
            return invalid
        nonce = request.json.get("nonce") if request.json.get("enforce_nonce") is True else None
        if isinstance(nonce, str) and len(nonce) > 25:
            return ScriptedAnswer(400, {"message": "Invalid Form Body", "code": 50035})
        created = self._by_nonce.get(nonce) if nonce else None
        if created is None:
            created = self._post(channel_id, request.json["content"])
            if nonce:
                self._by_nonce[nonce] = created
        return ScriptedAnswer(200, dict(created))

    def _channel_typing(self, channel_id: str) -> ScriptedAnswer:
        if channel_id in self.gone_channels:
            return ScriptedAnswer(404, UNKNOWN_CHANNEL)
        if channel_id in self.forbidden_channels:
            return ScriptedAnswer(403, MISSING_ACCESS)
        return ScriptedAnswer(204, b"")

    def _webhook(self, request: DiscordRequest, segments: list[str]) -> ScriptedAnswer:
        application_id, token = segments[1], segments[2]
        if token in self.expired_tokens:
            return ScriptedAnswer(401, INVALID_WEBHOOK_TOKEN)
        original = self._originals.get(token)
        if application_id != self.application_id or original is None:
            return ScriptedAnswer(404, UNKNOWN_WEBHOOK)
        if segments[3:] == ["messages", "@original"] and request.http_method == "GET":
            return ScriptedAnswer(200, dict(original))
        if segments[3:] == ["messages", "@original"] and request.http_method == "PATCH":
            invalid = _invalid_content(request.json)
            if invalid:
                return invalid
            original["content"] = request.json["content"]
            original["flags"] &= ~LOADING
            return ScriptedAnswer(200, dict(original))
        if len(segments) == 5 and segments[3] == "messages" and request.http_method == "PATCH":
            return self._edit(request, original["channel_id"], segments[4])
        if segments[3:] == [] and request.http_method == "POST":
            invalid = _invalid_content(request.json)
            if invalid:
                return invalid
            message = self._post(original["channel_id"], request.json["content"])
            # Without ?wait=true Discord answers 204 and no message.
            return ScriptedAnswer(200, message) if "wait=true" in request.query else ScriptedAnswer(204, b"")
        return ScriptedAnswer(405, {"message": "405: Method Not Allowed", "code": 0})

    def _edit(self, request: DiscordRequest, channel_id: str, message_id: str) -> ScriptedAnswer:
        if channel_id in self.gone_channels:
            return ScriptedAnswer(404, UNKNOWN_CHANNEL)
        message = next((m for m in self._channels.get(channel_id, []) if m["id"] == message_id), None)
        if message is None:
            return ScriptedAnswer(404, {"message": "Unknown Message", "code": 10008})
        invalid = _invalid_content(request.json)
        if invalid:
            return invalid
        message["content"] = request.json["content"]
        message["flags"] &= ~LOADING
        self.edits.append({"message_id": message_id, "content": message["content"], "at": time.monotonic()})
        return ScriptedAnswer(200, dict(message))

    def _post(self, channel_id: str, content: str, flags: int = 0) -> dict[str, Any]:
        message = {"id": str(self._next_id), "channel_id": channel_id, "content": content, "flags": flags}
        self._next_id += 1
        self._channels.setdefault(channel_id, []).append(message)
        if content:
            self.posted_at.append(time.monotonic())
        return message


def is_typing(request: DiscordRequest) -> bool:
    segments = request.path.strip("/").split("/")
    return request.http_method == "POST" and len(segments) == 3 and segments[::2] == ["channels", "typing"]


def _invalid_content(body: Any) -> ScriptedAnswer | None:
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, str) or not content or len(content) > 2000:
        return ScriptedAnswer(400, {"message": "Invalid Form Body", "code": 50035})
    return None


@pytest.fixture
def fake_discord() -> Iterator[FakeDiscord]:
    with FakeDiscord() as fake:
        yield fake
