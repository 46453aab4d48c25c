"""Gateway commands and the admin/user tiers (BEHAVIOUR §4, §9)."""

from __future__ import annotations

import pytest

from hermes_gateway.domain.source import SessionSource
from hermes_gateway.services.commands import COMMANDS, Command, answer_command, may_run, parse_command
from tests.fakes.services import make_settings

ALICE = SessionSource("telegram", chat_id="99", user_id="42", user_name="Alice")


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


def test_everyone_may_run_help_and_whoami_admins_everything_and_listed_commands_open_up() -> None:
    plain = make_settings({})
    assert may_run("help", ALICE, plain) and may_run("whoami", ALICE, plain)
    assert not may_run("model", ALICE, plain)
    assert may_run("model", ALICE, make_settings({"TELEGRAM_ADMINS": "42"}))
    assert may_run("model", ALICE, make_settings({"GATEWAY_ADMINS": "42"}))
    assert may_run("model", ALICE, make_settings({"GATEWAY_USER_COMMANDS": "model,status"}))
    assert not may_run("yolo", ALICE, make_settings({"GATEWAY_USER_COMMANDS": "model,status"}))


def test_whoami_and_help() -> None:
    who = answer_command("/whoami", ALICE, make_settings({}))
    assert who is not None and "user id 42 on telegram" in who and "user" in who
    admin = answer_command("/whoami", ALICE, make_settings({"GATEWAY_ADMINS": "42"}))
    assert admin is not None and "admin" in admin
    help_text = answer_command("/help", ALICE, make_settings({}))
    assert help_text is not None and "/help" in help_text and "/whoami" in help_text and "/sethome" not in help_text
    admin_help = answer_command("/help", ALICE, make_settings({"GATEWAY_ADMINS": "42"}))
    assert admin_help is not None and all(f"/{name}" in admin_help for name in COMMANDS)


def test_plain_chat_and_unknown_commands_go_to_the_agent() -> None:
    assert answer_command("hello there", ALICE, make_settings({})) is None
    assert answer_command("/summarize this", ALICE, make_settings({})) is None


def test_a_command_for_admins_is_refused_to_a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given an admin-only command (the session commands of issue #3 will be such)
    monkeypatch.setitem(COMMANDS, "model", ("switch the model", lambda call: "switched"))
    assert answer_command("/model x", ALICE, make_settings({})) == "/model is for admins here."
    assert answer_command("/model x", ALICE, make_settings({"GATEWAY_ADMINS": "42"})) == "switched"


def test_sethome_stores_this_chat_for_an_admin_only() -> None:
    from tests.fakes.services import FakeDirectory

    homes = FakeDirectory()
    group = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="42", thread_id="7")
    refused = answer_command("/sethome", group, make_settings({}), homes=homes, now=1.0)
    assert refused is not None and "admins" in refused and homes.homes == {}
    done = answer_command("/sethome", group, make_settings({"GATEWAY_ADMINS": "42"}), homes=homes, now=1.0)
    assert done is not None and "-100" in done and homes.homes == {"telegram": ("-100", "7")}
