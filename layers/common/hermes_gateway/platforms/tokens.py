"""Access tokens a sender fetches for itself and keeps until shortly before they expire (Teams' and
Google Chat's OAuth 2.0 tokens, Feishu's tenant access token).

Each platform keeps what is its own: how a token is fetched, and which answers mean the platform
refused it (the sender then calls `drop()` and tries once more with a fresh one).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from hermes_gateway.errors import PermanentError
from hermes_gateway.platforms.base import HttpClient

# A token is fetched again this long before it expires.
TOKEN_MARGIN_SECONDS = 300.0


class CachedToken:
    """One access token and when to fetch the next: `margin` seconds before it expires, but the
    margin never takes more than `max_margin_share` of the token's lifetime."""

    def __init__(
        self,
        *,
        margin: float = TOKEN_MARGIN_SECONDS,
        max_margin_share: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._margin = margin
        self._max_margin_share = max_margin_share
        self._clock = clock
        self._value: str | None = None
        self._renew_at = 0.0

    def __repr__(self) -> str:
        return f"CachedToken(held={self._value is not None})"

    def get(self, fetch: Callable[[], tuple[str, float]]) -> str:
        """The held token, or a new one from `fetch()`, which returns the token and its lifetime in
        seconds (and raises when the platform refuses the credentials)."""
        now = self._clock()
        if self._value is not None and now < self._renew_at:
            return self._value
        value, lifetime = fetch()
        self._value = value
        self._renew_at = now + max(0.0, lifetime - min(self._margin, lifetime * self._max_margin_share))
        return value

    def drop(self) -> None:
        """Forget the token (the platform refused it before its expiry): the next `get` fetches."""
        self._value = None


def oauth_token(
    http: HttpClient, token_url: str, form: Mapping[str, str], *, default_lifetime: float, name: str
) -> tuple[str, float]:
    """An OAuth 2.0 access token from a token endpoint (client credentials, RFC 6749 §4.4; a JWT
    bearer grant, RFC 7523) and its lifetime in seconds (`expires_in`, else `default_lifetime`)."""
    answer = http.request("POST", token_url, form=form)
    if answer.status != 200:
        # A refused credential is not a gone conversation or space: never TargetGone here.
        raise http.failure(answer, gone=())
    granted = answer.json_object()
    token = granted.get("access_token")
    if not isinstance(token, str) or not token:
        raise PermanentError(f"{name}: the token endpoint answered without an access token")
    return token, _seconds(granted.get("expires_in"), default=default_lifetime)


def _seconds(value: Any, *, default: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return default
    return seconds if seconds > 0 else default
