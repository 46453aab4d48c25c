"""A person's data on request (BEHAVIOUR §11), as pure rules: who a person is to each store, and
the `/forget` confirmation window; how long rows, files and routes are kept (domain/retention.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.privacy import (
    CONFIRM_SECONDS,
    ErasureRequest,
    Person,
    ProfileScope,
    forget_explanation,
    record_keys,
)
from hermes_gateway.domain.profiles import scoped_platform
from hermes_gateway.domain.reach import session_reach
from hermes_gateway.domain.retention import SessionActivity, capped_days, idle_past, is_expired, row_expiry
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource, sender_of
from hermes_gateway.errors import BadRequest
from hermes_gateway.settings import rules_from_settings
from hermes_gateway.tools.base import ToolContext, user_hash
from tests.fakes.services import make_settings

ids = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).filter(str.strip)
platforms = st.sampled_from(["telegram", "slack", "discord", "whatsapp", "teams", "feishu", "matrix"])
DAY = 86_400


@given(platform=platforms, user_id=ids, alt=st.none() | ids, chat=ids, profile=st.sampled_from(["default", "coder"]))
def test_a_chat_sender_is_the_same_person_to_every_store(
    platform: str, user_id: str, alt: str | None, chat: str, profile: str
) -> None:
    # Given a message from someone in a DM (with or without the platform's other id for them)
    source = SessionSource(platform, chat_id=chat, chat_type="dm", user_id=user_id, user_id_alt=alt)
    person = Person.of(source)
    scope = ProfileScope(profile, None if profile == "default" else profile)
    # Then forget looks for them where each writer put them: the rows' sender mark, the DM
    # session's reach, the memory tool's scope
    assert person.handle == sender_of(source)
    assert scope.dm_reach(person) == session_reach(scope.namespace, source)
    handle = user_hash(platform, alt or user_id)
    tool = ToolContext(kind="chat", turn_id="t", profile=profile, now=0.0, user_hash=handle)
    assert scope.memory_scope(person) == tool.memory_scope
    assert set(person.ids) == {user_id, alt or user_id}


def test_an_operator_names_a_person_as_platform_and_id() -> None:
    assert Person.parse(" Telegram:123456789 ") == Person("telegram", "123456789")
    assert Person.parse("matrix:@al:example.org").user_id == "@al:example.org"  # an id keeps its colons
    assert Person.parse("slack:U1ABC", ("slack",)).label == "slack:U1ABC"  # and its case
    for bad in ("telegram", "telegram:", ":42", "  "):
        with pytest.raises(BadRequest, match="<platform>:<user id>"):
            Person.parse(bad)
    with pytest.raises(BadRequest, match="unknown platform 'myspace'"):
        Person.parse("myspace:1", ("telegram", "slack"))


def test_each_profile_files_a_person_under_its_own_names() -> None:
    al = Person("telegram", "42")
    own, coder = ProfileScope("default"), ProfileScope("coder", "coder")
    assert (own.namespace, coder.namespace) == ("agent:main", "agent:coder")
    assert own.pairing_platform(al) == scoped_platform("telegram", None) == "telegram"
    assert coder.pairing_platform(al) == scoped_platform("telegram", "coder") == "telegram@coder"
    assert own.session_prefix("s1") == "default/s1/" and coder.session_prefix("s1") == "coder/s1/"
    # a deployment whose own profile has a name files its media under `default` still (the
    # source it stamps carries no profile), its memory and jobs under its name
    named_own = ProfileScope("prod")
    assert named_own.media_prefix == "default" and named_own.memory_scope(al) == f"prod#{al.handle}"


def test_an_older_dm_is_found_by_its_key_only_where_the_dm_chat_is_the_user() -> None:
    al = Person("telegram", "42")
    dm = SessionSource("telegram", chat_id="42", chat_type="dm", user_id="42")
    assert ProfileScope("default").legacy_dm_key(al) == build_session_key(dm) == "agent:main:telegram:dm:42"
    assert ProfileScope("coder", "coder").legacy_dm_key(al) == "agent:coder:telegram:dm:42"
    assert ProfileScope("default").legacy_dm_key(Person("whatsapp", "+1555@s.whatsapp.net")) == (
        "agent:main:whatsapp:dm:1555"
    )
    # a Slack DM's chat is a conversation (D...), never the user (U...): no key to guess
    assert ProfileScope("default").legacy_dm_key(Person("slack", "U1")) is None


def test_a_forget_must_be_confirmed_within_its_window() -> None:
    al = Person("telegram", "42")
    asked = ErasureRequest.ask(al, 1000.0, {"platform": "telegram", "chat_id": "42"}, "42")
    assert asked.state == "asked" and asked.confirm_by == 1000.0 + CONFIRM_SECONDS
    assert asked.confirmable(1000.0 + CONFIRM_SECONDS - 1)
    assert not asked.confirmable(1000.0 + CONFIRM_SECONDS)
    confirmed = asked.confirmed(1010.0)
    assert confirmed.state == "confirmed" and not confirmed.confirmable(1011.0)


def test_the_explanation_says_what_goes_and_what_cannot() -> None:
    text = forget_explanation(Person("telegram", "42"), external_memory=False)
    assert "/forget confirm within 5 minutes" in text and "group chats" in text and "Honcho" not in text
    assert "Honcho" in forget_explanation(Person("telegram", "42"), external_memory=True)


def test_a_stored_file_goes_with_its_record() -> None:
    assert record_keys(["p/s/1-0", "p/s/2-0"]) == ["p/s/1-0", "p/s/1-0.json", "p/s/2-0", "p/s/2-0.json"]


# -- retention --------------------------------------------------------------------------------


def test_a_row_expires_retention_days_after_it_was_written() -> None:
    assert row_expiry(1000.5, 0) is None  # kept
    assert row_expiry(1000.5, 30 * DAY) == 1000 + 30 * DAY
    assert not is_expired(None, 10**10) and not is_expired(2000, 1999) and is_expired(2000, 2000)


def test_routes_and_files_are_kept_no_longer_than_the_retention() -> None:
    assert capped_days(90, 0) == 90 and capped_days(0, 0) == 0  # no retention: as set
    assert capped_days(90, 30) == 30 and capped_days(7, 30) == 7 and capped_days(0, 30) == 30
    rules = rules_from_settings(make_settings({"GATEWAY_SESSIONS_RETENTION_DAYS": "30"}))
    assert (rules.retention_seconds, rules.route_ttl_seconds) == (30 * DAY, 30 * DAY)
    default = rules_from_settings(make_settings())
    assert (default.retention_seconds, default.route_ttl_seconds) == (0, 90 * DAY)


def test_a_session_is_idle_past_the_retention_by_its_latest_use() -> None:
    now, days = 100 * DAY, 30
    old = SessionActivity(started_at=10 * DAY)
    assert idle_past(old, now, days) and not idle_past(old, now, 0)
    assert not idle_past(SessionActivity(10 * DAY, newest_row_at=80 * DAY), now, days)  # a recent row
    assert not idle_past(SessionActivity(10 * DAY, route_activity_at=71 * DAY), now, days)  # a recent command
    assert idle_past(SessionActivity(10 * DAY, ended_at=70 * DAY, newest_row_at=69 * DAY), now, days)
