"""BEHAVIOUR §2: every worked example, every rule as a property."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.session_key import (
    build_session_key,
    canonical_whatsapp_id,
    is_shared_session,
    key_namespace,
    validate_session_id,
    validate_session_key,
)
from hermes_gateway.domain.source import SessionSource
from hermes_gateway.errors import InvalidIdentifier

S = SessionSource
SUPERGROUP = "-1001234567667"

EXAMPLES = [
    (S("telegram", chat_id="99"), {}, "agent:main:telegram:dm:99"),
    (S("telegram", user_id="jordan"), {}, "agent:main:telegram:dm:jordan"),
    (S("telegram", user_id="primary", user_id_alt="alt"), {}, "agent:main:telegram:dm:alt"),
    (S("telegram", chat_id="99", thread_id="topic-1", user_id="42"), {}, "agent:main:telegram:dm:99:topic-1"),
    (
        S("discord", chat_id="guild-123", chat_type="group", user_id="alice"),
        {},
        "agent:main:discord:group:guild-123:alice",
    ),
    (
        S("discord", chat_id="guild-123", chat_type="group", user_id="alice"),
        {"group_sessions_per_user": False},
        "agent:main:discord:group:guild-123",
    ),
    (
        S("telegram", chat_id=SUPERGROUP, chat_type="group", thread_id="17585", user_id="42"),
        {},
        # `thread`, not `group`: user 17585's own session in the forum's General topic is `group:…:17585`
        f"agent:main:telegram:thread:{SUPERGROUP}:17585",
    ),
    (
        S("telegram", chat_id=SUPERGROUP, chat_type="group", thread_id="17585", user_id="42"),
        {"thread_sessions_per_user": True},
        f"agent:main:telegram:group:{SUPERGROUP}:17585:42",
    ),
    (
        S("discord", chat_id="channel-1", chat_type="group", user_id="u", prospective_thread_id="msg-100"),
        {},
        "agent:main:discord:thread:channel-1:msg-100",
    ),
    (
        S("slack", chat_id="C123", chat_type="group", scope_id="T1", user_id="U1"),
        {},
        "agent:main:slack:group:T1:C123:U1",
    ),
    (S("whatsapp", chat_id="15551234567@s.whatsapp.net"), {}, "agent:main:whatsapp:dm:15551234567"),
    (S("telegram", chat_id="99"), {"profile": "coder"}, "agent:coder:telegram:dm:99"),
]


@pytest.mark.parametrize(("source", "options", "expected"), EXAMPLES)
def test_worked_examples(source: SessionSource, options: dict[str, object], expected: str) -> None:
    assert build_session_key(source, **options) == expected  # type: ignore[arg-type]


def test_namespaces() -> None:
    assert key_namespace(None) == key_namespace("") == key_namespace("default") == "agent:main"
    assert key_namespace("main") == "agent:main~"  # never collides with the default namespace
    assert key_namespace("coder") == "agent:coder"


def test_dm_without_any_id_is_one_sink_per_platform() -> None:
    assert build_session_key(S("telegram")) == "agent:main:telegram:dm"
    assert build_session_key(S("telegram", thread_id="t")) == "agent:main:telegram:dm:t"


def test_slack_scope_follows_chat_type_in_dms_and_other_platforms_never_add_scope() -> None:
    assert build_session_key(S("slack", chat_id="D1", scope_id="T9")) == "agent:main:slack:dm:T9:D1"
    assert build_session_key(S("discord", chat_id="D1", scope_id="G9")) == "agent:main:discord:dm:D1"


def test_channel_message_and_the_thread_it_opens_share_a_key() -> None:
    opener = S("discord", chat_id="c1", chat_type="group", user_id="u1", prospective_thread_id="m1")
    follow_up = S("discord", chat_id="c1", chat_type="thread", user_id="u2", thread_id="m1")
    assert build_session_key(opener) == build_session_key(follow_up)


def test_thread_isolation_needs_both_settings() -> None:
    src = S("telegram", chat_id="g", chat_type="group", thread_id="t", user_id="u")
    assert build_session_key(src, thread_sessions_per_user=True, group_sessions_per_user=False) == (
        "agent:main:telegram:thread:g:t"
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("15551234567@s.whatsapp.net", "15551234567"),
        ("+15551234567", "15551234567"),
        ("15551234567:12@s.whatsapp.net", "15551234567"),
        ("120363000000000000@g.us", "120363000000000000@g.us"),
        ("9876@lid", "9876"),
    ],
)
def test_whatsapp_canonical_ids(raw: str, expected: str) -> None:
    assert canonical_whatsapp_id(raw) == expected


def test_whatsapp_lid_maps_to_phone_when_known() -> None:
    assert canonical_whatsapp_id("9876@lid", {"9876": "+15550001111"}) == "15550001111"
    group = S("whatsapp", chat_id="1203@g.us", chat_type="group", user_id="9876@lid")
    same_person = S("whatsapp", chat_id="1203@g.us", chat_type="group", user_id="15550001111@s.whatsapp.net")
    mapping = {"9876": "15550001111"}
    assert build_session_key(group, lid_to_phone=mapping) == build_session_key(same_person, lid_to_phone=mapping)


def test_unsafe_keys_and_ids_are_refused() -> None:
    for bad in ("../etc", "/abs", "a..b"):
        with pytest.raises(InvalidIdentifier):
            validate_session_key(bad)
    assert validate_session_key("agent:main:googlechat:group:spaces/A/threads/B")
    for bad in ("a/b", "a\\b", "C:evil", "..", ""):
        with pytest.raises(InvalidIdentifier):
            validate_session_id(bad)
    with pytest.raises(InvalidIdentifier):
        build_session_key(S("telegram", chat_id="../../x"))


def test_shared_sessions() -> None:
    assert not is_shared_session(S("telegram", chat_id="1"))
    group = S("telegram", chat_id="g", chat_type="group", user_id="u")
    assert not is_shared_session(group)
    assert is_shared_session(group, group_sessions_per_user=False)
    thread = S("telegram", chat_id="g", chat_type="group", user_id="u", thread_id="t")
    assert is_shared_session(thread)
    assert not is_shared_session(thread, thread_sessions_per_user=True)


# -- properties -------------------------------------------------------------------------------

ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)
opt_ids = st.none() | ids
platforms = st.sampled_from(["telegram", "discord", "slack", "signal", "matrix"])
chat_types = st.sampled_from(["dm", "group", "channel", "thread"])


@st.composite
def sources(draw: st.DrawFn) -> SessionSource:
    return SessionSource(
        platform=draw(platforms),
        chat_type=draw(chat_types),
        chat_id=draw(opt_ids),
        user_id=draw(opt_ids),
        user_id_alt=draw(opt_ids),
        thread_id=draw(opt_ids),
        scope_id=draw(opt_ids),
        prospective_thread_id=draw(opt_ids),
        user_name=draw(opt_ids),
    )


flags = st.booleans()


@given(sources(), flags, flags)
def test_key_is_deterministic_and_namespaced(src: SessionSource, per_user: bool, per_thread_user: bool) -> None:
    key = build_session_key(src, group_sessions_per_user=per_user, thread_sessions_per_user=per_thread_user)
    assert key == build_session_key(src, group_sessions_per_user=per_user, thread_sessions_per_user=per_thread_user)
    assert key.startswith(f"agent:main:{src.platform}:")


@given(sources(), flags, flags)
def test_display_fields_never_change_the_key(src: SessionSource, per_user: bool, per_thread_user: bool) -> None:
    renamed = SessionSource.from_dict(
        {**src.to_dict(), "user_name": "someone else", "chat_name": "x", "message_id": "9"}
    )
    options = {"group_sessions_per_user": per_user, "thread_sessions_per_user": per_thread_user}
    assert build_session_key(src, **options) == build_session_key(renamed, **options)


@given(sources())
def test_dm_with_chat_id_ignores_the_sender(src: SessionSource) -> None:
    dm = SessionSource.from_dict({**src.to_dict(), "chat_type": "dm", "chat_id": "c"})
    other_sender = SessionSource.from_dict({**dm.to_dict(), "user_id": "someone", "user_id_alt": None})
    assert build_session_key(dm) == build_session_key(other_sender)


@given(sources())
def test_participant_is_appended_only_when_isolation_applies(src: SessionSource) -> None:
    if src.chat_type == "dm":
        return
    participant = src.user_id_alt or src.user_id
    thread = src.thread_id or src.prospective_thread_id
    shared = build_session_key(src, group_sessions_per_user=False)
    isolated = build_session_key(src, group_sessions_per_user=True, thread_sessions_per_user=True)
    default = build_session_key(src)
    grouped = shared
    if thread and src.platform == "telegram":  # a shared thread says so (test_session_key_collisions.py)
        slot = "thread" if src.prospective_thread_id and not src.thread_id else src.chat_type
        grouped = shared.replace(":telegram:thread:", f":telegram:{slot}:", 1)
    if participant:
        assert isolated == f"{grouped}:{participant}"
        assert default == (shared if thread else isolated)
    else:
        assert isolated == shared == default


@given(sources())
def test_profiles_never_share_keys(src: SessionSource) -> None:
    keys = {build_session_key(src, profile=p) for p in (None, "main", "coder")}
    assert len(keys) == 3


@given(sources())
def test_source_round_trips(src: SessionSource) -> None:
    assert SessionSource.from_dict(src.to_dict()) == src
