"""DynamoDB errors, read in one place: a lost condition, a lost transaction race, throttling.

The adapters turn these into domain outcomes (a retry, `Conflict`, `TransientError`) here and
nowhere else, so every store reads DynamoDB's answers the same way.
"""

from __future__ import annotations

import functools
import inspect
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from pynamodb.exceptions import PynamoDBException, TransactWriteError

from hermes_gateway.errors import TransientError

CONDITION_FAILED = "ConditionalCheckFailed"  # a cancellation reason inside a transaction
CONDITION_FAILED_EXCEPTION = "ConditionalCheckFailedException"  # a single call's error code
TRANSACTION_CONFLICT = "TransactionConflict"
# Throttling as single calls report it (…Exception) and as transaction cancellation reasons.
THROTTLED = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ProvisionedThroughputExceeded",
        "ThrottlingException",
        "ThrottlingError",
        "RequestLimitExceeded",
    }
)


T = TypeVar("T")


def backoff(attempt: int) -> None:
    """Full jitter, capped: contention on one item clears fastest when writers spread out."""
    time.sleep(random.uniform(0, min(0.2, 0.005 * 2**attempt)))  # noqa: S311 - jitter, not security


def condition_failed(exc: Exception) -> bool:
    return getattr(exc, "cause_response_code", None) == CONDITION_FAILED_EXCEPTION


def call_condition_failed(exc: Exception) -> bool:
    """A botocore call's failed condition (a ClientError; `condition_failed` reads pynamodb's).
    The item as it is rides in `exc.response["Item"]` when the call asked for ALL_OLD."""
    return bool(getattr(exc, "response", {}).get("Error", {}).get("Code") == CONDITION_FAILED_EXCEPTION)


def cancellation_codes(exc: TransactWriteError) -> list[str]:
    return [(reason.code if reason else "") or "" for reason in (exc.cancellation_reasons or [])]


@contextmanager
def throttling_is_transient() -> Iterator[None]:
    """Throttling becomes TransientError: the caller's retry policy (queue, workflow) applies."""
    try:
        yield
    except PynamoDBException as exc:
        codes = {exc.cause_response_code or ""}
        if isinstance(exc, TransactWriteError):
            codes.update(cancellation_codes(exc))
        if codes & THROTTLED:
            raise TransientError(f"DynamoDB is throttling ({', '.join(sorted(codes & THROTTLED))})") from exc
        raise


def throttling_is_transient_everywhere(cls: type[T]) -> type[T]:
    """Class decorator: every public method turns DynamoDB throttling into TransientError, so a
    throttled read or write anywhere in a store is retried by its caller's policy (the queue, the
    workflow's Retry on TransientError) instead of failing the work for good."""
    for name, member in list(vars(cls).items()):
        if not name.startswith("_") and inspect.isfunction(member):  # plain methods only
            setattr(cls, name, functools.wraps(member)(throttling_is_transient()(member)))
    return cls
