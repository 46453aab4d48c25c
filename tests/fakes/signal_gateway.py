"""The gateway's Signal endpoint on a loopback port, for the forwarder's tests: the code a deployed
ingress runs, with fakes behind it.

Every POST under `/webhooks/signal` goes through `handle_webhook` with the catalog's Signal adapter
(the Standard Webhooks signature, then parsing) and the real mailbox service: the inbox is a
`FakeEnqueue`, the outbox a `FakeOutbox`, the media bucket a dict served by this same server at
`/files/<key>` (the pre-signed URLs the mailbox hands out point there: a PUT must carry the
Content-Type and Content-Length it was given, as S3 checks a signed upload).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hermes_gateway.platforms.mailbox import mailbox_name
from hermes_gateway.services import mailbox
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, MailboxCall, handle_webhook
from tests.fakes import platforms
from tests.fakes.loopback import LoopbackFake, Received, ScriptedAnswer
from tests.fakes.services import FakeEnqueue, FakeOutbox, make_settings
from tests.fakes.signal_cli import ACCOUNT


@dataclass(frozen=True)
class Answered:
    """One request and the status the gateway answered it with."""

    http_method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    status: int


@dataclass
class SignalGateway(LoopbackFake[Received]):
    thread_name: ClassVar[str] = "fake-signal-gateway"
    http_methods: ClassVar[frozenset[str]] = frozenset({"POST", "GET", "PUT"})

    secret: str = ""
    clock: Callable[[], float] = time.time
    max_bytes: int = 20_000_000
    enqueue: FakeEnqueue = field(default_factory=FakeEnqueue)
    outbox: FakeOutbox = field(default_factory=FakeOutbox)
    store: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    answered: list[Answered] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.base_url + "/webhooks/signal"

    @property
    def mailbox(self) -> str:
        return mailbox_name("signal", None)

    def post_letter(self, delivery_id: str, letter: dict[str, Any]) -> None:
        """A reply waiting for the forwarder, as the delivery service posts one."""
        self.outbox.record_claimed(
            delivery_id,
            platform="signal",
            chat_id=letter.get("recipient") or letter.get("group_id"),
            thread_id=None,
            text=letter.get("text", ""),
            turn_id=None,
            chunk=1,
            chunks=1,
            now=self.clock(),
            mailbox=(self.mailbox, letter),
        )

    def url_of(self, key: str, expires_seconds: int) -> str:
        return f"{self.base_url}/files/{urllib.parse.quote(key, safe='')}"

    def upload_url(self, key: str, mime: str, size: int, expires_seconds: int) -> str:
        return f"{self.base_url}/files/{urllib.parse.quote(key, safe='')}?type={urllib.parse.quote(mime)}&size={size}"

    def _receive(self, received: Received) -> Received:
        return received

    def _default_answer(self, request: Received) -> ScriptedAnswer:
        path, _, query = request.path.partition("?")
        if path.startswith("/files/"):
            return self._file(request, urllib.parse.unquote(path.removeprefix("/files/")), query)
        response = handle_webhook(
            "signal",
            HttpRequest(request.http_method, path, request.headers, request.raw),
            settings=self._settings,
            adapters=self._adapters,
            enqueue_once=self.enqueue,
            received_at=self.clock(),
            serve_mailbox=self._serve,
        )
        self.answered.append(Answered(request.http_method, path, request.headers, request.raw, response.status))
        return ScriptedAnswer(response.status, response.body)

    def _file(self, request: Received, key: str, query: str) -> ScriptedAnswer:
        if request.http_method == "GET":
            found = self.store.get(key)
            return ScriptedAnswer(200, found[0]) if found else ScriptedAnswer(404, b"")
        signed = dict(urllib.parse.parse_qsl(query))
        if request.headers.get("content-type") != signed.get("type") or str(len(request.raw)) != signed.get("size"):
            return ScriptedAnswer(403, b"SignatureDoesNotMatch")
        self.store[key] = (request.raw, signed["type"])
        return ScriptedAnswer(200, b"")

    def _serve(self, platform: str, profile: str | None, call: MailboxCall, now: float) -> HttpResponse:
        deps = mailbox.MailboxDeps(letters=self.outbox, files=_Links(self), max_bytes=self.max_bytes)
        return mailbox.serve(platform, profile, call, deps, now)

    def start(self) -> SignalGateway:
        self._settings = make_settings({"SIGNAL_ENABLED": "true", "SIGNAL_ACCOUNT": ACCOUNT})
        self._adapters = platforms.adapters(self._settings, {"SIGNAL_RELAY_SECRET": self.secret}, clock=self.clock)
        super().start()
        return self


@dataclass(frozen=True)
class _Links:
    gateway: SignalGateway

    def url(self, key: str, expires_seconds: int) -> str:
        return self.gateway.url_of(key, expires_seconds)

    def upload_url(self, key: str, mime: str, size: int, expires_seconds: int) -> str:
        return self.gateway.upload_url(key, mime, size, expires_seconds)
