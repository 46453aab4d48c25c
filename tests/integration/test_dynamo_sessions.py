"""The DynamoDB session store and turn lease under concurrency (moto)."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from hermes_gateway.adapters.dynamo_sessions import DynamoSessionStore
from hermes_gateway.domain.sessions import ExpiredLease
from hermes_gateway.domain.source import SessionSource
from tests.fakes.concurrency import race

pytestmark = pytest.mark.integration

SOURCE = SessionSource(platform="telegram", chat_id="99", user_id="42", user_name="Al")


def count(table: str) -> int:
    return int(boto3.client("dynamodb").scan(TableName=table, Select="COUNT")["Count"])


def test_twenty_concurrent_callers_on_one_key_get_one_session_and_one_row(aws: Any) -> None:
    # Given a store and a key nobody has used
    store = DynamoSessionStore(aws.bindings)
    # When 20 callers ask for its session at the same moment
    entries = race(20, lambda _: store.get_or_create(SOURCE, "agent:main:telegram:dm:99", time.time()))
    # Then all of them get the same session, exactly one created it, and one row of each exists
    assert len({e.session_id for e in entries}) == 1
    assert sum(e.created for e in entries) == 1
    assert count(aws.bindings.table("routes")) == 1
    assert count(aws.bindings.table("sessions")) == 1


def test_different_keys_do_not_share_sessions(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    entries = race(10, lambda i: store.get_or_create(SOURCE, f"agent:main:telegram:dm:{i}", time.time()))
    assert len({e.session_id for e in entries}) == 10
    assert count(aws.bindings.table("sessions")) == 10


def test_existing_session_is_reused_and_force_new_replaces_it_once(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    first = store.get_or_create(SOURCE, "k", 1000.0)
    again = store.get_or_create(SOURCE, "k", 1001.0)
    assert again.session_id == first.session_id and not again.created
    # When one caller forces a new session, the old one ends and the route moves on by one revision
    fresh = store.get_or_create(SOURCE, "k", 1002.0, force_new=True)
    # (every route write bumps the revision: the reuse above touched the activity clock)
    assert again.revision == first.revision + 1
    assert fresh.created and fresh.session_id != first.session_id and fresh.revision == again.revision + 1
    old = store.models.session.get(first.session_id)
    assert old.ended_at == 1002.0 and old.end_reason == "forced"
    # When several callers force a new session concurrently, every replacement is fenced by the
    # revision it read: no two of them replace the same session, so revisions form one chain
    replaced = race(5, lambda _: store.get_or_create(SOURCE, "k", 1003.0, force_new=True))
    made = [r for r in replaced if r.created]
    final = store.get_route("k")
    assert final is not None and made and final.session_id in {r.session_id for r in made}
    # Each replacement is one route write and one new session. A caller whose replacement was
    # itself replaced before it read the route back answers with the newer session (created False),
    # so `made` may count fewer than were made; the sessions table counts them all.
    replacements = count(aws.bindings.table("sessions")) - 2
    assert len(made) <= replacements and final.revision == fresh.revision + replacements
    assert {r.revision for r in made} <= set(range(fresh.revision + 1, final.revision + 1))
    live = [s for s in store.models.session.scan() if s.ended_at is None]
    assert [s.session_id for s in live] == [final.session_id]


def test_a_route_to_an_ended_session_heals_itself(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    first = store.get_or_create(SOURCE, "k", 1000.0)
    Session = store.models.session
    Session(first.session_id).update(actions=[Session.ended_at.set(1001.0)])
    healed = store.get_or_create(SOURCE, "k", 1002.0)
    assert healed.session_id != first.session_id
    assert healed.reset_reason == "stale_route" and healed.prev_session_id == first.session_id


def test_concurrent_appends_get_distinct_contiguous_seqs(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    entry = store.get_or_create(SOURCE, "k", 1000.0)
    seqs = race(10, lambda i: store.append_message(entry.session_id, "user", f"m{i}", 1000.0 + i))
    assert sorted(seqs) == list(range(1, 11))
    rows = store.transcript(entry.session_id)
    assert [r.seq for r in rows] == list(range(1, 11))
    assert store.models.session.get(entry.session_id).message_count == 10


def test_a_repeated_dedupe_key_appends_and_counts_nothing(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    entry = store.get_or_create(SOURCE, "k", 1000.0)
    seqs = race(
        8,
        lambda _: store.append_message(
            entry.session_id, "assistant", "hi", 1.0, dedupe_key="turn-1:reply", input_tokens=5, output_tokens=7
        ),
    )
    assert set(seqs) == {1}
    assert len(store.transcript(entry.session_id)) == 1
    session = store.models.session.get(entry.session_id)
    assert (session.message_count, session.input_tokens, session.output_tokens) == (1, 5, 7)


def test_transcript_reads_up_to_a_seq_and_the_newest_limit(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    entry = store.get_or_create(SOURCE, "k", 1000.0)
    for i in range(6):
        store.append_message(entry.session_id, "user" if i % 2 == 0 else "assistant", f"m{i}", float(i))
    assert [r.content for r in store.transcript(entry.session_id, upto_seq=4)] == ["m0", "m1", "m2", "m3"]
    assert [r.content for r in store.transcript(entry.session_id, limit=2)] == ["m4", "m5"]
    assert [r.content for r in store.transcript(entry.session_id, upto_seq=4, limit=2)] == ["m2", "m3"]


def test_lease_race_has_one_winner_and_releases_only_by_token(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    store.get_or_create(SOURCE, "k", 1000.0)
    won = race(20, lambda i: store.acquire("k", f"turn-{i}", f"token-{i}", 1000.0, 60))
    assert won.count(True) == 1
    winner = won.index(True)
    # The holder may take it again (a retried router); nobody else can.
    assert store.acquire("k", f"turn-{winner}", f"token-{winner}", 1001.0, 60)
    assert not store.acquire("k", "other", "other-token", 1001.0, 60)
    assert not store.release("k", "not-the-token")
    released = race(5, lambda _: store.release("k", f"token-{winner}"))
    assert released.count(True) == 1
    assert store.acquire("k", "next", "next-token", 1002.0, 60)


def test_lease_on_a_missing_route_is_refused(aws: Any) -> None:
    assert not DynamoSessionStore(aws.bindings).acquire("nobody", "t", "tok", 1.0, 60)


def test_expired_leases_are_found_by_index_and_expired_once(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    for key in ("a", "b"):
        store.get_or_create(SOURCE, key, 1000.0)
    store.acquire("a", "turn-a", "tok-a", 1000.0, 60)
    store.acquire("b", "turn-b", "tok-b", 1000.0, 600)
    assert store.expired(1030.0) == []
    found = store.expired(1100.0)
    assert found == [ExpiredLease("a", "tok-a", "turn-a", 1060.0)]
    assert race(4, lambda _: store.expire(found[0], 1100.0)).count(True) == 1
    route = store.get_route("a")
    assert route is not None and route.resume_pending and route.lease_token is None
    assert store.expired(1100.0) == []
    b = store.get_route("b")
    assert b is not None and b.lease_token == "tok-b" and not b.resume_pending


def test_expire_keeps_a_lease_that_was_renewed(aws: Any) -> None:
    store = DynamoSessionStore(aws.bindings)
    store.get_or_create(SOURCE, "a", 1000.0)
    store.acquire("a", "turn-a", "tok-a", 1000.0, 60)
    stale = store.expired(1100.0)[0]
    store.release("a", "tok-a")
    store.acquire("a", "turn-b", "tok-b", 1100.0, 60)
    assert not store.expire(stale, 1101.0)
    assert store.get_route("a").lease_token == "tok-b"  # type: ignore[union-attr]
