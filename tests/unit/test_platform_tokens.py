"""platforms/tokens.py: the cached access token the Teams, Google Chat and Feishu senders share."""

from __future__ import annotations

from hermes_gateway.platforms.tokens import CachedToken
from tests.fakes.jwt import Clock


class Fetcher:
    def __init__(self, lifetime: float) -> None:
        self.lifetime = lifetime
        self.calls = 0

    def __call__(self) -> tuple[str, float]:
        self.calls += 1
        return f"token-{self.calls}", self.lifetime


def test_the_token_is_kept_until_the_margin_before_it_expires() -> None:
    clock, fetch = Clock(), Fetcher(3600)
    token = CachedToken(clock=clock)
    assert token.get(fetch) == "token-1"
    clock.now += 3600 - 301
    assert token.get(fetch) == "token-1"
    clock.now += 2
    assert token.get(fetch) == "token-2"


def test_the_margin_takes_at_most_its_share_of_a_short_lifetime() -> None:
    clock = Clock()
    halved, whole = CachedToken(clock=clock), CachedToken(max_margin_share=1.0, clock=clock)
    halved_fetch, whole_fetch = Fetcher(400), Fetcher(400)

    def both() -> tuple[int, int]:
        halved.get(halved_fetch)
        whole.get(whole_fetch)
        return halved_fetch.calls, whole_fetch.calls

    assert both() == (1, 1)
    clock.now += 99
    assert both() == (1, 1)
    clock.now += 2  # past 100 s: the whole five-minute margin is used up, but half the lifetime is not
    assert both() == (1, 2)


def test_a_dropped_token_is_fetched_again() -> None:
    fetch = Fetcher(3600)
    token = CachedToken(clock=Clock())
    token.get(fetch)
    token.drop()
    assert token.get(fetch) == "token-2"
    assert "token" not in repr(token).replace("CachedToken", "")
