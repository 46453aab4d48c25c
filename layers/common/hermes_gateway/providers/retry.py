"""Retries of one model request: 429 (after its Retry-After), 5xx and timeouts, with backoff, inside
a time budget. The budget keeps all tries and waits within the task that makes the request; what
is still failing when it runs out is raised as it is (TransientError or PermanentError)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import TypeVar

from hermes_gateway.errors import RateLimited, TransientError
from hermes_gateway.observability import logger

T = TypeVar("T")
MIN_ATTEMPT_SECONDS = 2.0  # a try with less time than this left is not worth starting


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    budget_seconds: float = 80.0
    base_delay_seconds: float = 1.0
    max_delay_seconds: float = 20.0


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header: delta seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def call_with_retries(
    attempt: Callable[[float], T],
    policy: RetryPolicy,
    *,
    provider: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: Callable[[], float] = random.random,
) -> T:
    """`attempt(seconds_left)` is one try; it raises TransientError to ask for another."""
    started = clock()
    tries = 0
    while True:
        tries += 1
        try:
            return attempt(policy.budget_seconds - (clock() - started))
        except TransientError as exc:
            if tries >= policy.max_attempts:
                raise
            if isinstance(exc, RateLimited):
                delay = exc.retry_after
            else:
                # full jitter: concurrent turns hitting the same outage do not retry in step
                delay = min(policy.max_delay_seconds, policy.base_delay_seconds * 2 ** (tries - 1)) * (0.5 + rng() / 2)
            if clock() - started + delay + MIN_ATTEMPT_SECONDS > policy.budget_seconds:
                logger.info(
                    "model request not retried: the budget is spent", extra={"provider": provider, "tries": tries}
                )
                raise
            logger.info(
                "model request retried",
                extra={"provider": provider, "try": tries, "delay": round(delay, 2), "reason": type(exc).__name__},
            )
            sleep(delay)
