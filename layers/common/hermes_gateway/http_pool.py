"""One pooled HTTP client for every platform, model and memory call.

A warm Lambda instance keeps its connections between invocations, so the next message to a
platform (or the next model call) skips the TCP and TLS handshakes. urllib3 does the pooling: it is
botocore's own HTTP library, already imported by every function, and pinned in
`requirements/layer.txt` so the layer carries the version the tests ran.

One policy for every caller:
- a connection idle for MAX_IDLE_SECONDS is not used again: the platform may have closed it while
  the instance was frozen between invocations, unseen, and a send on it would fail or hang;
- timeouts: `timeout` seconds to connect, and again for each read (as urllib's were);
- no retries here: each caller has its own (a delivery job is retried by its queue, a model call
  within its retry budget), and a second try of a POST could post twice;
- redirects are followed (at most MAX_REDIRECTS) only for a GET or HEAD without an Authorization
  header, so neither a credential nor a request body is ever sent to a host the caller did not name.

A request that gets no HTTP answer raises `NoAnswer`, whose text is safe to log (no URL, no
header: tokens live there); one that cannot be put on the wire at all raises `Unsendable`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

from hermes_gateway.errors import TransientError

if TYPE_CHECKING:
    import urllib3
    from urllib3.util.retry import Retry

MAX_REDIRECTS = 5
# Connections kept per host. Lambda runs one request at a time; local mode runs several at once.
CONNECTIONS_PER_HOST = 10
# Below the idle timeouts in front of most APIs (60 s for an AWS load balancer, 75 s for nginx).
MAX_IDLE_SECONDS = 50.0
HOSTS_KEPT = 20  # platforms, model servers and token endpoints one process talks to

NoAnswerKind = Literal["timeout", "connect", "broken"]
# A multipart form: each field a value, or a file as (file name, bytes, mime type)
FormFields = dict[str, str | tuple[str, bytes, str]]


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    headers: Mapping[str, str]  # looked up by case-insensitive name


class NoAnswer(Exception):
    """No HTTP answer: `timeout` (none in time), `connect` (no connection: refused, DNS, TLS) or
    `broken` (the connection failed on the way). `reason` is safe to log."""

    def __init__(self, kind: NoAnswerKind, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason

    def transient(self, who: str, scrub: Callable[[str], str] = str) -> TransientError:
        """The caller's error: worth a retry, which the caller's owner makes (a delivery job, a
        model call's budget). `scrub` takes the caller's secrets out of the reason."""
        what = {"timeout": "", "connect": "failed to connect: ", "broken": "the connection failed: "}[self.kind]
        return TransientError(f"{who}: {what}{scrub(self.reason)}")


class Unsendable(ValueError):
    """The URL or a header value cannot be put in a request (a malformed base URL or credential)."""


@cache
def _pool() -> urllib3.PoolManager:
    import urllib3
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    class IdleAwareConnection(HTTPConnection):
        """Taken for dropped (and connected afresh) once idle for MAX_IDLE_SECONDS."""

        used_at = 0.0

        def request(self, *args: Any, **kwargs: Any) -> None:
            self.used_at = time.monotonic()
            super().request(*args, **kwargs)

        @property
        def is_connected(self) -> bool:
            return time.monotonic() - self.used_at < MAX_IDLE_SECONDS and super().is_connected

    class IdleAwareTlsConnection(IdleAwareConnection, HTTPSConnection):
        pass

    class Pool(HTTPConnectionPool):
        ConnectionCls = IdleAwareConnection

    class TlsPool(HTTPSConnectionPool):
        ConnectionCls = IdleAwareTlsConnection

    manager = urllib3.PoolManager(num_pools=HOSTS_KEPT, maxsize=CONNECTIONS_PER_HOST, block=False)
    manager.pool_classes_by_scheme = {"http": Pool, "https": TlsPool}
    return manager


def send(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float,
) -> Reply:
    """One request on a pooled connection; any HTTP status comes back as a Reply."""
    sent = dict(headers or {})
    follow = method in ("GET", "HEAD") and body is None and not any(k.lower() == "authorization" for k in sent)
    retries = _redirects(follow)
    response = _request(_pool(), method, url, timeout, body=body, headers=sent, retries=retries, redirect=follow)
    return Reply(response.status, response.data, response.headers)


def _request(opener: Any, method: str, url: str, timeout: float, **options: Any) -> Any:
    """`opener.request` with this module's timeouts (`timeout` to connect, and for each read), its
    failures in this module's words: Unsendable, or NoAnswer."""
    from http.client import HTTPException

    import urllib3
    from urllib3.exceptions import HTTPError

    try:
        return opener.request(method, url, timeout=urllib3.Timeout(connect=timeout, read=timeout), **options)
    except ValueError:
        raise Unsendable("the URL or a header value cannot be sent") from None
    except (HTTPError, HTTPException, OSError) as exc:
        raise _no_answer(exc, timeout) from None


class Streamed:
    """An answer read as it arrives (`stream`): its status and headers, then its lines."""

    def __init__(self, response: Any, timeout: float) -> None:
        self._response = response
        self._timeout = timeout
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers

    def read(self, limit: int = 65536) -> bytes:
        """The rest of the body, at most `limit` bytes (an error's)."""
        return self._guarded(lambda: self._response.read(limit))

    def lines(self) -> Iterator[bytes]:
        """The body's lines (without their line ends) as they arrive; NoAnswer when the
        connection fails or goes quiet for the timeout on the way."""
        pending = b""
        while True:
            data = self._guarded(lambda: self._response.read1(65536))
            if not data:
                break
            pending += data
            *complete, pending = pending.split(b"\n")
            for line in complete:
                yield line.rstrip(b"\r")
        if pending:
            yield pending.rstrip(b"\r")

    def _guarded(self, read: Callable[[], bytes]) -> bytes:
        from http.client import HTTPException

        from urllib3.exceptions import HTTPError

        try:
            return read()
        except (HTTPError, HTTPException, OSError) as exc:
            raise _no_answer(exc, self._timeout) from None


@contextmanager
def stream(
    method: str, url: str, *, body: bytes | None = None, headers: Mapping[str, str] | None = None, timeout: float
) -> Iterator[Streamed]:
    """One request whose answer is read as it arrives (a model's server-sent events). The
    connection goes back to the pool when the body was read to its end, and is closed when the
    caller stopped before it (an answer cut short by /stop)."""
    response = _request(
        _pool(), method, url, timeout,
        body=body, headers=dict(headers or {}), retries=_redirects(False), redirect=False, preload_content=False,
    )  # fmt: skip
    try:
        yield Streamed(response, timeout)
    finally:
        if not response.isclosed():  # type: ignore[attr-defined]  # not read to its end: the connection cannot be used again
            response.close()
        response.release_conn()


class TooLarge(Exception):
    """The answer's body is longer than the caller's limit (nothing past the limit was read)."""

    def __init__(self, size: int | None, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.size = size  # the announced Content-Length, when there was one
        self.limit = limit


def download(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float,
    limit: int,
    redirects: bool = True,
    connect_to: str | None = None,
    sink: BinaryIO | None = None,
    deadline: float | None = None,
) -> Reply:
    """GET a file on a pooled connection, reading at most `limit` bytes: a longer body (announced
    by Content-Length or found while reading) raises TooLarge. Redirects are followed only without
    an Authorization header, as in `send`, and never with `redirects=False` (the caller checks
    where each one leads: an outbound media reference's public-address check).

    `connect_to`: the IP address to connect to, one the caller resolved and checked, so a second
    DNS answer (a rebinding name) cannot lead elsewhere; the URL's host is still the Host header,
    TLS server name and certificate name. Such a connection is not pooled.

    `sink`: a successful answer's body is written there as it arrives (the Reply's body is then
    empty), so a large file never sits in memory whole. `deadline` (time.monotonic()): the
    download ends with NoAnswer("timeout") when it is not done by then, however it trickles."""
    from http.client import HTTPException

    from urllib3.exceptions import HTTPError

    sent = dict(headers or {})
    follow = redirects and not any(k.lower() == "authorization" for k in sent) and connect_to is None
    opener: Any = _pool()
    if connect_to is not None:
        opener, url, sent = _pinned(url, connect_to, sent)
    response = _request(
        opener, "GET", url, _within(timeout, deadline), headers=sent, retries=_redirects(follow), redirect=follow,
        preload_content=False,
    )  # fmt: skip
    done = False
    try:
        announced = response.headers.get("Content-Length")
        size = int(announced) if announced and announced.isdigit() else None
        if response.status < 300 and size is not None and size > limit:
            raise TooLarge(size, limit)
        into = sink if sink is not None and response.status < 300 else None
        body = bytearray()
        read = 0
        for chunk in response.stream(64 * 1024):
            read += len(chunk)
            if read > limit:
                raise TooLarge(size, limit)
            if deadline is not None and time.monotonic() > deadline:
                raise NoAnswer("timeout", "the download did not finish in the time it had")
            if into is not None:
                into.write(chunk)
            else:
                body += chunk
        done = True
        return Reply(response.status, bytes(body), response.headers)
    except (HTTPError, HTTPException, OSError) as exc:
        raise _no_answer(exc, timeout) from None
    finally:
        if not done:  # a body left unread: the connection cannot carry another request
            response.close()
        response.release_conn() if response.status < 300 or not done else response.drain_conn()


def _within(timeout: float, deadline: float | None) -> float:
    """`timeout`, or less when a deadline comes sooner (never below a moment: the call then fails fast)."""
    if deadline is None:
        return timeout
    return max(0.05, min(timeout, deadline - time.monotonic()))


def _pinned(url: str, address: str, headers: dict[str, str]) -> tuple[Any, str, dict[str, str]]:
    """A one-connection pool to `address` for `url`, the path to ask it for, and the headers with
    the URL's own host as Host."""
    import urllib.parse

    import urllib3

    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    pool: Any
    if secure:
        pool = urllib3.HTTPSConnectionPool(
            address, port, maxsize=1, server_hostname=host, assert_hostname=host, retries=False
        )
    else:
        pool = urllib3.HTTPConnectionPool(address, port, maxsize=1, retries=False)
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    shown_host = f"[{host}]" if ":" in host else host
    named = {k: v for k, v in headers.items() if k.lower() != "host"}
    return pool, path, {**named, "Host": shown_host if parts.port is None else f"{shown_host}:{parts.port}"}


def multipart(fields: FormFields) -> tuple[bytes, str]:
    """A `multipart/form-data` body and its Content-Type: urllib3's encoder, for every caller
    that uploads a file (a platform's media upload, speech to text)."""
    from urllib3 import encode_multipart_formdata

    return encode_multipart_formdata(fields)


def _redirects(follow: bool) -> Retry | bool:
    """urllib3's retries as this module's policy: none, and redirects followed only when `follow`."""
    from urllib3.util.retry import Retry

    if not follow:
        return False
    return Retry(total=None, connect=0, read=0, status=0, other=0, redirect=MAX_REDIRECTS, raise_on_redirect=False)


def _no_answer(exc: Exception, timeout: float) -> NoAnswer:
    """The failure in the words urllib used: what went wrong, never where (the URL carries tokens)."""
    from urllib3.exceptions import (
        ConnectTimeoutError,
        MaxRetryError,
        NewConnectionError,
        ProtocolError,
        ProxyError,
        ReadTimeoutError,
        SSLError,
    )

    if isinstance(exc, MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, ReadTimeoutError):
        return NoAnswer("timeout", f"timed out: no answer within {timeout:g} s")
    if isinstance(exc, NewConnectionError | SSLError | ProxyError):
        return NoAnswer("connect", _cause_text(exc))
    if isinstance(exc, ConnectTimeoutError):
        return NoAnswer("connect", "timed out")
    if isinstance(exc, ProtocolError) and len(exc.args) > 1 and isinstance(exc.args[1], BaseException):
        return NoAnswer("broken", type(exc.args[1]).__name__)
    return NoAnswer("broken", type(exc).__name__)


def _cause_text(exc: BaseException) -> str:
    """The operating system's or TLS library's own words (urllib3's wrapper names the host)."""
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc.args[0] if exc.args else None, BaseException):
        cause = exc.args[0]
    return str(cause)[:200] if cause is not None else type(exc).__name__
