"""BEHAVIOUR §4, the allowlist layers: who may talk to the agent, and the reason code of each answer."""

from __future__ import annotations

import pytest

from hermes_gateway.domain.access import Decision, authorize
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.settings import Settings
from tests.fakes.services import make_settings

# Telegram is on by default and closed to everyone until an allowlist or allow-all says otherwise.
CLOSED: dict[str, str] = {}


def tg(user_id: str | None = "42", **fields: object) -> SessionSource:
    return SessionSource("telegram", chat_id="99", user_id=user_id, **fields)  # type: ignore[arg-type]


def decide(source: SessionSource, env: dict[str, str]) -> Decision:
    return authorize(source, make_settings(env))


@pytest.mark.parametrize(
    ("source", "env", "reason"),
    [
        (tg(), {"TELEGRAM_ALLOW_ALL_USERS": "true"}, "platform_allow_all"),
        (tg(), {"TELEGRAM_ALLOWED_USERS": "7,42"}, "platform_allowlist"),
        (tg(), {"GATEWAY_ALLOWED_USERS": "42"}, "gateway_allowlist"),
        (tg(), {"TELEGRAM_ALLOWED_USERS": "*"}, "platform_allowlist"),
        (tg(), {"GATEWAY_ALLOWED_USERS": "*"}, "gateway_allowlist"),
        (tg("alice@example.com"), {"TELEGRAM_ALLOWED_USERS": "alice"}, "platform_allowlist"),
        (tg("alice@example.com"), {"GATEWAY_ALLOWED_USERS": "alice"}, "gateway_allowlist"),
        (tg("alice@example.com"), {"GATEWAY_ALLOWED_USERS": "alice@example.com"}, "gateway_allowlist"),
        (tg("primary", user_id_alt="alt-7"), {"TELEGRAM_ALLOWED_USERS": "alt-7"}, "platform_allowlist"),
        (tg(None, user_id_alt="alt-7"), {"GATEWAY_ALLOWED_USERS": "alt-7"}, "gateway_allowlist"),
        (tg(), {"GATEWAY_ALLOW_ALL_USERS": "true"}, "gateway_allow_all"),
        (SessionSource("webchat", chat_id="c", user_id="u"), {"WEBCHAT_ENABLED": "true"}, "platform_allow_all"),
    ],
)
def test_each_allow_path_and_its_reason(source: SessionSource, env: dict[str, str], reason: str) -> None:
    assert decide(source, env) == Decision(True, reason)


@pytest.mark.parametrize(
    ("source", "env", "reason"),
    [
        (tg(), {"TELEGRAM_ENABLED": "false", "TELEGRAM_ALLOW_ALL_USERS": "true"}, "platform_disabled"),
        # The web chat is off unless local mode turns it on, even though it allows everyone once on.
        (SessionSource("webchat", chat_id="c", user_id="u"), CLOSED, "platform_disabled"),
        (SessionSource("slack", chat_id="C1", user_id="U1"), {"GATEWAY_ALLOW_ALL_USERS": "true"}, "platform_disabled"),
        (tg(is_bot=True), {"TELEGRAM_ALLOW_ALL_USERS": "true", "GATEWAY_ALLOWED_USERS": "42"}, "bot_sender"),
        (tg(None), {"TELEGRAM_ALLOW_ALL_USERS": "true"}, "no_user_id"),
        (tg(""), {"GATEWAY_ALLOW_ALL_USERS": "true"}, "no_user_id"),
        (tg(), CLOSED, "not_allowlisted"),
        (tg(), {"TELEGRAM_ALLOWED_USERS": "7,420,4"}, "not_allowlisted"),
        # `@` only widens an id that carries it: an allow-listed e-mail does not admit its bare local part.
        (tg("alice"), {"TELEGRAM_ALLOWED_USERS": "alice@example.com"}, "not_allowlisted"),
        (tg("bob@example.com"), {"TELEGRAM_ALLOWED_USERS": "alice"}, "not_allowlisted"),
    ],
)
def test_each_deny_and_its_reason(source: SessionSource, env: dict[str, str], reason: str) -> None:
    assert decide(source, env) == Decision(False, reason)


def test_the_order_is_first_allow_wins() -> None:
    # Given a user on both the platform and the gateway allowlists, with allow-all on as well
    settings: Settings = make_settings(
        {"TELEGRAM_ALLOWED_USERS": "42", "GATEWAY_ALLOWED_USERS": "42", "GATEWAY_ALLOW_ALL_USERS": "true"}
    )

    # When authorized, Then the earliest layer answers
    assert authorize(tg(), settings).reason == "platform_allowlist"


def test_platform_allow_all_precedes_the_allowlists() -> None:
    settings = make_settings({"TELEGRAM_ALLOW_ALL_USERS": "true", "TELEGRAM_ALLOWED_USERS": "42"})

    assert authorize(tg(), settings).reason == "platform_allow_all"


def test_a_disabled_platform_wins_over_every_allow() -> None:
    settings = make_settings({"TELEGRAM_ENABLED": "no", "GATEWAY_ALLOW_ALL_USERS": "yes", "GATEWAY_ALLOWED_USERS": "*"})

    assert authorize(tg(), settings) == Decision(False, "platform_disabled")


def test_one_platform_allowlist_does_not_admit_on_another() -> None:
    # Given a Telegram allowlist naming "u", When "u" writes from the (enabled, closed) web chat
    settings = make_settings(
        {"TELEGRAM_ALLOWED_USERS": "u", "WEBCHAT_ENABLED": "true", "WEBCHAT_ALLOW_ALL_USERS": "false"}
    )

    # Then the web chat denies: platform lists are per platform, only the gateway list is shared
    assert authorize(SessionSource("webchat", chat_id="c", user_id="u"), settings) == Decision(False, "not_allowlisted")


def test_reason_codes_are_a_closed_set() -> None:
    sources = [tg(), tg(None), tg(is_bot=True), tg("a@b"), SessionSource("webchat", user_id="u")]
    envs = [
        CLOSED,
        {"TELEGRAM_ALLOW_ALL_USERS": "1"},
        {"GATEWAY_ALLOWED_USERS": "a"},
        {"GATEWAY_ALLOW_ALL_USERS": "1"},
        {"TELEGRAM_ALLOWED_USERS": "42"},
        {"WEBCHAT_ENABLED": "1"},
    ]
    known = {
        "platform_disabled",
        "bot_sender",
        "no_user_id",
        "platform_allow_all",
        "platform_allowlist",
        "gateway_allowlist",
        "gateway_allow_all",
        "not_allowlisted",
    }

    reasons = {decide(s, e).reason for s in sources for e in envs}

    assert reasons <= known
    assert len(reasons) >= 6  # the grid really exercised most layers
