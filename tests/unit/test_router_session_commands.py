"""The router and the session commands: answered by the gateway, never the model; /retry routes
the undone text again as a new turn."""

from __future__ import annotations

from hermes_gateway.domain.source import SessionSource
from tests.fakes.engine import Engine, ToolModel

ALICE = SessionSource("telegram", chat_id="99", user_id="42", user_name="Alice")


def gateway() -> Engine:
    return Engine({"TELEGRAM_ALLOWED_USERS": "42"}, ToolModel("hi"))


def test_commands_are_answered_by_the_gateway_and_start_no_turn() -> None:
    engine = gateway()
    first = engine.send("hello", "telegram:default:1", ALICE)
    engine.pump()
    for event, text in (("2", "/status"), ("3", "/title Plans"), ("4", "/undo"), ("5", "/new")):
        outcome = engine.send(text, f"telegram:default:{event}", ALICE)
        assert outcome.status == "command", text
    # only "hello" reached the agent; /new started the memory flush of the session it replaced
    assert [n for n in engine.starter.started if not n.startswith("flush-")] == [first.turn_id]
    assert [n for n in engine.starter.started if n.startswith("flush-")] == [f"flush-{first.session_id}"]
    assert [b["text"].split("\n")[0][:14] for b in engine.replies.bodies] == [
        f"Session {first.session_id}"[:14],
        'Session titled "Plans".'[:14],
        "Undone: 2 message(s) hidden (kept, not deleted). Last message kept: #0."[:14],
        "New session started"[:14],
    ]
    assert [name for name, _ in engine.router_events.emitted if name.startswith("command:")] == [
        "command:status",
        "command:title",
        "command:undo",
        "command:new",
    ]


def test_retry_replies_and_routes_the_undone_text_as_a_new_turn() -> None:
    engine = Engine({"TELEGRAM_ALLOWED_USERS": "42"}, ToolModel("5"))
    first = engine.send("what is 2+2?", "telegram:default:1", ALICE)
    engine.pump()

    outcome = engine.send("/retry", "telegram:default:2", ALICE)

    assert engine.replies.bodies[-1]["text"] == "Retrying your last message."
    assert outcome.status == "started" and outcome.turn_id != first.turn_id
    assert engine.transcript() == [("user", "what is 2+2?")]  # the new turn's row; the undone pair hidden
    assert len(engine.stores.transcript.rows(first.session_id or "")) == 3  # the undone pair is kept


class Ahead:
    """The router's replies that go before a turn, each with how many turns had started when sent."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.sent: list[tuple[str, int]] = []

    def send(self, body: dict[str, object]) -> str:
        self.sent.append((str(body["text"]), len(self.engine.starter.started)))
        return "ahead"


def test_the_retry_notice_is_sent_before_the_retried_turn_starts() -> None:
    # Sent the asynchronous way, a fast answer could reach the chat before "Retrying ..." (seen in
    # local mode: the echo model's answer came first).
    engine = Engine({"TELEGRAM_ALLOWED_USERS": "42"}, ToolModel("5"))
    engine.send("what is 2+2?", "telegram:default:1", ALICE)
    engine.pump()
    engine.replies_ahead = ahead = Ahead(engine)
    started = len(engine.starter.started)
    replies = len(engine.replies.bodies)

    outcome = engine.send("/retry", "telegram:default:2", ALICE)

    assert outcome.status == "started"
    assert ahead.sent == [("Retrying your last message.", started)]  # before the turn started
    assert len(engine.starter.started) == started + 1
    assert len(engine.replies.bodies) == replies  # not also sent the asynchronous way


def test_a_command_that_starts_no_turn_replies_the_asynchronous_way() -> None:
    engine = gateway()
    engine.send("hello", "telegram:default:1", ALICE)
    engine.pump()
    engine.replies_ahead = ahead = Ahead(engine)
    assert engine.send("/title Plans", "telegram:default:2", ALICE).status == "command"
    assert ahead.sent == [] and engine.replies.bodies[-1]["text"] == 'Session titled "Plans".'
