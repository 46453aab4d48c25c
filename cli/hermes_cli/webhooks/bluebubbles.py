"""BlueBubbles: the server's webhooks (`hermes-gateway webhooks register|status bluebubbles`).

BlueBubbles registers webhooks through its own REST API (`POST /api/v1/webhook {url, events}`,
with the server password in the query). The URL registered is the gateway's webhook URL with the
webhook secret as `?password=`: BlueBubbles signs nothing, so that secret is what the gateway
checks. Only `new-message` is subscribed: every other event (`updated-message`'s delivery and read
reports of each reply, typing, read status) is acknowledged and left out by the gateway, and each
would cost a request for nothing. A webhook registered earlier for the same URL with another
secret (before a rotation) is deleted, or BlueBubbles would post every message twice, once
refused. Nothing printed carries a secret.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.base import AdapterContext, HttpClient
from hermes_gateway.platforms.bluebubbles import SECRET_PARAMETER, server_url
from hermes_gateway.settings.declare import is_secure_url

EVENTS = ["new-message"]
_SECRET_PARAMETERS = ("password", "guid", "token")  # the names a URL's secret travels under


def _client(context: AdapterContext, *extra: str) -> tuple[HttpClient, str]:
    password = context.secret("BLUEBUBBLES_PASSWORD")
    if not password or not server_url(context):
        raise PermanentError("bluebubbles is not configured: set BLUEBUBBLES_PASSWORD and BLUEBUBBLES_SERVER_URL")
    secrets = (password, *extra)
    forms = tuple(f for s in secrets for f in (s, urllib.parse.quote(s, safe=""), urllib.parse.quote_plus(s)))
    http = HttpClient(server_url(context), platform="bluebubbles", scrub=forms)
    return http, "?" + urllib.parse.urlencode({SECRET_PARAMETER: password})


def with_secret(url: str, secret: str) -> str:
    """The webhook URL BlueBubbles is given: the gateway's, its secret as `?password=`."""
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != SECRET_PARAMETER]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode([*query, (SECRET_PARAMETER, secret)])))


def redacted(url: str) -> str:
    """A registered URL as it may be shown: the secrets in its query replaced."""
    parts = urllib.parse.urlsplit(url)
    query = [(k, "<redacted>" if k in _SECRET_PARAMETERS else v) for k, v in urllib.parse.parse_qsl(parts.query)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query, safe="<>")))


def _base(url: str) -> str:
    return urllib.parse.urlunsplit(urllib.parse.urlsplit(url)._replace(query="", fragment=""))


def register_webhook(context: AdapterContext, url: str) -> str:
    """Register the URL (with the webhook secret) for `new-message`, and delete what an earlier
    secret registered for it. Returns a human line."""
    secret = context.secret("BLUEBUBBLES_WEBHOOK_SECRET")
    if not secret:
        raise PermanentError("set BLUEBUBBLES_WEBHOOK_SECRET first")
    if not is_secure_url(url):
        raise PermanentError("bluebubbles: the webhook URL must be an https URL (http only to this machine)")
    http, auth = _client(context, secret)
    registered = with_secret(url, secret)
    answer = http.request("POST", "/api/v1/webhook" + auth, json_body={"url": registered, "events": EVENTS})
    if answer.status != 200:
        raise http.failure(answer, gone=())
    stale = [w for w in _webhooks(http, auth) if _base(w["url"]) == _base(url) and w["url"] != registered]
    for webhook in stale:
        gone = http.request("DELETE", f"/api/v1/webhook/{webhook['id']}" + auth)
        if gone.status not in (200, 404):
            raise http.failure(gone, gone=())
    removed = f"; {len(stale)} registered with an earlier secret removed" if stale else ""
    return f"BlueBubbles will post {', '.join(EVENTS)} events to {url} (with the webhook secret){removed}"


def webhook_status(context: AdapterContext) -> dict[str, Any]:
    """The webhooks the server has registered, secrets redacted."""
    http, auth = _client(context, context.secret("BLUEBUBBLES_WEBHOOK_SECRET") or "")
    return {
        "webhooks": [
            {"id": w["id"], "url": redacted(w["url"]), "events": w.get("events")} for w in _webhooks(http, auth)
        ]
    }


def _webhooks(http: HttpClient, auth: str) -> list[dict[str, Any]]:
    answer = http.request("GET", "/api/v1/webhook" + auth)
    data = answer.json_object().get("data")
    if answer.status != 200 or not isinstance(data, list):
        raise http.failure(answer, gone=())
    return [w for w in data if isinstance(w, dict) and isinstance(w.get("url"), str) and "id" in w]
