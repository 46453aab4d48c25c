"""The lease sweep (services/expiry.py): release leases that outlived their turn, and only those."""

from __future__ import annotations

from collections.abc import Callable

from hermes_gateway.domain.sessions import ExpiredLease, TurnLease
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.services.expiry import LeaseRecovery, recover_expired_leases
from tests.fakes.services import FakeStarter, make_settings
from tests.fakes.sessions import FakeSessionStore
from tests.fakes.turns import FakeTurnControl

NOW = 1_764_400_000.0
TTL = 360


def release_expired_leases(lease: TurnLease, now: float, batch: int = 100) -> int:
    """The tick's lease part over `lease` (the store itself, or a wrapper around it): how many it released."""
    store = lease if isinstance(lease, FakeSessionStore) else lease.store  # type: ignore[attr-defined]
    deps = LeaseRecovery(make_settings({}), store, lease, FakeTurnControl(store), FakeStarter())
    return recover_expired_leases(deps, now, batch)["leases_released"]


def store_with_leases(*keys_and_start: tuple[str, float]) -> FakeSessionStore:
    store = FakeSessionStore()
    for key, started in keys_and_start:
        store.get_or_create(SessionSource("telegram", chat_id=key), key, started)
        assert store.acquire(key, f"turn-{key}", f"token-{key}", started, TTL)
    return store


def test_only_expired_leases_are_released_and_marked_resume_pending() -> None:
    # Given one lease past its expiry, one still running and one session without a lease
    store = store_with_leases(("old", NOW - TTL - 1), ("fresh", NOW - 10))
    store.get_or_create(SessionSource("telegram", chat_id="idle"), "idle", NOW - 1000)

    # When the sweep runs
    released = release_expired_leases(store, NOW)

    # Then only the expired lease is cleared, and only its session is marked resume_pending
    assert released == 1
    old, fresh, idle = (store.get_route(k) for k in ("old", "fresh", "idle"))
    assert old is not None and old.lease_token is None and old.resume_pending is True
    assert fresh is not None and fresh.lease_token == "token-fresh" and fresh.resume_pending is False
    assert idle is not None and idle.resume_pending is False


def test_a_lease_expiring_exactly_now_is_kept() -> None:
    store = store_with_leases(("edge", NOW - TTL))

    assert release_expired_leases(store, NOW) == 0
    assert store.get_route("edge").lease_token == "token-edge"  # type: ignore[union-attr]


def test_a_second_sweep_finds_nothing() -> None:
    store = store_with_leases(("a", NOW - 1000), ("b", NOW - 2000))

    assert release_expired_leases(store, NOW) == 2
    assert release_expired_leases(store, NOW + 60) == 0


class RenewsBetweenListAndExpire:
    """The race the sweep must survive: between listing expired leases and clearing them, the turn
    that holds one renews it (the router re-acquires with the same token) or a new turn takes it."""

    def __init__(self, store: FakeSessionStore, on_listed: Callable[[], object]) -> None:
        self.store = store
        self.on_listed = on_listed

    def acquire(self, session_key: str, turn_id: str, token: str, now: float, ttl_seconds: int) -> bool:
        return self.store.acquire(session_key, turn_id, token, now, ttl_seconds)

    def release(self, session_key: str, token: str) -> bool:
        return self.store.release(session_key, token)

    def expired(self, now: float, limit: int = 100) -> list[ExpiredLease]:
        found = self.store.expired(now, limit)
        self.on_listed()
        return found

    def expire(self, lease: ExpiredLease, now: float) -> bool:
        return self.store.expire(lease, now)


def test_a_lease_renewed_meanwhile_is_kept() -> None:
    # Given an expired lease that its own turn renews right after the sweep listed it
    store = store_with_leases(("k", NOW - TTL - 5))
    lease = RenewsBetweenListAndExpire(store, lambda: store.acquire("k", "turn-k", "token-k", NOW, TTL))

    # When the sweep runs
    released = release_expired_leases(lease, NOW)

    # Then the renewed lease stays and the session is not marked
    assert released == 0
    route = store.get_route("k")
    assert route is not None and route.lease_token == "token-k" and route.lease_expires_at == NOW + TTL
    assert route.resume_pending is False


def test_a_lease_taken_by_a_new_turn_meanwhile_is_kept() -> None:
    store = store_with_leases(("k", NOW - TTL - 5))

    def hand_over() -> None:
        assert store.release("k", "token-k")
        assert store.acquire("k", "turn-next", "token-next", NOW, TTL)

    released = release_expired_leases(RenewsBetweenListAndExpire(store, hand_over), NOW)

    assert released == 0
    route = store.get_route("k")
    assert route is not None and route.lease_token == "token-next" and route.resume_pending is False


def test_the_batch_limit_is_passed_to_the_index_query() -> None:
    store = store_with_leases(*((f"k{i}", NOW - 1000) for i in range(5)))

    assert release_expired_leases(store, NOW, batch=2) == 2
    assert release_expired_leases(store, NOW, batch=2) == 2
    assert release_expired_leases(store, NOW, batch=2) == 1
