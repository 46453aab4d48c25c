"""Two conversations never share a session key (a shared key is a privacy leak: one chat reads the
other's transcript). Where a platform's ids cannot be confused the key stays as Hermes writes it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import SessionSource

S = SessionSource
FORUM = "-1001234"


def test_a_forum_topic_and_a_user_of_the_general_topic_are_two_sessions() -> None:
    # Given user 77 writing in the General topic (per-user sessions) and topic 77 (shared)
    user_77 = S("telegram", chat_id=FORUM, chat_type="group", user_id="77")
    topic_77 = S("telegram", chat_id=FORUM, chat_type="group", user_id="42", thread_id="77")
    # Then they are two sessions (both were agent:main:telegram:group:-1001234:77)
    assert build_session_key(user_77) == f"agent:main:telegram:group:{FORUM}:77"  # unchanged
    assert build_session_key(topic_77) == f"agent:main:telegram:thread:{FORUM}:77"
    # and each topic member's own session keeps its form
    per_user = build_session_key(topic_77, thread_sessions_per_user=True)
    assert per_user == f"agent:main:telegram:group:{FORUM}:77:42"


def test_a_topic_member_without_a_user_id_is_not_taken_for_a_user() -> None:
    anonymous = S("telegram", chat_id=FORUM, chat_type="group", thread_id="77")
    assert build_session_key(anonymous, thread_sessions_per_user=True) == f"agent:main:telegram:thread:{FORUM}:77"


def test_a_generic_webhook_chat_holding_a_colon_is_not_another_chats_thread() -> None:
    colon = S("webhook", chat_id="x:y")
    threaded = S("webhook", chat_id="x", thread_id="y")
    assert build_session_key(colon) == "agent:main:webhook:dm:x%3Ay"
    assert build_session_key(threaded) == "agent:main:webhook:dm:x:y"
    assert build_session_key(S("webhook", chat_id="x%3Ay")) == "agent:main:webhook:dm:x%253Ay"


@pytest.mark.parametrize(
    "source",
    [
        S("slack", chat_id="C1", chat_type="group", scope_id="T1", user_id="U1", thread_id="1700000000.000100"),
        S("discord", chat_id="t1", chat_type="thread", user_id="u", thread_id="t1"),
        S("matrix", chat_id="!r:example.org", chat_type="group", user_id="@a:example.org", thread_id="$e"),
        S("teams", chat_id="19:abc@thread.tacv2", chat_type="group", user_id="29:1x", thread_id="1700000000000"),
        S("google_chat", chat_id="spaces/A", chat_type="group", user_id="users/1", thread_id="spaces/A/threads/B"),
        S("sms", chat_id="whatsapp:+15550001111", user_id="whatsapp:+15550001111"),
    ],
)
def test_unambiguous_platforms_keep_hermes_keys(source: SessionSource) -> None:
    # A shared thread and every id as the platform wrote it: no escape, no `thread` slot
    key = build_session_key(source)
    chat = source.chat_id or ""
    assert f":{source.chat_type}:" in key and chat in key and "%" not in key


def identity(source: SessionSource, per_user: bool, per_thread: bool) -> tuple[object, ...]:
    """What makes a conversation one: the chat, its thread, and the person when sessions are per user."""
    thread = source.thread_id
    isolate = per_user and (per_thread if thread else True)
    chat_type = "dm" if source.chat_type == "dm" else "group"
    person = source.user_id if isolate and chat_type != "dm" else None
    return (chat_type, source.chat_id, thread, person)


free_text = st.text(alphabet="a:%7", min_size=1, max_size=3)
numbers = st.sampled_from(["7", "77", "-7"])


@st.composite
def conversations(draw: st.DrawFn, platform: str, ids: st.SearchStrategy[str]) -> SessionSource:
    return S(
        platform,
        chat_id=draw(ids),
        chat_type=draw(st.sampled_from(["dm", "group"])),
        user_id=draw(st.none() | ids),
        thread_id=draw(st.none() | ids),
    )


@pytest.mark.parametrize(("platform", "ids"), [("webhook", free_text), ("telegram", numbers)])
@settings(max_examples=300, deadline=None)
@given(data=st.data(), per_user=st.booleans(), per_thread=st.booleans())
def test_two_conversations_never_share_a_key(
    platform: str, ids: st.SearchStrategy[str], data: st.DataObject, per_user: bool, per_thread: bool
) -> None:
    # Given two sources drawn from few characters (separators included), so that they often collide
    first, second = data.draw(conversations(platform, ids)), data.draw(conversations(platform, ids))
    options = {"group_sessions_per_user": per_user, "thread_sessions_per_user": per_thread}
    # Then they share a key only when they are the same conversation
    same_key = build_session_key(first, **options) == build_session_key(second, **options)  # type: ignore[arg-type]
    assert same_key == (identity(first, per_user, per_thread) == identity(second, per_user, per_thread))
