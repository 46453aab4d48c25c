"""Receipts of the session API's mutating requests: a retried request id gets its first answer.

The DynamoDB adapter (`hermes_gateway.adapters.dynamo_receipts`) and the in-memory fake
(`tests/fakes/receipts.py`) keep the same rules: one claim per request id (a conditional put), a
receipt stored only by its claimant, a request id reused for a different request refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol


@dataclass(frozen=True)
class Claim:
    """What claiming a request id found.

    claimed: this call holds the id (`token`) and applies the request;
    done: the request ran before, `receipt` is its answer;
    in_progress: another call holds the id right now;
    mismatch: the id was used for a different request."""

    status: Literal["claimed", "done", "in_progress", "mismatch"]
    token: str | None = None
    receipt: dict[str, Any] | None = None


class ReceiptStore(Protocol):
    def claim(self, key: str, fingerprint: str, now: float) -> Claim: ...

    def complete(self, key: str, token: str, receipt: dict[str, Any], now: float) -> bool:
        """Store the answer if `token` still holds the claim; False when it was taken over."""
        ...

    def abandon(self, key: str, token: str) -> None:
        """Give the id back (the request failed in a way a retry may fix)."""
        ...
