"""BEHAVIOUR §4, pairing: the code rules (pure) and the in-memory store's limits, which the router's
unit tests rely on (tests/integration/test_dynamo_access.py holds the DynamoDB adapter to them)."""

from __future__ import annotations

import hashlib
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain import pairing
from hermes_gateway.domain.pairing import (
    ALPHABET,
    CODE_LENGTH,
    code_matches,
    hash_code,
    is_well_formed,
    new_code,
    new_salt,
    normalize_code,
    pairing_reply,
)
from tests.fakes.access import FakePairingStore

T0 = 1_700_000_000.0
codes = st.text(alphabet=ALPHABET, min_size=CODE_LENGTH, max_size=CODE_LENGTH)


@pytest.fixture
def fast_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store hashes with the iteration count read at call time; one keeps these tests fast."""
    monkeypatch.setattr(pairing, "HASH_ITERATIONS", 1)


# -- codes ------------------------------------------------------------------------------------


def test_the_alphabet_has_no_look_alikes() -> None:
    assert len(ALPHABET) == len(set(ALPHABET)) == 32
    assert not set("01IO") & set(ALPHABET)
    assert ALPHABET.isupper()


def test_new_codes_are_well_formed_and_random() -> None:
    issued = [new_code() for _ in range(200)]
    assert all(len(code) == CODE_LENGTH and is_well_formed(code) for code in issued)
    assert len(set(issued)) == len(issued)


@pytest.mark.parametrize(
    ("typed", "code"),
    [
        ("abcd efgh", "ABCDEFGH"),
        ("  ABCD-EFGH\n", "ABCDEFGH"),
        ("ab-cd_ef gh", "ABCDEFGH"),
        ("a b\tc d e f g h", "ABCDEFGH"),
        ("k7m2 p9q3", "K7M2P9Q3"),
    ],
)
def test_normalize_ignores_case_spaces_and_dashes(typed: str, code: str) -> None:
    assert normalize_code(typed) == code
    assert is_well_formed(normalize_code(typed))


@given(codes, st.lists(st.sampled_from([" ", "-", "_", "\t"]), max_size=CODE_LENGTH + 1), st.booleans())
def test_any_spelling_of_a_code_normalizes_to_it(code: str, separators: list[str], lower: bool) -> None:
    # Given a code typed in lower case with separators between its characters
    typed = "".join(c + s for c, s in zip(code, separators + [""] * CODE_LENGTH, strict=False))
    typed = typed.lower() if lower else typed
    # Then it normalizes back to the code
    assert normalize_code(typed) == code


@pytest.mark.parametrize("typed", ["", "ABCDEFG", "ABCDEFGHJ", "ABCDEFG0", "ABCDEFGI", "ABCDEFG1", "ABCDÉFGH"])
def test_malformed_codes_are_rejected(typed: str) -> None:
    assert not is_well_formed(normalize_code(typed))


def test_hashes_are_salted_slow_and_not_the_code() -> None:
    # The real iteration count, checked once against hashlib directly
    code, salt = "K7M2P9Q3", new_salt()
    assert pairing.HASH_ITERATIONS >= 100_000
    expected = hashlib.pbkdf2_hmac("sha256", code.encode(), salt, pairing.HASH_ITERATIONS).hex()
    assert hash_code(code, salt) == expected
    assert code not in expected and code.lower() not in expected


@given(codes)
def test_one_code_under_two_salts_has_two_hashes(code: str) -> None:
    pairing_iterations = pairing.HASH_ITERATIONS
    pairing.HASH_ITERATIONS = 1  # hypothesis runs many examples; the count is not under test here
    try:
        first, second = new_salt(), new_salt()
        assert first != second and len(first) == pairing.SALT_BYTES
        assert hash_code(code, first) != hash_code(code, second)
        assert hash_code(code, first) == hash_code(code, first)
    finally:
        pairing.HASH_ITERATIONS = pairing_iterations


@pytest.mark.usefixtures("fast_hash")
def test_code_matches_only_its_own_code_and_salt() -> None:
    salt = new_salt()
    stored = hash_code("K7M2P9Q3", salt)
    assert code_matches("K7M2P9Q3", salt, stored)
    assert not code_matches("K7M2P9Q4", salt, stored)
    assert not code_matches("K7M2P9Q3", new_salt(), stored)


def test_the_reply_names_the_code_and_the_approve_command() -> None:
    reply = pairing_reply("telegram", "K7M2P9Q3")
    assert "K7M2P9Q3" in reply and "pairing approve telegram K7M2P9Q3" in reply


# -- the in-memory store's rules --------------------------------------------------------------


@pytest.fixture
def store(fast_hash: None) -> FakePairingStore:
    return FakePairingStore()


def issue(store: FakePairingStore, user: str, now: float = T0, platform: str = "telegram") -> str:
    result = store.request_code(platform, user, f"name-{user}", f"chat-{user}", now)
    assert result.status == "issued" and result.code is not None, result
    return result.code


def test_issue_then_approve(store: FakePairingStore) -> None:
    code = issue(store, "u1")
    assert [p.user_id for p in store.pending("telegram", T0)] == ["u1"]
    result = store.approve("telegram", code.lower()[:4] + " - " + code[4:], T0 + 5, "operator")
    assert result.status == "approved" and result.approval is not None
    assert (result.approval.user_id, result.approval.user_name, result.approval.approved_by) == (
        "u1",
        "name-u1",
        "operator",
    )
    assert store.is_approved("telegram", "u1") and not store.is_approved("discord", "u1")
    assert store.pending("telegram", T0 + 5) == []
    assert [a.user_id for a in store.approved("telegram")] == ["u1"]


def test_no_plaintext_code_is_kept(store: FakePairingStore) -> None:
    code = issue(store, "u1")
    assert code not in repr(store.__dict__)


def test_a_platforms_slots_and_try_later_once(store: FakePairingStore) -> None:
    users = [f"u{n}" for n in range(1, pairing.MAX_PENDING_PER_PLATFORM + 1)]
    issued = {user: issue(store, user) for user in users}
    # One user more is refused and told once; asking again within the interval is silent
    first = store.request_code("telegram", "extra", None, None, T0)
    assert (first.status, first.tell_try_later) == ("no_slot", True)
    again = store.request_code("telegram", "extra", None, None, T0 + 60)
    assert (again.status, again.tell_try_later) == ("no_slot", False)
    # Another platform is not affected
    issue(store, "extra", platform="discord")
    # Once a slot frees up, the refused user gets a code at once: the refusal did not use their window
    assert store.approve("telegram", issued["u1"], T0 + 100, "op").status == "approved"
    issue(store, "extra", T0 + 120)
    # And a refused user hears "try later" again in the next interval
    assert store.request_code("telegram", "other", None, None, T0 + 120).tell_try_later
    assert not store.request_code("telegram", "other", None, None, T0 + 719).tell_try_later
    assert store.request_code("telegram", "other", None, None, T0 + 720).tell_try_later


def test_one_request_per_interval_and_a_new_code_replaces_the_old(store: FakePairingStore) -> None:
    old = issue(store, "u1")
    assert store.request_code("telegram", "u1", None, None, T0 + 599) == pairing.CodeRequest("rate_limited")
    new = issue(store, "u1", T0 + 600)
    assert [(p.user_id, p.created_at) for p in store.pending("telegram", T0 + 600)] == [("u1", T0 + 600)]
    assert store.approve("telegram", old, T0 + 601, "op").status == "invalid"
    assert store.approve("telegram", new, T0 + 601, "op").status == "approved"


def test_expired_codes_are_not_listed_free_their_slot_and_do_not_approve(store: FakePairingStore) -> None:
    codes_issued = [issue(store, user) for user in ("u1", "u2", "u3")]
    expiry = T0 + pairing.CODE_TTL_SECONDS
    assert len(store.pending("telegram", expiry - 1)) == 3
    assert store.pending("telegram", expiry) == []
    assert store.approve("telegram", codes_issued[0], expiry, "op").status == "invalid"
    issue(store, "u4", expiry)
    assert [p.user_id for p in store.pending("telegram", expiry)] == ["u4"]


def test_five_failures_lock_approvals_for_an_hour(store: FakePairingStore) -> None:
    code = issue(store, "u1")
    for n in range(4):
        assert store.approve("telegram", "AAAAAAAA" if n % 2 else "not a code", T0 + n, "op").status == "invalid"
    fifth = store.approve("telegram", "AAAAAAAA", T0 + 10, "op")
    assert (fifth.status, fifth.locked_until) == ("invalid", T0 + 10 + 3600)
    # While locked even the right code fails, and no new code is handed out
    assert store.approve("telegram", code, T0 + 11, "op").status == "locked"
    assert store.request_code("telegram", "u2", None, None, T0 + 11).status == "locked"
    assert store.approve("discord", "AAAAAAAA", T0 + 11, "op").status == "invalid"
    assert store.approve("telegram", code, T0 + 3609, "op").status == "locked"
    # After the hour a fresh code works (the old one has expired meanwhile)
    fresh = issue(store, "u3", T0 + 3610)
    assert store.approve("telegram", fresh, T0 + 3610, "op").status == "approved"


def test_an_approval_resets_the_failure_count(store: FakePairingStore) -> None:
    code = issue(store, "u1")
    for _ in range(4):
        store.approve("telegram", "AAAAAAAA", T0, "op")
    assert store.approve("telegram", code, T0, "op").status == "approved"
    for _ in range(4):
        assert store.approve("telegram", "AAAAAAAA", T0, "op").locked_until is None


def test_revoke_and_clear_pending(store: FakePairingStore) -> None:
    store.approve("telegram", issue(store, "u1"), T0, "op")
    issue(store, "u2")
    issue(store, "u3")
    assert store.revoke("telegram", "u1") and not store.revoke("telegram", "u1")
    assert not store.is_approved("telegram", "u1")
    assert store.clear_pending("telegram") == 2
    assert store.pending("telegram", T0) == []
    assert store.clear_pending("telegram") == 0


def test_parallel_requests_of_one_user_give_one_code(store: FakePairingStore) -> None:
    results: list[pairing.CodeRequest] = []
    barrier = threading.Barrier(5)

    def ask() -> None:
        barrier.wait()
        results.append(store.request_code("telegram", "u1", None, None, T0))

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.status for r in results) == ["issued"] + ["rate_limited"] * 4
