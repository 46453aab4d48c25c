"""Bearer JWTs signed by a platform (Bot Framework, Google Chat): a signing-key cache and RS256 checks.

`JwksCache` holds a platform's published public keys (a JWKS document, found directly or through an
OpenID configuration's `jwks_uri`) for the life of the adapter, which is one cold start. It fetches
them on first use; afterwards only when they are older than `ttl_seconds`, or when a token names a
key id it does not hold (the platform rotated its keys). Either refetch happens at most once per
`refetch_seconds`, so a flood of tokens naming made-up key ids costs one request, not one each; a
token naming a known key never costs a request.

`verify_bearer` accepts RS256 only. The algorithm is fixed here, never taken from the token: a token
announcing `none`, or HS256 "signed" with the public key as an HMAC secret (algorithm confusion), is
refused before any key is used.

PyJWT and cryptography are imported inside the functions that use them, so the ingress pays for them
only when a platform that needs them receives a request.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from hermes_gateway.errors import ConfigError, GatewayError, Unauthorized
from hermes_gateway.platforms.base import HttpClient

ALGORITHM = "RS256"
DEFAULT_LEEWAY_SECONDS = 300.0  # the "industry-standard clock skew" the Bot Framework names
DEFAULT_TTL_SECONDS = 6 * 3600.0
DEFAULT_REFETCH_SECONDS = 60.0
# While no key has ever been fetched nothing can be verified: a failed first fetch is retried sooner.
EMPTY_RETRY_SECONDS = 5.0


@dataclass(frozen=True)
class SigningKey:
    kid: str
    public_key: Any  # cryptography's RSAPublicKey
    # The Bot Framework's extension: the channel ids this key may sign for. None when not published.
    endorsements: tuple[str, ...] | None = None


class JwksCache:
    """One platform's signing keys, fetched with `http` from `jwks_url`, or from the `jwks_uri` named
    by the OpenID configuration at `openid_config_url`."""

    def __init__(
        self,
        http: HttpClient,
        *,
        jwks_url: str = "",
        openid_config_url: str = "",
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        refetch_seconds: float = DEFAULT_REFETCH_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if bool(jwks_url) == bool(openid_config_url):
            raise ConfigError("a key cache needs exactly one of a JWKS URL or an OpenID configuration URL")
        for url in (jwks_url, openid_config_url):
            if url and not url.startswith(("https://", "http://")):
                raise ConfigError(f"{http.platform}: the signing key URL must be an http(s) URL")
        self._http = http
        self._jwks_url = jwks_url
        self._openid_config_url = openid_config_url
        self._ttl = ttl_seconds
        self._refetch = refetch_seconds
        self._clock = clock
        self._keys: dict[str, SigningKey] = {}
        self._fetched_at: float | None = None  # the last successful fetch
        self._attempted_at: float | None = None  # the last fetch, successful or not

    def key(self, kid: str) -> SigningKey:
        """The key with this id, or Unauthorized when the platform does not publish one."""
        now = self._clock()
        if kid not in self._keys or self._is_stale(now):
            self._refresh_if_allowed(now)
        found = self._keys.get(kid)
        if found is None:
            if not self._keys:
                raise Unauthorized(f"{self._http.platform}: signing keys are unavailable; cannot verify the token")
            raise Unauthorized(f"{self._http.platform}: the token names an unknown signing key")
        return found

    def _is_stale(self, now: float) -> bool:
        return self._fetched_at is None or now - self._fetched_at >= self._ttl

    def _refresh_if_allowed(self, now: float) -> None:
        if self._attempted_at is not None:
            wait = self._refetch if self._keys else min(self._refetch, EMPTY_RETRY_SECONDS)
            if now - self._attempted_at < wait:
                return
        self._attempted_at = now
        try:
            keys = self._fetch()
        except (GatewayError, ValueError, TypeError):
            # Keep the keys held so far: a key server outage must not stop verification.
            return
        self._keys = keys
        self._fetched_at = now

    def _fetch(self) -> dict[str, SigningKey]:
        url = self._jwks_url or self._jwks_uri()
        document = self._get_json(url)
        entries = document.get("keys")
        if not isinstance(entries, list):
            raise ValueError("the key document has no key list")
        keys = {key.kid: key for key in map(_signing_key, entries) if key is not None}
        if not keys:
            raise ValueError("the key document lists no usable RS256 key")
        return keys

    def _jwks_uri(self) -> str:
        uri = self._get_json(self._openid_config_url).get("jwks_uri")
        if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
            raise ValueError("the OpenID configuration names no http(s) jwks_uri")
        return uri

    def _get_json(self, url: str) -> dict[str, Any]:
        answer = self._http.request("GET", url, headers={"Accept": "application/json"})
        if answer.status != 200 or not isinstance(answer.body, dict):
            raise ValueError(f"key server answered HTTP {answer.status}")
        return answer.body


def _signing_key(entry: Any) -> SigningKey | None:
    """A JWKS entry as a key, or None for one that is not an RSA signing key."""
    from jwt.algorithms import RSAAlgorithm
    from jwt.exceptions import InvalidKeyError

    if not isinstance(entry, dict) or entry.get("kty") != "RSA" or not isinstance(entry.get("kid"), str):
        return None
    if entry.get("use", "sig") != "sig" or entry.get("alg", ALGORITHM) != ALGORITHM:
        return None
    try:
        public_key = RSAAlgorithm.from_jwk(entry)
    except (InvalidKeyError, ValueError, TypeError, KeyError):
        return None
    endorsements = entry.get("endorsements")
    return SigningKey(
        kid=entry["kid"],
        public_key=public_key,
        endorsements=tuple(str(e) for e in endorsements) if isinstance(endorsements, list) else None,
    )


def bearer_token(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer <token>` header, or Unauthorized."""
    if not authorization:
        raise Unauthorized("missing Authorization header")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header is not a bearer token")
    return token.strip()


def verify_bearer(
    authorization: str | None,
    keys: JwksCache,
    *,
    issuers: Collection[str],
    audience: str,
    clock: Callable[[], float],
    leeway: float = DEFAULT_LEEWAY_SECONDS,
    endorsement: str | None = None,
) -> dict[str, Any]:
    """The claims of a valid RS256 bearer token, or Unauthorized naming what is wrong with it.

    Checked: the header is a bearer token; the algorithm is RS256; the key id is one the platform
    publishes (and, with `endorsement`, the key is endorsed for that channel id); the signature;
    the issuer is one of `issuers`; `audience` is (one of) the audience(s); `exp` is present and
    not past, and `nbf`, when present, is reached (both with `leeway` seconds of clock skew).
    """
    import jwt

    token = bearer_token(authorization)
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise Unauthorized("the bearer token is not a well-formed JWT") from None
    if header.get("alg") != ALGORITHM:
        raise Unauthorized(f"the token is not signed with {ALGORITHM}; no other algorithm is accepted")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid:
        raise Unauthorized("the token names no signing key")
    key = keys.key(kid)
    if endorsement is not None and endorsement not in (key.endorsements or ()):
        raise Unauthorized("the signing key is not endorsed for the activity's channel")
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key.public_key,
            algorithms=[ALGORITHM],
            # Time, issuer and audience are checked below, against the injected clock.
            options={
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise Unauthorized("the token's signature does not verify") from None
    except jwt.PyJWTError:
        raise Unauthorized("the bearer token is not a well-formed JWT") from None
    _check_claims(claims, issuers=issuers, audience=audience, now=clock(), leeway=leeway)
    return claims


def _check_claims(
    claims: dict[str, Any], *, issuers: Collection[str], audience: str, now: float, leeway: float
) -> None:
    if claims.get("iss") not in issuers:
        raise Unauthorized("the token has the wrong issuer")
    aud = claims.get("aud")
    audiences = aud if isinstance(aud, list) else [aud]
    if not audience or audience not in audiences:
        raise Unauthorized("the token has the wrong audience")
    exp = _number(claims.get("exp"))
    if exp is None:
        raise Unauthorized("the token has no expiry")
    if now > exp + leeway:
        raise Unauthorized("the token has expired")
    if "nbf" in claims:
        nbf = _number(claims["nbf"])
        if nbf is None or now + leeway < nbf:
            raise Unauthorized("the token is not valid yet")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
