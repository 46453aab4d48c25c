"""The DynamoDB pairing store (BEHAVIOUR §4) under concurrency (moto)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.client
import pytest
from botocore.exceptions import ClientError

from hermes_gateway.adapters.dynamo_access import DynamoAccessStore
from hermes_gateway.domain import pairing
from hermes_gateway.domain.pairing import (
    CODE_TTL_SECONDS,
    LOCKOUT_SECONDS,
    MAX_PENDING_PER_PLATFORM,
    REQUEST_INTERVAL_SECONDS,
    CodeRequest,
)
from hermes_gateway.errors import TransientError
from tests.fakes.access import FakePairingStore
from tests.fakes.concurrency import race

pytestmark = pytest.mark.integration

T0 = 1_700_000_000.0
WRONG = "ZZZZZZZZ"


@pytest.fixture
def store(aws: Any, monkeypatch: pytest.MonkeyPatch) -> DynamoAccessStore:
    # The store hashes with the count read at call time; test_issue_approve_with_the_real_hash
    # keeps the real one.
    monkeypatch.setattr(pairing, "HASH_ITERATIONS", 1)
    return DynamoAccessStore(aws.bindings)


def issue(store: Any, user: str, now: float = T0, platform: str = "telegram") -> str:
    result = store.request_code(platform, user, f"name-{user}", f"chat-{user}", now)
    assert result.status == "issued" and result.code is not None, result
    return str(result.code)


def lock_item(store: DynamoAccessStore, platform: str = "telegram") -> Any:
    return store.models.lock.get(f"lock#{platform}", "approvals", consistent_read=True)


def test_issue_approve_with_the_real_hash(aws: Any) -> None:
    # Given the real, slow hash
    assert pairing.HASH_ITERATIONS == 100_000
    store = DynamoAccessStore(aws.bindings)
    # When a user asks for a code
    result = store.request_code("telegram", "42", "Al", "99", T0)
    # Then they get one, valid for an hour, listed as pending
    assert result.status == "issued" and result.code and pairing.is_well_formed(result.code)
    assert result.expires_at == T0 + CODE_TTL_SECONDS and not result.tell_try_later
    assert [(p.user_id, p.user_name, p.chat_id) for p in store.pending("telegram", T0)] == [("42", "Al", "99")]
    assert not store.is_approved("telegram", "42")
    # When the operator approves it
    approved = store.approve("telegram", result.code, T0 + 30, "cli")
    # Then the user is approved and the code is gone
    assert approved.status == "approved" and approved.approval is not None
    assert approved.approval == pairing.Approval("telegram", "42", "Al", T0 + 30, "cli")
    assert store.is_approved("telegram", "42")
    assert store.approved("telegram") == [approved.approval]
    assert store.pending("telegram", T0 + 30) == []
    assert store.approve("telegram", result.code, T0 + 31, "cli").status == "invalid"


def _values(value: dict[str, Any]) -> Iterator[str | bytes]:
    """Every scalar in a raw DynamoDB attribute value, map keys included."""
    for kind, inner in value.items():
        if kind in ("S", "N", "B"):
            yield inner
        elif kind in ("SS", "NS", "BS"):
            yield from inner
        elif kind == "L":
            for element in inner:
                yield from _values(element)
        elif kind == "M":
            for key, element in inner.items():
                yield key
                yield from _values(element)


def _decodings(value: str | bytes) -> Iterator[bytes]:
    """The value as bytes, and as hex and base64 would read it."""
    raw = value if isinstance(value, bytes) else value.encode()
    yield raw
    yield raw.hex().encode()
    text = raw.decode("ascii", errors="ignore")
    for decode in (bytes.fromhex, base64.b64decode, base64.urlsafe_b64decode):
        try:
            yield decode(text)
        except (ValueError, binascii.Error):
            continue


def test_no_plaintext_code_is_stored_anywhere(store: DynamoAccessStore, aws: Any) -> None:
    # Given codes issued, one approved, a failure counted and a user refused
    codes = [issue(store, f"u{n}") for n in range(MAX_PENDING_PER_PLATFORM)]
    assert store.request_code("telegram", "late", "Dee", "c4", T0).status == "no_slot"
    assert store.approve("telegram", codes[0].lower(), T0 + 1, "cli").status == "approved"
    store.approve("telegram", WRONG, T0 + 2, "cli")
    # When the whole table is scanned
    table = aws.bindings.table("access")
    items = boto3.client("dynamodb").scan(TableName=table, ConsistentRead=True)["Items"]
    assert {item["pk"]["S"] for item in items} == {
        "approved#telegram",
        "pending#telegram",
        "limit#telegram",
        "lock#telegram",
    }
    # Then no attribute holds any code, in any spelling or encoding
    forms = [c.encode() for code in codes for c in (code, code.lower())]
    for item in items:
        for name, value in item.items():
            for scalar in (name, *_values(value)):
                for decoded in _decodings(scalar):
                    assert not any(form in decoded.upper() or form in decoded for form in forms), (item, name)
    # And what is stored instead is a salted hash
    slots = [item for item in items if item["pk"]["S"] == "pending#telegram"]
    assert len(slots) == MAX_PENDING_PER_PLATFORM - 1
    assert all(len(item["code_hash"]["S"]) == 64 and item["salt"]["S"] for item in slots)


def test_more_users_than_slots_race_for_them(store: DynamoAccessStore) -> None:
    # When 7 users more than there are slots ask at the same moment
    users = MAX_PENDING_PER_PLATFORM + 7
    results: list[CodeRequest] = race(users, lambda i: store.request_code("telegram", f"u{i}", None, None, T0))
    # Then exactly as many as there are slots get a code and 7 are refused, each told to try later
    issued = [i for i, r in enumerate(results) if r.status == "issued"]
    refused = [i for i, r in enumerate(results) if r.status != "issued"]
    assert len(issued) == MAX_PENDING_PER_PLATFORM and len({results[i].code for i in issued}) == len(issued)
    assert all(results[i] == CodeRequest("no_slot", tell_try_later=True) for i in refused)
    assert sorted(p.user_id for p in store.pending("telegram", T0)) == sorted(f"u{i}" for i in issued)
    # When the refused users ask again (in parallel) within the interval, they are not told again
    again = race(7, lambda k: store.request_code("telegram", f"u{refused[k]}", None, None, T0 + 60))
    assert again == [CodeRequest("no_slot", tell_try_later=False)] * 7
    # When one code is approved, a refused user gets a code at once: the refusals used no window
    first_code = results[issued[0]].code
    assert first_code is not None
    assert store.approve("telegram", first_code, T0 + 90, "cli").status == "approved"
    assert store.request_code("telegram", f"u{refused[0]}", None, None, T0 + 91).status == "issued"
    assert len(store.pending("telegram", T0 + 91)) == MAX_PENDING_PER_PLATFORM
    # And a refused user is told to try later again once the interval has passed
    late = f"u{refused[1]}"
    assert not store.request_code("telegram", late, None, None, T0 + REQUEST_INTERVAL_SECONDS - 1).tell_try_later
    assert store.request_code("telegram", late, None, None, T0 + REQUEST_INTERVAL_SECONDS).tell_try_later


def test_one_users_parallel_requests_give_one_code(store: DynamoAccessStore) -> None:
    results = race(5, lambda _: store.request_code("telegram", "u1", "Al", "c1", T0))
    assert sorted(r.status for r in results) == [
        "issued",
        "rate_limited",
        "rate_limited",
        "rate_limited",
        "rate_limited",
    ]
    assert [p.user_id for p in store.pending("telegram", T0)] == ["u1"]


def test_one_request_per_interval_and_a_new_code_replaces_the_old(store: DynamoAccessStore) -> None:
    old = issue(store, "u1")
    issue(store, "u2")
    issue(store, "u3")
    # Within the interval the user is rate limited (silence); their code is still good
    assert store.request_code("telegram", "u1", None, None, T0 + REQUEST_INTERVAL_SECONDS - 1) == CodeRequest(
        "rate_limited"
    )
    # After it they get a new code in their own slot, even with every slot taken
    later = T0 + REQUEST_INTERVAL_SECONDS
    new = issue(store, "u1", later)
    assert new != old
    pending = store.pending("telegram", later)
    assert [(p.user_id, p.created_at) for p in pending] == [("u2", T0), ("u3", T0), ("u1", later)]
    assert store.approve("telegram", old, later + 1, "cli").status == "invalid"
    assert store.approve("telegram", new, later + 1, "cli").status == "approved"


def test_expired_codes_are_not_listed_and_free_their_slot(store: DynamoAccessStore) -> None:
    codes = [issue(store, f"u{n}") for n in range(MAX_PENDING_PER_PLATFORM)]
    expiry = T0 + CODE_TTL_SECONDS
    assert len(store.pending("telegram", expiry - 1)) == MAX_PENDING_PER_PLATFORM
    # Once expired (and TTL has not deleted anything), they are not listed and do not approve
    assert store.pending("telegram", expiry) == []
    assert store.approve("telegram", codes[0], expiry, "cli").status == "invalid"
    # And their slots are free
    newcomers = [f"v{n}" for n in range(MAX_PENDING_PER_PLATFORM)]
    for user in newcomers:
        issue(store, user, expiry)
    assert sorted(p.user_id for p in store.pending("telegram", expiry)) == sorted(newcomers)
    assert store.request_code("telegram", "w", None, None, expiry).status == "no_slot"


def test_approval_ignores_case_spaces_and_dashes(store: DynamoAccessStore) -> None:
    code = issue(store, "u1")
    typed = f" {code[:4].lower()} - {code[4:].lower()} "
    assert store.approve("telegram", typed, T0, "cli").status == "approved"
    assert store.is_approved("telegram", "u1")


def test_five_wrong_approvals_lock_for_an_hour(store: DynamoAccessStore, monkeypatch: pytest.MonkeyPatch) -> None:
    code = issue(store, "u1")
    checks: list[str] = []
    real_matches = pairing.code_matches

    def counted(typed: str, salt: bytes, expected_hash: str) -> bool:
        checks.append(typed)
        return real_matches(typed, salt, expected_hash)

    monkeypatch.setattr("hermes_gateway.adapters.dynamo_access.code_matches", counted)
    # A malformed code counts as a failure without any hash work
    assert store.approve("telegram", "not-a-code", T0, "cli").status == "invalid"
    assert checks == []
    for n in range(3):
        assert store.approve("telegram", WRONG, T0 + n, "cli") == pairing.ApproveResult("invalid")
    assert int(lock_item(store).failures) == 4
    # The fifth failure locks approvals for an hour
    locked_at = T0 + 10
    fifth = store.approve("telegram", WRONG, locked_at, "cli")
    assert fifth == pairing.ApproveResult("invalid", locked_until=locked_at + LOCKOUT_SECONDS)
    # While locked even a valid code fails, without hash work, and no code is handed out
    checks.clear()
    assert store.approve("telegram", code, locked_at + 1, "cli") == pairing.ApproveResult(
        "locked", locked_until=locked_at + LOCKOUT_SECONDS
    )
    assert checks == []
    assert store.request_code("telegram", "u2", None, None, locked_at + 1) == CodeRequest("locked", tell_try_later=True)
    assert store.request_code("telegram", "u2", None, None, locked_at + 2) == CodeRequest("locked")
    assert store.approve("telegram", code, locked_at + LOCKOUT_SECONDS - 1, "cli").status == "locked"
    # After the hour (the old code has expired meanwhile) a new code approves
    fresh = issue(store, "u3", locked_at + LOCKOUT_SECONDS)
    assert store.approve("telegram", fresh, locked_at + LOCKOUT_SECONDS, "cli").status == "approved"
    assert lock_item_missing(store)


def lock_item_missing(store: DynamoAccessStore) -> bool:
    try:
        lock_item(store)
    except store.models.lock.DoesNotExist:
        return True
    return False


def test_an_approval_resets_the_failure_count(store: DynamoAccessStore) -> None:
    code = issue(store, "u1")
    for _ in range(4):
        store.approve("telegram", WRONG, T0, "cli")
    assert store.approve("telegram", code, T0, "cli").status == "approved"
    assert lock_item_missing(store)
    assert [store.approve("telegram", WRONG, T0, "cli").locked_until for _ in range(4)] == [None] * 4


def test_parallel_failures_are_all_counted(store: DynamoAccessStore) -> None:
    # Given pending codes, so each wrong approval does its hash work
    for user in ("u1", "u2", "u3"):
        issue(store, user)
    # When 4 wrong approvals run at once, all 4 are counted and nothing is locked yet
    assert race(4, lambda _: store.approve("telegram", WRONG, T0, "cli").status) == ["invalid"] * 4
    assert int(lock_item(store).failures) == 4
    assert store.approve("telegram", WRONG, T0 + 1, "cli").locked_until == T0 + 1 + LOCKOUT_SECONDS


def test_eight_parallel_wrong_approvals_end_locked(store: DynamoAccessStore) -> None:
    code = issue(store, "u1")
    # When 8 wrong approvals run at once
    results = race(8, lambda i: store.approve("telegram", WRONG, T0 + i / 100, "cli"))
    # Then at least five were counted, the rest found the lock, and no failure skipped it
    statuses = [r.status for r in results]
    assert statuses.count("invalid") >= 5 and statuses.count("invalid") + statuses.count("locked") == 8
    assert store.approve("telegram", code, T0 + 1, "cli").status == "locked"
    # And one of them locked: every result that names the lockout names the same one
    lock = lock_item(store)
    assert lock.failures == 0 and lock.locked_until > T0 + 1
    assert {r.locked_until for r in results if r.locked_until} == {lock.locked_until}
    assert sum(r.locked_until is not None for r in results if r.status == "invalid") >= 1


def test_parallel_approvals_of_one_code_approve_once(store: DynamoAccessStore) -> None:
    code = issue(store, "u1")
    results = race(3, lambda _: store.approve("telegram", code, T0, "cli").status)
    assert sorted(results) == ["approved", "invalid", "invalid"]
    # A code typed right but consumed by a parallel call is not a failure
    assert lock_item_missing(store)


def test_revoke(store: DynamoAccessStore) -> None:
    for user in ("u1", "u2"):
        store.approve("telegram", issue(store, user), T0, "cli")
    assert [a.user_id for a in store.approved("telegram")] == ["u1", "u2"]
    assert store.revoke("telegram", "u1")
    assert not store.revoke("telegram", "u1")
    assert not store.is_approved("telegram", "u1") and store.is_approved("telegram", "u2")
    assert [a.user_id for a in store.approved("telegram")] == ["u2"]


def test_clear_pending(store: DynamoAccessStore) -> None:
    codes = [issue(store, user) for user in ("u1", "u2", "u3")]
    issue(store, "u1", platform="discord")
    assert store.clear_pending("telegram") == 3
    assert store.pending("telegram", T0) == [] and len(store.pending("discord", T0)) == 1
    assert store.clear_pending("telegram") == 0
    assert store.approve("telegram", codes[0], T0, "cli").status == "invalid"
    # The slots are free again (the cleared users still wait out their interval)
    issue(store, "u4")
    assert store.request_code("telegram", "u1", None, None, T0 + 1).status == "rate_limited"


def test_platforms_do_not_share_slots_or_locks(store: DynamoAccessStore) -> None:
    telegram_code = issue(store, "u1")
    for user in ("u2", "u3"):
        issue(store, user)
    for _ in range(5):
        store.approve("telegram", WRONG, T0, "cli")
    assert store.approve("telegram", telegram_code, T0, "cli").status == "locked"
    # The same users on another platform get codes, and approvals there work
    discord_code = issue(store, "u1", platform="discord")
    assert store.approve("discord", discord_code, T0, "cli").status == "approved"
    assert store.is_approved("discord", "u1") and not store.is_approved("telegram", "u1")
    assert store.approved("telegram") == []


def test_the_fake_answers_like_the_adapter(store: DynamoAccessStore) -> None:
    """One script against both stores: the router's unit tests can trust the fake."""

    def play(target: Any) -> list[object]:
        codes: dict[str, str] = {}
        seen: list[object] = []

        def ask(user: str, at: float, platform: str = "telegram") -> None:
            result = target.request_code(platform, user, user.upper(), None, T0 + at)
            if result.code:
                codes[user] = result.code
            seen.append((user, at, result.status, result.expires_at, result.tell_try_later))

        def approve(typed: str, at: float) -> None:
            seen.append((typed, at, target.approve("telegram", codes.get(typed, typed), T0 + at, "cli")))

        for user in ("a", "b", "c", "d"):
            ask(user, 0)
        ask("d", 30)
        ask("a", 60)
        approve("b", 90)
        ask("d", 100)
        ask("e", 100)
        for n in range(5):
            approve(WRONG, 110 + n)
        approve("a", 200)
        ask("f", 200)
        ask("f", 300)
        ask("a", 700)
        seen.append(target.pending("telegram", T0 + 700))
        ask("a", 3720)
        ask("f", 3720)
        approve("a", 3730)
        seen.append(target.pending("telegram", T0 + 3730))
        seen.append(target.approved("telegram"))
        seen.append(target.clear_pending("telegram"))
        return seen

    fake_store = FakePairingStore()
    assert play(store) == play(fake_store)


@pytest.mark.parametrize(
    ("operation", "error"),
    [
        ("GetItem", {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}),
        ("Query", {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}),
        (
            "TransactWriteItems",
            {
                "Error": {"Code": "TransactionCanceledException", "Message": "throttled"},
                "CancellationReasons": [{"Code": "ThrottlingError"}, {"Code": "None"}, {"Code": "None"}],
            },
        ),
    ],
)
def test_throttling_is_transient(
    store: DynamoAccessStore, monkeypatch: pytest.MonkeyPatch, operation: str, error: dict[str, Any]
) -> None:
    code = issue(store, "u1")
    real_call = botocore.client.BaseClient._make_api_call

    def throttled(client: Any, name: str, params: dict[str, Any]) -> Any:
        if name == operation:
            raise ClientError(error, name)  # type: ignore[arg-type]
        return real_call(client, name, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", throttled)
    # (botocore's own retries sit below `_make_api_call`: this is what is left after them)
    with pytest.raises(TransientError):
        store.approve("telegram", code, T0, "cli")


def squatted(store: Any) -> list[str]:
    """Throwaway accounts fill every slot and ask again whenever their window allows (sampled: every
    10 minutes through the first hour, then now and then for the rest of the day); a newcomer asks
    a second after each round. What the newcomer was answered, round by round."""
    squatters = [f"squatter{n}" for n in range(MAX_PENDING_PER_PLATFORM)]
    rounds = [*range(0, 3600, REQUEST_INTERVAL_SECONDS), 3600, 7200, 43_200, 86_400 - REQUEST_INTERVAL_SECONDS]
    answers = []
    for at in rounds:
        for user in squatters:
            store.request_code("telegram", user, None, None, T0 + at)
        answers.append(store.request_code("telegram", f"newcomer{at}", None, None, T0 + at + 1).status)
    return answers


@pytest.mark.parametrize("kind", ["dynamodb", "fake"])
def test_squatters_hold_every_slot_for_one_hour_a_day_not_for_ever(store: DynamoAccessStore, kind: str) -> None:
    # Given as many throwaway accounts as there are slots, each renewing its code every 10 minutes
    answers = squatted(store if kind == "dynamodb" else FakePairingStore())
    # Then they lock newcomers out for the first hour only: their codes expire an hour after the
    # first, and none of them gets another code that day (it took 3 accounts, for ever, before)
    assert answers == ["no_slot"] * 6 + ["issued"] * 4


def test_a_renewed_code_keeps_the_first_ones_expiry_and_the_next_hold_is_a_day_later(
    store: DynamoAccessStore,
) -> None:
    first = store.request_code("telegram", "u1", None, None, T0)
    renewed = store.request_code("telegram", "u1", None, None, T0 + REQUEST_INTERVAL_SECONDS)
    assert first.expires_at == renewed.expires_at == T0 + CODE_TTL_SECONDS and first.code != renewed.code
    over = store.request_code("telegram", "u1", None, None, T0 + CODE_TTL_SECONDS)
    assert over == CodeRequest("held", tell_try_later=True)  # told once per interval, as for no_slot
    assert store.request_code("telegram", "u1", None, None, T0 + CODE_TTL_SECONDS + 60) == CodeRequest("held")
    assert store.request_code("telegram", "u1", None, None, T0 + pairing.HOLD_PERIOD_SECONDS).status == "issued"
