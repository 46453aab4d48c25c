"""platforms/jwt_keys.py: the signing-key cache and RS256 bearer verification, against loopback key servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError, Unauthorized
from hermes_gateway.platforms.base import HttpClient
from hermes_gateway.platforms.jwt_keys import EMPTY_RETRY_SECONDS, JwksCache, bearer_token, verify_bearer
from tests.fakes.google_server import FakeGoogle
from tests.fakes.jwt import NOW, Clock, SigningKeyPair, b64url, hand_made, hs256_with_public_key, with_changes
from tests.fakes.teams_server import FakeBotFramework

ISSUER = "https://issuer.example"
AUDIENCE = "app-123"


@pytest.fixture(scope="module")
def key() -> SigningKeyPair:
    return SigningKeyPair("key-1")


@pytest.fixture(scope="module")
def other_key() -> SigningKeyPair:
    return SigningKeyPair("key-2")


@pytest.fixture
def server(key: SigningKeyPair) -> Iterator[FakeGoogle]:
    with FakeGoogle(keys=[key.jwk(alg="RS256")]) as fake:
        yield fake


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(server: FakeGoogle, clock: Clock) -> JwksCache:
    return JwksCache(HttpClient("", platform="test", timeout=2.0), jwks_url=server.certs_url, clock=clock)


def claims(**changes: Any) -> dict[str, Any]:
    return with_changes({"iss": ISSUER, "aud": AUDIENCE, "exp": int(NOW) + 3600, "nbf": int(NOW) - 10}, **changes)


def verify(token: str, cache: JwksCache, clock: Clock, **kwargs: Any) -> dict[str, Any]:
    return verify_bearer(f"Bearer {token}", cache, issuers=(ISSUER,), audience=AUDIENCE, clock=clock, **kwargs)


def key_fetches(server: FakeGoogle) -> int:
    return server.paths("GET").count("/certs")


# --- verification -------------------------------------------------------------------------------


def test_a_valid_token_gives_its_claims(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    token = key.sign(claims(sub="someone"))
    assert verify(token, cache, clock)["sub"] == "someone"


def test_the_audience_may_be_one_of_a_list(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    verify(key.sign(claims(aud=["other", AUDIENCE])), cache, clock)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"iss": "https://evil.example"}, "wrong issuer"),
        ({"iss": None}, "wrong issuer"),
        ({"aud": "another-app"}, "wrong audience"),
        ({"aud": ["x", "y"]}, "wrong audience"),
        ({"aud": None}, "wrong audience"),
        ({"exp": None}, "no expiry"),
        ({"exp": "tomorrow"}, "no expiry"),
        ({"exp": int(NOW) - 301}, "expired"),
        ({"nbf": int(NOW) + 301}, "not valid yet"),
    ],
)
def test_claims_are_checked_against_the_injected_clock(
    key: SigningKeyPair, cache: JwksCache, clock: Clock, changes: dict[str, Any], reason: str
) -> None:
    with pytest.raises(Unauthorized, match=reason):
        verify(key.sign(claims(**changes)), cache, clock)


def test_five_minutes_of_clock_skew_are_allowed(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    verify(key.sign(claims(exp=int(NOW) - 299, nbf=int(NOW) + 299)), cache, clock)
    with pytest.raises(Unauthorized, match="expired"):
        verify(key.sign(claims(exp=int(NOW) - 299)), cache, clock, leeway=0)


def test_a_token_signed_by_another_key_under_a_known_id_is_refused(
    other_key: SigningKeyPair, cache: JwksCache, clock: Clock
) -> None:
    forged = other_key.sign(claims(), kid="key-1")
    with pytest.raises(Unauthorized, match="signature does not verify"):
        verify(forged, cache, clock)


def test_a_tampered_payload_is_refused(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    header, _, signature = key.sign(claims(aud="another-app")).split(".")
    tampered = f"{header}.{b64url(json.dumps(claims()).encode())}.{signature}"
    with pytest.raises(Unauthorized, match="signature does not verify"):
        verify(tampered, cache, clock)


def test_alg_none_is_refused(cache: JwksCache, clock: Clock) -> None:
    token = hand_made({"alg": "none", "typ": "JWT", "kid": "key-1"}, claims())
    with pytest.raises(Unauthorized, match="not signed with RS256"):
        verify(token, cache, clock)


def test_algorithm_confusion_hs256_with_the_public_key_is_refused(
    key: SigningKeyPair, cache: JwksCache, clock: Clock, server: FakeGoogle
) -> None:
    # Given the classic attack: an HS256 token whose HMAC secret is the (public) RSA key
    token = hs256_with_public_key(key, claims())
    with pytest.raises(Unauthorized, match="not signed with RS256"):
        verify(token, cache, clock)
    # and it is refused before any key is even fetched
    assert key_fetches(server) == 0


def test_other_asymmetric_algorithms_are_refused(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    import jwt

    token = jwt.encode(claims(), key.private_key, algorithm="RS512", headers={"kid": "key-1"})
    with pytest.raises(Unauthorized, match="not signed with RS256"):
        verify(token, cache, clock)


@pytest.mark.parametrize(
    ("authorization", "reason"),
    [
        (None, "missing Authorization"),
        ("", "missing Authorization"),
        ("Basic dXNlcjpwYXNz", "not a bearer token"),
        ("Bearer", "not a bearer token"),
        ("Bearer    ", "not a bearer token"),
        ("Bearer not-a-jwt", "not a well-formed JWT"),
        ("Bearer a.b.c", "not a well-formed JWT"),
    ],
)
def test_malformed_authorization_headers_are_refused(
    authorization: str | None, reason: str, cache: JwksCache, clock: Clock
) -> None:
    with pytest.raises(Unauthorized, match=reason):
        verify_bearer(authorization, cache, issuers=(ISSUER,), audience=AUDIENCE, clock=clock)


def test_the_scheme_is_case_insensitive(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    assert bearer_token("bearer abc") == "abc"
    verify_bearer(f"BEARER {key.sign(claims())}", cache, issuers=(ISSUER,), audience=AUDIENCE, clock=clock)


def test_a_token_without_a_key_id_is_refused(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    import jwt

    token = jwt.encode(claims(), key.private_key, algorithm="RS256")
    with pytest.raises(Unauthorized, match="names no signing key"):
        verify(token, cache, clock)


def test_an_unknown_key_id_is_refused(other_key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    with pytest.raises(Unauthorized, match="unknown signing key"):
        verify(other_key.sign(claims()), cache, clock)


def test_an_empty_audience_setting_accepts_nothing(key: SigningKeyPair, cache: JwksCache, clock: Clock) -> None:
    with pytest.raises(Unauthorized, match="wrong audience"):
        verify_bearer(f"Bearer {key.sign(claims(aud=''))}", cache, issuers=(ISSUER,), audience="", clock=clock)


# --- endorsements (Bot Framework) ---------------------------------------------------------------


def test_endorsements_bind_a_key_to_channels(key: SigningKeyPair, clock: Clock) -> None:
    with FakeGoogle(keys=[key.jwk(endorsements=["msteams", "skype"])]) as server:
        cache = JwksCache(HttpClient("", platform="test"), jwks_url=server.certs_url, clock=clock)
        token = key.sign(claims())
        verify(token, cache, clock, endorsement="msteams")
        with pytest.raises(Unauthorized, match="not endorsed"):
            verify(token, cache, clock, endorsement="webchat")


def test_a_key_without_endorsements_is_not_endorsed_for_any_channel(
    key: SigningKeyPair, cache: JwksCache, clock: Clock
) -> None:
    with pytest.raises(Unauthorized, match="not endorsed"):
        verify(key.sign(claims()), cache, clock, endorsement="msteams")


# --- caching ------------------------------------------------------------------------------------


def test_keys_are_fetched_once_for_any_number_of_tokens(
    key: SigningKeyPair, cache: JwksCache, clock: Clock, server: FakeGoogle
) -> None:
    for _ in range(5):
        verify(key.sign(claims()), cache, clock)
        clock.now += 30
    assert key_fetches(server) == 1


def test_an_unknown_key_id_refetches_at_most_once_per_interval(
    key: SigningKeyPair, other_key: SigningKeyPair, cache: JwksCache, clock: Clock, server: FakeGoogle
) -> None:
    verify(key.sign(claims()), cache, clock)
    clock.now += 61
    # When a flood of tokens names a key the platform does not publish
    for _ in range(10):
        with pytest.raises(Unauthorized, match="unknown signing key"):
            verify(other_key.sign(claims()), cache, clock)
    # Then the keys were asked for once more, not once per token
    assert key_fetches(server) == 2
    # and a token with a known key costs nothing
    verify(key.sign(claims()), cache, clock)
    assert key_fetches(server) == 2


def test_key_rotation_is_picked_up_by_the_next_refetch(
    key: SigningKeyPair, other_key: SigningKeyPair, cache: JwksCache, clock: Clock, server: FakeGoogle
) -> None:
    verify(key.sign(claims()), cache, clock)
    # Given the platform starts signing with a new key
    server.keys = [key.jwk(), other_key.jwk()]
    clock.now += 61
    # When the first token signed with it arrives, the keys are fetched again and it verifies
    verify(other_key.sign(claims(exp=int(clock.now) + 60)), cache, clock)
    assert key_fetches(server) == 2


def test_keys_are_refreshed_after_their_time_to_live(key: SigningKeyPair, server: FakeGoogle, clock: Clock) -> None:
    cache = JwksCache(HttpClient("", platform="test"), jwks_url=server.certs_url, ttl_seconds=600, clock=clock)
    verify(key.sign(claims()), cache, clock)
    clock.now += 599
    verify(key.sign(claims()), cache, clock)
    assert key_fetches(server) == 1
    clock.now += 2
    verify(key.sign(claims()), cache, clock)
    assert key_fetches(server) == 2


def test_a_failed_refresh_keeps_the_keys_held(key: SigningKeyPair, server: FakeGoogle, clock: Clock) -> None:
    cache = JwksCache(HttpClient("", platform="test"), jwks_url=server.certs_url, ttl_seconds=600, clock=clock)
    verify(key.sign(claims()), cache, clock)
    clock.now += 601
    server.answer_next(503, "unavailable")
    verify(key.sign(claims(exp=int(clock.now) + 60)), cache, clock)
    assert key_fetches(server) == 2


def test_when_no_key_was_ever_fetched_nothing_verifies_and_the_fetch_is_retried_soon(
    key: SigningKeyPair, cache: JwksCache, clock: Clock, server: FakeGoogle
) -> None:
    server.answer_next(500, {"error": "boom"})
    with pytest.raises(Unauthorized, match="unavailable"):
        verify(key.sign(claims()), cache, clock)
    with pytest.raises(Unauthorized, match="unavailable"):
        verify(key.sign(claims()), cache, clock)
    assert key_fetches(server) == 1
    clock.now += EMPTY_RETRY_SECONDS
    verify(key.sign(claims(exp=int(clock.now) + 60)), cache, clock)
    assert key_fetches(server) == 2


@pytest.mark.parametrize("document", [{"keys": "nope"}, {"no": "keys"}, {"keys": []}, ["not", "an", "object"]])
def test_unusable_key_documents_count_as_a_failed_fetch(
    document: Any, key: SigningKeyPair, cache: JwksCache, clock: Clock, server: FakeGoogle
) -> None:
    server.answer_next(200, document)
    with pytest.raises(Unauthorized, match="unavailable"):
        verify(key.sign(claims()), cache, clock)


def test_entries_that_are_not_rs256_signing_keys_are_skipped(key: SigningKeyPair, clock: Clock) -> None:
    entries = [
        {"kty": "EC", "kid": "ec", "crv": "P-256", "x": "AA", "y": "AA"},
        key.jwk(kid="enc", use="enc"),
        key.jwk(kid="rs512", alg="RS512"),
        {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
        "not an object",
        key.jwk(),
    ]
    with FakeGoogle(keys=entries) as server:
        cache = JwksCache(HttpClient("", platform="test"), jwks_url=server.certs_url, clock=clock)
        verify(key.sign(claims()), cache, clock)
        for kid in ("ec", "enc", "rs512", "broken"):
            with pytest.raises(Unauthorized, match="unknown signing key"):
                verify(key.sign(claims(), kid=kid), cache, clock)


def test_keys_can_be_found_through_an_openid_configuration(key: SigningKeyPair, clock: Clock) -> None:
    with FakeBotFramework(keys=[key.jwk()]) as server:
        cache = JwksCache(HttpClient("", platform="test"), openid_config_url=server.openid_url, clock=clock)
        verify(key.sign(claims()), cache, clock)
        verify(key.sign(claims()), cache, clock)
        assert server.paths("GET") == ["/v1/.well-known/openidconfiguration", "/v1/.well-known/keys"]


def test_an_openid_configuration_without_a_jwks_uri_is_a_failed_fetch(key: SigningKeyPair, clock: Clock) -> None:
    with FakeBotFramework(keys=[key.jwk()]) as server:
        server.answer_next(200, {"issuer": "x", "jwks_uri": "file:///etc/passwd"})
        cache = JwksCache(HttpClient("", platform="test"), openid_config_url=server.openid_url, clock=clock)
        with pytest.raises(Unauthorized, match="unavailable"):
            verify(key.sign(claims()), cache, clock)


@pytest.mark.parametrize(
    "urls",
    [{}, {"jwks_url": "https://a", "openid_config_url": "https://b"}, {"jwks_url": "ftp://keys.example/jwks"}],
)
def test_the_cache_needs_exactly_one_http_url(urls: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        JwksCache(HttpClient("", platform="test"), **urls)
