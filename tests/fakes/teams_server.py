"""A fake Bot Framework on a loopback port.

`FakeBotFramework` (fixture `fake_bot_framework` in the test modules) answers
- `GET /v1/.well-known/openidconfiguration`: an OpenID configuration whose `jwks_uri` is
  `GET /v1/.well-known/keys`, which lists `fake.keys` (JWKs, with `endorsements`);
- `POST /<tenant>/oauth2/v2.0/token`: Entra ID's client-credentials grant; it checks the form against
  `app_id`/`app_password` and issues `bf-token-1`, `bf-token-2`, … (`fake.issued`);
- `POST /v3/conversations/<id>/activities`: the Bot Connector; it requires a bearer token it issued
  and answers ids `activity-1`, `activity-2`, …; `fake.activities` lists (conversation id, body);
- `GET <path>` of `fake.files` (path with its query -> answer): an attachment on the service URL
  (with a bearer token it issued) or a file's pre-authenticated download URL (`open_files`: none);
- `PUT /v3/conversations/<id>/activities/<activity id>` updates one (`fake.updates` lists
  (conversation id, activity id, body)).
Every request is recorded in `fake.requests`; `answer_next` scripts failures (see loopback.py).

The keys it serves are JWKs of `tests.fakes.jwt.SigningKeyPair`s. A form-encoded body (the token
request) is recorded in `json` as a dict of its fields.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer

DEFAULT_APP_ID = "00000000-0000-0000-0000-00000000b07a"
DEFAULT_APP_PASSWORD = "fake-app-password-~secret"


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    json: Any  # the parsed JSON body, or the form fields of a form-encoded one; None otherwise
    headers: dict[str, str]  # lower-cased names


@dataclass
class FakeBotFramework(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-bot-framework"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST", "PUT"})

    app_id: str = DEFAULT_APP_ID
    app_password: str = DEFAULT_APP_PASSWORD
    keys: list[dict[str, Any]] = field(default_factory=list)
    expires_in: int = 3600
    issued: list[str] = field(default_factory=list)
    activities: list[tuple[str, Any]] = field(default_factory=list)
    files: dict[str, ScriptedAnswer] = field(default_factory=dict)
    open_files: frozenset[str] = frozenset()  # paths of `files` downloaded without a token
    updates: list[tuple[str, str, Any]] = field(default_factory=list)

    @property
    def openid_url(self) -> str:
        return f"{self.base_url}/v1/.well-known/openidconfiguration"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/botframework.com/oauth2/v2.0/token"

    def paths(self, http_method: str = "GET") -> list[str]:
        with self._lock:
            return [r.path for r in self.requests if r.http_method == http_method]

    def token_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/oauth2/v2.0/token")]

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(http_method, path, body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        if request.http_method == "GET" and request.path == "/v1/.well-known/openidconfiguration":
            return ScriptedAnswer(
                200,
                {
                    "issuer": "https://api.botframework.com",
                    "jwks_uri": f"{self.base_url}/v1/.well-known/keys",
                    "id_token_signing_alg_values_supported": ["RS256"],
                },
            )
        if request.http_method == "GET" and request.path == "/v1/.well-known/keys":
            return ScriptedAnswer(200, {"keys": list(self.keys)})
        if request.http_method == "POST" and request.path.endswith("/oauth2/v2.0/token"):
            return self._token(request)
        if request.http_method == "GET" and request.path in self.files:
            if request.path not in self.open_files and request.headers.get("authorization") not in {
                f"Bearer {t}" for t in self.issued
            }:
                return ScriptedAnswer(401, {"message": "Authorization has been denied for this request."})
            return self.files[request.path]
        parts = request.path.split("/")
        if request.http_method == "POST" and len(parts) == 5 and parts[1:3] == ["v3", "conversations"]:
            return self._activity(urllib.parse.unquote(parts[3]), parts[4], request)
        if request.http_method == "PUT" and len(parts) == 6 and parts[1:3] == ["v3", "conversations"]:
            return self._update(urllib.parse.unquote(parts[3]), urllib.parse.unquote(parts[5]), request)
        return ScriptedAnswer(404, {"error": {"code": "NotFound", "message": "no such endpoint"}})

    def _token(self, request: RecordedRequest) -> ScriptedAnswer:
        form = request.json if isinstance(request.json, dict) else {}
        expected = {
            "grant_type": "client_credentials",
            "client_id": self.app_id,
            "client_secret": self.app_password,
            "scope": "https://api.botframework.com/.default",
        }
        if form != expected:
            return ScriptedAnswer(401, {"error": "invalid_client", "error_description": "AADSTS7000215: bad secret"})
        token = f"bf-token-{len(self.issued) + 1}"
        self.issued.append(token)
        return ScriptedAnswer(200, {"token_type": "Bearer", "expires_in": self.expires_in, "access_token": token})

    def _activity(self, conversation: str, tail: str, request: RecordedRequest) -> ScriptedAnswer:
        if tail != "activities":
            return ScriptedAnswer(404, {"error": {"code": "NotFound", "message": "no such endpoint"}})
        if request.headers.get("authorization") not in {f"Bearer {t}" for t in self.issued}:
            return ScriptedAnswer(401, {"message": "Authorization has been denied for this request."})
        body = request.json if isinstance(request.json, dict) else {}
        if body.get("type") != "message" or not isinstance(body.get("text"), str):
            return ScriptedAnswer(400, {"error": {"code": "BadArgument", "message": "invalid activity"}})
        self.activities.append((conversation, body))
        return ScriptedAnswer(201, {"id": f"activity-{len(self.activities)}"})

    def _update(self, conversation: str, activity_id: str, request: RecordedRequest) -> ScriptedAnswer:
        if request.headers.get("authorization") not in {f"Bearer {t}" for t in self.issued}:
            return ScriptedAnswer(401, {"message": "Authorization has been denied for this request."})
        known = {f"activity-{i}" for i in range(1, len(self.activities) + 1)}
        if activity_id not in known:
            return ScriptedAnswer(404, {"error": {"code": "ActivityNotFoundInConversation", "message": "not found"}})
        body = request.json if isinstance(request.json, dict) else {}
        if body.get("type") != "message" or not isinstance(body.get("text"), str):
            return ScriptedAnswer(400, {"error": {"code": "BadArgument", "message": "invalid activity"}})
        self.updates.append((conversation, activity_id, body))
        return ScriptedAnswer(200, {"id": activity_id})
