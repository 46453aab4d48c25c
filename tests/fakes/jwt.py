"""RS256 test keys and hand-made JWTs for the bearer-token platforms (Teams, Google Chat) and
platforms/jwt_keys.py, with the settable clock their tests verify against.

`SigningKeyPair` is an RSA key generated in memory at run time (nothing is written to disk): its JWK
for a fake key server and `sign` for tokens. `hand_made` builds a token byte by byte (alg `none`,
a forged header), `hs256_with_public_key` the classic algorithm-confusion forgery.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from typing import Any

NOW = 1_764_400_000.0


class Clock:
    """A clock to inject (`clock=`); move it with `clock.now += seconds`."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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


def with_changes(base: Mapping[str, Any], **changes: Any) -> dict[str, Any]:
    """`base` (a claim set) with `changes` applied; a change to None removes the claim."""
    merged = {**base, **changes}
    return {k: v for k, v in merged.items() if v is not None}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def hand_made(header: dict[str, Any], payload: dict[str, Any], sign: Callable[[bytes], bytes] | None = None) -> str:
    """A compact JWT built by hand: `sign` makes the signature over the signing input (none without)."""
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(payload).encode())}"
    signature = sign(signing_input.encode()) if sign else b""
    return f"{signing_input}.{b64url(signature)}"


def hs256_with_public_key(key: SigningKeyPair, payload: dict[str, Any]) -> str:
    """Algorithm confusion: an HS256 token under the key's id whose HMAC secret is its public key (PEM)."""
    secret = key.public_pem()
    return hand_made(
        {"alg": "HS256", "typ": "JWT", "kid": key.kid},
        payload,
        lambda data: hmac.new(secret, data, hashlib.sha256).digest(),
    )
