"""BEHAVIOUR §4, the allowlist layers: who may talk to the agent, and the reason code of each answer."""

from __future__ import annotations

import pytest

from hermes_gateway.domain.access import AccessFacts, Decision, _listed, authorize, is_admin, unauthorized_dm_action
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.settings import Settings
from tests.fakes.services import make_settings

# Telegram is on by default and closed to everyone until an allowlist or allow-all says otherwise.
CLOSED: dict[str, str] = {}


def tg(user_id: str | None = "42", **fields: object) -> SessionSource:
    fields.setdefault("chat_id", "99")
    return SessionSource("telegram", user_id=user_id, **fields)  # type: ignore[arg-type]


def nobody_paired(platform: str, user_id: str) -> bool:
    return False


def decide(source: SessionSource, env: dict[str, str]) -> Decision:
    return authorize(source, make_settings(env), is_paired=nobody_paired)


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
    assert authorize(tg(), settings, is_paired=nobody_paired).reason == "platform_allowlist"


def test_platform_allow_all_precedes_the_allowlists() -> None:
    settings = make_settings({"TELEGRAM_ALLOW_ALL_USERS": "true", "TELEGRAM_ALLOWED_USERS": "42"})

    assert authorize(tg(), settings, is_paired=nobody_paired).reason == "platform_allow_all"


def test_a_disabled_platform_wins_over_every_allow() -> None:
    settings = make_settings({"TELEGRAM_ENABLED": "no", "GATEWAY_ALLOW_ALL_USERS": "yes", "GATEWAY_ALLOWED_USERS": "*"})

    assert authorize(tg(), settings, is_paired=nobody_paired) == Decision(False, "platform_disabled")


def test_one_platform_allowlist_does_not_admit_on_another() -> None:
    # Given a Telegram allowlist naming "u", When "u" writes from the (enabled, closed) web chat
    settings = make_settings(
        {"TELEGRAM_ALLOWED_USERS": "u", "WEBCHAT_ENABLED": "true", "WEBCHAT_ALLOW_ALL_USERS": "false"}
    )

    # Then the web chat denies: platform lists are per platform, only the gateway list is shared
    assert authorize(SessionSource("webchat", chat_id="c", user_id="u"), settings, is_paired=nobody_paired) == Decision(
        False, "not_allowlisted"
    )


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


# -- the layers of §4 beyond the allowlists ---------------------------------------------------

GROUP = {"chat_id": "-100", "chat_type": "group"}


def test_an_allowlisted_group_chat_allows_everyone_in_it_even_without_a_user_id() -> None:
    settings = make_settings({"TELEGRAM_ALLOWED_CHATS": "-100"})
    assert (
        authorize(
            SessionSource("telegram", chat_id="-100", chat_type="group"), settings, is_paired=nobody_paired
        ).reason
        == "group_chat_allowlist"
    )
    # ... but a DM with the same id is not a group chat
    assert not authorize(tg(chat_id="-100"), settings, is_paired=nobody_paired).allowed


@pytest.mark.parametrize(
    ("policy", "mentions", "allowed"),
    [("none", True, False), ("mentions", False, False), ("mentions", True, True), ("all", False, True)],
)
def test_bot_senders_follow_the_bot_policy_even_when_allowlisted(policy: str, mentions: bool, allowed: bool) -> None:
    settings = make_settings({"TELEGRAM_BOT_POLICY": policy, "TELEGRAM_ALLOWED_USERS": "42"})
    decision = authorize(tg(is_bot=True), settings, is_paired=nobody_paired, facts=AccessFacts(mentions_bot=mentions))
    assert decision.allowed is allowed
    assert decision.reason == ("bot_policy" if allowed else "bot_sender")


def test_trusted_sources_and_role_grants_allow() -> None:
    settings = make_settings(CLOSED)
    assert (
        authorize(tg(user_id=None), settings, is_paired=nobody_paired, facts=AccessFacts(trusted=True)).reason
        == "trusted_source"
    )
    assert (
        authorize(tg(), settings, is_paired=nobody_paired, facts=AccessFacts(role_granted=True)).reason == "role_grant"
    )


def test_an_approved_pairing_allows_in_union_with_the_allowlists() -> None:
    # Given an allowlist that does not name user 42, and 42 approved by pairing
    settings = make_settings({"TELEGRAM_ALLOWED_USERS": "7"})
    paired = {("telegram", "42")}

    def is_paired(platform: str, user_id: str) -> bool:
        return (platform, user_id) in paired

    # Then both the listed user and the paired user are allowed; a third is not
    assert authorize(tg(user_id="7"), settings, is_paired=is_paired).reason == "platform_allowlist"
    assert authorize(tg(user_id="42"), settings, is_paired=is_paired).reason == "paired"
    assert not authorize(tg(user_id="8"), settings, is_paired=is_paired).allowed


def test_the_pairing_store_is_not_read_for_an_allowlisted_user() -> None:
    def must_not_be_called(platform: str, user_id: str) -> bool:
        raise AssertionError("read the pairing store")

    settings = make_settings({"TELEGRAM_ALLOWED_USERS": "42"})
    assert authorize(tg(), settings, is_paired=must_not_be_called).allowed


def test_whatsapp_aliases_match_each_other() -> None:
    settings = make_settings({"GATEWAY_ALLOWED_USERS": "+15551234567"})
    source = SessionSource("whatsapp", chat_id="15551234567@s.whatsapp.net", user_id="15551234567@s.whatsapp.net")
    # whatsapp is not a configured platform yet: the rule is checked on the matcher directly
    assert _listed(source.user_id or "", settings.access.allowed_users, "whatsapp")
    assert not _listed(source.user_id or "", settings.access.allowed_users, "telegram")


@pytest.mark.parametrize(
    ("env", "source_fields", "action"),
    [
        ({}, {}, "pair"),  # no allowlist anywhere: pair
        ({"TELEGRAM_ALLOWED_USERS": "7"}, {}, "ignore"),  # an allowlist: ignore
        ({"GATEWAY_ALLOWED_USERS": "7"}, {}, "ignore"),
        ({"TELEGRAM_ALLOWED_CHATS": "-100"}, {}, "ignore"),
        ({"TELEGRAM_ALLOWED_USERS": "7", "TELEGRAM_UNAUTHORIZED_DM": "pair"}, {}, "pair"),  # explicit first
        ({"TELEGRAM_UNAUTHORIZED_DM": "ignore"}, {}, "ignore"),
        ({}, GROUP, "ignore"),  # groups are always ignored
        ({}, {"is_bot": True}, "ignore"),
    ],
)
def test_unauthorized_dm_precedence(env: dict[str, str], source_fields: dict[str, object], action: str) -> None:
    assert unauthorized_dm_action(tg(**source_fields), make_settings(env)) == action


def test_admins() -> None:
    settings = make_settings({"GATEWAY_ADMINS": "1", "TELEGRAM_ADMINS": "2"})
    assert is_admin(tg(user_id="1"), settings) and is_admin(tg(user_id="2"), settings)
    assert not is_admin(tg(user_id="3"), settings)


def test_a_group_user_allowlist_allows_its_senders_in_that_group_only() -> None:
    settings = make_settings({"TELEGRAM_GROUP_USERS": "-100=42,43;-200=7"})
    in_group = tg(chat_id="-100", chat_type="group")
    assert authorize(in_group, settings, is_paired=nobody_paired).reason == "group_user_allowlist"
    assert not authorize(tg(chat_id="-200", chat_type="group"), settings, is_paired=nobody_paired).allowed
    assert not authorize(tg(), settings, is_paired=nobody_paired).allowed  # not in a DM
    assert unauthorized_dm_action(tg(), settings) == "ignore"  # it counts as an allowlist
