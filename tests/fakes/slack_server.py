"""A fake Slack Web API on a loopback port.

Use the `fake_slack` fixture defined in the test module, or `FakeSlack` as a context manager.
Point a `SlackSender` (or `SLACK_API_BASE_URL`) at `fake.base_url` (it ends in `/api`, like
https://slack.com/api) with `fake.token`.

- Every request is recorded in `fake.requests`, in arrival order, failures included.
- `chat.postMessage` with the right bearer token answers `{"ok": true, "channel", "ts"}` with ts
  values 1700000000.000001, .000002, …; `fake.sent` lists what was accepted. Channels in
  `fake.gone_channels` answer `channel_not_found`; a wrong token answers `invalid_auth`, with
  HTTP 200 as Slack does.
- `assistant.threads.setStatus` answers ok for a `thread_ts` in `fake.assistant_threads`,
  `invalid_thread_ts` for any other; `fake.statuses` lists the accepted bodies. An answer
  scripted without `only` never goes to it (`only=is_set_status` scripts one for it).
- `chat.update` edits a posted message (by channel and `ts`; `fake.text_of(ts)`); each accepted
  edit is in `fake.edits` with its arrival time (`at`, time.monotonic), each post's in `fake.posted_at`.
- `conversations.history` (a channel's messages, newest first) and `conversations.replies` (a
  thread's, oldest first) answer the posted messages newer than `oldest`, at most `limit`, each with
  its `metadata` when `include_all_metadata` is true; channels in `fake.history_refused` answer
  `missing_scope`, as a bot without the history scope gets.
- Other methods answer HTTP 404 `unknown_method`.
- `fake.answer_next(status, body, times=n, headers=...)` scripts the next answers; `slack_error`
  builds Slack's `{"ok": false, "error": code}` body.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

# Made per run, never a fixed value on disk (the fake accepts whatever token it was given)
DEFAULT_TOKEN = f"test-slack-bot-{secrets.token_hex(12)}"


def slack_error(code: str) -> dict[str, Any]:
    return {"ok": False, "error": code}


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    api_method: str  # e.g. "chat.postMessage"; "" when the path is not /api/<method>
    json: Any  # the parsed body; None when it was empty or not JSON
    headers: dict[str, str]  # lower-cased names


@dataclass
class FakeSlack(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-slack"
    url_suffix: ClassVar[str] = "/api"

    token: str = DEFAULT_TOKEN
    sent: list[dict[str, Any]] = field(default_factory=list)  # accepted chat.postMessage bodies + "ts"
    gone_channels: set[str] = field(default_factory=set)
    assistant_threads: set[str] = field(default_factory=set)  # thread_ts values of assistant threads
    statuses: list[dict[str, Any]] = field(default_factory=list)
    _next_ts: int = 1
    edits: list[dict[str, Any]] = field(default_factory=list)  # accepted chat.update bodies + "at"
    posted_at: list[float] = field(default_factory=list)
    _texts: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, ts) -> its text now
    history_refused: set[str] = field(default_factory=set)  # channels whose history the bot may not read

    def text_of(self, ts: str, channel: str | None = None) -> str | None:
        with self._lock:
            return next((t for (c, s), t in self._texts.items() if s == ts and channel in (None, c)), None)

    def _scripted_by_default(self, request: RecordedRequest) -> bool:
        return not is_set_status(request)

    def calls(self, api_method: str) -> list[Any]:
        with self._lock:
            return [r.json for r in self.requests if r.api_method == api_method]

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        api_method = path.removeprefix("/api/") if path.startswith("/api/") else ""
        return RecordedRequest(http_method, path, api_method, body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.api_method not in ("chat.postMessage", "chat.update", "assistant.threads.setStatus", *_HISTORY):
            return ScriptedAnswer(404, slack_error("unknown_method"))
        authorization = request.headers.get("authorization", "")
        if not authorization:
            return ScriptedAnswer(200, slack_error("not_authed"))
        if authorization != f"Bearer {self.token}":
            return ScriptedAnswer(200, slack_error("invalid_auth"))
        payload = request.json if isinstance(request.json, dict) else {}
        if is_set_status(request):
            return self._set_status(payload)
        if request.api_method in _HISTORY:
            return self._history(request.api_method, payload)
        channel = payload.get("channel")
        if not isinstance(channel, str) or not channel or channel in self.gone_channels:
            return ScriptedAnswer(200, slack_error("channel_not_found"))
        text = payload.get("text")
        if not isinstance(text, str) or not text.strip():
            return ScriptedAnswer(200, slack_error("no_text"))
        if len(text) > 40_000:
            return ScriptedAnswer(200, slack_error("msg_too_long"))
        if request.api_method == "chat.update":
            key = (channel, str(payload.get("ts")))
            if key not in self._texts:
                return ScriptedAnswer(200, slack_error("message_not_found"))
            self._texts[key] = text
            self.edits.append({**payload, "at": time.monotonic()})
            return ScriptedAnswer(200, {"ok": True, "channel": channel, "ts": key[1], "text": text})
        ts = f"1700000000.{self._next_ts:06d}"
        self._next_ts += 1
        self.sent.append({**payload, "ts": ts})
        self.posted_at.append(time.monotonic())
        self._texts[(channel, ts)] = text
        message = {"type": "message", "text": text, "ts": ts, "bot_id": "B0FAKE"}
        return ScriptedAnswer(200, {"ok": True, "channel": channel, "ts": ts, "message": message})

    def _history(self, api_method: str, form: dict[str, Any]) -> ScriptedAnswer:
        channel = form.get("channel")
        if not isinstance(channel, str) or not channel or channel in self.gone_channels:
            return ScriptedAnswer(200, slack_error("channel_not_found"))
        if channel in self.history_refused:
            return ScriptedAnswer(200, {**slack_error("missing_scope"), "needed": "channels:history"})
        thread = form.get("ts") if api_method == "conversations.replies" else None
        if api_method == "conversations.replies" and not thread:
            return ScriptedAnswer(200, slack_error("invalid_arguments"))
        oldest, limit = float(form.get("oldest") or 0), int(form.get("limit") or 100)
        with_metadata = form.get("include_all_metadata") == "true"
        found = []
        for post, at in zip(self.sent, self.posted_at, strict=True):  # ts values are not clock times: at is
            if post["channel"] != channel or (thread is not None and post.get("thread_ts") != thread):
                continue
            if thread is None and post.get("thread_ts"):
                continue  # a channel's history holds its threads' parents, not their replies
            message = {"type": "message", "text": self._texts[(channel, post["ts"])], "ts": post["ts"]}
            if with_metadata and isinstance(post.get("metadata"), dict):
                message["metadata"] = post["metadata"]
            found.append((at, message))
        wall_offset = time.time() - time.monotonic()
        messages = [m for at, m in found if at + wall_offset >= oldest]
        if api_method == "conversations.history":
            messages.reverse()
        return ScriptedAnswer(200, {"ok": True, "messages": messages[:limit], "has_more": len(messages) > limit})

    def _set_status(self, payload: dict[str, Any]) -> ScriptedAnswer:
        if not payload.get("channel_id") or not isinstance(payload.get("status"), str):
            return ScriptedAnswer(200, slack_error("invalid_arguments"))
        if payload.get("thread_ts") not in self.assistant_threads:
            return ScriptedAnswer(200, slack_error("invalid_thread_ts"))
        self.statuses.append(payload)
        return ScriptedAnswer(200, {"ok": True})


_HISTORY = ("conversations.history", "conversations.replies")


def is_set_status(request: RecordedRequest) -> bool:
    return request.api_method == "assistant.threads.setStatus"
