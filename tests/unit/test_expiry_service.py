"""The tick's lease part (services/expiry.py): a lease that outlived its turn is the tick's only
when something waits on it (queued messages, an approval); the rest are taken over by the
session's next message."""

from __future__ import annotations

from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turns import QueuedInput
from hermes_gateway.services.expiry import LeaseRecovery, recover_expired_leases
from tests.fakes.services import FakeStarter, make_settings
from tests.fakes.sessions import memory_stores

NOW = 1_764_400_000.0
TTL = 360


def tick(stores: SessionStores, now: float, batch: int = 100) -> dict[str, int]:
    deps = LeaseRecovery(
        make_settings({}), stores.routes, stores.leases, stores.control, stores.transcript, FakeStarter()
    )
    return recover_expired_leases(deps, now, batch)


def leased(stores: SessionStores, key: str, started: float, *, waiting: bool) -> None:
    source = SessionSource("telegram", chat_id=key)
    entry = stores.routes.open(source, key, started)
    assert stores.leases.begin(entry, f"turn-{key}", f"token-{key}", f"e-{key}", started) is not None
    if waiting:
        held = stores.routes.get(key)
        assert held is not None
        item = QueuedInput(f"q-{key}", "waiting", started, source, ReplyTarget("telegram", key))
        assert stores.leases.enqueue(held, item, max_items=5, now=started).status == "queued"


def test_only_expired_leases_with_something_waiting_are_released() -> None:
    stores = memory_stores()
    leased(stores, "old", NOW - TTL - 1, waiting=True)
    leased(stores, "fresh", NOW - 10, waiting=True)
    leased(stores, "plain", NOW - TTL - 1, waiting=False)

    counts = tick(stores, NOW)

    assert counts["leases_released"] == 1 and counts["queues_recovered"] == 1
    old, fresh, plain = (stores.routes.get(k) for k in ("old", "fresh", "plain"))
    assert old is not None and old.resume_pending and old.lease_token != "token-old"  # handed to its queue
    assert fresh is not None and fresh.lease_token == "token-fresh" and not fresh.resume_pending
    assert plain is not None and plain.lease_token == "token-plain"  # the next message takes it over


def test_a_lease_expiring_exactly_now_is_kept() -> None:
    stores = memory_stores()
    leased(stores, "edge", NOW - TTL, waiting=True)

    assert tick(stores, NOW)["leases_released"] == 0
    assert stores.routes.get("edge").lease_token == "token-edge"  # type: ignore[union-attr]


def test_a_second_tick_finds_nothing() -> None:
    stores = memory_stores()
    leased(stores, "a", NOW - 1000, waiting=True)
    leased(stores, "b", NOW - 2000, waiting=True)

    assert tick(stores, NOW)["leases_released"] == 2
    assert tick(stores, NOW + 60) == {"leases_released": 0, "approvals_timed_out": 0, "queues_recovered": 0}


def test_the_batch_limit_bounds_one_tick() -> None:
    stores = memory_stores()
    for n in range(3):
        leased(stores, f"k{n}", NOW - 1000 - n, waiting=True)

    assert tick(stores, NOW, batch=2)["leases_released"] == 2
    assert tick(stores, NOW, batch=2)["leases_released"] == 1
