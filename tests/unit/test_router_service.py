"""The router (services/router.py): authorize, route to a session, append, lease, start the turn.

Every step must be idempotent on the platform event id, because the inbound queue may hand the
same message over more than once.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.errors import SessionBusy
from hermes_gateway.services.router import (
    Access,
    RouteOutcome,
    lease_token_for,
    route_message,
    turn_id_for,
)
from hermes_gateway.settings import LEASE_MARGIN_SECONDS, Settings
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import FakeSessionStore

NOW = 1_764_400_000.0
KEY = "agent:main:telegram:dm:99"
OPEN = {"TELEGRAM_ALLOWED_USERS": "42"}
EXECUTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def message(
    event: str = "telegram:default:1",
    text: str = "hello",
    *,
    user_id: str | None = "42",
    thread_id: str | None = None,
    message_id: str = "5",
) -> InboundMessage:
    source = SessionSource(
        "telegram", chat_id="99", user_id=user_id, user_name="Alice", thread_id=thread_id, message_id=message_id
    )
    return InboundMessage(source=source, text=text, event_id=event, received_at=NOW - 1)


def fake_access() -> Access:
    return Access(pairing=FakePairingStore(), replies=FakeDeliveryQueue(), events=FakeEvents())


def route(
    msg: InboundMessage,
    store: FakeSessionStore,
    starter: FakeStarter,
    settings: Settings | None = None,
    now: float = NOW,
    access: Access | None = None,
) -> RouteOutcome:
    return route_message(
        msg,
        settings=settings or make_settings(OPEN),
        store=store,
        lease=store,
        starter=starter,
        access=access or fake_access(),
        now=now,
    )


def test_a_denied_message_stores_nothing_and_starts_nothing() -> None:
    # Given a sender on no allowlist
    store, starter = FakeSessionStore(), FakeStarter()

    # When the message is routed
    outcome = route(message(user_id="666"), store, starter)

    # Then it is dropped silently: no session, no row, no lease, no turn
    assert (outcome.status, outcome.reason) == ("denied", "not_allowlisted")
    assert outcome.turn_id is None
    assert store.routes == {} and store.sessions == {} and store.leases == {}
    assert starter.calls == []


def test_a_message_without_a_sender_is_denied() -> None:
    store, starter = FakeSessionStore(), FakeStarter()

    outcome = route(message(user_id=None), store, starter)

    assert (outcome.status, outcome.reason) == ("denied", "no_user_id")
    assert store.sessions == {} and starter.calls == []


def test_an_allowed_message_creates_the_session_appends_leases_and_starts_one_turn() -> None:
    store, starter = FakeSessionStore(), FakeStarter()

    outcome = route(message(text="hello"), store, starter)

    # A session for the key, with the user's row
    assert outcome.status == "started" and outcome.reason == "ok"
    route_entry = store.get_route(KEY)
    assert route_entry is not None and route_entry.session_id == outcome.session_id
    rows = store.transcript(outcome.session_id)  # type: ignore[arg-type]
    assert [(r.role, r.content, r.sender_name, r.platform_message_id) for r in rows] == [
        ("user", "hello", "Alice", "5")
    ]
    # The lease is held by this turn, for the turn's time limit plus a margin
    assert route_entry.lease_turn_id == outcome.turn_id
    assert route_entry.lease_token == lease_token_for(outcome.turn_id)  # type: ignore[arg-type]
    assert route_entry.lease_expires_at == NOW + 300 + LEASE_MARGIN_SECONDS
    # One execution, named after the turn, carrying what the turn needs
    [(name, turn)] = starter.calls
    assert name == outcome.turn_id == turn["turn_id"]
    assert turn["lease_token"] == route_entry.lease_token
    assert turn["session_key"] == KEY
    assert turn["session_id"] == outcome.session_id
    assert turn["user_seq"] == rows[0].seq
    assert turn["event_id"] == "telegram:default:1"
    assert turn["started_at"] == NOW
    assert SessionSource.from_dict(turn["source"]) == message().source


def test_the_reply_target_is_fixed_from_the_source() -> None:
    store, starter = FakeSessionStore(), FakeStarter()

    route(message(thread_id="17"), store, starter)

    [(_, turn)] = starter.calls
    assert turn["reply_to"] == {"platform": "telegram", "chat_id": "99", "thread_id": "17"}


def test_the_turn_is_a_plain_json_document() -> None:
    store, starter = FakeSessionStore(), FakeStarter()
    route(message(), store, starter)

    [(_, turn)] = starter.calls
    assert json.loads(json.dumps(turn)) == turn  # it is the execution's input


def test_a_redelivered_message_is_routed_once() -> None:
    # Given a message already routed (its turn running and holding the lease)
    store, starter = FakeSessionStore(), FakeStarter()
    first = route(message(), store, starter)

    # When the queue hands the same message over again
    second = route(message(), store, starter, now=NOW + 5)

    # Then no SessionBusy, one session, one user row, no second start, and the running turn's lease kept
    assert second.status == "already_answered"
    assert second.turn_id == first.turn_id and second.session_id == first.session_id
    assert len(store.sessions) == 1
    assert len(store.transcript(first.session_id)) == 1  # type: ignore[arg-type]
    assert [name for name, _ in starter.calls] == [first.turn_id]
    assert store.get_route(KEY).lease_token == lease_token_for(first.turn_id)  # type: ignore[union-attr, arg-type]


def test_a_different_message_while_the_lease_is_held_is_busy_and_appends_nothing() -> None:
    # Given a turn running for the first message
    store, starter = FakeSessionStore(), FakeStarter()
    first = route(message("telegram:default:1", "first"), store, starter)

    # When a second message for the same session arrives
    with pytest.raises(SessionBusy) as busy:
        route(message("telegram:default:2", "second", message_id="6"), store, starter, now=NOW + 1)
    assert busy.value.retry_after == 1  # a young turn: try again soon
    with pytest.raises(SessionBusy) as busy:
        route(message("telegram:default:2", "second", message_id="6"), store, starter, now=NOW + 200)
    assert busy.value.retry_after == 50  # a long turn: a quarter of its age

    # Then it is left for the queue to retry: nothing appended, nothing started, the lease untouched
    assert [r.content for r in store.transcript(first.session_id)] == ["first"]  # type: ignore[arg-type]
    assert len(starter.calls) == 1
    held = store.get_route(KEY)
    assert held is not None and held.lease_turn_id == first.turn_id


def test_the_waiting_message_is_routed_after_the_lease_is_released() -> None:
    store, starter = FakeSessionStore(), FakeStarter()
    first = route(message("telegram:default:1", "first"), store, starter)
    with pytest.raises(SessionBusy):
        route(message("telegram:default:2", "second", message_id="6"), store, starter)

    # When the first turn ends and the queue retries the second message
    assert store.release(KEY, lease_token_for(first.turn_id))  # type: ignore[arg-type]
    second = route(message("telegram:default:2", "second", message_id="6"), store, starter, now=NOW + 30)

    # Then it runs in the same session, after the first
    assert second.status == "started" and second.session_id == first.session_id
    assert second.turn_id != first.turn_id
    assert [r.content for r in store.transcript(first.session_id)] == ["first", "second"]  # type: ignore[arg-type]


def test_a_redelivery_after_the_turn_finished_leaves_the_session_free() -> None:
    # Given a message whose turn ran and released the lease
    store, starter = FakeSessionStore(), FakeStarter()
    first = route(message(), store, starter)
    assert store.release(KEY, lease_token_for(first.turn_id))  # type: ignore[arg-type]

    # When the queue hands the same message over once more (e.g. the batch ack was lost)
    again = route(message(), store, starter, now=NOW + 90)

    # Then nothing starts, and the session is free for the user's next message
    assert again.status == "already_answered"
    assert len(starter.calls) == 1
    route_entry = store.get_route(KEY)
    assert route_entry is not None and route_entry.lease_token is None


class CrashAfterStart(FakeSessionStore):
    """Dies once between starting the execution and recording that it started."""

    crashed = False

    def mark_turn_started(self, session_id: str, dedupe_key: str, turn_id: str) -> None:
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("the router died here")
        super().mark_turn_started(session_id, dedupe_key, turn_id)


@pytest.mark.parametrize("still_running", [True, False])
def test_a_retry_after_a_crash_between_start_and_record_keeps_the_lease_only_for_a_live_turn(
    still_running: bool,
) -> None:
    # Given a router that started the turn but died before recording it
    store, starter = CrashAfterStart(), FakeStarter()
    with pytest.raises(RuntimeError):
        route(message(), store, starter)
    turn_id = next(iter(starter.started))
    if not still_running:
        starter.finish(turn_id)  # ... and the turn ran to its end meanwhile (its release came first)
        assert store.release(KEY, lease_token_for(turn_id))
    # When the queue retries the message
    again = route(message(), store, starter, now=NOW + 30)
    # Then the execution is not started twice, and the lease is held only while the turn runs
    assert again.status == "already_started" and len(starter.started) == 1
    lease = store.get_route(KEY).lease_token  # type: ignore[union-attr]
    assert lease == (lease_token_for(turn_id) if still_running else None)
    assert store.turn_started(again.session_id, message().event_id)  # type: ignore[arg-type]


def test_turn_ids_are_deterministic_and_differ_per_event_and_session() -> None:
    assert turn_id_for("s1", "e1") == turn_id_for("s1", "e1")
    assert turn_id_for("s1", "e1") != turn_id_for("s1", "e2")
    assert turn_id_for("s1", "e1") != turn_id_for("s2", "e1")
    assert lease_token_for("t1") == lease_token_for("t1") != lease_token_for("t2")


@given(session_id=st.text(min_size=1, max_size=200), event_id=st.text(min_size=1, max_size=500))
def test_turn_ids_are_valid_execution_names(session_id: str, event_id: str) -> None:
    turn_id = turn_id_for(session_id, event_id)

    assert EXECUTION_NAME.fullmatch(turn_id)
    assert len(turn_id) <= 80


# -- DM pairing ---------------------------------------------------------------------------------

CODE = re.compile(r"pairing code is ([A-Z2-9]{8})")


def test_an_unknown_dm_gets_a_pairing_code_and_stores_nothing_else() -> None:
    # Given no allowlist anywhere (so unknown DMs pair) and a user nobody approved
    store, starter, access = FakeSessionStore(), FakeStarter(), fake_access()
    # When they write
    outcome = route(message(), store, starter, settings=make_settings({}), access=access)
    # Then they get one reply naming the code and the exact approve command, and nothing else happens
    assert outcome.status == "pairing" and outcome.reason == "issued"
    [reply] = access.replies.bodies  # type: ignore[attr-defined]
    code = CODE.search(reply["text"]).group(1)  # type: ignore[union-attr]
    assert f"hermes-gateway pairing approve telegram {code}" in reply["text"]
    assert reply["redact"] == [code] and reply["target"] == {"platform": "telegram", "chat_id": "99", "thread_id": None}
    assert access.events.emitted == [("pairing:requested", {"platform": "telegram", "user": reply_user_hash()})]  # type: ignore[attr-defined]
    assert store.sessions == {} and starter.calls == []


def reply_user_hash() -> str:
    from hermes_gateway.observability import hash_id

    return hash_id("42") or ""


def test_asking_again_within_ten_minutes_is_silent_and_a_redelivery_replies_once() -> None:
    store, starter, access = FakeSessionStore(), FakeStarter(), fake_access()
    first = route(message(), store, starter, settings=make_settings({}), access=access)
    again = route(
        message("telegram:default:2"), store, starter, settings=make_settings({}), access=access, now=NOW + 60
    )
    assert first.status == "pairing" and again.reason == "pairing_rate_limited"
    assert len(access.replies.bodies) == 1  # type: ignore[attr-defined]


def test_once_approved_the_user_is_answered() -> None:
    store, starter, access = FakeSessionStore(), FakeStarter(), fake_access()
    route(message(), store, starter, settings=make_settings({}), access=access)
    code = CODE.search(access.replies.bodies[0]["text"]).group(1)  # type: ignore[attr-defined, union-attr]
    assert access.pairing.approve("telegram", code.lower(), NOW + 5, "test").status == "approved"
    outcome = route(message("telegram:default:3"), store, starter, settings=make_settings({}), access=access)
    assert outcome.status == "started"


@pytest.mark.parametrize(
    ("env", "chat_type"),
    [({"TELEGRAM_ALLOWED_USERS": "7"}, "dm"), ({}, "group"), ({"TELEGRAM_UNAUTHORIZED_DM": "ignore"}, "dm")],
)
def test_ignored_messages_get_no_reply(env: dict[str, str], chat_type: str) -> None:
    store, starter, access = FakeSessionStore(), FakeStarter(), fake_access()
    source = SessionSource("telegram", chat_id="99", chat_type=chat_type, user_id="42")
    msg = InboundMessage(source=source, text="hi", event_id="telegram:default:9", received_at=NOW)
    outcome = route(msg, store, starter, settings=make_settings(env), access=access)
    assert outcome.status == "denied"
    assert access.replies.bodies == [] and store.sessions == {}  # type: ignore[attr-defined]


def test_a_gateway_command_is_answered_without_a_session_or_turn() -> None:
    store, starter, access = FakeSessionStore(), FakeStarter(), fake_access()
    outcome = route(message(text="/whoami"), store, starter, access=access)
    assert outcome.status == "command"
    [reply] = access.replies.bodies  # type: ignore[attr-defined]
    assert "user id 42 on telegram" in reply["text"] and reply["delivery_id"].startswith("command-")
    assert store.sessions == {} and starter.calls == []


def test_an_unknown_command_goes_to_the_agent() -> None:
    store, starter, access = FakeSessionStore(), FakeStarter(), fake_access()
    assert route(message(text="/summarize"), store, starter, access=access).status == "started"
