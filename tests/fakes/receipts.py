"""In-memory receipt store with the DynamoDB adapter's rules: one claim per request id, a receipt
stored only by its claimant, a stale claim taken over, a reused id with another request refused."""

from __future__ import annotations

import itertools
import threading
from typing import Any

from hermes_gateway.domain.receipts import Claim


class FakeReceipts:
    def __init__(self, stale_after: float = 30.0) -> None:
        self._lock = threading.Lock()
        self._tokens = itertools.count(1)
        self.items: dict[str, dict[str, Any]] = {}
        self.stale_after = stale_after

    def claim(self, key: str, fingerprint: str, now: float) -> Claim:
        with self._lock:
            item = self.items.get(key)
            stale = item is not None and item["status"] == "claimed" and item["claimed_at"] < now - self.stale_after
            if item is None or stale:
                token = f"t{next(self._tokens)}"
                self.items[key] = {"status": "claimed", "fingerprint": fingerprint, "token": token, "claimed_at": now}
                return Claim("claimed", token=token)
            if item["fingerprint"] != fingerprint:
                return Claim("mismatch")
            if item["status"] == "done":
                return Claim("done", receipt=item["receipt"])
            return Claim("in_progress")

    def complete(self, key: str, token: str, receipt: dict[str, Any], now: float) -> bool:
        with self._lock:
            item = self.items.get(key)
            if item is None or item["status"] != "claimed" or item["token"] != token:
                return False
            item.update(status="done", receipt=receipt, token=None)
            return True

    def abandon(self, key: str, token: str) -> None:
        with self._lock:
            item = self.items.get(key)
            if item is not None and item["status"] == "claimed" and item["token"] == token:
                del self.items[key]
