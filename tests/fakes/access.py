"""In-memory pairing store with the DynamoDB adapter's rules (`hermes_gateway.adapters.dynamo_access`).

At most MAX_PENDING_PER_PLATFORM live codes per platform, a user's new code replaces their old
one, one issued code per user per REQUEST_INTERVAL_SECONDS (a refused request does not count),
a user's codes within one hour of each HOLD_PERIOD_SECONDS (`domain.pairing.hold_start`),
"try later" once per interval, MAX_FAILED_APPROVALS failures lock a platform's approvals for
LOCKOUT_SECONDS, and codes are kept only as salted hashes. One lock makes every call atomic, as the
adapter's conditional writes are. Hashing uses the domain's `HASH_ITERATIONS` at call time, so a
test may lower it.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from hermes_gateway.domain.pairing import (
    CODE_TTL_SECONDS,
    LOCKOUT_SECONDS,
    MAX_FAILED_APPROVALS,
    MAX_PENDING_PER_PLATFORM,
    REQUEST_INTERVAL_SECONDS,
    Approval,
    ApproveResult,
    CodeRequest,
    PendingCode,
    code_matches,
    hash_code,
    hold_start,
    is_well_formed,
    new_code,
    new_salt,
    normalize_code,
)


@dataclass(frozen=True)
class _Slot:
    code_hash: str
    salt: bytes
    code: PendingCode


class FakePairingStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.approvals: dict[tuple[str, str], Approval] = {}
        self.slots: dict[str, dict[int, _Slot]] = {}  # platform -> slot number (1..MAX) -> code
        self.last_request_at: dict[tuple[str, str], float] = {}
        self.held_since: dict[tuple[str, str], float] = {}
        self.told_try_later_at: dict[tuple[str, str], float] = {}
        self.failures: dict[str, int] = {}
        self.locked_until: dict[str, float] = {}

    def request_code(
        self, platform: str, user_id: str, user_name: str | None, chat_id: str | None, now: float
    ) -> CodeRequest:
        with self._lock:
            if self._locked(platform, now):
                return self._refuse("locked", platform, user_id, now)
            slot = self._choose_slot(platform, user_id, now)
            if slot is None:
                return self._refuse("no_slot", platform, user_id, now)
            last = self.last_request_at.get((platform, user_id))
            if last is not None and last > now - REQUEST_INTERVAL_SECONDS:
                return CodeRequest("rate_limited")
            held_from = hold_start(self.held_since.get((platform, user_id)), now)
            if held_from is None:
                return self._refuse("held", platform, user_id, now)
            self.held_since[(platform, user_id)] = held_from
            code, salt = new_code(), new_salt()
            expires_at = float(math.ceil(held_from + CODE_TTL_SECONDS))
            pending = PendingCode(platform, user_id, user_name, chat_id, now, expires_at)
            self.slots.setdefault(platform, {})[slot] = _Slot(hash_code(code, salt), salt, pending)
            self.last_request_at[(platform, user_id)] = now
            return CodeRequest("issued", code=code, expires_at=expires_at)

    def _choose_slot(self, platform: str, user_id: str, now: float) -> int | None:
        slots = self.slots.get(platform, {})
        for number, slot in slots.items():
            if slot.code.user_id == user_id:
                return number
        for number in range(1, MAX_PENDING_PER_PLATFORM + 1):
            if number not in slots or slots[number].code.expires_at <= now:
                return number
        return None

    def _refuse(self, status: str, platform: str, user_id: str, now: float) -> CodeRequest:
        told = self.told_try_later_at.get((platform, user_id))
        if told is not None and told > now - REQUEST_INTERVAL_SECONDS:
            return CodeRequest(status, tell_try_later=False)
        self.told_try_later_at[(platform, user_id)] = now
        return CodeRequest(status, tell_try_later=True)

    def _locked(self, platform: str, now: float) -> bool:
        return self.locked_until.get(platform, 0.0) > now

    def approve(self, platform: str, code: str, now: float, approved_by: str) -> ApproveResult:
        with self._lock:
            if self._locked(platform, now):
                return ApproveResult("locked", locked_until=self.locked_until[platform])
            typed = normalize_code(code)
            slots = self.slots.get(platform, {})
            if is_well_formed(typed):
                for number, slot in sorted(slots.items()):
                    if slot.code.expires_at > now and code_matches(typed, slot.salt, slot.code_hash):
                        del slots[number]
                        approval = Approval(platform, slot.code.user_id, slot.code.user_name, now, approved_by)
                        self.approvals[(platform, approval.user_id)] = approval
                        self.failures.pop(platform, None)
                        self.locked_until.pop(platform, None)
                        return ApproveResult("approved", approval=approval)
            self.failures[platform] = self.failures.get(platform, 0) + 1
            if self.failures[platform] < MAX_FAILED_APPROVALS:
                return ApproveResult("invalid")
            self.failures[platform] = 0
            self.locked_until[platform] = now + LOCKOUT_SECONDS
            return ApproveResult("invalid", locked_until=now + LOCKOUT_SECONDS)

    def is_approved(self, platform: str, user_id: str) -> bool:
        with self._lock:
            return (platform, user_id) in self.approvals

    def revoke(self, platform: str, user_id: str) -> bool:
        with self._lock:
            return self.approvals.pop((platform, user_id), None) is not None

    def pending(self, platform: str, now: float) -> list[PendingCode]:
        with self._lock:
            live = [s.code for s in self.slots.get(platform, {}).values() if s.code.expires_at > now]
            return sorted(live, key=lambda p: (p.created_at, p.user_id))

    def approved(self, platform: str) -> list[Approval]:
        with self._lock:
            found = [a for (p, _), a in self.approvals.items() if p == platform]
            return sorted(found, key=lambda a: (a.approved_at, a.user_id))

    def clear_pending(self, platform: str) -> int:
        with self._lock:
            return len(self.slots.pop(platform, {}))

    def forget_user(self, platform: str, user_id: str) -> int:
        with self._lock:
            removed = int(self.approvals.pop((platform, user_id), None) is not None)
            slots = self.slots.get(platform, {})
            for number in [n for n, slot in slots.items() if slot.code.user_id == user_id]:
                del slots[number]
                removed += 1
            # the request window is one item in the table: its three times together
            window = [w.pop((platform, user_id), None) for w in (self.last_request_at, self.held_since,
                                                                  self.told_try_later_at)]  # fmt: skip
            return removed + int(any(value is not None for value in window))
