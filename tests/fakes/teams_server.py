"""A fake Bot Framework on a loopback port, and the RSA test keys both JWT platforms' fakes use.

`FakeBotFramework` (fixture `fake_bot_framework` in the test modules) answers
- `GET /v1/.well-known/openidconfiguration`: an OpenID configuration whose `jwks_uri` is
  `GET /v1/.well-known/keys`, which lists `fake.keys` (JWKs, with `endorsements`);
- `POST /<tenant>/oauth2/v2.0/token`: Entra ID's client-credentials grant; it checks the form against
  `app_id`/`app_password` and issues `bf-token-1`, `bf-token-2`, … (`fake.issued`);
- `POST /v3/conversations/<id>/activities`: the Bot Connector; it requires a bearer token it issued
  and answers ids `activity-1`, `activity-2`, …; `fake.activities` lists (conversation id, body).
Every request is recorded in `fake.requests`; `answer_next` scripts failures (see loopback.py).

`SigningKeyPair` is an RSA key generated in memory: its JWK for a fake key server and `sign` for
tokens. `FormAwareFake` records form-encoded bodies (OAuth token requests) as dicts; the stock
loopback handler records only JSON.
"""

from __future__ import annotations

import io
import json
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from tests.fakes.loopback import LoopbackFake, ScriptedAnswer, _LoopbackHandler

DEFAULT_APP_ID = "00000000-0000-0000-0000-00000000b07a"
DEFAULT_APP_PASSWORD = "fake-app-password-~secret"


class SigningKeyPair:
    """An RSA key pair made at run time; nothing is written to disk."""

    def __init__(self, kid: str = "key-1") -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.kid = kid
        self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key = self.private_key.public_key()

    def jwk(self, **extra: Any) -> dict[str, Any]:
        from jwt.algorithms import RSAAlgorithm

        entry: dict[str, Any] = json.loads(RSAAlgorithm.to_jwk(self.public_key))
        return {**entry, "kid": self.kid, "use": "sig", **extra}

    def sign(self, claims: dict[str, Any], *, kid: str | None = None, headers: dict[str, Any] | None = None) -> str:
        import jwt

        return jwt.encode(
            claims, self.private_key, algorithm="RS256", headers={"kid": kid or self.kid, **(headers or {})}
        )

    def public_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def private_pem(self) -> str:
        from cryptography.hazmat.primitives import serialization

        return self.private_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode("ascii")


class _FormAwareHandler(_LoopbackHandler):
    """Hands a form-encoded body to the fake as a JSON object, so it is recorded like JSON."""

    def _handle(self) -> None:
        if self.headers.get("Content-Type", "").startswith("application/x-www-form-urlencoded"):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            as_json = json.dumps(dict(urllib.parse.parse_qsl(raw.decode("utf-8")))).encode("utf-8")
            self.rfile = io.BytesIO(as_json)
            del self.headers["Content-Length"]
            self.headers["Content-Length"] = str(len(as_json))
        super()._handle()


@dataclass(kw_only=True)
class FormAwareFake(LoopbackFake[Any]):
    def start(self) -> Self:
        super().start()
        assert self._server is not None
        self._server.RequestHandlerClass = _FormAwareHandler
        return self


@dataclass(frozen=True)
class RecordedRequest:
    http_method: str
    path: str
    json: Any  # the parsed JSON body, or the form fields of a form-encoded one; None otherwise
    headers: dict[str, str]  # lower-cased names


@dataclass
class FakeBotFramework(FormAwareFake):
    thread_name: ClassVar[str] = "fake-bot-framework"
    http_methods: ClassVar[frozenset[str]] = frozenset({"GET", "POST"})

    app_id: str = DEFAULT_APP_ID
    app_password: str = DEFAULT_APP_PASSWORD
    keys: list[dict[str, Any]] = field(default_factory=list)
    expires_in: int = 3600
    issued: list[str] = field(default_factory=list)
    activities: list[tuple[str, Any]] = field(default_factory=list)

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
        parts = request.path.split("/")
        if request.http_method == "POST" and len(parts) == 5 and parts[1:3] == ["v3", "conversations"]:
            return self._activity(urllib.parse.unquote(parts[3]), parts[4], request)
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
