"""signal-cli → Hermes forwarder: Signal for the serverless gateway (docs/platforms/signal.md).

Signal has no webhooks. signal-cli holds the account (its keys stay where you run it: a Raspberry
Pi, a small container), and this process sits beside it:

- every `receive` notification with a message in it is kept in a spool on disk, its files are
  uploaded (the gateway hands out pre-signed URLs), and it is POSTed as signal-cli wrote it to
  `<WebhookUrl>/signal`, signed the Standard Webhooks way with SIGNAL_RELAY_SECRET; a post the
  gateway did not take is tried again, after a restart too, until it is taken or refused;
- the gateway cannot call into a home network, so its replies wait in a mailbox: this process
  collects them (`/signal/outbox`, often while a reply is awaited, rarely otherwise), sends each
  through signal-cli (a file as an attachment), and reports signal-cli's timestamp for it, which
  marks the reply sent. A ledger on disk remembers what was sent: a letter collected again (its
  report was lost, the process restarted) is reported, never sent twice.

signal-cli is reached over its JSON-RPC socket (`signal-cli -a <number> daemon --tcp`, or
`--socket`), or through signal-cli-rest-api (normal or native mode: `/v1/receive`, `/v2/send`).
Standard library only; it does not import the gateway. Configuration: the environment, see
`Config.from_env` and relays/signal-cli/README.md.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import itertools
import json
import logging
import os
import queue
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger("hermes.signal_forwarder")

RETRY_STATUSES = (404, 408, 429, 500, 502, 503, 504)  # 404: the gateway's Signal route is not on (yet)
MAX_BACKOFF_SECONDS = 300.0
LETTERS_PER_POLL = 10
# Letters remembered: one is needed only until its report reached the gateway (the next call after
# a restart), and the file is written twice a letter (about 60 bytes an entry)
LEDGER_KEEP = 1000
REST_RECEIVE_SECONDS = 10


# --- signing: the Standard Webhooks scheme -------------------------------------------------------


def sign(secret: str, msg_id: str, timestamp: int | str, body: bytes) -> str:
    """The `webhook-signature` value: base64 HMAC-SHA256 over "id.timestamp.body", keyed with the
    base64-decoded part of the secret after "whsec_". A copy of the gateway's
    `standard_webhook.sign` (this file runs apart from the gateway); the gateway's tests verify
    its output with the gateway's own `verify`."""
    key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    digest = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


class GatewayUnavailable(Exception):
    """The gateway did not take the request (network, throttling, 5xx): try again later."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class GatewayRefused(Exception):
    """The gateway refused the request for good (400, 413): trying again cannot help."""


class Gateway:
    """The gateway's Signal endpoint: `<base>` for messages, `<base>/uploads`, `<base>/outbox`."""

    def __init__(self, url: str, secret: str, *, timeout: float = 20.0, clock: Callable[[], float] = time.time):
        if not url.startswith(("https://", "http://")):
            raise ValueError("RELAY_URL must be an http(s) URL")
        sign(secret, "check", 0, b"")  # a malformed secret fails at start, not on the first message
        self.url = url.rstrip("/")
        self._secret = secret
        self._timeout = timeout
        self._clock = clock

    def request(self, call: str, payload: dict[str, Any], *, msg_id: str) -> dict[str, Any]:
        """POST `payload` to `<url>[/call]`, signed now; the answer's JSON object."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        timestamp = str(int(self._clock()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "hermes-signal-forwarder/1",
            "webhook-id": msg_id,
            "webhook-timestamp": timestamp,
            "webhook-signature": sign(self._secret, msg_id, timestamp, body),
        }
        url = f"{self.url}/{call}" if call else self.url
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - checked
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as response:  # noqa: S310 - checked
                raw = response.read()
        except urllib.error.HTTPError as exc:
            retry_after = _seconds(exc.headers.get("Retry-After") if exc.headers else None)
            detail = exc.read()[:300].decode("utf-8", "replace")
            exc.close()
            if exc.code in RETRY_STATUSES or exc.code == 401:  # 401: a clock off, a secret being rotated
                raise GatewayUnavailable(f"HTTP {exc.code}: {detail}", retry_after) from None
            raise GatewayRefused(f"HTTP {exc.code}: {detail}") from None
        except OSError as exc:  # URLError, timeouts, resets
            raise GatewayUnavailable(type(exc).__name__) from None
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            raise GatewayUnavailable("the gateway's answer is not JSON") from None
        return answer if isinstance(answer, dict) else {}

    def upload(self, url: str, headers: dict[str, str], data: bytes) -> None:
        """PUT a file to the pre-signed URL the gateway gave, with the headers it signed."""
        req = urllib.request.Request(url, data=data, headers=headers, method="PUT")  # noqa: S310 - the gateway's
        try:
            with urllib.request.urlopen(req, timeout=max(self._timeout, 60.0)) as response:  # noqa: S310
                response.read()
        except (urllib.error.HTTPError, OSError) as exc:
            raise GatewayUnavailable(f"upload failed: {type(exc).__name__}") from None

    def download(self, url: str, limit: int) -> bytes:
        """GET a reply's file from the pre-signed URL of its letter."""
        try:
            with urllib.request.urlopen(url, timeout=max(self._timeout, 60.0)) as response:  # noqa: S310
                data = response.read(limit + 1)
        except (urllib.error.HTTPError, OSError) as exc:
            raise GatewayUnavailable(f"download failed: {type(exc).__name__}") from None
        if len(data) > limit:
            raise GatewayRefused("the file is larger than the forwarder takes")
        return bytes(data)


def _seconds(value: str | None) -> float | None:
    try:
        return min(max(float(value or ""), 0.0), MAX_BACKOFF_SECONDS)
    except ValueError:
        return None


# --- what signal-cli hands over --------------------------------------------------------------


def params_of(notification: dict[str, Any]) -> dict[str, Any] | None:
    """The `{envelope, account}` of a notification in any of its forms (JSON-RPC `receive`, its
    manual-mode `{subscription, result}`, a REST `/v1/receive` item); None for anything else."""
    if "jsonrpc" in notification:
        if notification.get("method") != "receive":
            return None
        params = notification.get("params")
        if isinstance(params, dict) and "subscription" in params:
            params = params.get("result")
        return params if isinstance(params, dict) else None
    return notification if isinstance(notification.get("envelope"), dict) else None


def forwardable(notification: dict[str, Any], account: str) -> bool:
    """Whether the gateway has anything to do with it: a data message someone else sent. Typing,
    receipts, reactions, deletions, edits and the account's own syncs are not posted at all (the
    gateway would acknowledge and drop them; each post costs a request)."""
    envelope = (params_of(notification) or {}).get("envelope")
    if not isinstance(envelope, dict):
        return False
    data = envelope.get("dataMessage")
    if not isinstance(data, dict) or data.get("reaction") is not None or data.get("remoteDelete") is not None:
        return False
    return not (account and account in (envelope.get("sourceNumber"), envelope.get("source")))


def attachments_of(notification: dict[str, Any]) -> list[dict[str, Any]]:
    params = params_of(notification) or {}
    data = (params.get("envelope") or {}).get("dataMessage") or {}
    found = data.get("attachments") if isinstance(data, dict) else None
    return [a for a in found or () if isinstance(a, dict) and isinstance(a.get("id"), str)]


def chat_of(notification: dict[str, Any]) -> tuple[str, str]:
    """("group", group id) or ("recipient", the sender): where a typing indicator goes."""
    params = params_of(notification) or {}
    envelope = params.get("envelope") or {}
    group = (envelope.get("dataMessage") or {}).get("groupInfo") or {}
    if isinstance(group, dict) and group.get("groupId"):
        return "group", str(group["groupId"])
    return "recipient", str(envelope.get("sourceNumber") or envelope.get("sourceUuid") or envelope.get("source"))


def message_key(notification: dict[str, Any]) -> str:
    """A name for one message that is the same however often it is received: the sender and the
    timestamp (what the gateway de-duplicates on too)."""
    params = params_of(notification) or {}
    envelope = params.get("envelope") or {}
    sender = envelope.get("sourceUuid") or envelope.get("sourceNumber") or envelope.get("source") or "unknown"
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{sender}_{envelope.get('timestamp')}")


# --- what signal-cli answers a send with ----------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """sent (with signal-cli's timestamp) | gone (not on Signal) | failed (refused for good) |
    retry (signal-cli or Signal could not now: the letter is tried again later)."""

    status: str
    timestamp: int | None = None
    error: str = ""


_TRANSIENT = ("NETWORK_FAILURE", "RATE_LIMIT_FAILURE")


def outcome_of_result(result: Any) -> Outcome:
    """A `send` result: `{timestamp, results: [{recipientAddress, type}]}` (the man page shows
    `{timestamp}` alone). Sent when any recipient has it (a group where one member is unreachable
    still got it); else gone when every recipient is unregistered; else retry or failed."""
    if not isinstance(result, dict) or not isinstance(result.get("timestamp"), int | str):
        return Outcome("failed", error="signal-cli answered without a timestamp")
    timestamp = int(result["timestamp"])
    kinds = [str(r.get("type")) for r in result.get("results") or () if isinstance(r, dict)]
    if not kinds or "SUCCESS" in kinds:
        return Outcome("sent", timestamp)
    if all(kind == "UNREGISTERED_FAILURE" for kind in kinds):
        return Outcome("gone", error="the recipient is not registered on Signal")
    if any(kind in _TRANSIENT for kind in kinds):
        return Outcome("retry", error=",".join(sorted(set(kinds))))
    return Outcome("failed", error=",".join(sorted(set(kinds))))


def outcome_of_error(error: Any) -> Outcome:
    """A JSON-RPC error of `send`: its result when it carries one; else by code: -3 (I/O: Signal's
    servers, the network) is tried again, an unregistered user is gone, the rest failed (-4: the
    recipient's safety number changed; trust it with `signal-cli trust`)."""
    if not isinstance(error, dict):
        return Outcome("failed", error="malformed JSON-RPC error")
    response = (error.get("data") or {}).get("response") if isinstance(error.get("data"), dict) else None
    if isinstance(response, dict) and response.get("results"):
        return outcome_of_result(response)
    message = str(error.get("message") or "")[:300]
    if error.get("code") == -3 or "rate limit" in message.lower():
        return Outcome("retry", error=message)
    if "not registered" in message:
        return Outcome("gone", error=message)
    return Outcome("failed", error=f"{error.get('code')}: {message}")


# How signal-cli's JSON-RPC `send` and signal-cli-rest-api's `/v2/send` name the same things
JSON_RPC_NAMES = ("attachments", "quoteTimestamp", "quoteAuthor")
REST_NAMES = ("base64_attachments", "quote_timestamp", "quote_author")


def extras(letter: dict[str, Any], files: list[tuple[bytes, str, str]], names: tuple[str, str, str]) -> dict[str, Any]:
    """A send's files (as data URIs) and quote, under the names the API uses (`names`)."""
    attachments, quote_timestamp, quote_author = names
    found: dict[str, Any] = {}
    if files:
        found[attachments] = [data_uri(data, mime, name) for data, mime, name in files]
    quote = letter.get("quote")
    if isinstance(quote, dict):
        found.update({quote_timestamp: quote["timestamp"], quote_author: quote["author"]})
    return found


def data_uri(data: bytes, mime: str, name: str) -> str:
    """An attachment as signal-cli takes one without a shared file system (RFC 2397, with a name)."""
    safe = re.sub(r"[^A-Za-z0-9._ -]", "_", name)[:100] or "file"
    return f"data:{mime or 'application/octet-stream'};filename={safe};base64,{base64.b64encode(data).decode()}"


# --- signal-cli over JSON-RPC (daemon --tcp / --socket) -----------------------------------------


class SignalCliError(Exception):
    """signal-cli could not be asked (not connected, refused the connection): nothing was sent."""


class SignalCliNoAnswer(SignalCliError):
    """signal-cli was asked and did not answer (the connection broke, a timeout): it may have sent."""


class JsonRpcSignal:
    """One connection to `signal-cli daemon`: its `receive` notifications arrive on it, and
    requests (`send`, `getAttachment`, `sendTyping`) are answered on it, by id."""

    def __init__(self, address: str, *, account_param: str = "", timeout: float = 60.0) -> None:
        self._address = address
        self._account = account_param  # for a daemon serving several accounts
        self._timeout = timeout
        self._ids = itertools.count(1)
        self._waiting: dict[str, queue.Queue[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self.notifications: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def connect(self) -> None:
        if self._address.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self._address.removeprefix("unix://"))
        else:
            host, _, port = self._address.removeprefix("tcp://").rpartition(":")
            sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=10)
            sock.settimeout(None)
        self._sock = sock
        threading.Thread(target=self._read, args=(sock,), name="signal-cli-reader", daemon=True).start()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _read(self, sock: socket.socket) -> None:
        try:
            for line in sock.makefile("rb"):
                self._dispatch(line)
        except OSError:
            pass
        finally:
            with self._lock:
                waiting = list(self._waiting.values())
            for box in waiting:
                box.put({"error": {"code": "disconnected", "message": "signal-cli closed the connection"}})
            self.notifications.put(None)  # the receiving loop reconnects

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            logger.warning("signal-cli wrote a line that is not JSON")
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            self.notifications.put(message)
            return
        with self._lock:
            box = self._waiting.get(str(message.get("id")))
        if box is not None:
            box.put(message)

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The response object of one request (with `result` or `error`)."""
        if self._sock is None:
            raise SignalCliError("not connected to signal-cli")
        request_id = f"hermes-{next(self._ids)}"
        if self._account:
            params = {**params, "account": self._account}
        box: queue.Queue[dict[str, Any]] = queue.Queue()
        with self._lock:
            self._waiting[request_id] = box
        try:
            line = json.dumps({"jsonrpc": "2.0", "method": method, "params": params, "id": request_id}) + "\n"
            try:
                self._sock.sendall(line.encode())
            except OSError as exc:
                raise SignalCliError(f"signal-cli was not asked {method}: {type(exc).__name__}") from None
            try:
                answer = box.get(timeout=self._timeout)
            except queue.Empty:
                raise SignalCliNoAnswer(f"signal-cli did not answer {method} in time") from None
        finally:
            with self._lock:
                self._waiting.pop(request_id, None)
        if (answer.get("error") or {}).get("code") == "disconnected":
            raise SignalCliNoAnswer(f"signal-cli closed the connection before answering {method}")
        return answer

    def send(self, letter: dict[str, Any], files: list[tuple[bytes, str, str]]) -> Outcome:
        params = {"message": letter.get("text") or "", **extras(letter, files, JSON_RPC_NAMES)}
        if letter.get("group_id"):
            params["groupId"] = letter["group_id"]
        else:
            params["recipient"] = [letter["recipient"]]
        answer = self.call("send", params)
        if "error" in answer:
            return outcome_of_error(answer["error"])
        return outcome_of_result(answer.get("result"))

    def attachment(self, attachment_id: str) -> bytes:
        answer = self.call("getAttachment", {"id": attachment_id})
        data = (answer.get("result") or {}).get("data") if isinstance(answer.get("result"), dict) else None
        if not isinstance(data, str):
            raise SignalCliError("signal-cli gave no attachment data")
        return base64.b64decode(data)

    def typing(self, kind: str, chat: str) -> None:
        params: dict[str, Any] = {"groupId": chat} if kind == "group" else {"recipient": [chat]}
        self.call("sendTyping", params)

    def receive(self) -> Iterator[dict[str, Any]]:
        """Notifications as they arrive, until the connection closes."""
        while True:
            message = self.notifications.get()
            if message is None:
                return
            yield message


# --- signal-cli-rest-api (normal or native mode) ------------------------------------------------


class RestSignal:
    """bbernhard/signal-cli-rest-api: `/v1/receive/<number>` (polled), `/v2/send`,
    `/v1/attachments/<id>`. Its json-rpc mode receives over a WebSocket only, which the standard
    library has no client for: run it in normal or native mode, or use signal-cli's own socket."""

    def __init__(self, base_url: str, account: str, *, timeout: float = 60.0) -> None:
        self._base = base_url.rstrip("/")
        self._account = account
        self._timeout = timeout

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        req = urllib.request.Request(self._base + path, data=data, headers=headers, method=method)  # noqa: S310
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as response:  # noqa: S310 - configured URL
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
            exc.close()
        except OSError as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, ConnectionRefusedError | socket.gaierror):
                raise SignalCliError(f"signal-cli-rest-api unreachable: {type(reason).__name__}") from None
            raise SignalCliNoAnswer(f"signal-cli-rest-api did not answer: {type(reason).__name__}") from None
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, raw

    def receive(self) -> Iterator[dict[str, Any]]:
        """The items of one `/v1/receive` call (it waits up to REST_RECEIVE_SECONDS for messages)."""
        number = urllib.parse.quote(self._account, safe="")
        status, items = self._request("GET", f"/v1/receive/{number}?timeout={REST_RECEIVE_SECONDS}")
        if status != 200 or not isinstance(items, list):
            raise SignalCliError(f"/v1/receive answered HTTP {status}")
        yield from (item for item in items if isinstance(item, dict))

    def send(self, letter: dict[str, Any], files: list[tuple[bytes, str, str]]) -> Outcome:
        if letter.get("group_id"):
            recipient = "group." + base64.b64encode(str(letter["group_id"]).encode()).decode()
        else:
            recipient = str(letter["recipient"])
        body = {"number": self._account, "recipients": [recipient], "message": letter.get("text") or ""}
        status, answer = self._request("POST", "/v2/send", {**body, **extras(letter, files, REST_NAMES)})
        error = str(answer.get("error") if isinstance(answer, dict) else answer or "")[:300]
        if status in (200, 201) and isinstance(answer, dict) and str(answer.get("timestamp", "")).isdigit():
            return Outcome("sent", int(answer["timestamp"]))
        if status == 429 or status >= 500:
            return Outcome("retry", error=f"HTTP {status}: {error}")
        if "not registered" in error:
            return Outcome("gone", error=error)
        return Outcome("failed", error=f"HTTP {status}: {error}")

    def attachment(self, attachment_id: str) -> bytes:
        path = "/v1/attachments/" + urllib.parse.quote(attachment_id, safe="")
        req = urllib.request.Request(self._base + path)  # noqa: S310 - the configured URL
        try:
            with urllib.request.urlopen(req, timeout=self._timeout) as response:  # noqa: S310
                return bytes(response.read())
        except (urllib.error.HTTPError, OSError) as exc:
            raise SignalCliError(f"attachment unavailable: {type(exc).__name__}") from None

    def typing(self, kind: str, chat: str) -> None:
        recipient = "group." + base64.b64encode(chat.encode()).decode() if kind == "group" else chat
        number = urllib.parse.quote(self._account, safe="")
        self._request("PUT", f"/v1/typing-indicator/{number}", {"recipient": recipient})


# --- state on disk: the spool of messages to post, the ledger of letters sent ------------------


def _write_json(path: Path, value: Any) -> None:
    """Written whole or not at all: a crash leaves the old file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, separators=(",", ":")))
    os.replace(tmp, path)


class Spool:
    """Messages received and not yet taken by the gateway, one file each (named by message, so a
    message received twice is kept once). Refused ones are moved to `rejected/` to be looked at."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory / "spool"
        self.dir.mkdir(parents=True, exist_ok=True)
        (directory / "rejected").mkdir(exist_ok=True)

    def add(self, notification: dict[str, Any]) -> Path:
        path = self.dir / f"{message_key(notification)}.json"
        _write_json(path, notification)
        return path

    def pending(self) -> list[Path]:
        return sorted(self.dir.glob("*.json"), key=lambda p: p.stat().st_mtime)

    def done(self, path: Path) -> None:
        path.unlink(missing_ok=True)

    def reject(self, path: Path) -> None:
        os.replace(path, self.dir.parent / "rejected" / path.name)


class Ledger:
    """What became of each letter this forwarder took: `sending` before signal-cli is asked, then
    the outcome. A letter collected again is reported from here, never sent twice; one left
    `sending` (the process stopped mid-send) is reported `unknown`, not sent again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}

    def get(self, letter_id: str) -> dict[str, Any] | None:
        return self._entries.get(letter_id)

    def forget(self, letter_id: str) -> None:
        if self._entries.pop(letter_id, None) is not None:
            _write_json(self.path, self._entries)

    def record(self, letter_id: str, entry: dict[str, Any]) -> None:
        self._entries.pop(letter_id, None)
        self._entries[letter_id] = entry
        while len(self._entries) > LEDGER_KEEP:
            self._entries.pop(next(iter(self._entries)))
        _write_json(self.path, self._entries)


def report_of(letter_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    """What the gateway is told of a letter, from its ledger entry."""
    if entry["status"] == "sent":
        return {"id": letter_id, "status": "sent", "timestamp": entry["timestamp"]}
    if entry["status"] == "sending":
        return {"id": letter_id, "status": "unknown", "error": "the forwarder stopped while signal-cli sent it"}
    return {"id": letter_id, "status": entry["status"], "error": entry.get("error", "")}


# --- the forwarder ----------------------------------------------------------------------------


@dataclass
class Config:
    relay_url: str
    secret: str
    account: str
    state_dir: Path
    signal_cli: str = "tcp://127.0.0.1:7583"  # or unix:///path, or http(s)://… for signal-cli-rest-api
    multi_account: bool = False
    poll_seconds: float = 30.0  # while no reply is awaited (a push, a scheduled message)
    active_poll_seconds: float = 1.0  # while one is
    active_seconds: float = 60.0  # how long after a message its reply is awaited
    max_file_bytes: int = 100_000_000
    typing: bool = True

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Config:
        return cls(
            relay_url=env["RELAY_URL"],
            secret=env["SIGNAL_RELAY_SECRET"],
            account=env["SIGNAL_ACCOUNT"],
            state_dir=Path(env.get("FORWARDER_STATE_DIR", "state")),
            signal_cli=env.get("SIGNAL_CLI", "tcp://127.0.0.1:7583"),
            multi_account=env.get("SIGNAL_CLI_MULTI_ACCOUNT", "").lower() in ("1", "true", "yes"),
            poll_seconds=float(env.get("POLL_SECONDS", "30")),
            active_poll_seconds=float(env.get("ACTIVE_POLL_SECONDS", "1")),
            active_seconds=float(env.get("ACTIVE_SECONDS", "60")),
            typing=env.get("TYPING_INDICATOR", "true").lower() not in ("0", "false", "no"),
        )


@dataclass
class Forwarder:
    config: Config
    gateway: Gateway
    signal: Any  # JsonRpcSignal | RestSignal
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    reports: list[dict[str, Any]] = field(default_factory=list)  # waiting to be told to the gateway
    awaited: list[float] = field(default_factory=list)  # when each reply awaited stops being awaited
    wake: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.spool = Spool(self.config.state_dir)
        self.ledger = Ledger(self.config.state_dir / "sent.json")
        self._lock = threading.Lock()

    # inbound --------------------------------------------------------------------------------

    def received(self, notification: dict[str, Any]) -> bool:
        """Keep a notification worth posting in the spool, then post it; False when not posted now."""
        if not forwardable(notification, self.config.account):
            return True
        path = self.spool.add(notification)
        return self.post(path)

    def post(self, path: Path) -> bool:
        """Post one spooled message (its files uploaded first); True when the gateway took it or
        refused it for good (then it is kept under rejected/), False to try again later."""
        notification = json.loads(path.read_text())
        try:
            uploads = self._upload(notification)
            self.gateway.request("", {**notification, "uploads": uploads}, msg_id=f"msg_signal_{path.stem}")
        except GatewayUnavailable as exc:
            logger.warning("gateway did not take a message; it stays in the spool", extra={"reason": str(exc)})
            return False
        except GatewayRefused as exc:
            logger.error("gateway refused a message; kept under rejected/", extra={"reason": str(exc)})
            self.spool.reject(path)
            return True
        self.spool.done(path)
        with self._lock:
            self.awaited.append(self.clock() + self.config.active_seconds)
        self.wake.set()
        self._show_typing(notification)
        return True

    def _upload(self, notification: dict[str, Any]) -> dict[str, str]:
        """Each file of the message, fetched from signal-cli and PUT where the gateway said; a file
        that cannot be had is left out (the model is told it could not be opened)."""
        files = {}
        for item in attachments_of(notification):
            try:
                data = self.signal.attachment(item["id"])
            except SignalCliError as exc:
                logger.warning("an attachment could not be read from signal-cli", extra={"reason": str(exc)})
                continue
            if data:
                files[item["id"]] = (data, str(item.get("contentType") or ""))
        if not files:
            return {}
        wanted = [
            {"id": key, "size": len(data), **({"content_type": mime} if mime else {})}
            for key, (data, mime) in files.items()
        ]
        try:
            answer = self.gateway.request("uploads", {"files": wanted}, msg_id=f"msg_up_{time.time_ns()}")
        except GatewayRefused as exc:  # the message goes without its files rather than not at all
            logger.error("the gateway refused the message's files", extra={"reason": str(exc)})
            return {}
        uploads = {}
        for grant in answer.get("uploads") or ():
            data, _ = files[grant["id"]]
            self.gateway.upload(grant["url"], grant.get("headers") or {}, data)
            uploads[grant["id"]] = grant["upload_id"]
        return uploads

    def _show_typing(self, notification: dict[str, Any]) -> None:
        if not self.config.typing:
            return
        try:
            self.signal.typing(*chat_of(notification))
        except Exception:  # noqa: BLE001 - decoration: a failed indicator changes nothing
            logger.debug("typing indicator not shown")

    def retry_spool(self) -> None:
        """Post what an earlier run (or an earlier try) left in the spool, oldest first."""
        for path in self.spool.pending():
            if not self.post(path):
                return

    # outbound -------------------------------------------------------------------------------

    def collect(self) -> int:
        """One call on the mailbox: the reports of earlier letters out, the next letters in, each
        sent (or reported from the ledger). How many letters came."""
        with self._lock:
            reports = list(self.reports)
        answer = self.gateway.request(
            "outbox", {"reports": reports, "limit": LETTERS_PER_POLL}, msg_id=f"msg_poll_{time.time_ns()}"
        )
        answered = {*answer.get("settled", ()), *answer.get("ignored", ())}
        with self._lock:
            self.reports = [r for r in self.reports if r["id"] not in answered]
        letters = [letter for letter in answer.get("letters") or () if isinstance(letter, dict)]
        for letter in letters:
            if not self._deliver(letter):
                break  # signal-cli cannot send now: the rest wait behind it, in order
        if letters:
            self._reply_came(len(letters))
        return len(letters)

    def _deliver(self, letter: dict[str, Any]) -> bool:
        """Send one letter unless the ledger knows it; False when it must be tried again later."""
        letter_id = str(letter["id"])
        known = self.ledger.get(letter_id)
        if known is not None:
            self._report(report_of(letter_id, known))
            return True
        try:
            files = [
                (self.gateway.download(f["url"], self.config.max_file_bytes), f.get("mime", ""), f.get("name", ""))
                for f in letter.get("attachments") or ()
            ]
        except GatewayUnavailable as exc:
            logger.warning("a reply's file could not be downloaded; trying later", extra={"reason": str(exc)})
            return False
        except GatewayRefused as exc:
            self._settle(letter_id, {"status": "failed", "error": str(exc)})
            return True
        self.ledger.record(letter_id, {"status": "sending"})
        try:
            outcome = self.signal.send(letter, files)
        except SignalCliNoAnswer as exc:  # it may be on its way: never sent twice
            outcome = Outcome("unknown", error=str(exc))
        except SignalCliError as exc:
            outcome = Outcome("retry", error=str(exc))
        if outcome.status == "retry":
            # signal-cli did not send it (unreachable, or Signal asked it to wait): later, in order
            self.ledger.forget(letter_id)
            logger.warning("signal-cli could not send a reply now", extra={"reason": outcome.error})
            return False
        if outcome.status == "sent":
            self._settle(letter_id, {"status": "sent", "timestamp": outcome.timestamp})
        else:
            logger.warning("signal-cli refused a reply", extra={"status": outcome.status, "reason": outcome.error})
            self._settle(letter_id, {"status": outcome.status, "error": outcome.error})
        return True

    def _settle(self, letter_id: str, entry: dict[str, Any]) -> None:
        self.ledger.record(letter_id, entry)
        self._report(report_of(letter_id, entry))

    def _report(self, report: dict[str, Any]) -> None:
        with self._lock:
            self.reports = [r for r in self.reports if r["id"] != report["id"]] + [report]

    def _reply_came(self, count: int) -> None:
        with self._lock:
            del self.awaited[:count]

    def interval(self) -> float:
        """How long until the next collection: soon while a reply is awaited (or a report waits)."""
        now = self.clock()
        with self._lock:
            self.awaited = [until for until in self.awaited if until > now]
            busy = bool(self.awaited) or bool(self.reports)
        return self.config.active_poll_seconds if busy else self.config.poll_seconds

    def collect_forever(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                came = self.collect()
                backoff = 1.0
            except GatewayUnavailable as exc:
                logger.warning("mailbox not collected", extra={"reason": str(exc)})
                self.wake.wait(exc.retry_after or backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
                continue
            except GatewayRefused as exc:  # the gateway cannot read these reports: they would wedge it
                logger.error("the gateway refused the reports; they are dropped", extra={"reason": str(exc)})
                with self._lock:
                    self.reports.clear()
                self.wake.wait(backoff)
                continue
            if came:
                continue  # more may wait, and the reports go at once
            self.pause()

    def pause(self) -> None:
        """Until the next collection: the interval; a message posted meanwhile shortens an idle
        wait to the active one (its reply cannot be there at once, so no call right away)."""
        self.wake.clear()
        if self.wake.wait(self.interval()):
            self.wake.clear()
            self.wake.wait(self.config.active_poll_seconds)

    def receive_forever(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                if isinstance(self.signal, JsonRpcSignal):
                    self.signal.connect()
                    logger.info("connected to signal-cli")
                self.retry_spool()
                for notification in self.signal.receive():
                    backoff = 1.0
                    if not self.received(notification):
                        self.sleep(backoff)  # the spool keeps it; the next message retries it first
                        self.retry_spool()
                if isinstance(self.signal, RestSignal):
                    continue  # one /v1/receive call ended: the next one at once
            except (OSError, SignalCliError) as exc:
                logger.warning("signal-cli unreachable", extra={"reason": str(exc)})
            if isinstance(self.signal, JsonRpcSignal):
                self.signal.close()
            self.sleep(backoff)
            backoff = min(backoff * 2, 60.0)


def build(config: Config, clock: Callable[[], float] = time.time) -> Forwarder:
    """The forwarder `config` describes; `clock` signs its posts (the gateway accepts 5 minutes off)."""
    gateway = Gateway(config.relay_url, config.secret, clock=clock)
    signal: JsonRpcSignal | RestSignal
    if config.signal_cli.startswith(("http://", "https://")):
        signal = RestSignal(config.signal_cli, config.account)
    else:
        signal = JsonRpcSignal(config.signal_cli, account_param=config.account if config.multi_account else "")
    return Forwarder(config, gateway, signal)


def main() -> None:  # pragma: no cover - runs until stopped
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"), format="%(asctime)s %(levelname)s %(message)s")
    forwarder = build(Config.from_env(dict(os.environ)))
    stop = threading.Event()
    threading.Thread(target=forwarder.collect_forever, args=(stop,), name="mailbox", daemon=True).start()
    try:
        forwarder.receive_forever(stop)
    except KeyboardInterrupt:
        stop.set()


if __name__ == "__main__":
    main()
