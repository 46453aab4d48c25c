"""A fake BlueBubbles server (its REST API v1) on a loopback port, answering as the server's code
does (BlueBubblesApp/bluebubbles-server 1.9.9; the shapes of tests/fixtures/bluebubbles/).

Use `FakeBlueBubbles` as a context manager; point a sender (or BLUEBUBBLES_SERVER_URL) at
`fake.base_url` with `fake.password`.

- Every route wants the password in the query (`guid`, else `password`, else `token`, compared
  trimmed): none answers 401 "Missing server password!", a wrong one 401 "Unauthorized".
- `POST /api/v1/message/text` and `POST /api/v1/message/attachment` (multipart: `chatGuid`,
  `tempGuid`, `name`, `method`, `isAudioMessage`, the file in `attachment`): AppleScript sends
  need a `tempGuid`; a tempGuid still being sent answers 400 "already queued". A chat in
  `fake.failing_chats` answers 500 "Message Send Error" with the failed message (its `error`
  code). Sent messages are in `fake.sent` (`text` or `attachment`, `chatGuid`, `tempGuid`,
  `method`, `selectedMessageGuid`, `isAudioMessage`, `guid`, `dateCreated`), newest last.
- `fake.answer_slowly(seconds)`: the next send is taken (it is in `fake.sent` at once) but
  answered `seconds` later, its tempGuid "queued" and its message in no query until then:
  Messages still sending it.
- `POST /api/v1/message/query`: the bot's sent messages of a chat (`chatGuid`, `after` in ms,
  `sort`, `limit`), serialized as the server does, with their `attachments` when asked `with`.
- `GET /api/v1/attachment/<guid>/download`: the bytes of `fake.attachments[guid]` ((bytes, mime));
  `fake.downloads` counts each. An unknown GUID answers 404.
- `POST` / `DELETE /api/v1/chat/<guid>/typing`: 200 with `private_api`, else the Private API
  middleware's 500; each is in `fake.typing`.
- `GET`, `POST /api/v1/webhook`, `DELETE /api/v1/webhook/<id>`: the registered webhooks in
  `fake.webhooks` (`id`, `url`, `events`, `created`); registering a URL again returns the stored one.
"""

from __future__ import annotations

import json
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, Received, ScriptedAnswer
from tests.fakes.upload_server import form_fields

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bluebubbles"
DEFAULT_PASSWORD = "fake-bluebubbles-server-pw"  # the fake's own, for loopback tests
BAD_REQUEST = "You've made a bad request! Please check your request params & body"
WEBHOOK_EVENTS = frozenset(json.loads((FIXTURES / "docs_webhook_examples.json").read_text())["subscription_keys"])


def rest_fixture(name: str) -> dict[str, Any]:
    """One answer of `rest_send_text.json` (`response_200`, `response_401_wrong_password`, ...)."""
    found: dict[str, Any] = json.loads((FIXTURES / "rest_send_text.json").read_text())[name]
    return found


def error(status: int, message: str, kind: str, detail: str, data: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"status": status, "message": message, "error": {"type": kind, "message": detail}}
    if data is not None or status == 500:
        body["data"] = data
    return body


@dataclass
class FakeBlueBubbles(LoopbackFake[Received]):
    thread_name: ClassVar[str] = "fake-bluebubbles"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST", "DELETE"})

    password: str = DEFAULT_PASSWORD
    private_api: bool = False
    sent: list[dict[str, Any]] = field(default_factory=list)
    attachments: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    downloads: Counter[str] = field(default_factory=Counter)
    typing: list[tuple[str, str]] = field(default_factory=list)  # (method, chat guid)
    webhooks: list[dict[str, Any]] = field(default_factory=list)
    failing_chats: dict[str, int] = field(default_factory=dict)  # chat guid -> Messages' error code
    _queued: dict[str, float] = field(default_factory=dict)  # tempGuid -> until (time.monotonic)
    _slow: list[float] = field(default_factory=list)
    _next: int = 1

    def answer_slowly(self, seconds: float) -> None:
        with self._lock:
            self._slow.append(seconds)

    def posted(self, chat_guid: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [m for m in self.sent if chat_guid is None or m["chatGuid"] == chat_guid]

    def _receive(self, received: Received) -> Received:
        return received

    # --- routing --------------------------------------------------------------------------

    def _default_answer(self, request: Received) -> ScriptedAnswer:
        path, _, raw_query = request.path.partition("?")
        refused = self._refused(dict(urllib.parse.parse_qsl(raw_query)))
        if refused is not None:
            return refused
        parts = path.strip("/").split("/")
        if parts[:2] != ["api", "v1"]:
            return ScriptedAnswer(404, error(404, "Not found", "Server Error", "Route not found"))
        route = (request.http_method, *parts[2:])
        if route == ("POST", "message", "text"):
            return self._send(request.body if isinstance(request.body, dict) else {}, None)
        if route == ("POST", "message", "attachment"):
            fields = form_fields(request.headers.get("content-type", ""), request.raw)
            values = {name: f.text for name, f in fields.items() if f.filename is None}
            return self._send(values, fields.get("attachment"))
        if route == ("POST", "message", "query"):
            return self._query(request.body if isinstance(request.body, dict) else {})
        if len(parts) == 5 and parts[2] == "attachment" and parts[4] == "download" and request.http_method == "GET":
            return self._download(urllib.parse.unquote(parts[3]))
        if len(parts) == 5 and parts[2] == "chat" and parts[4] == "typing":
            return self._typing(request.http_method, urllib.parse.unquote(parts[3]))
        if parts[2:3] == ["webhook"]:
            return self._webhook(request, parts[3:])
        return ScriptedAnswer(404, error(404, "Not found", "Server Error", "Route not found"))

    def _refused(self, query: dict[str, str]) -> ScriptedAnswer | None:
        token = query.get("guid") or query.get("password") or query.get("token")
        if not token:
            return ScriptedAnswer(401, rest_fixture("response_401_missing_password"))
        if token.strip() != self.password.strip():
            return ScriptedAnswer(401, rest_fixture("response_401_wrong_password"))
        return None

    # --- sending --------------------------------------------------------------------------

    def _send(self, body: dict[str, Any], upload: Any) -> ScriptedAnswer:
        chat, temp = body.get("chatGuid"), body.get("tempGuid")
        method = body.get("method") or "apple-script"
        if not isinstance(chat, str) or not chat:
            return ScriptedAnswer(400, error(400, BAD_REQUEST, "Validation Error", "The chatGuid field is required."))
        if method == "apple-script" and not temp:
            return ScriptedAnswer(400, rest_fixture("response_400_missing_tempguid"))
        now = time.monotonic()
        if isinstance(temp, str) and self._queued.get(temp, 0.0) > now:
            detail = f"Message is already queued to be sent! (Temp GUID: {temp})"
            if upload is not None:
                detail = "Attachment is already queued to be sent!"
            return ScriptedAnswer(400, error(400, BAD_REQUEST, "Validation Error", detail))
        guid = f"F0000000-0000-4000-8000-{self._next:012d}"
        self._next += 1
        message: dict[str, Any] = {
            "guid": guid,
            "chatGuid": chat,
            "tempGuid": temp,
            "method": method,
            "selectedMessageGuid": body.get("selectedMessageGuid"),
            "dateCreated": int(time.time() * 1000),
        }
        if upload is None:
            message["text"] = body.get("message")
        else:
            message.update(attachment=upload.value, name=body.get("name"), mime=upload.content_type)
            message["isAudioMessage"] = body.get("isAudioMessage") == "true"
        code = self.failing_chats.get(chat)
        if code is not None:
            failed = {**self._serialized(message), "error": code}
            return ScriptedAnswer(500, error(500, "Message Send Error", "iMessage Error", "Failed to send", failed))
        self.sent.append(message)
        delay = self._slow.pop(0) if self._slow else 0.0
        if isinstance(temp, str) and delay:
            self._queued[temp] = now + delay
        data = {**self._serialized(message), "tempGuid": temp}
        status = "Attachment sent!" if upload is not None else "Message sent!"
        return ScriptedAnswer(200, {"status": 200, "message": status, "data": data}, delay=delay)

    def _serialized(self, message: dict[str, Any]) -> dict[str, Any]:
        """A sent message as the server serializes it (the fixture's shape, this message's values)."""
        data = dict(rest_fixture("response_200")["data"])
        data.pop("tempGuid", None)
        text = message.get("text") or ""
        data.update(guid=message["guid"], text=text, dateCreated=message["dateCreated"], isFromMe=True)
        data["attributedBody"] = [{"string": text, "runs": []}]
        data["chats"] = [{**data["chats"][0], "guid": message["chatGuid"]}]
        data["attachments"] = (
            [{"guid": "at_" + message["guid"], "transferName": message["name"], "mimeType": message["mime"]}]
            if "attachment" in message
            else []
        )
        return data

    def _query(self, body: dict[str, Any]) -> ScriptedAnswer:
        after = body.get("after") or 0
        limit = int(body.get("limit") or 100)
        now = time.monotonic()
        found = [
            m
            for m in self.sent
            if m["chatGuid"] == body.get("chatGuid")
            and m["dateCreated"] > after
            and self._queued.get(m["tempGuid"], 0) <= now
        ]
        found.sort(key=lambda m: m["dateCreated"], reverse=body.get("sort", "DESC") == "DESC")
        wanted = body.get("with") or []
        data = []
        for message in found[:limit]:
            serialized = self._serialized(message)
            if "attachment" not in wanted and "attachments" not in wanted:
                serialized["attachments"] = []
            data.append(serialized)
        metadata = {"offset": 0, "limit": limit, "total": len(found), "count": len(data)}
        return ScriptedAnswer(200, {"status": 200, "message": "Successfully fetched messages!", "data": data,
                                    "metadata": metadata})  # fmt: skip

    # --- the rest -------------------------------------------------------------------------

    def _download(self, guid: str) -> ScriptedAnswer:
        found = self.attachments.get(guid)
        if found is None:
            return ScriptedAnswer(404, error(404, "Not found", "Database Error", "Attachment does not exist!"))
        self.downloads[guid] += 1
        return ScriptedAnswer(200, found[0], {"Content-Type": found[1]})

    def _typing(self, method: str, chat: str) -> ScriptedAnswer:
        self.typing.append((method, chat))
        if not self.private_api:
            detail = "iMessage Private API Helper is not connected!"
            message = "Please make sure you have completed the setup for the Private API, and your helper is connected!"
            return ScriptedAnswer(500, error(500, message, "iMessage Error", detail))
        verb = "started" if method == "POST" else "stopped"
        return ScriptedAnswer(200, {"status": 200, "message": f"Successfully {verb} typing!"})

    def _webhook(self, request: Received, rest: list[str]) -> ScriptedAnswer:
        if request.http_method == "GET" and not rest:
            ok = {"status": 200, "message": "Successfully fetched webhooks!", "data": list(self.webhooks)}
            return ScriptedAnswer(200, ok)
        if request.http_method == "DELETE" and len(rest) == 1:
            kept = [w for w in self.webhooks if str(w["id"]) != rest[0]]
            if len(kept) == len(self.webhooks):
                return ScriptedAnswer(404, error(404, "Not found", "Database Error", "Webhook does not exist!"))
            self.webhooks[:] = kept
            return ScriptedAnswer(200, {"status": 200, "message": "Successfully deleted webhook!"})
        body = request.body if isinstance(request.body, dict) else {}
        url, events = body.get("url"), body.get("events")
        if not isinstance(url, str) or not isinstance(events, list) or not events:
            return ScriptedAnswer(400, error(400, BAD_REQUEST, "Validation Error", "The url field is required."))
        unknown = [e for e in events if e not in WEBHOOK_EVENTS]
        if unknown:
            invalid = f"Invalid webhook event: {unknown[0]}"
            return ScriptedAnswer(400, error(400, BAD_REQUEST, "Validation Error", invalid))
        stored = next((w for w in self.webhooks if w["url"] == url), None)
        if stored is None:
            stored = {"url": url, "events": list(events), "id": self._next, "created": "2025-07-12T18:40:00.000Z"}
            self._next += 1
            self.webhooks.append(stored)
        return ScriptedAnswer(200, {"status": 200, "message": "Successfully created webhook!", "data": stored})
