"""Local mode's HTTP front: API Gateway (HTTP API, payload 2.0) in front of the ingress handler,
plus the web chat page and local-only endpoints:

- `GET /local/outbox`, `GET /local/health`: open, as before (the CLI and tests read them).
- `GET /local/events`: the lifecycle events published to the (embedded) event bus, newest last.
- `GET /local/session?chat_id=<id>`: which session a web chat chat id is in (`session_key`, and
  `session_id`, `created_at`, `updated_at` once the first message made one, else null).
- `POST /api/sessions`: the session API, with `Authorization: Bearer <SESSION_API_TOKEN>` (generated
  at start-up, in the state file) in place of the deployed route's IAM signing.
- `GET /local/info`: the agent (provider name and model), the enabled platforms, the version and
  the gateway commands (`name`, `summary`, `everyone`); the page builds its command buttons from it.
- `/webhooks/<platform>[/...]` and a named profile's `/p/<profile>/webhooks/<platform>[/...]`:
  the ingress function, as the deployed routes call it (it reads the profile from `rawPath`).

The two page endpoints want the `x-hermes-local-token` header the page already sends with each
message (WEBCHAT_TOKEN, embedded in the page), so only that page reads them; neither returns a
secret, an endpoint URL or a lease token.
"""

from __future__ import annotations

import base64
import hmac
import json
import re
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlsplit

if TYPE_CHECKING:
    from hermes_gateway.domain.sessions import SessionEntry
    from hermes_gateway.settings import Settings
    from hermes_local.runtime import LocalGateway


API_GATEWAY_MAX_BODY = 10 * 1024 * 1024  # HTTP API payload quota
STATIC = Path(__file__).resolve().parent / "static"
TOKEN_HEADER = "x-hermes-local-token"  # noqa: S105 - a header name, not a secret
SESSION_API_PATH = "/api/sessions"  # as deployed (infra/capabilities/api.py)
SESSION_API_TOKEN = "SESSION_API_TOKEN"  # noqa: S105 - the name of the local bearer token
_CHAT_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what the web chat adapter accepts


class SessionStoreReader(Protocol):
    def get_route(self, session_key: str) -> SessionEntry | None: ...


def webchat_session(chat_id: str, settings: Settings, store: SessionStoreReader) -> dict[str, Any]:
    """The session a web chat chat id is in: its key, and the route's session once one exists.

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
    route = store.get_route(key)
    return {
        "chat_id": chat_id,
        "session_key": key,
        "session_id": route.session_id if route else None,
        "created_at": route.created_at if route else None,
        "updated_at": route.updated_at if route else None,
    }


def gateway_info(settings: Settings, platforms: list[str]) -> dict[str, Any]:
    """What the page shows about the running gateway; nothing secret (no keys, no endpoint URLs)."""
    import hermes_gateway.services.turn_commands  # noqa: F401 - lists its commands in HANDLED_ELSEWHERE
    from hermes_gateway import __version__
    from hermes_gateway.services.commands import ALWAYS_ALLOWED, COMMANDS, HANDLED_ELSEWHERE

    return {
        "provider": settings.provider.name,
        "model": settings.provider.model or None,
        "profile": settings.profile,
        "stage": settings.stage,
        "platforms": platforms,
        "version": __version__,
        "commands": [
            {
                "name": name,
                "summary": summary,
                "everyone": name in ALWAYS_ALLOWED or name in settings.access.user_commands,
            }
            for name, (summary, _) in COMMANDS.items()
        ]
        # the running turn's (/stop, /approve, ...): each checks who may use it when it is used
        + [{"name": name, "summary": summary, "everyone": True} for name, summary in HANDLED_ELSEWHERE.items()],
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

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.send_header("cache-control", "no-store")
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (a page reload); what it asked for was done regardless

    def _json(self, status: int, data: Any) -> None:
        self._send(status, json.dumps(data).encode(), "application/json")

    def do_GET(self) -> None:
        gateway = self.server.gateway
        parts = urlsplit(self.path)
        if parts.path in ("/", "/index.html"):
            page = (STATIC / "index.html").read_text(encoding="utf-8")
            # A JS string literal, whatever the token holds (WEBCHAT_TOKEN may come from the environment).
            token = json.dumps(gateway.local_secrets["WEBCHAT_TOKEN"]).replace("<", "\\u003c")
            page = page.replace('"__WEBCHAT_TOKEN__"', token)
            self._send(200, page.encode(), "text/html; charset=utf-8")
        elif parts.path == "/local/health":
            self._json(200, gateway.health())
        elif parts.path == "/local/events":
            self._json(200, gateway.events())
        elif parts.path == "/local/outbox":
            filters = dict(parse_qsl(parts.query))
            self._json(200, gateway.outbox(chat_id=filters.get("chat_id"), platform=filters.get("platform")))
        elif parts.path in ("/local/session", "/local/info"):
            self._page_endpoint(parts.path, dict(parse_qsl(parts.query)))
        elif is_webhook_path(parts.path):
            self._webhook("GET")
        else:
            self._json(404, {"ok": False, "error": "not found"})

    def _page_endpoint(self, path: str, query: dict[str, str]) -> None:
        from hermes_gateway import wiring

        expected = self.server.gateway.local_secrets.get("WEBCHAT_TOKEN", "")
        given = self.headers.get(TOKEN_HEADER) or ""
        if not expected or not hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8")):
            self._json(401, {"ok": False, "error": "wrong or missing web chat token (reload the page)"})
            return
        if path == "/local/info":
            self._json(200, gateway_info(wiring.settings(), self.server.gateway.enabled_platforms()))
            return
        chat_id = query.get("chat_id", "")
        if not _CHAT_ID.match(chat_id):
            self._json(400, {"ok": False, "error": "chat_id must be 1-64 letters, digits, '_' or '-'"})
            return
        self._json(200, webchat_session(chat_id, wiring.settings(), wiring.session_store()))

    def do_POST(self) -> None:
        if is_webhook_path(urlsplit(self.path).path):
            self._webhook("POST")
        elif urlsplit(self.path).path == SESSION_API_PATH:
            self._session_api()
        else:
            self._json(404, {"ok": False, "error": "not found"})

    def _session_api(self) -> None:
        """The session API as deployed, with local mode's bearer token in place of IAM signing."""
        expected = self.server.gateway.local_secrets.get(SESSION_API_TOKEN, "")
        given = self.headers.get("authorization") or ""
        scheme, _, token = given.partition(" ")
        if not expected or scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), expected.encode()):
            refused = {"reason": "permission_denied", "message": "wrong or missing token"}
            self._json(403, {"ok": False, "error": refused})
            return
        length = int(self.headers.get("content-length") or 0)
        if length > API_GATEWAY_MAX_BODY:
            self._json(413, {"message": "Request Entity Too Large"})
            return
        body = self.rfile.read(length) if length else b""
        event = api_gateway_v2_event("POST", self.path, list(self.headers.items()), body, self.client_address[0])
        event["routeKey"] = event["requestContext"]["routeKey"] = f"POST {SESSION_API_PATH}"
        # What API Gateway's IAM authorizer adds; the function refuses a request without it.
        event["requestContext"]["authorizer"] = {"iam": {"userArn": "local-token", "callerId": "local"}}
        try:
            result = self.server.gateway.functions.invoke("session_api", event)
        except Exception:
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"message": "Internal Server Error"})
            raise
        self._send(int(result.get("statusCode", 200)), str(result.get("body", "")).encode(), "application/json")

    def do_PUT(self) -> None:  # Matrix application-service transactions
        if is_webhook_path(urlsplit(self.path).path):
            self._webhook("PUT")
        else:
            self._json(404, {"ok": False, "error": "not found"})

    def _webhook(self, method: str) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length > API_GATEWAY_MAX_BODY:
            self._json(413, {"message": "Request Entity Too Large"})
            return
        body = self.rfile.read(length) if length else b""
        event = api_gateway_v2_event(method, self.path, list(self.headers.items()), body, self.client_address[0])
        try:
            result = self.server.gateway.functions.invoke("ingress", event)
        except Exception:
            self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"message": "Internal Server Error"})
            raise
        self._send(
            int(result.get("statusCode", 200)),
            str(result.get("body", "")).encode(),
            result.get("headers", {}).get("content-type", "application/json"),
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], gateway: LocalGateway) -> None:
        super().__init__(address, _Handler)
        self.gateway = gateway


def serve(gateway: LocalGateway, host: str, port: int) -> ThreadingHTTPServer:
    server = _Server((host, port), gateway)
    threading.Thread(target=server.serve_forever, name="http-front", daemon=True).start()
    return server
