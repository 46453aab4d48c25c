"""Local mode's HTTP front: API Gateway (HTTP API, payload 2.0) in front of the ingress handler,
plus the web chat page and local-only endpoints:

- `GET /`: the web chat page, with the web chat token (WEBCHAT_TOKEN) embedded in it.
- `GET /local/outbox`, `GET /local/health`: every delivery that would have gone to a platform, and
  whether local mode runs.
- `GET /local/events`: the lifecycle events published to the (embedded) event bus, newest last.
- `GET /local/session?chat_id=<id>`: which session a web chat chat id is in (`session_key`, and
  `session_id`, `title`, `created_at`, `updated_at` once the first message made one, else null).
- `GET /local/info`: the agent (provider name and model), the enabled platforms, the version and
  the gateway commands (`name`, `summary`, `everyone`); the page builds its command buttons from it.
- `POST /local/email`: a raw RFC 822 message, received as SES would (stored in the embedded S3,
  the ingress invoked with SES's event; `?spf=FAIL` and the like set SES's verdicts); 202.
- `POST /local/upload`: a file the web chat page attaches (raw body, `Content-Type`, `x-file-name`),
  kept in the media bucket; answers the reference the page sends with its message.
- `POST /api/sessions` (a named profile's: `POST /p/<profile>/api/sessions`): the session API, with
  `Authorization: Bearer <SESSION_API_TOKEN>` (generated at start-up, in the state file) in place
  of the deployed route's IAM signing.
- `/webhooks/<platform>[/...]` and a named profile's `/p/<profile>/webhooks/<platform>[/...]`:
  the ingress function, as the deployed routes call it (it reads the profile from `rawPath`).

Every `/local/*` endpoint wants the `x-hermes-local-token` header the page sends with each
message, so only that page (or a client given the token) reads them; none returns a secret, an
endpoint URL or a lease token. Everything but the webhooks (which their signatures guard, and which
a tunnel reaches under its own host name) answers only `Host: 127.0.0.1:<port>` or
`localhost:<port>`, and no other site's `Origin`: a page the user opens, even one that rebinds its
DNS name to 127.0.0.1, can neither read the page's token nor call the endpoints.
"""

from __future__ import annotations

import base64
import functools
import hmac
import json
import re
import secrets
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:
    from hermes_gateway.domain.sessions import SessionEntry, SessionInfo
    from hermes_gateway.settings import Settings
    from hermes_local.runtime import LocalGateway


API_GATEWAY_MAX_BODY = 10 * 1024 * 1024  # HTTP API payload quota
STATIC = Path(__file__).resolve().parent / "static"
TOKEN_HEADER = "x-hermes-local-token"  # noqa: S105 - a header name, not a secret
SESSION_API_PATH = "/api/sessions"  # as deployed (infra/capabilities/api.py)
SESSION_API_TOKEN = "SESSION_API_TOKEN"  # noqa: S105 - the name of the local bearer token
_CHAT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the web chat adapter accepts
_METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,20}")  # an HTTP method is a token (RFC 9110)


class SessionStoreReader(Protocol):
    def get(self, session_key: str) -> SessionEntry | None: ...


class SessionTitles(Protocol):
    def get_session(self, session_id: str) -> SessionInfo | None: ...


def webchat_session(
    chat_id: str, settings: Settings, store: SessionStoreReader, titles: SessionTitles | None = None
) -> dict[str, Any]:
    """The session a web chat chat id is in: its key, and the route's session once one exists,
    with its title (`/title`; None until one is set).

    The source is the one the web chat adapter builds for the page (a DM, the chat id as user id),
    keyed with the running settings, as ingress and the router key it."""
    from hermes_gateway.domain.session_key import build_session_key
    from hermes_gateway.domain.source import SessionSource

    source = SessionSource(platform="webchat", chat_id=chat_id, chat_type="dm", user_id=chat_id, user_name="You")
    key = build_session_key(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
        profile=settings.profile,
    )
    route = store.get(key)
    found = titles.get_session(route.session_id) if route is not None and titles is not None else None
    return {
        "chat_id": chat_id,
        "session_key": key,
        "session_id": route.session_id if route else None,
        "title": found.title if found is not None else None,
        "created_at": route.created_at if route else None,
        "updated_at": route.updated_at if route else None,
    }


def gateway_info(settings: Settings, platforms: list[str]) -> dict[str, Any]:
    """What the page shows about the running gateway; nothing secret (no keys, no endpoint URLs)."""
    from hermes_gateway import __version__
    from hermes_gateway.services.commands import COMMANDS

    return {
        "provider": settings.provider.name,
        "model": settings.provider.model or None,
        "profile": settings.profile,
        "stage": settings.stage,
        "platforms": platforms,
        "version": __version__,
        # the running turn's (/stop, /approve, ...) check who may use them when they are used
        "commands": [
            {
                "name": spec.name,
                "summary": spec.summary,
                "everyone": spec.everyone or spec.name in settings.access.user_commands,
            }
            for spec in COMMANDS.values()
        ],
    }


def api_gateway_v2_event(
    method: str, target: str, headers: list[tuple[str, str]], body: bytes, source_ip: str
) -> dict[str, Any]:
    """An HTTP API payload format 2.0 event, as API Gateway builds it."""
    parts = urlsplit(target)
    merged: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()  # payload 2.0 lower-cases header names and comma-joins repeats
        merged[key] = f"{merged[key]},{value}" if key in merged else value
    query: dict[str, str] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        query[name] = f"{query[name]},{value}" if name in query else value
    try:
        text, is_b64 = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, is_b64 = base64.b64encode(body).decode("ascii"), True
    segments = parts.path.strip("/").split("/")
    # `/p/<profile>/webhooks/...` is a named profile's: its routes are under its own prefix.
    prefix = segments[:2] if len(segments) >= 2 and segments[0] == "p" and segments[1] else []
    rest = segments[len(prefix) :]
    path_params = {"platform": rest[1]} if len(rest) >= 2 and rest[0] == "webhooks" and rest[1] else {}
    route = "".join(f"/{segment}" for segment in prefix) + "/webhooks/{platform}"
    if len(rest) > 2 and path_params:
        path_params["proxy"] = "/".join(rest[2:])
        route += "/{proxy+}"
    now = time.time()
    return {
        "version": "2.0",
        "routeKey": f"{method} {route}",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": merged,
        "queryStringParameters": query or None,
        "pathParameters": path_params,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": merged.get("host", "127.0.0.1"),
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": merged.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"{method} {route}",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": text,
        "isBase64Encoded": is_b64,
    }


def is_webhook_path(path: str) -> bool:
    """`/webhooks/...`, or a named profile's `/p/<profile>/webhooks/...`: for the ingress function."""
    if path.startswith("/webhooks/"):
        return True
    segments = path.split("/", 4)  # "", "p", profile, "webhooks", rest
    return len(segments) == 5 and segments[1] == "p" and bool(segments[2]) and segments[3] == "webhooks"


class _Handler(BaseHTTPRequestHandler):
    server_version = "hermes-local"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return  # the functions log what matters; per-request lines would drown them

    def _send(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.send_header("cache-control", "no-store")
            for name, value in (headers or {}).items():
                if name.lower() not in ("content-type", "content-length"):
                    self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a page reload); what it asked for was done regardless

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), "application/json", headers)

    # -- who may ask ------------------------------------------------------------------------

    def _refused(self, path: str) -> bool:
        """Answer 403 unless the request comes from this machine's own clients. A DNS-rebinding page
        reaches 127.0.0.1 under its own name (the `Host` it sends) and a page of another site sends
        its `Origin`. Platform webhooks are exempt: their signatures are the check, and a tunnel to
        local mode sends its own public host name."""
        if is_webhook_path(path):
            return False
        hosts = self.server.hosts
        host = self.headers.get("host")
        origin = self.headers.get("origin")
        if host in hosts and (origin is None or origin in {f"http://{h}" for h in hosts}):
            return False
        where = " or ".join(f"http://{h}" for h in sorted(hosts))
        self._json(403, {"ok": False, "error": f"local mode answers only {where} (Host and Origin)"})
        return True

    def _page_token_ok(self) -> bool:
        """The web chat page's token (WEBCHAT_TOKEN, embedded in the page): every `/local/*` endpoint
        wants it, so only the page (or a client given the token) reads what local mode holds."""
        expected = self.server.gateway.local_secrets.get("WEBCHAT_TOKEN", "")
        given = self.headers.get(TOKEN_HEADER) or ""
        if expected and hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8")):
            return True
        self._json(401, {"ok": False, "error": f"wrong or missing {TOKEN_HEADER} header (reload the page)"})
        return False

    def _body(self) -> bytes | None:
        """The request body by its `Content-Length` (none: empty); None once a 400 or 413 is sent."""
        raw = (self.headers.get("content-length") or "0").strip()
        if not (raw.isascii() and raw.isdigit()):
            self._json(400, {"message": "Content-Length must be a non-negative integer"})
            return None
        length = int(raw)
        if length > API_GATEWAY_MAX_BODY:
            self._json(413, {"message": "Request Entity Too Large"})
            return None
        return self.rfile.read(length) if length else b""

    # -- routing ----------------------------------------------------------------------------

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        if self._refused(parts.path):
            return
        if is_webhook_path(parts.path):
            self._webhook(method)  # the ingress function answers a method the platform does not use
            return
        allowed = _ROUTES.get(parts.path) or (("POST",) if session_api_profile(parts.path) is not None else None)
        if allowed is None:
            self._json(404, {"ok": False, "error": "not found"})
        elif method not in allowed:
            self._json(405, {"ok": False, "error": "method not allowed"}, {"allow": ", ".join(allowed)})
        elif parts.path == UPLOAD_PATH:
            self._upload()
        elif parts.path == EMAIL_PATH:
            self._email(dict(parse_qsl(parts.query)))
        elif method == "POST":
            self._session_api(parts.path)
        else:
            self._get(parts.path, dict(parse_qsl(parts.query)))

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:  # Matrix application-service transactions
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")

    def do_HEAD(self) -> None:
        self._route("HEAD")

    def do_OPTIONS(self) -> None:  # a CORS preflight gets no CORS headers: nothing here is cross-origin
        self._route("OPTIONS")

    def __getattr__(self, name: str) -> Any:
        """Any other method (TRACE, CONNECT, a made-up one) is routed as those above are, so it is
        answered as API Gateway answers it (405 from the ingress function on a webhook, 404 or 405
        here), never with http.server's 501."""
        if name.startswith("do_") and _METHOD.fullmatch(name[3:]):
            return functools.partial(self._route, name[3:])
        raise AttributeError(name)

    def _get(self, path: str, query: dict[str, str]) -> None:
        from hermes_gateway import wiring

        gateway = self.server.gateway
        if path in ("/", "/index.html"):
            page = (STATIC / "index.html").read_text(encoding="utf-8")
            # A JS string literal, whatever the token holds (WEBCHAT_TOKEN may come from the environment).
            token = json.dumps(gateway.local_secrets["WEBCHAT_TOKEN"]).replace("<", "\\u003c")
            page = page.replace('"__WEBCHAT_TOKEN__"', token)
            self._send(200, page.encode(), "text/html; charset=utf-8")
            return
        if not self._page_token_ok():
            return
        if path == "/local/health":
            self._json(200, gateway.health())
        elif path == "/local/events":
            self._json(200, gateway.events())
        elif path == "/local/outbox":
            self._json(200, gateway.outbox(chat_id=query.get("chat_id"), platform=query.get("platform")))
        elif path == "/local/info":
            self._json(200, gateway_info(wiring.settings(), gateway.enabled_platforms()))
        else:
            chat_id = query.get("chat_id", "")
            if not _CHAT_ID.match(chat_id):
                self._json(400, {"ok": False, "error": "chat_id must be 1-64 letters, digits, '_' or '-'"})
                return
            stores = wiring.session_stores()
            self._json(200, webchat_session(chat_id, wiring.settings(), stores.routes, stores.catalogue))

    def _upload(self) -> None:
        """A file the web chat page attaches to a message: kept in the media bucket (the embedded
        S3) until the message's turn fetches it, as a platform keeps a file until a bot asks."""
        from hermes_gateway import wiring
        from hermes_gateway.domain.media import kind_of_mime
        from hermes_gateway.platforms.webchat import UPLOAD_PREFIX

        if not self._page_token_ok():
            return
        raw = (self.headers.get("content-length") or "").strip()
        limit = wiring.settings().media.max_bytes
        if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) <= limit:
            self._json(413 if raw.isdigit() else 400, {"ok": False, "error": f"a file of 1 byte to {limit} bytes"})
            return
        store = wiring.media_store()
        if store is None:
            self._json(503, {"ok": False, "error": "no media bucket"})
            return
        data = self.rfile.read(int(raw))
        mime = (self.headers.get("content-type") or "application/octet-stream").split(";", 1)[0].strip()
        name = unquote(self.headers.get("x-file-name") or "")[:200] or "file"
        upload_id = secrets.token_hex(16)
        store.put(UPLOAD_PREFIX + upload_id, data, mime)
        kind = kind_of_mime(mime)
        self._json(200, {"upload_id": upload_id, "name": name, "mime": mime, "size": len(data), "kind": kind})

    def _email(self, query: dict[str, str]) -> None:
        """A raw RFC 822 message, received as SES's receipt rule would receive it: stored in the
        embedded S3 and handed to the ingress function asynchronously (hermes_local.ses); the query
        may set SES's verdicts (`?spf=FAIL&virus=FAIL`, to try a refusal). 202 with its SES id."""
        from hermes_local.ses import parse_verdicts

        if not self._page_token_ok():
            return
        body = self._body()
        if body is None:
            return
        try:
            verdicts = parse_verdicts([f"{k}={v}" for k, v in query.items()])
            ses_id = self.server.gateway.receive_email(body, verdicts)
        except ValueError as exc:
            self._json(400, {"ok": False, "error": str(exc)})
            return
        self._json(202, {"ok": True, "ses_message_id": ses_id})

    def _session_api(self, path: str) -> None:
        """The session API as deployed (a named profile's at `/p/<profile>/api/sessions`), with local
        mode's bearer token in place of IAM signing."""
        expected = self.server.gateway.local_secrets.get(SESSION_API_TOKEN, "")
        given = self.headers.get("authorization") or ""
        scheme, _, token = given.partition(" ")
        if (
            not expected
            or scheme.lower() != "bearer"
            or not hmac.compare_digest(token.encode("utf-8", "replace"), expected.encode())
        ):
            refused = {"reason": "permission_denied", "message": "wrong or missing token"}
            self._json(403, {"ok": False, "error": refused})
            return
        body = self._body()
        if body is None:
            return
        event = api_gateway_v2_event("POST", self.path, list(self.headers.items()), body, self.client_address[0])
        event["routeKey"] = event["requestContext"]["routeKey"] = f"POST {path}"
        # What API Gateway's IAM authorizer adds; the function refuses a request without it.
        event["requestContext"]["authorizer"] = {"iam": {"userArn": "local-token", "callerId": "local"}}
        self._invoke("session_api", event)

    def _webhook(self, method: str) -> None:
        body = self._body()
        if body is None:
            return
        self._invoke(
            "ingress", api_gateway_v2_event(method, self.path, list(self.headers.items()), body, self.client_address[0])
        )

    def _invoke(self, function: str, event: dict[str, Any]) -> None:
        """Run the function and send its answer as API Gateway would: status, headers and body."""
        try:
            result = self.server.gateway.functions.invoke(function, event)
        except Exception:
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"message": "Internal Server Error"})
            raise
        headers = {str(k): str(v) for k, v in (result.get("headers") or {}).items()}
        content_type = next((v for k, v in headers.items() if k.lower() == "content-type"), "application/json")
        self._send(int(result.get("statusCode", 200)), str(result.get("body", "")).encode(), content_type, headers)


# The front's own endpoints and their methods (the session API and the webhooks are routed apart).
UPLOAD_PATH = "/local/upload"
EMAIL_PATH = "/local/email"  # a raw e-mail, received as SES would (POST, raw RFC 822 body)
_ROUTES: dict[str, tuple[str, ...]] = {
    path: ("GET",)
    for path in ("/", "/index.html", "/local/health", "/local/events", "/local/outbox", "/local/session", "/local/info")
}
_ROUTES[UPLOAD_PATH] = ("POST",)
_ROUTES[EMAIL_PATH] = ("POST",)
_SESSION_API_ROUTE = re.compile(r"^(?:/p/([a-z][a-z0-9_]{0,29}))?" + re.escape(SESSION_API_PATH) + "$")


def session_api_profile(path: str) -> str | None:
    """ "" for the session API of the deployment's own profile, the name for a named profile's
    (`/p/<profile>/api/sessions`, as deployed), None when the path is neither."""
    found = _SESSION_API_ROUTE.match(path)
    return None if found is None else found.group(1) or ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], gateway: LocalGateway) -> None:
        from hermes_local.aws import loopback_hosts

        super().__init__(address, _Handler)
        self.gateway = gateway
        port = int(self.server_address[1])
        self.hosts = loopback_hosts(port) | {f"{address[0]}:{port}"}


def serve(gateway: LocalGateway, host: str, port: int) -> ThreadingHTTPServer:
    server = _Server((host, port), gateway)
    threading.Thread(target=server.serve_forever, name="http-front", daemon=True).start()
    return server
