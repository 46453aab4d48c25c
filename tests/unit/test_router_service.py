"""The router (services/router.py): authorize, route to a session, append, lease, start the turn.

Every step must be idempotent on the platform event id, because the inbox stream may hand the
same message over more than once.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.sessions import SessionTally
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.domain.turn_state import TurnState
from hermes_gateway.errors import TransientError
from hermes_gateway.services.lifecycle import Successor, lease_token_for, turn_id_for
from hermes_gateway.services.router import Access, RouteOutcome, route_message
from hermes_gateway.settings import LEASE_MARGIN_SECONDS, Settings
from tests.fakes.access import FakePairingStore
from tests.fakes.dynamo import MemoryDynamo, session_tables_client
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import memory_stores

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
    stores: SessionStores,
    starter: FakeStarter,
    settings: Settings | None = None,
    now: float = NOW,
    access: Access | None = None,
) -> RouteOutcome:
    return route_message(
        msg, settings=settings or make_settings(OPEN), stores=stores, starter=starter, access=access or fake_access(),
        now=now,
    )  # fmt: skip


def world() -> tuple[SessionStores, FakeStarter, MemoryDynamo]:
    client = session_tables_client()
    return memory_stores(client=client), FakeStarter(), client


def nothing_stored(client: MemoryDynamo) -> bool:
    return all(client.items(table) == [] for table in ("routes", "sessions", "messages"))


def rows(stores: SessionStores, session_id: str | None) -> list[str]:
    assert session_id is not None
    return [r.content for r in stores.transcript.rows(session_id)]


def test_a_denied_message_stores_nothing_and_starts_nothing() -> None:
    stores, starter, client = world()

    outcome = route(message(user_id="666"), stores, starter)

    assert (outcome.status, outcome.reason) == ("denied", "not_allowlisted") and outcome.turn_id is None
    assert nothing_stored(client) and starter.calls == []


def test_a_message_without_a_sender_is_denied() -> None:
    stores, starter, client = world()

    outcome = route(message(user_id=None), stores, starter)

    assert (outcome.status, outcome.reason) == ("denied", "no_user_id")
    assert nothing_stored(client) and starter.calls == []


def test_an_allowed_message_creates_the_session_appends_leases_and_starts_one_turn() -> None:
    stores, starter, _ = world()

    outcome = route(message(text="hello"), stores, starter)

    assert outcome.status == "started" and outcome.reason == "ok"
    entry = stores.routes.get(KEY)
    assert entry is not None and entry.session_id == outcome.session_id
    written = stores.transcript.rows(entry.session_id)
    assert [(r.seq, r.role, r.content, r.sender_name, r.platform_message_id) for r in written] == [
        (1, "user", "hello", "Alice", "5")
    ]
    # The lease is held by this turn, for the turn's time limit plus a margin, with its answer's seq
    assert entry.lease_turn_id == outcome.turn_id and entry.reply_seq == 2
    assert entry.lease_token == lease_token_for(outcome.turn_id or "")
    assert entry.lease_expires_at == NOW + 300 + LEASE_MARGIN_SECONDS
    # One execution, named after the turn, carrying what the turn needs
    [(name, state)] = starter.calls
    turn = TurnState.from_json(state).turn
    assert name == outcome.turn_id == turn.turn_id and turn.lease_token == entry.lease_token
    assert (turn.session_key, turn.session_id, turn.user_seqs, turn.reply_seq) == (KEY, outcome.session_id, (1,), 2)
    assert turn.event_id == "telegram:default:1" and turn.started_at == NOW and turn.user_text == "hello"
    assert turn.source == message().source


def release(stores: SessionStores, outcome: RouteOutcome, at: float) -> str:
    """The turn of `outcome` finishes (nothing queued behind it)."""
    successor = Successor(KEY, outcome.session_id or "", at, False)
    token = lease_token_for(outcome.turn_id or "")
    return stores.leases.finish(
        KEY, outcome.session_id or "", token, successor.plan, at, tally=SessionTally(), succeeded=True
    ).status


def test_one_message_reads_its_route_once_and_writes_it_once() -> None:
    stores, starter, client = world()
    release(stores, route(message("telegram:default:1", "first"), stores, starter), NOW)
    client.calls.clear()

    route(message("telegram:default:2", "second", message_id="6"), stores, starter, now=NOW + 5)

    # The route read once, then one write that takes the lease and allocates the seqs, then the row
    assert client.calls == ["GetItem", "UpdateItem", "PutItem"]


def test_the_reply_target_is_fixed_from_the_source() -> None:
    stores, starter, _ = world()

    route(message(thread_id="17"), stores, starter)

    [(_, state)] = starter.calls
    assert state["turn"]["reply_to"] == {"platform": "telegram", "chat_id": "99", "thread_id": "17"}


def test_the_turn_is_a_plain_json_document() -> None:
    stores, starter, _ = world()
    route(message(), stores, starter)

    [(_, state)] = starter.calls
    assert json.loads(json.dumps(state)) == state  # it is the execution's input


def test_a_redelivered_message_is_routed_once() -> None:
    stores, starter, _ = world()
    first = route(message(), stores, starter)

    second = route(message(), stores, starter, now=NOW + 5)

    # The same turn, started again (harmless: the execution is named after the turn), no new row
    assert second.status == "already_started" and second.turn_id == first.turn_id
    assert rows(stores, first.session_id) == ["hello"]
    assert {name for name, _ in starter.calls} == {first.turn_id}
    assert stores.routes.get(KEY).lease_token == lease_token_for(first.turn_id or "")  # type: ignore[union-attr]


def test_a_message_while_the_lease_is_held_is_queued_and_appends_nothing_yet() -> None:
    stores, starter, _ = world()
    first = route(message("telegram:default:1", "first"), stores, starter)

    queued = route(message("telegram:default:2", "second", message_id="6"), stores, starter, now=NOW + 1)

    assert queued.status == "queued" and queued.reason == "queue"
    assert rows(stores, first.session_id) == ["first"] and len(starter.calls) == 1
    held = stores.routes.get(KEY)
    assert held is not None and held.lease_turn_id == first.turn_id and held.queued == 1


def test_a_redelivery_after_the_turn_finished_leaves_the_session_free() -> None:
    stores, starter, _ = world()
    first = route(message(), stores, starter)
    assert release(stores, first, NOW + 1) == "released"

    again = route(message(), stores, starter, now=NOW + 90)

    assert again.status == "already_answered" and len(starter.calls) == 1
    assert stores.routes.get(KEY).lease_token is None  # type: ignore[union-attr]


def test_an_answered_message_routed_again_after_the_route_forgot_it_gives_the_lease_back() -> None:
    # Given a message answered long ago: nine messages since, more than the route remembers
    stores, starter, _ = world()
    first = route(message(), stores, starter)
    assert release(stores, first, NOW + 1) == "released"
    for n in range(2, 11):
        later = route(message(f"telegram:default:{n}", f"m{n}", message_id=str(n)), stores, starter, now=NOW + n)
        assert later.status == "started" and release(stores, later, NOW + n + 0.5) == "released"

    # When an operator's redrive routes it again
    again = route(message(), stores, starter, now=NOW + 90)

    # Then its turn is not run again (the execution exists: the starter says so) and the session
    # is free at once, not held until the lease would expire
    assert again.status == "already_answered" and again.turn_id == first.turn_id
    assert len(starter.started) == 10
    # and the transcript holds the message once: the model is not shown it twice
    assert rows(stores, first.session_id).count("hello") == 1
    assert stores.routes.get(KEY).lease_token is None  # type: ignore[union-attr]
    assert route(message("telegram:default:11", "next", message_id="11"), stores, starter, now=NOW + 91).status == (
        "started"
    )


class CrashingStarter(FakeStarter):
    """Dies once before the execution is started (the router's Lambda timed out there)."""

    crashed = False

    def start(self, name: str, turn: dict[str, Any]) -> bool:
        if not self.crashed:
            self.crashed = True
            raise RuntimeError("the router died here")
        return super().start(name, turn)


def test_a_retry_after_a_crash_before_the_start_starts_the_turn() -> None:
    stores, _, _ = world()
    starter = CrashingStarter()
    with pytest.raises(RuntimeError):
        route(message(), stores, starter)

    again = route(message(), stores, starter, now=NOW + 30)

    assert again.status == "already_started" and len(starter.started) == 1
    assert rows(stores, again.session_id) == ["hello"]


def test_an_answered_message_routed_again_whose_start_was_throttled_gives_the_lease_back_on_its_retry() -> None:
    # Given a message answered long ago (its execution ran to its end), then more than the route
    # remembers
    stores, starter, _ = world()
    first = route(message(), stores, starter)
    starter.finish(first.turn_id or "", at=NOW + 1)
    assert release(stores, first, NOW + 1) == "released"
    for n in range(2, 11):
        later = route(message(f"telegram:default:{n}", f"m{n}", message_id=str(n)), stores, starter, now=NOW + n)
        starter.finish(later.turn_id or "", at=NOW + n + 0.5)
        assert release(stores, later, NOW + n + 0.5) == "released"

    # When a redrive routes it again and the router takes the lease but its start is throttled
    starter.fail_next_start = TransientError("Step Functions is throttling")
    with pytest.raises(TransientError):
        route(message(), stores, starter, now=NOW + 90)
    assert stores.routes.get(KEY).lease_token == lease_token_for(first.turn_id or "")  # type: ignore[union-attr]
    # and the stream hands the message over again (the route now remembers it)
    again = route(message(), stores, starter, now=NOW + 91)

    # Then the turn that ran before is not taken for one about to start: the lease goes at once
    # and the message's second row is taken back
    assert again.status == "already_answered" and again.turn_id == first.turn_id
    assert stores.routes.get(KEY).lease_token is None  # type: ignore[union-attr]
    assert rows(stores, first.session_id).count("hello") == 1
    assert route(message("telegram:default:11", "next", message_id="11"), stores, starter, now=NOW + 92).status == (
        "started"
    )


@pytest.mark.parametrize("first_execution_ended", [False, True])
def test_a_redelivered_message_whose_turn_still_runs_leaves_it_running(first_execution_ended: bool) -> None:
    stores, starter, _ = world()
    first = route(message(), stores, starter)
    if first_execution_ended:
        # the turn goes on in a continuation (or waits on an approval): its first execution
        # succeeded after the lease was taken, and the lease is still the turn's
        starter.finish(first.turn_id or "", at=NOW + 2)
    # the stream hands the message over again while its turn runs: nothing ends it
    again = route(message(), stores, starter, now=NOW + 5)
    assert again.status == "already_started"
    assert stores.routes.get(KEY).lease_token == lease_token_for(first.turn_id or "")  # type: ignore[union-attr]
    assert rows(stores, first.session_id) == ["hello"]


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
    stores, starter, client = world()
    access = fake_access()
    # When they write
    outcome = route(message(), stores, starter, settings=make_settings({}), access=access)
    # Then they get one reply naming the code and the exact approve command, and nothing else happens
    assert outcome.status == "pairing" and outcome.reason == "issued"
    [reply] = access.replies.bodies  # type: ignore[attr-defined]
    code = CODE.search(reply["text"]).group(1)  # type: ignore[union-attr]
    assert f"hermes-gateway pairing approve telegram {code}" in reply["text"]
    assert reply["redact"] == [code] and reply["target"] == {"platform": "telegram", "chat_id": "99", "thread_id": None}
    assert access.events.emitted == [("pairing:requested", {"platform": "telegram", "user": reply_user_hash()})]  # type: ignore[attr-defined]
    assert nothing_stored(client) and starter.calls == []


def reply_user_hash() -> str:
    from hermes_gateway.observability import hash_id

    return hash_id("42") or ""


def test_asking_again_within_ten_minutes_is_silent_and_a_redelivery_replies_once() -> None:
    stores, starter, _client = world()
    access = fake_access()
    first = route(message(), stores, starter, settings=make_settings({}), access=access)
    again = route(
        message("telegram:default:2"), stores, starter, settings=make_settings({}), access=access, now=NOW + 60
    )
    assert first.status == "pairing" and again.reason == "pairing_rate_limited"
    assert len(access.replies.bodies) == 1  # type: ignore[attr-defined]


def test_once_approved_the_user_is_answered() -> None:
    stores, starter, _client = world()
    access = fake_access()
    route(message(), stores, starter, settings=make_settings({}), access=access)
    code = CODE.search(access.replies.bodies[0]["text"]).group(1)  # type: ignore[attr-defined, union-attr]
    assert access.pairing.approve("telegram", code.lower(), NOW + 5, "test").status == "approved"
    outcome = route(message("telegram:default:3"), stores, starter, settings=make_settings({}), access=access)
    assert outcome.status == "started"


@pytest.mark.parametrize(
    ("env", "chat_type"),
    [({"TELEGRAM_ALLOWED_USERS": "7"}, "dm"), ({}, "group"), ({"TELEGRAM_UNAUTHORIZED_DM": "ignore"}, "dm")],
)
def test_ignored_messages_get_no_reply(env: dict[str, str], chat_type: str) -> None:
    stores, starter, client = world()
    access = fake_access()
    source = SessionSource("telegram", chat_id="99", chat_type=chat_type, user_id="42")
    msg = InboundMessage(source=source, text="hi", event_id="telegram:default:9", received_at=NOW)
    outcome = route(msg, stores, starter, settings=make_settings(env), access=access)
    assert outcome.status == "denied"
    assert access.replies.bodies == [] and nothing_stored(client)  # type: ignore[attr-defined]


def test_a_gateway_command_is_answered_without_a_session_or_turn() -> None:
    stores, starter, client = world()
    access = fake_access()
    outcome = route(message(text="/whoami"), stores, starter, access=access)
    assert outcome.status == "command"
    [reply] = access.replies.bodies  # type: ignore[attr-defined]
    assert "user id 42 on telegram" in reply["text"] and reply["delivery_id"].startswith("command-")
    assert nothing_stored(client) and starter.calls == []


def test_an_unknown_command_goes_to_the_agent() -> None:
    stores, starter, _client = world()
    access = fake_access()
    assert route(message(text="/summarize"), stores, starter, access=access).status == "started"
