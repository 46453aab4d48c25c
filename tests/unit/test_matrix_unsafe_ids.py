"""Matrix ids the session key's safety rule refuses: a transaction is never answered 400 for them
(the homeserver resends a refused transaction unchanged forever, blocking the bot), and a valid
user id holding `..` still gets its own session."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.platforms.matrix import key_safe_user_id, parse_event
from hermes_gateway.services.ingress import HttpRequest, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.services import FakeEnqueue, make_settings

HS_TOKEN = "unit-matrix-hs-token"
BOT = "@hermes:example.org"
ROOM = "!room:example.org"
ENV = {"MATRIX_ENABLED": "true", "MATRIX_BOT_USER_ID": BOT}


def event(
    sender: str = "@alice:example.org",
    room: str = ROOM,
    event_id: str = "$e1",
    relates_to: dict[str, str] | None = None,
) -> dict[str, Any]:
    content: dict[str, Any] = {"msgtype": "m.text", "body": "hello"}
    if relates_to is not None:
        content["m.relates_to"] = relates_to
    return {"type": "m.room.message", "event_id": event_id, "room_id": room, "sender": sender, "content": content}


def transaction(*events: dict[str, Any]) -> tuple[int, FakeEnqueue]:
    settings = make_settings(ENV)
    enqueue = FakeEnqueue()
    request = HttpRequest(
        method="PUT",
        path="/webhooks/matrix/_matrix/app/v1/transactions/7",
        headers={"content-type": "application/json", "authorization": f"Bearer {HS_TOKEN}"},
        body=json.dumps({"events": list(events)}).encode(),
        query={},
    )
    response = handle_webhook(
        "matrix",
        request,
        settings=settings,
        adapters=platforms.adapters(settings, {"MATRIX_HS_TOKEN": HS_TOKEN}),
        enqueue_once=enqueue,
        received_at=1_764_400_000.0,
    )
    return response.status, enqueue


def test_a_valid_user_id_with_two_dots_alone_in_a_transaction_is_answered() -> None:
    # Given a transaction whose only event comes from @john..doe (a valid Matrix user id)
    status, enqueue = transaction(event(sender="@john..doe:example.org"))

    # Then it is acknowledged and the message is enqueued under a key the safety rule accepts
    assert status == 200
    [envelope] = enqueue.sent
    assert envelope["session_key"] == f"agent:main:matrix:group:{ROOM}:@john%2E%2Edoe:example%2Eorg"
    assert envelope["source"]["user_id"] == "@john..doe:example.org"  # allowlists see the real id


@pytest.mark.parametrize(
    ("unsafe", "reason"),
    [
        (event(room="!../../etc/passwd:example.org"), "unsafe_id"),
        (event(relates_to={"rel_type": "m.thread", "event_id": "$../../x"}), "unsafe_id"),
        (event(sender="@a\x00b:example.org"), "unsafe_id"),
    ],
)
def test_an_event_with_an_unusable_id_is_ignored_never_a_400(unsafe: dict[str, Any], reason: str) -> None:
    parsed = parse_event(unsafe, bot_user_id=BOT, received_at=0.0)
    assert parsed == Ignored(reason)
    status, enqueue = transaction(unsafe)
    assert (status, enqueue.sent) == (200, [])


def test_an_ordinary_id_keeps_its_key() -> None:
    parsed = parse_event(event(sender="@jo.doe:example.org"), bot_user_id=BOT, received_at=0.0)
    assert isinstance(parsed, InboundMessage) and parsed.source.user_id_alt is None


# Localparts and server names as Matrix (historical ids included) allows them, with dots and '%'.
_IDS = st.builds(
    lambda local, server: f"@{local}:{server}",
    st.text(alphabet="abz09._=-/+%", min_size=1, max_size=12),
    st.sampled_from(["example.org", "hs.example.org"]),
)


@given(_IDS, _IDS)
def test_two_users_never_share_a_session_key(first: str, second: str) -> None:
    def key(sender: str) -> str | None:
        parsed = parse_event(event(sender=sender), bot_user_id=BOT, received_at=0.0)
        assert isinstance(parsed, InboundMessage)
        return build_session_key(parsed.source)

    assert (key(first) == key(second)) == (first == second)


@given(_IDS)
def test_the_key_safe_form_is_reversible(user_id: str) -> None:
    encoded = key_safe_user_id(user_id)
    assert ".." not in encoded
    assert encoded.replace("%2E", ".").replace("%25", "%") == user_id
