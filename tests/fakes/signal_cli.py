"""Fake signal-cli, on loopback: what the Signal forwarder talks to, shaped after the fixtures in
tests/fixtures/signal/ (signal-cli's own JSON, see SOURCES.md there).

- `FakeSignalCli`: `signal-cli daemon --tcp` (newline-delimited JSON-RPC 2.0 over TCP): `notify`
  writes a `receive` notification line to every connected client; `send` is answered as signal-cli
  does (`{timestamp, results: [{recipientAddress, type}]}`, a new timestamp each), or with what a
  test scripted (`answer_next`: a result, a JSON-RPC error, or no answer at all); `getAttachment`
  gives the bytes of `files[id]` base64-encoded (`{"data"}`); `sendTyping` answers `{}`.
- `FakeSignalRest`: signal-cli-rest-api in normal mode: `GET /v1/receive/<number>` hands over the
  items queued with `queue_items` (then an empty list, after a short wait), `POST /v2/send` answers
  201 `{"timestamp": "<ms>"}`, `GET /v1/attachments/<id>` the file, `PUT /v1/typing-indicator/…`.
"""

from __future__ import annotations

import base64
import importlib.util
import itertools
import json
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, Received, ScriptedAnswer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "signal"
FORWARDER = Path(__file__).resolve().parents[2] / "relays" / "signal-cli" / "forwarder.py"
ACCOUNT = "+15555550100"  # the fixtures' bot account
FIRST_TIMESTAMP = 1752345601500  # the fixtures' first reply timestamp (jsonrpc_send.json)


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def load_forwarder(name: str = "signal_cli_forwarder") -> ModuleType:
    """The reference forwarder, loaded from its path: it ships apart from the gateway (no package)."""
    spec = importlib.util.spec_from_file_location(name, FORWARDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@contextmanager
def run_loops(forwarder: Any) -> Iterator[None]:
    """The forwarder's two loops in threads, as it runs deployed; stopped (and its signal-cli
    connection closed) on leaving."""
    stop = threading.Event()
    loops = [
        threading.Thread(target=forwarder.receive_forever, args=(stop,), daemon=True),
        threading.Thread(target=forwarder.collect_forever, args=(stop,), daemon=True),
    ]
    for loop in loops:
        loop.start()
    try:
        yield
    finally:
        stop.set()
        forwarder.wake.set()
        forwarder.signal.close()
        for loop in loops:
            loop.join(timeout=5)


@dataclass
class FakeSignalCli:
    """A `signal-cli daemon --tcp` on a loopback port."""

    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    _script: list[dict[str, Any] | None] = field(default_factory=list)  # None: never answered
    _clients: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _timestamps: itertools.count[int] = field(default_factory=lambda: itertools.count(FIRST_TIMESTAMP, 1000))
    _server: socketserver.ThreadingTCPServer | None = None

    @property
    def address(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"tcp://{host}:{port}"

    @property
    def sent(self) -> list[dict[str, Any]]:
        """The params of every `send` request, in order."""
        with self._lock:
            return [r["params"] for r in self.requests if r.get("method") == "send"]

    def answer_next(self, answer: dict[str, Any] | None) -> None:
        """The next `send` gets this (`{"result": …}` or `{"error": …}`), or None: no answer at all."""
        with self._lock:
            self._script.append(answer)

    def notify(self, notification: dict[str, Any]) -> None:
        """One line to every connected client, as the daemon writes a received message."""
        line = (json.dumps(notification, separators=(",", ":")) + "\n").encode()
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            client.sendall(line)

    def wait_connected(self, count: int = 1, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._clients) >= count:
                    return
            time.sleep(0.01)
        raise AssertionError("the forwarder did not connect to the fake signal-cli")

    def disconnect_all(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients), []
        for client in clients:
            client.shutdown(socket.SHUT_RDWR)

    def start(self) -> FakeSignalCli:
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                with fake._lock:
                    fake._clients.append(self.connection)
                try:
                    for line in self.rfile:
                        answer = fake._answer(json.loads(line))
                        if answer is not None:
                            self.connection.sendall((json.dumps(answer) + "\n").encode())
                except OSError:
                    pass
                finally:
                    with fake._lock:
                        if self.connection in fake._clients:
                            fake._clients.remove(self.connection)

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-signal-cli", daemon=True).start()
        return self

    def stop(self) -> None:
        self.disconnect_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> FakeSignalCli:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _answer(self, request: dict[str, Any]) -> dict[str, Any] | None:
        with self._lock:
            self.requests.append(request)
            method, params = request.get("method"), request.get("params") or {}
            scripted = self._script.pop(0) if method == "send" and self._script else {}
            if scripted is None:
                return None
            if scripted:
                return {"jsonrpc": "2.0", **scripted, "id": request.get("id")}
            if method == "send":
                result: Any = _send_result(next(self._timestamps), params)
            elif method == "getAttachment":
                data = self.files.get(str(params.get("id")))
                if data is None:
                    error = {"code": -1, "message": "no such attachment"}
                    return {"jsonrpc": "2.0", "error": error, "id": request["id"]}
                result = {"data": base64.b64encode(data).decode()}
            else:
                result = {}
            return {"jsonrpc": "2.0", "result": result, "id": request.get("id")}


def _send_result(timestamp: int, params: dict[str, Any]) -> dict[str, Any]:
    """What signal-cli answers a successful `send` (jsonrpc_send.json's response_dm/response_group)."""
    group = params.get("groupId")
    recipients = params.get("recipient") or ["+15555550123"]
    results = [
        {"recipientAddress": {"uuid": None, "number": r, "username": None}, "type": "SUCCESS"}
        | ({"groupId": group} if group else {})
        for r in recipients
    ]
    return {"timestamp": timestamp, "results": results}


@dataclass(frozen=True)
class RestRequest:
    http_method: str
    path: str
    body: Any


@dataclass
class FakeSignalRest(LoopbackFake[RestRequest]):
    """signal-cli-rest-api in normal mode, on a loopback port."""

    thread_name: ClassVar[str] = "fake-signal-rest"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST", "PUT"})

    files: dict[str, bytes] = field(default_factory=dict)
    _items: list[dict[str, Any]] = field(default_factory=list)
    _timestamps: itertools.count[int] = field(default_factory=lambda: itertools.count(FIRST_TIMESTAMP, 1000))

    @property
    def sent(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.body for r in self.requests if r.http_method == "POST" and r.path == "/v2/send"]

    def queue_items(self, *items: dict[str, Any]) -> None:
        with self._lock:
            self._items.extend(items)

    def _receive(self, received: Received) -> RestRequest:
        return RestRequest(received.http_method, received.path, received.body)

    def _scripted_by_default(self, request: RestRequest) -> bool:
        return request.path == "/v2/send"  # a scripted answer is for a send, never a receive

    def _default_answer(self, request: RestRequest) -> ScriptedAnswer:
        path = urllib.parse.urlsplit(request.path).path
        if request.http_method == "GET" and path.startswith("/v1/receive/"):
            items, self._items = self._items, []
            return ScriptedAnswer(200, items, delay=0 if items else 0.05)
        if request.http_method == "GET" and path.startswith("/v1/attachments/"):
            data = self.files.get(urllib.parse.unquote(path.rsplit("/", 1)[-1]))
            return ScriptedAnswer(200, data) if data is not None else ScriptedAnswer(404, {"error": "not found"})
        if request.http_method == "POST" and path == "/v2/send":
            return ScriptedAnswer(201, {"timestamp": str(next(self._timestamps))})
        return ScriptedAnswer(204, b"")
