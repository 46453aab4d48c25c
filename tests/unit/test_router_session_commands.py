"""The router and the session commands: answered by the gateway, never the model; /retry routes
the undone text again as a new turn."""

from __future__ import annotations

from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.services.router import Access, RouteOutcome, route_message
from tests.fakes.access import FakePairingStore
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeStarter, make_settings
from tests.fakes.sessions import FakeSessionStore

NOW = 1_764_400_000.0
KEY = "agent:main:telegram:dm:99"


def message(event: str, text: str) -> InboundMessage:
    source = SessionSource("telegram", chat_id="99", user_id="42", user_name="Alice", message_id=event)
    return InboundMessage(source=source, text=text, event_id=f"telegram:default:{event}", received_at=NOW)


class Gateway:
    def __init__(self) -> None:
        self.store, self.starter = FakeSessionStore(), FakeStarter()
        self.replies, self.events = FakeDeliveryQueue(), FakeEvents()
        self.access = Access(pairing=FakePairingStore(), replies=self.replies, events=self.events)

    def route(self, event: str, text: str, now: float = NOW) -> RouteOutcome:
        return route_message(
            message(event, text),
            settings=make_settings({"TELEGRAM_ALLOWED_USERS": "42"}),
            store=self.store,
            lease=self.store,
            starter=self.starter,
            access=self.access,
            now=now,
        )

    def finish_turn(self, outcome: RouteOutcome, reply: str) -> None:
        """What the turn does at its end: store the reply, release the lease."""
        assert outcome.turn_id is not None and outcome.session_id is not None
        turn = self.starter.started[outcome.turn_id]
        self.store.append_message(outcome.session_id, "assistant", reply, NOW)
        self.store.release(KEY, turn["lease_token"])
        self.starter.finish(outcome.turn_id)


def test_commands_are_answered_by_the_gateway_and_start_no_turn() -> None:
    gateway = Gateway()
    first = gateway.route("1", "hello")
    gateway.finish_turn(first, "hi")
    for event, text in (("2", "/status"), ("3", "/title Plans"), ("4", "/undo"), ("5", "/new")):
        outcome = gateway.route(event, text)
        assert outcome.status == "command", text
    # only "hello" reached the agent; /new started the memory flush of the session it replaced
    assert [n for n in gateway.starter.started if not n.startswith("flush-")] == [first.turn_id]
    assert [n for n in gateway.starter.started if n.startswith("flush-")] == [f"flush-{first.session_id}"]
    assert [b["text"].split("\n")[0][:14] for b in gateway.replies.bodies] == [
        f"Session {first.session_id}"[:14],
        'Session titled "Plans".'[:14],
        "Undone: 2 message(s) hidden (kept, not deleted). Last message kept: #0."[:14],
        "New session started"[:14],
    ]
    assert [name for name, _ in gateway.events.emitted if name.startswith("command:")] == [
        "command:status",
        "command:title",
        "command:undo",
        "command:new",
    ]


def test_retry_replies_and_routes_the_undone_text_as_a_new_turn() -> None:
    # Given a turn that got a bad answer
    gateway = Gateway()
    first = gateway.route("1", "what is 2+2?")
    gateway.finish_turn(first, "5")
    # When the user sends /retry
    outcome = gateway.route("2", "/retry")
    # Then the gateway says so, and the same question starts a new turn
    assert gateway.replies.bodies[-1]["text"] == "Retrying your last message."
    assert outcome.status == "started" and outcome.turn_id != first.turn_id
    rows = gateway.store.transcript(first.session_id or "")
    assert [(r.role, r.content) for r in rows] == [("user", "what is 2+2?")]
    assert len(gateway.store.messages[first.session_id or ""]) == 3  # the undone pair is kept, inactive
