"""The `UsageBook` contract (domain/limits.py), run on the in-memory DynamoDB of the unit tests
(tests/unit/test_usage_book_in_memory.py) and on moto (tests/integration/test_usage_book_on_dynamodb.py).

Each `check_*` takes a factory `make() -> (book, stores)` (the book reads the counters off the
same routes the stores write) and raises AssertionError on a breach."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hermes_gateway.adapters.dynamo_table import Update
from hermes_gateway.domain.limits import Counted, Counts, Owner, UsageBook, periods
from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.sessions import SessionTally
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.services import lifecycle

Make = Callable[[], tuple[UsageBook, SessionStores]]

T0 = 1_800_000_000.0  # 2027-01-15 08:00 UTC
AL = Owner("telegram", "42", "0a1b2c3d")
BO = Owner("telegram@coder", "42", "0a1b2c3d")  # the same id with another profile's bot: another user
DM = SessionSource(platform="telegram", chat_id="99", user_id="42")
GROUP = SessionSource(platform="telegram", chat_id="-5", chat_type="group", user_id="42")


def _counted_message(stores: SessionStores, source: SessionSource, key: str, event: str, at: float) -> None:
    """A turn of `source`'s user in `key`: its message counted as it took the lease, then ended."""
    entry = stores.routes.open(source, key, at, touch_activity=False)
    p = periods(at)
    turn_id = lifecycle.turn_id_for(entry.session_id, event)
    token = lifecycle.lease_token_for(turn_id)
    counts = entry.ledgers.get(AL.spender)
    counted = Counted(AL.spender, (counts.counts if counts else Counts()).plus_one(p), p)
    assert stores.leases.begin(entry, turn_id, token, event, at, counted=counted) is not None
    successor = lifecycle.Successor(key, entry.session_id, at, False)
    ended = stores.leases.finish(key, entry.session_id, token, successor.plan, at, tally=SessionTally(), succeeded=True)
    assert ended.status == "released"


def check_the_sessions_a_user_used_are_kept_per_user_and_profile(make: Make) -> None:
    book, _ = make()
    today = periods(T0)
    assert book.activity(AL, today).days == {}
    book.note_used(AL, "agent:main:telegram:dm:99", today)
    book.note_used(AL, "agent:main:telegram:group:-5:42", periods(T0 - 86_400))  # yesterday
    book.note_used(AL, "agent:main:telegram:dm:7", periods(T0 - 40 * 86_400))  # last month
    found = book.activity(AL, today)
    assert found.days == {"agent:main:telegram:dm:99": today.day, "agent:main:telegram:group:-5:42": today.day - 1}
    assert found.used_on(today.day) == ["agent:main:telegram:dm:99"]
    assert book.activity(BO, today).days == {}  # another profile's bot: another user


def check_a_users_counters_are_read_off_their_routes(make: Make) -> None:
    book, stores = make()
    _counted_message(stores, DM, "agent:main:telegram:dm:99", "e1", T0)
    _counted_message(stores, DM, "agent:main:telegram:dm:99", "e2", T0 + 1)
    _counted_message(stores, GROUP, "agent:main:telegram:group:-5:42", "e3", T0 + 2)
    keys = ["agent:main:telegram:dm:99", "agent:main:telegram:group:-5:42", "agent:main:telegram:dm:404"]
    found = sorted(ledger.counts.minute_messages for ledger in book.ledgers(keys, AL.spender))
    assert found == [1, 2]  # a route that does not exist counts nothing
    assert book.ledgers(keys, "ffffffff") == []  # nor a user who never wrote there
    assert book.ledgers([], AL.spender) == []


def check_sessions_are_linked_on_their_routes_and_links_add_up(make: Make) -> None:
    book, stores = make()
    today = periods(T0)
    _counted_message(stores, DM, "agent:main:telegram:dm:99", "e1", T0)
    book.link("agent:main:telegram:dm:99", AL.spender, "agent:main:telegram:group:-5:42", today)
    book.link("agent:main:telegram:dm:99", AL.spender, "agent:main:telegram:thread:-5:7", today)
    book.link("agent:main:telegram:dm:404", AL.spender, "agent:main:telegram:dm:99", today)  # no route: nothing
    route = stores.routes.get("agent:main:telegram:dm:99")
    assert route is not None and route.ledgers[AL.spender].peers == {
        today.day: frozenset({"agent:main:telegram:group:-5:42", "agent:main:telegram:thread:-5:7"})
    }
    assert route.ledgers[AL.spender].counts.day_messages == 1  # the counts are untouched
    assert stores.routes.get("agent:main:telegram:dm:404") is None


def check_a_limit_window_is_told_once(make: Make) -> None:
    book, _ = make()
    today = periods(T0)
    assert book.told(AL) is None
    assert book.tell(AL, "messages_per_minute@1", today)
    assert not book.tell(AL, "messages_per_minute@1", today)
    assert book.told(AL) == "messages_per_minute@1"
    assert book.activity(AL, today).days == {}  # the told window is not a session
    assert book.tell(BO, "messages_per_minute@1", today)  # another user
    assert book.tell(AL, "messages_per_minute@2", today)  # the next window
    assert not book.tell(AL, "messages_per_minute@2", today)


def check_what_is_kept_of_a_user_is_exported_and_forgotten(make: Make) -> None:
    # Given Al's counters on his DM and on a shared group route where another user counts too
    book, stores = make()
    today = periods(T0)
    _counted_message(stores, DM, "agent:main:telegram:dm:99", "e1", T0)
    _counted_message(stores, GROUP, "agent:main:telegram:group:-5", "e2", T0 + 1)
    other = Owner("telegram", "43", "9f9f9f9f")
    edits: Any = stores.edits
    edits.t.routes.update({"session_key": "agent:main:telegram:group:-5"}, Update().set(f"uq{other.spender}", [1]))
    for key in ("agent:main:telegram:dm:99", "agent:main:telegram:group:-5"):
        book.note_used(AL, key, today)
    book.tell(AL, "messages_per_minute@1", today)
    book.note_used(other, "agent:main:telegram:group:-5", today)
    # When what is kept of him is read, then it is all there
    held = book.held(AL)
    assert sorted(s["session_key"] for s in held["sessions_used"]) == [
        "agent:main:telegram:dm:99", "agent:main:telegram:group:-5",
    ]  # fmt: skip
    assert held["told_window"] == "messages_per_minute@1"
    assert held["counters"]["agent:main:telegram:group:-5"]["messages"]["minute_messages"] == 1
    # When he is forgotten: his counters leave both routes, his records go; the other user's stay
    assert book.forget(AL) == 2 + 3
    keys = ["agent:main:telegram:dm:99", "agent:main:telegram:group:-5"]
    assert book.ledgers(keys, AL.spender) == [] and book.told(AL) is None
    assert book.activity(AL, today).days == {} and book.held(AL)["sessions_used"] == []
    assert [ledger.counts for ledger in book.ledgers(keys, other.spender)] != []
    assert book.activity(other, today).days == {"agent:main:telegram:group:-5": today.day}
    assert book.forget(AL) == 0


CHECKS = [value for name, value in sorted(globals().items()) if name.startswith("check_")]
