"""DM pairing (BEHAVIOUR §4): an unknown user gets a one-time code, the operator approves it.

Codes are 8 characters from an alphabet without look-alikes, valid up to one hour, and stored
only as a salted, slow hash: the plaintext exists in the user's chat and in the operator's
command, never in a table or a log line. The limits (one request per user per 10 minutes, 10
pending codes per platform, 5 failed approvals lock a platform's approvals for an hour) are
enforced by the store with conditional writes, so parallel requests cannot exceed them.

A user holds a pending code for at most one hour a day: a code asked for again within the hour
replaces theirs but keeps its expiry, and once the hour is over they get the next one a day after
the first. Holding every slot of a platform therefore takes MAX_PENDING_PER_PLATFORM accounts for
each hour of the day (240 a day), not three for ever (each could renew its code every 10 minutes).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Protocol

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL_SECONDS = 3600
REQUEST_INTERVAL_SECONDS = 600
MAX_PENDING_PER_PLATFORM = 10
HOLD_PERIOD_SECONDS = 24 * 3600  # a user's codes span at most CODE_TTL_SECONDS of each period
MAX_FAILED_APPROVALS = 5
LOCKOUT_SECONDS = 3600
SALT_BYTES = 16
# A code has 40 bits; a slow hash keeps a leaked table from giving live codes away quickly.
HASH_ITERATIONS = 100_000

_SEPARATORS = re.compile(r"[\s\-_]+")


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What the operator typed, as a code: case, spaces and dashes ignored."""
    return _SEPARATORS.sub("", text).upper()


def is_well_formed(code: str) -> bool:
    return len(code) == CODE_LENGTH and all(c in ALPHABET for c in code)


def hold_start(held_since: float | None, now: float) -> float | None:
    """When the hold a code issued `now` belongs to began: the user's current one (the code expires
    with it), a new one (`now`) when there was none or the last began a period ago, or None while the
    user waits for the period to pass."""
    if held_since is None or held_since <= now - HOLD_PERIOD_SECONDS:
        return now
    if held_since > now - CODE_TTL_SECONDS:
        return held_since
    return None


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def hash_code(code: str, salt: bytes) -> str:
    return hashlib.pbkdf2_hmac("sha256", code.encode("ascii"), salt, HASH_ITERATIONS).hex()


def code_matches(code: str, salt: bytes, expected_hash: str) -> bool:
    return hmac.compare_digest(hash_code(code, salt), expected_hash)


@dataclass(frozen=True)
class CodeRequest:
    """The outcome of an unknown user's DM.

    status: `issued` (a new code), `rate_limited` (asked within the last 10 minutes: stay silent,
    their code is still good), `no_slot` (MAX_PENDING_PER_PLATFORM codes pending on the platform),
    `held` (the user's hour of pending codes for this period is used up) or `locked` (approvals
    locked). `tell_try_later` is true the first time a user meets `no_slot`, `held` or `locked` in a
    request interval, so they hear "try later" once and then nothing.
    """

    status: str
    code: str | None = None
    expires_at: float | None = None
    tell_try_later: bool = False


@dataclass(frozen=True)
class PendingCode:
    platform: str
    user_id: str
    user_name: str | None
    chat_id: str | None
    created_at: float
    expires_at: float


@dataclass(frozen=True)
class Approval:
    platform: str
    user_id: str
    user_name: str | None
    approved_at: float
    approved_by: str


@dataclass(frozen=True)
class ApproveResult:
    """status: `approved`, `invalid` (no pending code matches; counts as a failure) or `locked`."""

    status: str
    approval: Approval | None = None
    locked_until: float | None = None


class PairingStore(Protocol):
    def request_code(
        self, platform: str, user_id: str, user_name: str | None, chat_id: str | None, now: float
    ) -> CodeRequest: ...

    def approve(self, platform: str, code: str, now: float, approved_by: str) -> ApproveResult: ...

    def is_approved(self, platform: str, user_id: str) -> bool: ...

    def revoke(self, platform: str, user_id: str) -> bool: ...

    def pending(self, platform: str, now: float) -> list[PendingCode]:
        """Unexpired pending codes (expired ones are ignored even before TTL deletes them)."""
        ...

    def approved(self, platform: str) -> list[Approval]: ...

    def clear_pending(self, platform: str) -> int: ...

    def forget_user(self, platform: str, user_id: str) -> int:
        """Delete the user's approval, pending code and request window (forget); how many."""
        ...


def pairing_reply(
    platform: str, code: str, profile: str | None = None, *, cli: str = "hermes-gateway", local: bool = False
) -> str:
    """What an unknown user is told: the command as the operator runs it (`cli`; in local mode the
    path of the one beside it, with `--local`); a named profile's bot names itself in the command."""
    return (
        f"Hi! I don't know you yet. Your pairing code is {code} (valid for up to one hour).\n"
        f"Ask the operator of this bot to run:\n"
        f"{cli} pairing approve {platform} {code}"
        + (f" --profile {profile}" if profile else "")
        + (" --local" if local else "")
    )


TRY_LATER_REPLY = "I can't take new pairing requests right now. Please try again later."
