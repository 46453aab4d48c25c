"""A fake Google (signing keys, OAuth token endpoint, Chat API) on a loopback port.

`FakeGoogle` (fixture `fake_google` in the test modules) answers
- `GET /certs`: `fake.keys` as a JWKS document (the Chat or OIDC signing keys);
- `POST /token`: the JWT-bearer grant. It verifies the assertion's RS256 signature with the public
  half of `fake.account_key` and its claims (iss = the service account, aud = this endpoint, the
  chat.bot scope, a lifetime of at most an hour), then issues `ya29.fake-1`, `ya29.fake-2`, …;
- `POST /v1/spaces/<id>/messages`: the Chat API. It requires an issued token, and answers the
  created message with name `spaces/<id>/messages/m1`, `m2`, …; `fake.messages` lists
  (space, query, body). A `requestId` seen before answers the message it created (Chat's
  idempotent create), and creates nothing;
- `GET /v1/media/<resource name>?alt=media`: an attachment's bytes from `fake.media` (resource
  name -> answer), with an issued token.
`service_account_json()` is a key file for the sender, with the private key in memory only.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tests.fakes.jwt import SigningKeyPair
from tests.fakes.loopback import LoopbackFake, ScriptedAnswer
from tests.fakes.teams_server import RecordedRequest

SERVICE_ACCOUNT_EMAIL = "hermes-bot@example-project.iam.gserviceaccount.com"
CHAT_BOT_SCOPE = "https://www.googleapis.com/auth/chat.bot"


@dataclass
class FakeGoogle(LoopbackFake[RecordedRequest]):
    thread_name: ClassVar[str] = "fake-google"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST"})

    account_key: SigningKeyPair = field(default_factory=lambda: SigningKeyPair("sa-key-1"))
    keys: list[dict[str, Any]] = field(default_factory=list)
    expires_in: int = 3599
    issued: list[str] = field(default_factory=list)
    assertions: list[dict[str, Any]] = field(default_factory=list)  # the verified claims of each assertion
    messages: list[tuple[str, dict[str, str], Any]] = field(default_factory=list)
    media: dict[str, ScriptedAnswer] = field(default_factory=dict)
    _by_request_id: dict[str, dict[str, Any]] = field(default_factory=dict)  # requestId -> its answer

    @property
    def certs_url(self) -> str:
        return f"{self.base_url}/certs"

    @property
    def token_uri(self) -> str:
        return f"{self.base_url}/token"

    @property
    def api_base_url(self) -> str:
        return f"{self.base_url}/v1"

    def service_account_json(self) -> str:
        return json.dumps(
            {
                "type": "service_account",
                "project_id": "example-project",
                "private_key_id": self.account_key.kid,
                "private_key": self.account_key.private_pem(),
                "client_email": SERVICE_ACCOUNT_EMAIL,
                "client_id": "1234567890",
                "token_uri": self.token_uri,
            }
        )

    def paths(self, http_method: str = "GET") -> list[str]:
        with self._lock:
            return [r.path for r in self.requests if r.http_method == http_method]

    def _record(self, http_method: str, path: str, headers: dict[str, str], body: Any) -> RecordedRequest:
        return RecordedRequest(http_method, path, body, headers)

    def _default_answer(self, request: RecordedRequest) -> ScriptedAnswer:
        path, _, query = request.path.partition("?")
        if request.http_method == "GET" and path == "/certs":
            return ScriptedAnswer(200, {"keys": list(self.keys)})
        if request.http_method == "POST" and path == "/token":
            return self._token(request)
        if request.http_method == "GET" and path.startswith("/v1/media/") and query == "alt=media":
            if request.headers.get("authorization") not in {f"Bearer {t}" for t in self.issued}:
                return ScriptedAnswer(401, {"error": {"code": 401, "status": "UNAUTHENTICATED"}})
            found = self.media.get(urllib.parse.unquote(path.removeprefix("/v1/media/")))
            if found is not None:
                return found
        parts = path.split("/")
        if (
            request.http_method == "POST"
            and len(parts) == 5
            and parts[1:3] == ["v1", "spaces"]
            and parts[4] == "messages"
        ):
            return self._message(f"spaces/{parts[3]}", dict(urllib.parse.parse_qsl(query)), request)
        return ScriptedAnswer(404, {"error": {"code": 404, "message": "Not found", "status": "NOT_FOUND"}})

    def _token(self, request: RecordedRequest) -> ScriptedAnswer:
        import jwt

        form = request.json if isinstance(request.json, dict) else {}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return ScriptedAnswer(400, {"error": "unsupported_grant_type"})
        try:
            claims = jwt.decode(
                str(form.get("assertion")),
                self.account_key.public_key,
                algorithms=["RS256"],
                audience=self.token_uri,
                issuer=SERVICE_ACCOUNT_EMAIL,
                options={"require": ["iat", "exp"], "verify_exp": False, "verify_iat": False},
            )
        except jwt.PyJWTError as exc:
            return ScriptedAnswer(400, {"error": "invalid_grant", "error_description": type(exc).__name__})
        if claims.get("scope") != CHAT_BOT_SCOPE or not 0 < claims["exp"] - claims["iat"] <= 3600:
            return ScriptedAnswer(400, {"error": "invalid_scope", "error_description": "bad scope or lifetime"})
        self.assertions.append(claims)
        token = f"ya29.fake-{len(self.issued) + 1}"
        self.issued.append(token)
        return ScriptedAnswer(200, {"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"})

    def _message(self, space: str, query: dict[str, str], request: RecordedRequest) -> ScriptedAnswer:
        if request.headers.get("authorization") not in {f"Bearer {t}" for t in self.issued}:
            return ScriptedAnswer(
                401,
                {"error": {"code": 401, "message": "Request had invalid credentials.", "status": "UNAUTHENTICATED"}},
            )
        body = request.json if isinstance(request.json, dict) else {}
        if not isinstance(body.get("text"), str) or not body["text"]:
            return ScriptedAnswer(400, {"error": {"code": 400, "message": "Message cannot be empty."}})
        request_id = query.get("requestId")
        if request_id and request_id in self._by_request_id:
            return ScriptedAnswer(200, self._by_request_id[request_id])
        self.messages.append((space, query, body))
        name = f"{space}/messages/m{len(self.messages)}"
        created = {"name": name, "text": body["text"], "thread": body.get("thread") or {}}
        if request_id:
            self._by_request_id[request_id] = created
        return ScriptedAnswer(200, created)
