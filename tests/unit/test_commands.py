"""Gateway commands (BEHAVIOUR §9) and the admin/user tiers (§4), on the in-memory session store."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.sessions import TranscriptRow
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.services.commands import (
    COMMANDS,
    Command,
    CommandContext,
    CommandResult,
    answer_command,
    may_run,
    parse_command,
)
from hermes_gateway.settings import Settings
from tests.fakes.services import FakeDirectory, FakeEvents, make_settings
from tests.fakes.sessions import memory_stores

NOW = 1_800_000_000.0
ALICE = SessionSource("telegram", chat_id="99", user_id="42", user_name="Alice")
KEY = build_session_key(ALICE)
GROUP = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="42", user_name="Alice", thread_id="7")


class Chat:
    """One chat's view of the gateway: its store and events, and a clock."""

    def __init__(self, env: dict[str, str] | None = None, source: SessionSource = ALICE) -> None:
        self.settings: Settings = make_settings(env or {})
        self.stores = memory_stores()
        self.events = FakeEvents()
        self.source = source
        self.key = build_session_key(source)
        self.now = NOW

    def say(self, text: str, reply: str | None = None) -> str:
        """A user turn (and the agent's reply) as the router and the turn would store them."""
        entry = self.stores.routes.open(self.source, self.key, self.now)
        for role, content in (("user", text), ("assistant", reply or f"echo: {text}")):
            seq = self.stores.leases.allocate(self.key, entry.session_id, 1, self.now)
            assert seq is not None
            self.stores.transcript.put(entry.session_id, TranscriptRow(seq, role, content, self.now))
        self.now += 10
        return entry.session_id

    def hold(self) -> None:
        """A turn is running in the chat's session."""
        entry = self.stores.routes.get(self.key)
        assert entry is not None and self.stores.leases.begin(entry, "turn-1", "tok", "e-hold", self.now) is not None

    def command(self, text: str) -> CommandResult | None:
        self.now += 1
        context = CommandContext(self.source, self.settings, self.now, self.key, self.stores, None, self.events)
        return answer_command(text, context)

    def reply(self, text: str) -> str:
        result = self.command(text)
        assert result is not None, text
        return result.reply

    def route_session(self) -> str:
        route = self.stores.routes.get(self.key)
        assert route is not None
        return route.session_id

    def contents(self) -> list[str]:
        info = self.stores.catalogue.get_session(self.route_session())
        return [row.content for row in self.stores.transcript.rows(self.route_session(), info.hidden if info else ())]


def context(source: SessionSource, settings: Settings, **kwargs: Any) -> CommandContext:
    return CommandContext(source, settings, NOW, **kwargs)


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("/help", Command("help", "")),
        ("  /WhoAmI  ", Command("whoami", "")),
        ("/help@HermesBot", Command("help", "")),
        ("/new my title", Command("new", "my title")),
        ("/undo\n2", Command("undo", "2")),
        ("hello /help", None),
        ("/", None),
        ("/ help", None),
        ("//help", None),
    ],
)
def test_parse_command(text: str, command: Command | None) -> None:
    assert parse_command(text) == command


def test_tiers_everyone_runs_own_session_commands_admins_everything_listed_commands_open_up() -> None:
    plain = make_settings({})
    for name in ("help", "whoami", "status", "new", "reset", "undo", "retry", "title", "resume", "sessions"):
        assert may_run(name, ALICE, plain), name
    assert not may_run("model", ALICE, plain) and not may_run("sethome", ALICE, plain)
    assert may_run("model", ALICE, make_settings({"TELEGRAM_ADMINS": "42"}))
    assert may_run("model", ALICE, make_settings({"GATEWAY_ADMINS": "42"}))
    assert may_run("model", ALICE, make_settings({"GATEWAY_USER_COMMANDS": "model,status"}))
    assert not may_run("yolo", ALICE, make_settings({"GATEWAY_USER_COMMANDS": "model,status"}))


def test_in_a_shared_session_only_admins_change_it() -> None:
    # Given a thread whose members share one session (the default for threads)
    plain, admin = make_settings({}), make_settings({"GATEWAY_ADMINS": "42"})
    # Then a member may look but not rewrite everyone's history
    assert may_run("status", GROUP, plain) and may_run("sessions", GROUP, plain)
    assert not may_run("undo", GROUP, plain) and not may_run("new", GROUP, plain)
    assert may_run("undo", GROUP, admin)
    refused = answer_command("/undo", context(GROUP, plain))
    assert refused == CommandResult("/undo is for admins here.")


def test_whoami_and_help() -> None:
    who = answer_command("/whoami", context(ALICE, make_settings({})))
    assert who is not None and "user id 42 on telegram" in who.reply and "user" in who.reply
    admin = answer_command("/whoami", context(ALICE, make_settings({"GATEWAY_ADMINS": "42"})))
    assert admin is not None and "admin" in admin.reply
    help_text = answer_command("/help", context(ALICE, make_settings({})))
    assert help_text is not None and "/help" in help_text.reply and "/new" in help_text.reply
    assert "/sethome" not in help_text.reply and "/model" not in help_text.reply


def test_whoami_names_a_named_profiles_bot() -> None:
    profiles = make_settings({"GATEWAY_PROFILES": '{"coder": {"TELEGRAM_ENABLED": "true"}}'})
    who = answer_command("/whoami", context(ALICE, profiles.for_profile("coder")))
    assert who is not None and "on telegram (profile coder)" in who.reply
    plain = answer_command("/whoami", context(ALICE, profiles))
    assert plain is not None and "profile" not in plain.reply


def test_help_lists_the_running_turns_commands_too() -> None:
    help_text = answer_command("/help", context(ALICE, make_settings({})))
    assert help_text is not None
    for name in ("/stop", "/approve", "/deny", "/yolo", "/queue"):
        assert name in help_text.reply
    admin_help = answer_command("/help", context(ALICE, make_settings({"GATEWAY_ADMINS": "42"})))
    assert admin_help is not None and all(f"/{name}" in admin_help.reply for name in COMMANDS)


def test_plain_chat_and_unknown_commands_go_to_the_agent() -> None:
    chat = Chat()
    assert chat.command("hello there") is None
    assert chat.command("/summarize this") is None
    assert chat.events.emitted == []


def test_the_command_table_is_explicit_and_the_running_turns_commands_are_answered_elsewhere() -> None:
    from hermes_gateway.services.turn_commands import TURN_COMMANDS

    answered_by_the_turn = {name for name, spec in COMMANDS.items() if spec.handler is None}
    assert answered_by_the_turn == set(TURN_COMMANDS)
    assert all(name == spec.name for name, spec in COMMANDS.items())
    chat = Chat()
    assert chat.command("/stop") is None  # the router's turn commands answer it, before any session command


def test_sethome_stores_this_chat_for_an_admin_only() -> None:
    homes = FakeDirectory()
    refused = answer_command("/sethome", context(GROUP, make_settings({}), homes=homes))
    assert refused is not None and "admins" in refused.reply and homes.homes == {}
    done = answer_command("/sethome", context(GROUP, make_settings({"GATEWAY_ADMINS": "42"}), homes=homes))
    assert done is not None and "-100" in done.reply and homes.homes == {"telegram": ("-100", "7")}


def test_new_starts_a_fresh_session_with_an_optional_title() -> None:
    chat = Chat()
    first = chat.say("hello")
    reply = chat.reply("/new Trip plans")
    # Then the chat's route points at a new, titled, empty session; the old one ended
    assert chat.route_session() != first and chat.contents() == []
    assert reply == f'New session "Trip plans" started ({chat.route_session()}).'
    info = chat.stores.catalogue.get_session(chat.route_session())
    assert info is not None and info.title == "Trip plans"
    old = chat.stores.catalogue.get_session(first)
    assert old is not None and old.ended_at is not None
    name, detail = chat.events.emitted[-1]
    assert name == "command:new" and detail["platform"] == "telegram" and detail["resubmit"] is False
    names = [name for name, _ in chat.events.emitted]
    assert names == ["session:end", "session:reset", "session:start", "command:new"]
    # the user id is hashed: no value carries it (a hash or a random session id may contain "42")
    assert all(value != "42" for _, d in chat.events.emitted for value in d.values())


def test_new_with_a_taken_title_still_starts_the_session() -> None:
    chat = Chat()
    chat.say("hello")
    chat.reply("/title Taken")
    reply = chat.reply("/new Taken")
    assert "Title not set" in reply and chat.contents() == []


def test_reset_forces_a_new_session() -> None:
    chat = Chat()
    first = chat.say("hello")
    assert chat.reply("/reset").startswith("Session reset.")
    assert chat.route_session() != first


def test_undo_hides_the_last_turns_and_keeps_the_rows() -> None:
    chat = Chat()
    session = chat.say("one")
    chat.say("two")
    chat.say("three")
    assert chat.reply("/undo").startswith("Undone: 2 message(s)")
    assert chat.contents() == ["one", "echo: one", "two", "echo: two"]
    assert chat.reply("/undo 2").startswith("Undone: 4 message(s)")
    assert chat.contents() == []
    assert len(chat.stores.transcript.rows(session)) == 6  # soft-deleted, kept
    assert chat.reply("/undo") == "Nothing to undo."
    assert chat.reply("/undo zero").startswith("Usage: /undo [n]")
    assert chat.reply("/undo 0").startswith("Usage")


def test_undo_and_retry_with_no_session_yet() -> None:
    chat = Chat()
    assert chat.reply("/undo") == "Nothing to undo."
    assert chat.reply("/retry") == "Nothing to retry."


def test_retry_takes_back_the_last_turn_and_resubmits_its_text() -> None:
    chat = Chat()
    chat.say("first question")
    chat.say("second question", "a bad answer")
    result = chat.command("/retry")
    # Then the last turn is hidden and its text comes back for the router to route again
    assert result == CommandResult("Retrying your last message.", resubmit_text="second question")
    assert chat.contents() == ["first question", "echo: first question"]
    assert chat.events.emitted[-1][1]["resubmit"] is True


def test_a_running_turn_refuses_undo_and_retry() -> None:
    chat = Chat()
    chat.say("hello")
    chat.hold()
    assert "being written" in chat.reply("/undo")
    assert "being written" in chat.reply("/retry")
    assert chat.contents() == ["hello", "echo: hello"]


def test_status_shows_id_title_messages_tokens_model_and_busy_or_idle() -> None:
    chat = Chat({"GATEWAY_PROVIDER": "echo"})
    assert chat.reply("/status").startswith("No session yet")
    session = chat.say("hello")
    chat.reply("/title Plans")
    status = chat.reply("/status")
    assert f'"Plans" ({session})' in status and "2 messages" in status
    assert "Tokens: " in status and "Model: echo:" in status and "State: idle" in status
    chat.say("more")
    chat.reply("/undo")
    assert "2 messages (2 undone)" in chat.reply("/status")
    chat.hold()
    assert "State: busy" in chat.reply("/status")


def test_model_shows_sets_and_clears_the_session_override() -> None:
    chat = Chat({"GATEWAY_ADMINS": "42"})
    chat.say("hello")
    assert chat.reply("/model").startswith("Model: echo:")
    assert chat.reply("/model openai:gpt-4o-mini") == "This session now uses openai:gpt-4o-mini."
    route = chat.stores.routes.get(chat.key)
    assert route is not None and route.model_override is not None
    assert route.model_override.to_dict() == {"model": "gpt-4o-mini", "provider": "openai"}
    assert "(this session" in chat.reply("/model") and "status" not in chat.reply("/model")
    assert "openai:gpt-4o-mini (this session)" in chat.reply("/status")
    refused = chat.reply("/model " + "sk-" + "abcdefghijklmnopqrstuvwxyz012345")
    assert refused.startswith("Model not changed") and "sk-abc" not in refused
    assert chat.reply("/model default") == "This session uses the default model again."
    route = chat.stores.routes.get(chat.key)
    assert route is not None and route.model_override is None


def test_title_shows_sets_and_refuses_a_taken_title() -> None:
    chat = Chat()
    assert chat.reply("/title") == "No session yet. Name it with /title <name>."
    chat.say("hello")
    assert chat.reply("/title").startswith("This session has no title")
    assert chat.reply("/title Weekend") == 'Session titled "Weekend".'
    assert chat.reply("/title") == 'This session is "Weekend".'
    chat.reply("/new")
    assert chat.reply("/title weekend") == 'Another session is already called "weekend". Pick another title.'


def test_title_before_any_chat_creates_the_session() -> None:
    chat = Chat()
    assert chat.reply("/title Fresh") == 'Session titled "Fresh".'
    info = chat.stores.catalogue.get_session(chat.route_session())
    assert info is not None and info.title == "Fresh"


def test_sessions_and_resume_switch_between_this_chats_sessions() -> None:
    chat = Chat()
    first = chat.say("about cats")
    chat.reply("/title Cats")
    chat.reply("/new Dogs")
    chat.say("about dogs")
    listing = chat.reply("/sessions")
    assert '"Cats"' in listing and '"Dogs"' in listing and "<- current" in listing
    # When the user resumes the earlier session by title
    assert chat.reply("/resume cats").startswith('Resumed "Cats"')
    assert chat.route_session() == first and chat.contents() == ["about cats", "echo: about cats"]
    assert chat.reply("/resume Cats").startswith("Already in")
    assert chat.reply("/resume Nope").startswith('No session called "Nope"')
    assert chat.reply("/resume").startswith("Sessions in this chat")


def test_resume_never_reaches_another_chats_session() -> None:
    # Given Bob's DM session titled "Secret"
    bob = SessionSource("telegram", chat_id="77", user_id="7", user_name="Bob")
    chat = Chat()
    bob_key = build_session_key(bob)
    entry = chat.stores.routes.open(bob, bob_key, NOW)
    chat.stores.edits.rename(entry.session_id, "Secret", fence=_fence(chat, bob_key), now=NOW)
    chat.say("hello")
    # Then Alice can neither list nor resume it
    assert "Secret" not in chat.reply("/sessions")
    assert chat.reply("/resume Secret").startswith('No session called "Secret"')
    assert chat.reply(f"/resume {entry.session_id}").startswith("No session called")


def _fence(chat: Chat, key: str) -> Any:
    from hermes_gateway.domain.sessions import Fence

    route = chat.stores.routes.get(key)
    assert route is not None
    return Fence(route.revision)


def test_a_redelivered_command_runs_once_and_gets_its_first_answer() -> None:
    from tests.fakes.receipts import FakeReceipts

    # Given a chat whose router keeps command receipts
    chat = Chat()
    receipts = FakeReceipts()
    for text in ("one", "two", "three"):
        chat.say(text)

    def deliver(text: str, event_id: str) -> CommandResult | None:
        context = CommandContext(
            chat.source, chat.settings, chat.now, chat.key, chat.stores, None, chat.events, receipts, event_id
        )
        return answer_command(text, context)

    # When the queue hands the same /undo over twice
    first = deliver("/undo", "telegram:default:10")
    again = deliver("/undo", "telegram:default:10")
    # Then one turn was undone, and the redelivery got the same answer
    assert first == again and first is not None and first.reply.startswith("Undone: 2")
    assert chat.contents() == ["one", "echo: one", "two", "echo: two"]
    assert [name for name, _ in chat.events.emitted].count("command:undo") == 1
    # A redelivered /retry resubmits the same text again (the router de-duplicates the turn)
    retried = deliver("/retry", "telegram:default:11")
    assert retried is not None and deliver("/retry", "telegram:default:11") == retried
    assert retried.resubmit_text == "two" and chat.contents() == ["one", "echo: one"]
    # A read-only command keeps no receipt
    assert deliver("/status", "telegram:default:12") is not None and "command#telegram:default:12" not in receipts.items


def test_a_command_that_fails_gives_its_claim_back_and_one_in_flight_is_retried_later() -> None:
    from hermes_gateway.errors import TransientError
    from tests.fakes.receipts import FakeReceipts

    chat = Chat()
    chat.say("one")
    receipts = FakeReceipts()

    class Broken:
        def undo(self, *args: Any, **kwargs: Any) -> Any:
            raise TransientError("throttled")

    from dataclasses import replace

    broken = replace(chat.stores, edits=Broken())  # type: ignore[arg-type]
    context = CommandContext(chat.source, chat.settings, chat.now, chat.key, broken, None, None, receipts, "e1")
    with pytest.raises(TransientError):
        answer_command("/undo", context)
    assert receipts.items == {}  # given back: the redelivery runs it
    ok = CommandContext(chat.source, chat.settings, chat.now, chat.key, chat.stores, None, None, receipts, "e1")
    result = answer_command("/undo", ok)
    assert result is not None and result.reply.startswith("Undone")
    # While another delivery of the same message holds the claim, this one is retried later
    import hashlib

    fingerprint = hashlib.sha256(b"undo ").hexdigest()
    assert receipts.claim("command#e2", fingerprint, chat.now).status == "claimed"
    held = CommandContext(chat.source, chat.settings, chat.now, chat.key, chat.stores, None, None, receipts, "e2")
    with pytest.raises(TransientError):
        answer_command("/undo", held)
