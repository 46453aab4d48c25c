"""The loopback HTTP machinery the fake servers share.

A fake subclasses `LoopbackFake` (a dataclass) and fills in two hooks:

- `_record(http_method, path, headers, body)` turns one request into the fake's own recorded type;
  `body` is the parsed JSON, the fields of a form-encoded body (a dict), or None. A fake that needs
  the raw bytes (a signature over them) overrides `_receive(received)` instead: a `Received` has
  the raw body, the content type and the decoded `body`;
- `_default_answer(request)` answers a request nothing was scripted for (called with the lock held,
  so it may update the fake's state).

The base keeps every request in `requests`, in arrival order, failures included; `answer_next`
scripts raw answers (errors, bodies that are not JSON, slow answers) that go before any default.
A `ScriptedAnswer` body that is a dict (or any other JSON value) is sent as JSON, str or bytes as
they are, a `Paced` one piece by piece as its times say (a model writing its answer); a
Content-Type among its headers replaces the one the body's type implies. A scripted
answer goes to the next request its `only` admits; without one, to the next request
`_scripted_by_default` admits (all, unless a fake says otherwise: a typing indicator running
beside a send does not take the error a test scripted for the send). `answer_late` makes the next
request the fake's default handles (recorded, posted) wait before its answer is written: a
platform that took a send but answered after the sender's timeout.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, ClassVar, Generic, Self, TypeVar

RequestT = TypeVar("RequestT")


@dataclass(frozen=True)
class Paced:
    """A body written as it is made: each piece after its pause (seconds after the piece before,
    kept to the schedule: a late piece does not delay the ones after it), with no Content-Length,
    the connection closed after the last piece."""

    pieces: tuple[tuple[float, bytes], ...]


@dataclass(frozen=True)
class ScriptedAnswer:
    status: int
    body: Any  # a dict is sent as JSON, str or bytes as they are, `Paced` piece by piece
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    only: Callable[[Any], bool] | None = None  # the recorded requests it may answer (None: the fake's default)
    late: bool = False  # not an answer of its own: the default one, written after `delay`


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    http_method: str
    path: str  # with the query
    headers: dict[str, str]  # lower-cased names
    raw: bytes

    @property
    def content_type(self) -> str:
        """The media type, lower-cased, without parameters ("" when the request names none)."""
        return self.headers.get("content-type", "").partition(";")[0].strip().lower()

    @property
    def body(self) -> Any:
        """The fields of a form-encoded body (a dict), else the parsed JSON, else None."""
        if self.content_type == "application/x-www-form-urlencoded":
            return dict(urllib.parse.parse_qsl(self.raw.decode("utf-8", "replace"), keep_blank_values=True))
        try:
            return json.loads(self.raw) if self.raw else None
        except ValueError:
            return None


@dataclass(kw_only=True)
class LoopbackFake(ABC, Generic[RequestT]):
    thread_name: ClassVar[str] = "fake-loopback"
    url_suffix: ClassVar[str] = ""  # appended to `base_url`, e.g. "/v1"
    http_methods: ClassVar[frozenset[str]] = frozenset({"POST"})  # others get the stdlib's 501

    requests: list[RequestT] = field(default_factory=list)
    _script: list[ScriptedAnswer] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: _LoopbackServer | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the fake is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}{self.url_suffix}"

    def answer_next(
        self,
        status: int,
        body: Any,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
        only: Callable[[RequestT], bool] | None = None,
    ) -> None:
        with self._lock:
            self._script.extend(ScriptedAnswer(status, body, dict(headers or {}), delay, only) for _ in range(times))

    def answer_late(self, delay: float, *, times: int = 1, only: Callable[[RequestT], bool] | None = None) -> None:
        """The next `times` requests (that `only` admits) are handled as usual (a send is posted)
        but answered only after `delay` seconds: past a sender's timeout, a send that took effect."""
        with self._lock:
            self._script.extend(ScriptedAnswer(0, None, delay=delay, only=only, late=True) for _ in range(times))

    def start(self) -> Self:
        self._server = _LoopbackServer(self)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name=self.thread_name, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()

    def _answer(self, request: RequestT) -> ScriptedAnswer:
        with self._lock:
            self.requests.append(request)
            for index, scripted in enumerate(self._script):
                if scripted.only(request) if scripted.only is not None else self._scripted_by_default(request):
                    self._script.pop(index)
                    if scripted.late:
                        return replace(self._default_answer(request), delay=scripted.delay)
                    return scripted
            return self._default_answer(request)

    def _scripted_by_default(self, request: RequestT) -> bool:
        """Whether an answer scripted without `only` may answer this request."""
        return True

    def _receive(self, received: Received) -> RequestT:
        """One request as the fake records it: by default what `_record` makes of the decoded body."""
        return self._record(received.http_method, received.path, received.headers, received.body)

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RequestT:
        """One request as the fake records it; `headers` has lower-cased names, `body` is the parsed
        JSON, the fields of a form-encoded body, or None."""
        raise NotImplementedError(f"{type(self).__name__} overrides neither _record nor _receive")

    @abstractmethod
    def _default_answer(self, request: RequestT) -> ScriptedAnswer:
        """The answer when nothing is scripted; called with the lock held."""


class _LoopbackServer(ThreadingHTTPServer):
    def __init__(self, fake: LoopbackFake[Any]) -> None:
        super().__init__(("127.0.0.1", 0), _LoopbackHandler)
        self.fake = fake


class _LoopbackHandler(BaseHTTPRequestHandler):
    server: _LoopbackServer

    def do_POST(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        fake = self.server.fake
        if self.command not in fake.http_methods:
            # as BaseHTTPRequestHandler answers a method it has no do_<METHOD> for
            self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
            return
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k.lower(): v for k, v in self.headers.items()}
        answer = fake._answer(fake._receive(Received(self.command, self.path, headers, raw)))
        if answer.delay:
            time.sleep(answer.delay)
        self._write(answer)

    def _write(self, answer: ScriptedAnswer) -> None:
        if isinstance(answer.body, Paced):
            self._write_paced(answer, answer.body)
            return
        if isinstance(answer.body, bytes):
            payload, content_type = answer.body, "application/octet-stream"
        elif isinstance(answer.body, str):
            payload, content_type = answer.body.encode(), "text/plain"
        else:
            payload, content_type = json.dumps(answer.body).encode(), "application/json"
        try:
            self.send_response(answer.status)
            if not any(name.lower() == "content-type" for name in answer.headers):  # a scripted one wins
                self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test); nothing to answer

    def _write_paced(self, answer: ScriptedAnswer, body: Paced) -> None:
        try:
            self.send_response(answer.status)
            self.send_header("Connection", "close")
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            due = time.monotonic()
            for pause, piece in body.pieces:
                due += pause
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.wfile.write(piece)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading (/stop ends a stream where it is)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test output is no place for a request log."""
