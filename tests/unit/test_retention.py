"""The retention sweep (`sessions.retention_days`, services/retention.py): sessions idle past the
retention are deleted by the tick, a pass at a time; rows with an expiry are left to TTL."""

from __future__ import annotations

from typing import Any

from hermes_gateway.domain.reset_policy import SessionRules
from hermes_gateway.domain.retention import DAY_SECONDS, PASS_INTERVAL_SECONDS
from hermes_gateway.domain.sessions import Fence
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.services.retention import RetentionResult, sweep_retention
from tests.contracts.personal_data import BO_DM, say, table
from tests.contracts.session_storage import route
from tests.fakes.dynamo import session_tables_client
from tests.fakes.sessions import memory_stores

NOW = 1_800_000_000.0
DAYS = 30
CAROL = SessionSource(platform="telegram", chat_id="88", chat_type="dm", user_id="44", user_name="Cy")
KEYS = {"al": "agent:main:telegram:dm:99", "bo": "agent:main:telegram:dm:77", "cy": "agent:main:telegram:dm:88"}
AL_DM = SessionSource(platform="telegram", chat_id="99", chat_type="dm", user_id="42", user_name="Al")


def test_no_retention_reads_nothing() -> None:
    client = session_tables_client()
    stores = memory_stores(client=client)
    assert sweep_retention(stores.retention, stores.personal, ("agent:main",), NOW, 0).sessions_retired == 0
    assert client.calls == []


def test_sessions_idle_past_the_retention_go_and_those_in_use_stay() -> None:
    # Given rows kept 30 days: Al's session idle 40 days (titled, with a row from before the
    # setting), Bo's started 40 days ago and used yesterday, Cy's started last week
    stores = memory_stores(SessionRules(retention_seconds=DAYS * int(DAY_SECONDS)))
    old = NOW - 40 * DAY_SECONDS
    say(stores, AL_DM, KEYS["al"], "an old question", old)
    al = route(stores, KEYS["al"]).session_id
    stores.edits.rename(al, "Old times", fence=Fence(route(stores, KEYS["al"]).revision), now=old + 1)
    table(stores).messages.put(
        {"session_id": al, "seq": 50, "role": "user", "content": "from before", "created_at": old}
    )
    say(stores, BO_DM, KEYS["bo"], "started long ago", old)
    say(stores, BO_DM, KEYS["bo"], "still here", NOW - DAY_SECONDS)
    say(stores, CAROL, KEYS["cy"], "new here", NOW - 7 * DAY_SECONDS)
    # When the tick's sweep runs
    result = sweep_retention(stores.retention, stores.personal, ("agent:main",), NOW, DAYS)
    # Then Al's session is gone: record, route, title, and the row TTL cannot reach; his timed
    # rows are left to TTL (free), and no reader sees them (past their expiry)
    assert (result.sessions_retired, result.sessions_kept) == (1, 1)
    assert stores.catalogue.get_session(al) is None and stores.routes.get(KEYS["al"]) is None
    assert stores.catalogue.find_session_by_title("agent:main", "Old times") is None
    left = {int(i["seq"]): i for i in table(stores).messages.query(_partition(al))}
    assert sorted(left) == [1, 2] and all("expires_at" in i for i in left.values())
    # Bo's and Cy's stay
    assert stores.routes.get(KEYS["bo"]) is not None and stores.routes.get(KEYS["cy"]) is not None


def test_a_pass_goes_a_few_sessions_a_tick_then_rests_a_day() -> None:
    client = session_tables_client()
    stores = memory_stores(SessionRules(retention_seconds=DAYS * int(DAY_SECONDS)), client=client)
    old = NOW - 40 * DAY_SECONDS
    for n, key in enumerate(("agent:main:telegram:dm:1", "agent:main:telegram:dm:2", "agent:main:telegram:dm:3")):
        source = SessionSource(platform="telegram", chat_id=key[-1], chat_type="dm", user_id=key[-1])
        say(stores, source, key, "hi", old + n)
    # Two a tick: the first tick deletes two, the second the third and ends the pass

    def sweep(now: float) -> RetentionResult:
        return sweep_retention(stores.retention, stores.personal, ("agent:main",), now, DAYS, limit=2)

    assert sweep(NOW).sessions_retired == 2
    assert sweep(NOW + 60).sessions_retired == 1
    assert stores.retention.pass_state("agent:main") == {"next_pass_at": NOW + 60 + PASS_INTERVAL_SECONDS}
    # Resting, a tick reads the pass's state and nothing else
    client.calls.clear()
    assert sweep(NOW + 120).sessions_retired == 0 and client.calls == ["GetItem"]
    # A day later the next pass begins
    client.calls.clear()
    sweep(NOW + 60 + PASS_INTERVAL_SECONDS)
    assert "Query" in client.calls


def _partition(session_id: str) -> Any:
    from hermes_gateway.adapters.dynamo_table import condition

    return condition(None, "{session_id} = {:s}", s=session_id)
