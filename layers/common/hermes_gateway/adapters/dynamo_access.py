"""DynamoDB adapter for DM pairing (BEHAVIOUR §4) on the access table (pynamodb).

One table, keyed `pk` + `sk`, TTL on `expires_at`; each kind of item under its own prefix:

- `approved#<platform>` / `<user_id>`: an approval (`user_name`, `approved_at`, `approved_by`).
- `pending#<platform>` / `slot#1`..`slot#10`: a pending code as a salted hash (`code_hash`, `salt`
  in hex) with who asked. A slot is free when it is missing or its code has expired, even before
  TTL deletes it; a request takes one with a conditional put, so however many requests race, a
  platform never holds more than MAX_PENDING_PER_PLATFORM live codes.
- `limit#<platform>` / `<user_id>`: the user's request window (`last_request_at`), when their
  current hold of a code began (`held_since`: its codes expire an hour after it; the next hold
  begins a day after it), and when they were last told to try later (`told_try_later_at`).
- `lock#<platform>` / `approvals`: failed approvals (`failures`) and the lockout (`locked_until`).

A code is live while `now < expires_at`; a window or lockout ends when its interval has fully
passed. The plaintext code is never written and never logged: only `hash_code(code, salt)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.connection import Connection
from pynamodb.exceptions import DeleteError, DoesNotExist, PutError, TransactWriteError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from hermes_gateway.adapters.dynamo_errors import (
    CONDITION_FAILED,
    TRANSACTION_CONFLICT,
    backoff,
    cancellation_codes,
    condition_failed,
    throttling_is_transient,
)
from hermes_gateway.adapters.models import dynamodb_endpoint, table_meta
from hermes_gateway.domain.pairing import (
    CODE_TTL_SECONDS,
    HOLD_PERIOD_SECONDS,
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
from hermes_gateway.errors import TransientError
from hermes_gateway.resources import Bindings

_MAX_ATTEMPTS = 8
_SLOT_KEYS = tuple(f"slot#{n}" for n in range(1, MAX_PENDING_PER_PLATFORM + 1))
_LOCK_SK = "approvals"


class AccessItem(Model):
    pk = UnicodeAttribute(hash_key=True)
    sk = UnicodeAttribute(range_key=True)


class ApprovalItem(AccessItem):
    user_name = UnicodeAttribute(null=True)
    approved_at = NumberAttribute()
    approved_by = UnicodeAttribute()


class PendingItem(AccessItem):
    code_hash = UnicodeAttribute()
    salt = UnicodeAttribute()  # hex
    user_id = UnicodeAttribute()
    user_name = UnicodeAttribute(null=True)
    chat_id = UnicodeAttribute(null=True)
    created_at = NumberAttribute()
    expires_at = NumberAttribute()  # TTL, epoch seconds


class LimitItem(AccessItem):
    last_request_at = NumberAttribute(null=True)
    held_since = NumberAttribute(null=True)
    told_try_later_at = NumberAttribute(null=True)
    expires_at = NumberAttribute(null=True)  # TTL: once the hold's period is over


class LockItem(AccessItem):
    failures = NumberAttribute(null=True)
    locked_until = NumberAttribute(null=True)
    # TTL, set only with a lockout: a failure count alone stays until an approval or a lockout.
    expires_at = NumberAttribute(null=True)


@dataclass(frozen=True)
class AccessModels:
    approval: type[ApprovalItem]
    pending: type[PendingItem]
    limit: type[LimitItem]
    lock: type[LockItem]


# Bound classes are cached: pynamodb keeps a connection per class, so the endpoint is in the key.
@lru_cache(maxsize=8)
def bind_access(table: str, region: str | None, host: str | None = None) -> AccessModels:
    def bind(name: str, base: type[AccessItem]) -> type:
        return type(name, (base,), {"Meta": table_meta(table, region, host), "__module__": __name__})

    return AccessModels(
        approval=bind("Approval", ApprovalItem),
        pending=bind("Pending", PendingItem),
        limit=bind("Limit", LimitItem),
        lock=bind("Lock", LockItem),
    )


_Slot = tuple[str, PendingItem | None]  # a slot's sort key and its item as read (None: missing)


def _choose_slot(slots: dict[str, PendingItem], user_id: str, now: float) -> _Slot | None:
    """The user's own slot (a new code replaces theirs: one user never holds two), else a free one."""
    for sk, item in slots.items():
        if item.user_id == user_id:
            return sk, item
    for sk in _SLOT_KEYS:
        found = slots.get(sk)
        if found is None or found.expires_at <= now:
            return sk, found
    return None


def _pending_code(platform: str, item: PendingItem) -> PendingCode:
    return PendingCode(
        platform=platform,
        user_id=item.user_id,
        user_name=item.user_name,
        chat_id=item.chat_id,
        created_at=float(item.created_at),
        expires_at=float(item.expires_at),
    )


def _approval(platform: str, item: ApprovalItem) -> Approval:
    return Approval(
        platform=platform,
        user_id=item.sk,
        user_name=item.user_name,
        approved_at=float(item.approved_at),
        approved_by=item.approved_by,
    )


class DynamoAccessStore:
    """`PairingStore` on the access table."""

    def __init__(self, bindings: Bindings, region: str | None = None) -> None:
        self._region = region
        self._host = dynamodb_endpoint()
        self.models = bind_access(bindings.table("access"), region, self._host)

    @cached_property
    def _connection(self) -> Connection:
        return Connection(region=self._region, host=self._host)

    # -- code requests ----------------------------------------------------------------------

    def request_code(
        self, platform: str, user_id: str, user_name: str | None, chat_id: str | None, now: float
    ) -> CodeRequest:
        """Issue a code, or say why not.

        The order makes sure a refused request never costs the user their request window:

        1. the platform's lockout (a read): locked → `locked`;
        2. the platform's slots (a read): the user's own slot if they have one, else a free one;
           none → `no_slot`;
        3. the user's window and hold, taken with a conditional write (`last_request_at` missing or
           at least REQUEST_INTERVAL_SECONDS old, and `held_since` within the last hour or at least
           a period old): refused → `rate_limited`, or `held` when only the hold refused. Of a
           user's parallel requests, only one gets past this point;
        4. the slot, taken with a conditional put (free, or still holding what step 2 read). If
           another request took it meanwhile, the slots are read again; when none is left, the
           window taken in step 3 is given back and the answer is `no_slot`.

        So after `locked` or `no_slot` the user gets a code on the first request once a slot frees
        up or the lockout ends. They are told to try later once per interval (`told_try_later_at`,
        a conditional write too); further refusals within it are silent. A user who already holds
        a live code and asks again within the interval gets `rate_limited`; after it, their slot
        gets the new code.
        """
        if self._locked_until(platform, now) is not None:
            return self._refuse("locked", platform, user_id, now)
        target = _choose_slot(self._slots(platform), user_id, now)
        if target is None:
            return self._refuse("no_slot", platform, user_id, now)
        held_from = self._take_window(platform, user_id, now)
        if isinstance(held_from, str):
            return (
                CodeRequest("rate_limited")
                if held_from == "rate_limited"
                else self._refuse(held_from, platform, user_id, now)
            )
        issued: CodeRequest | None = None
        try:
            issued = self._issue(platform, user_id, user_name, chat_id, now, target, held_from)
        finally:
            if issued is None:
                self._give_back_window(platform, user_id, now, new_hold=held_from == now)
        return issued or self._refuse("no_slot", platform, user_id, now)

    def _issue(
        self,
        platform: str,
        user_id: str,
        user_name: str | None,
        chat_id: str | None,
        now: float,
        target: _Slot,
        held_from: float,
    ) -> CodeRequest | None:
        Pending = self.models.pending
        code, salt = new_code(), new_salt()
        expires_at = math.ceil(held_from + CODE_TTL_SECONDS)
        item = Pending(
            f"pending#{platform}",
            target[0],
            code_hash=hash_code(code, salt),
            salt=salt.hex(),
            user_id=user_id,
            user_name=user_name,
            chat_id=chat_id,
            created_at=now,
            expires_at=expires_at,
        )
        slot: _Slot | None = target
        # Each lost put means another request took that slot: with every slot taken, none is chosen.
        for _ in range(MAX_PENDING_PER_PLATFORM + _MAX_ATTEMPTS):
            if slot is None:
                return None
            item.sk, seen = slot
            condition = Pending.sk.does_not_exist() | (Pending.expires_at <= now)
            if seen is not None:
                condition |= Pending.code_hash == seen.code_hash
            try:
                with throttling_is_transient():
                    item.save(condition=condition)
            except PutError as exc:
                if not condition_failed(exc):
                    raise
                slot = _choose_slot(self._slots(platform), user_id, now)
                continue
            return CodeRequest("issued", code=code, expires_at=float(expires_at))
        raise TransientError("no pending slot settled")

    def _slots(self, platform: str) -> dict[str, PendingItem]:
        with throttling_is_transient():
            items = self.models.pending.query(f"pending#{platform}", consistent_read=True)
            return {item.sk: item for item in items if item.sk in _SLOT_KEYS}

    def _take_window(self, platform: str, user_id: str, now: float) -> float | str:
        """Take the user's request window within their current hold, else with a new hold: the
        hold's start, or why not (`rate_limited`, `held`)."""
        Limit = self.models.limit
        item = Limit(f"limit#{platform}", user_id)
        window = Limit.last_request_at.does_not_exist() | (Limit.last_request_at <= now - REQUEST_INTERVAL_SECONDS)
        keep: list[Any] = [Limit.last_request_at.set(now), Limit.expires_at.set(math.ceil(now + HOLD_PERIOD_SECONDS))]
        attempts: tuple[tuple[Condition, list[Any]], ...] = (
            (window & (Limit.held_since > now - CODE_TTL_SECONDS), keep),
            (
                window & (Limit.held_since.does_not_exist() | (Limit.held_since <= now - HOLD_PERIOD_SECONDS)),
                [*keep, Limit.held_since.set(now)],
            ),
        )
        for condition, actions in attempts:
            try:
                with throttling_is_transient():
                    item.update(actions=actions, condition=condition)
            except UpdateError as exc:
                if not condition_failed(exc):
                    raise
                continue
            return float(item.held_since if item.held_since is not None else now)
        try:
            with throttling_is_transient():
                current = Limit.get(f"limit#{platform}", user_id, consistent_read=True)
        except DoesNotExist:
            return "rate_limited"  # taken and given back meanwhile: as busy as a taken window
        start = hold_start(current.held_since, now)
        busy = current.last_request_at is not None and current.last_request_at > now - REQUEST_INTERVAL_SECONDS
        return "rate_limited" if busy or start is not None else "held"

    def _claim_once_per_interval(self, platform: str, user_id: str, mark: Any, now: float) -> bool:
        """Set one of the user's limit marks to `now` unless it was set less than an interval ago."""
        Limit = self.models.limit
        try:
            with throttling_is_transient():
                Limit(f"limit#{platform}", user_id).update(
                    # The item lives as long as the hold it may hold: TTL never ends a hold early.
                    actions=[mark.set(now), Limit.expires_at.set(math.ceil(now + HOLD_PERIOD_SECONDS))],
                    condition=mark.does_not_exist() | (mark <= now - REQUEST_INTERVAL_SECONDS),
                )
        except UpdateError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def _give_back_window(self, platform: str, user_id: str, now: float, *, new_hold: bool) -> None:
        """Undo `_take_window`. Removing the times is exact: taking the window required the old one
        to be missing or out of the interval, and a new hold the old one to be missing or a period
        old, which a missing one is too."""
        Limit = self.models.limit
        actions: list[Any] = [Limit.last_request_at.remove()]
        condition: Condition = Limit.last_request_at == now
        if new_hold:
            actions.append(Limit.held_since.remove())
            condition &= Limit.held_since == now
        try:
            with throttling_is_transient():
                Limit(f"limit#{platform}", user_id).update(actions=actions, condition=condition)
        except UpdateError as exc:
            if not condition_failed(exc):
                raise

    def _refuse(self, status: str, platform: str, user_id: str, now: float) -> CodeRequest:
        told = self._claim_once_per_interval(platform, user_id, self.models.limit.told_try_later_at, now)
        return CodeRequest(status, tell_try_later=told)

    # -- approvals --------------------------------------------------------------------------

    def approve(self, platform: str, code: str, now: float, approved_by: str) -> ApproveResult:
        """Approve the user whose live code this is.

        While the platform is locked every code fails, without any hash work. A malformed code
        counts as a failure without hashing. A code that matched but was consumed or replaced by
        a parallel call before this one's transaction is `invalid` without counting a failure: it
        was typed right.
        """
        locked_until = self._locked_until(platform, now)
        if locked_until is not None:
            return ApproveResult("locked", locked_until=locked_until)
        typed = normalize_code(code)
        if is_well_formed(typed):
            for slot in self._slots(platform).values():
                if slot.expires_at > now and code_matches(typed, bytes.fromhex(slot.salt), slot.code_hash):
                    return self._consume(platform, slot, now, approved_by)
        return self._count_failure(platform, now)

    def _not_locked(self, now: float) -> Condition:
        Lock = self.models.lock
        unlocked: Condition = Lock.locked_until.does_not_exist() | (Lock.locked_until <= now)
        return unlocked

    def _locked_until(self, platform: str, now: float) -> float | None:
        try:
            with throttling_is_transient():
                lock = self.models.lock.get(f"lock#{platform}", _LOCK_SK, consistent_read=True)
        except DoesNotExist:
            return None
        if lock.locked_until is not None and lock.locked_until > now:
            return float(lock.locked_until)
        return None

    def _consume(self, platform: str, slot: PendingItem, now: float, approved_by: str) -> ApproveResult:
        """One transaction: the slot goes (if it still holds this code), the approval is written and
        the failure count is reset (if the platform is still unlocked)."""
        Pending, Lock = self.models.pending, self.models.lock
        item = self.models.approval(
            f"approved#{platform}", slot.user_id, user_name=slot.user_name, approved_at=now, approved_by=approved_by
        )
        for attempt in range(_MAX_ATTEMPTS):
            try:
                with throttling_is_transient(), TransactWrite(connection=self._connection) as tx:
                    tx.delete(slot, condition=(Pending.code_hash == slot.code_hash) & (Pending.expires_at > now))
                    tx.save(item)
                    tx.delete(Lock(f"lock#{platform}", _LOCK_SK), condition=self._not_locked(now))
            except TransactWriteError as exc:
                codes = cancellation_codes(exc)
                if TRANSACTION_CONFLICT in codes:
                    backoff(attempt)
                    continue
                if len(codes) == 3 and codes[2] == CONDITION_FAILED:
                    return ApproveResult("locked", locked_until=self._locked_until(platform, now))
                if codes and codes[0] == CONDITION_FAILED:
                    return ApproveResult("invalid")
                raise
            return ApproveResult("approved", approval=_approval(platform, item))
        raise TransientError(f"approval did not settle after {_MAX_ATTEMPTS} attempts")

    def _count_failure(self, platform: str, now: float) -> ApproveResult:
        """`ADD failures 1` (atomic: parallel failures are all counted); whoever reaches the limit
        locks. The lock is conditioned on the platform not being locked already, so of two failures
        that both reach it one locks and the other finds it locked; neither skips it."""
        Lock = self.models.lock
        lock = Lock(f"lock#{platform}", _LOCK_SK)
        try:
            with throttling_is_transient():
                lock.update(actions=[Lock.failures.add(1), Lock.expires_at.remove()], condition=self._not_locked(now))
        except UpdateError as exc:
            if condition_failed(exc):
                return ApproveResult("locked", locked_until=self._locked_until(platform, now))
            raise
        if (lock.failures or 0) < MAX_FAILED_APPROVALS:
            return ApproveResult("invalid")
        until = now + LOCKOUT_SECONDS
        try:
            with throttling_is_transient():
                lock.update(
                    actions=[
                        Lock.locked_until.set(until),
                        Lock.failures.set(0),
                        Lock.expires_at.set(math.ceil(until)),
                    ],
                    condition=self._not_locked(now),
                )
        except UpdateError as exc:
            if not condition_failed(exc):
                raise
            return ApproveResult("invalid", locked_until=self._locked_until(platform, now))
        return ApproveResult("invalid", locked_until=until)

    # -- listing and administration ---------------------------------------------------------

    def is_approved(self, platform: str, user_id: str) -> bool:
        try:
            with throttling_is_transient():
                self.models.approval.get(f"approved#{platform}", user_id, consistent_read=True)
        except DoesNotExist:
            return False
        return True

    def revoke(self, platform: str, user_id: str) -> bool:
        Approval = self.models.approval
        try:
            with throttling_is_transient():
                Approval(f"approved#{platform}", user_id).delete(condition=Approval.sk.exists())
        except DeleteError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def pending(self, platform: str, now: float) -> list[PendingCode]:
        live = [_pending_code(platform, item) for item in self._slots(platform).values() if item.expires_at > now]
        return sorted(live, key=lambda p: (p.created_at, p.user_id))

    def approved(self, platform: str) -> list[Approval]:
        with throttling_is_transient():
            items = [
                _approval(platform, item)
                for item in self.models.approval.query(f"approved#{platform}", consistent_read=True)
            ]
        return sorted(items, key=lambda a: (a.approved_at, a.user_id))

    def clear_pending(self, platform: str) -> int:
        """Delete every slot, live or expired; the count is of the items this call deleted."""
        Pending = self.models.pending
        cleared = 0
        for item in self._slots(platform).values():
            try:
                with throttling_is_transient():
                    item.delete(condition=Pending.sk.exists())
            except DeleteError as exc:
                if not condition_failed(exc):
                    raise
                continue
            cleared += 1
        return cleared

    def forget_user(self, platform: str, user_id: str) -> int:
        """Delete what the table holds of one user on the platform: the approval, the request
        window and their pending code (forget); how many items that was."""
        removed = int(self.revoke(platform, user_id))
        for item in self._slots(platform).values():
            if item.user_id == user_id:
                removed += self._deleted(item)
        removed += self._deleted(self.models.limit(f"limit#{platform}", user_id))
        return removed

    def _deleted(self, item: AccessItem) -> int:
        try:
            with throttling_is_transient():
                item.delete(condition=type(item).sk.exists())
        except DeleteError as exc:
            if condition_failed(exc):
                return 0
            raise
        return 1
