"""What a turn may reach (BEHAVIOUR §11): the pure rules (domain/reach.py) and how a turn's reach is
decided from the turn alone (services/turn/reach.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.reach import (
    MediaReach,
    SearchScope,
    SendReach,
    search_scope,
    session_reach,
    urls_in,
)
from hermes_gateway.domain.source import SessionSource, compact_source
from hermes_gateway.domain.targets import ReplyTarget, ResolvedTarget
from hermes_gateway.domain.turn_state import CronRun, ToolLoop, Turn, TurnKind, TurnState
from hermes_gateway.providers.base import ChatMessage
from hermes_gateway.services.turn.reach import seen_urls, turn_reach
from tests.fakes.engine import Engine

NS = "agent:main"
AL = SessionSource("telegram", chat_id="42", chat_type="dm", user_id="42")
GROUP = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="42")
SLACK = SessionSource("slack", chat_id="C1", chat_type="group", user_id="U1", scope_id="T1")


def test_a_dm_session_is_its_users_and_a_group_session_its_chats() -> None:
    assert session_reach(NS, AL) == "agent:main|dm|telegram|42"
    assert session_reach(NS, replace(AL, user_id_alt="alt")) == "agent:main|dm|telegram|alt"
    assert session_reach(NS, GROUP) == "agent:main|chat|telegram|-100"
    assert session_reach(NS, replace(GROUP, user_id="43")) == session_reach(NS, GROUP)  # the group's, whoever
    assert session_reach(NS, SLACK) == "agent:main|chat|slack|T1/C1"
    assert session_reach("agent:coder", AL) != session_reach(NS, AL)
    whatsapp = SessionSource("whatsapp", chat_id="x", chat_type="dm", user_id="+15551234567@s.whatsapp.net")
    assert session_reach(NS, whatsapp) == session_reach(NS, replace(whatsapp, user_id="15551234567"))


@pytest.mark.parametrize(
    ("source", "scope", "admin", "expected"),
    [
        (AL, "user", False, SearchScope(NS, reach="agent:main|dm|telegram|42")),
        (GROUP, "user", False, SearchScope(NS, reach="agent:main|chat|telegram|-100")),
        (AL, "chat", False, SearchScope(NS, session_key="agent:main:telegram:dm:42")),
        (AL, "profile", False, SearchScope(NS)),
        (AL, "user", True, SearchScope(NS)),  # admins search the profile
        (None, "user", False, SearchScope(NS, session_key="agent:main:telegram:dm:42")),  # nobody: own chat
    ],
)
def test_the_search_scope_table(source: SessionSource | None, scope: str, admin: bool, expected: SearchScope) -> None:
    assert search_scope(NS, source, scope=scope, admin=admin, session_key="agent:main:telegram:dm:42") == expected


def test_a_search_with_no_one_and_no_session_reads_nothing_real() -> None:
    found = search_scope(NS, None, scope="user")
    assert found.session_key == "agent:main:-" and found.label == "chat"
    with pytest.raises(ValueError, match="unknown search scope"):
        search_scope(NS, AL, scope="everyone")


def test_media_urls_are_fetched_only_as_given_or_on_a_listed_host() -> None:
    given = "https://files.example/a.png?sig=1"
    reach = MediaReach(frozenset({given}), ("cdn.example", "*.images.example"))
    assert reach.allows(given)
    assert not reach.allows(given + "&d=secret")  # the same file with more in its query string
    assert not reach.allows("https://files.example/a.png")
    assert reach.allows("https://cdn.example/anything?d=1")  # the operator trusts that host
    assert not reach.allows("https://evilcdn.example/x") and not reach.allows("https://cdn.example.evil.io/x")
    assert reach.allows("https://a.b.images.example/x") and not reach.allows("https://images.example.com/x")
    assert reach.allows("default/s1/3-0")  # stored keys are the delivery's to check
    assert not reach.allows("https://[::1")  # an unreadable URL is never fetched


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_urls_in_finds_only_http_urls_and_each_is_in_the_text(text: str) -> None:
    for url in urls_in(text):
        assert url.lower().startswith(("http://", "https://")) and url in text


def test_urls_in_takes_a_sentences_punctuation_off() -> None:
    assert urls_in("see (https://x.example/a.png), then https://y.example/b.") >= {
        "https://x.example/a.png",
        "https://y.example/b",
    }


@pytest.mark.parametrize(
    ("spec", "target", "listed", "needs"),
    [
        ("origin", ResolvedTarget("telegram", "42"), (), False),
        ("telegram:42", ResolvedTarget("telegram", "42"), (), False),
        ("telegram", ResolvedTarget("telegram", "-100home"), (), False),  # a home channel
        ("local", ResolvedTarget("local", "local"), (), False),
        ("telegram:43", ResolvedTarget("telegram", "43"), (), True),
        ("slack:C9", ResolvedTarget("slack", "C9"), ("slack:C9",), False),
        ("SLACK:C9", ResolvedTarget("slack", "C9"), ("slack:C9",), False),
        ("slack:C9:1.2", ResolvedTarget("slack", "C9", "1.2"), ("slack:C9",), False),
        ("slack:C9:1.3", ResolvedTarget("slack", "C9", "1.3"), ("slack:C9:1.2",), True),
        ("#ops", ResolvedTarget("slack", "C9", label="#ops"), ("#ops",), False),
        ("discord:C9", ResolvedTarget("discord", "C9"), ("slack:C9",), True),
    ],
)
def test_sending_outside_the_turns_chat_needs_an_approval(
    spec: str, target: ResolvedTarget, listed: tuple[str, ...], needs: bool
) -> None:
    assert SendReach(ResolvedTarget("telegram", "42"), listed).needs_approval(spec, target) is needs


# --- a turn's reach, from the turn ---------------------------------------------------------------


def _chat_state(**changes: object) -> TurnState:
    turn = Turn(
        "t1", TurnKind.CHAT, 0.0, session_id="s1", session_key="agent:main:telegram:dm:42", source=AL,
        reply_to=ReplyTarget("telegram", "42"), user_text="look at https://user.example/a.png please",
    )  # fmt: skip
    return TurnState(replace(turn, **changes))  # type: ignore[arg-type]


def test_a_chat_turns_reach_is_its_sender_its_chat_and_its_session() -> None:
    engine = Engine({"GATEWAY_SEND_MESSAGE_TARGETS": "slack:C9", "GATEWAY_MEDIA_OUTBOUND_HOSTS": "cdn.example"})
    state = _chat_state()
    loop = ToolLoop(messages=(ChatMessage("tool", '{"url":"https://tool.example/b.png"}', tool_call_id="c"),))
    reach = turn_reach(replace(state, loop=loop), engine.deps)
    assert reach.search == SearchScope(NS, reach="agent:main|dm|telegram|42") and not reach.admin
    assert reach.files_session == "s1"
    assert reach.send.own == ResolvedTarget("telegram", "42", None, label="origin")
    assert reach.send.listed == ("slack:C9",) and reach.media.hosts == ("cdn.example",)
    assert {"https://user.example/a.png", "https://tool.example/b.png"} <= reach.media.seen


def test_an_admins_turn_searches_the_profile() -> None:
    engine = Engine({"GATEWAY_ADMINS": "42"})
    assert turn_reach(_chat_state(), engine.deps).search == SearchScope(NS)


def test_a_cron_run_reaches_what_its_creator_may_and_attaches_no_stored_file() -> None:
    engine = Engine()
    origin = {"platform": "telegram", "chat_id": "42", "thread_id": None}
    run = CronRun("j1", "r1", "check https://prompt.example/c.png", origin=origin, creator=AL)
    state = TurnState(Turn("cron-j1-r1", TurnKind.CRON, 0.0, cron=run))
    reach = turn_reach(state, engine.deps)
    assert reach.search == SearchScope(NS, reach="agent:main|dm|telegram|42")
    assert reach.files_session is None and reach.send.own == ResolvedTarget("telegram", "42", None, label="origin")
    assert "https://prompt.example/c.png" in seen_urls(state)
    # a job with no creator (the operator's, or older) searches no one's sessions
    nobody = TurnState(Turn("cron-j2-r1", TurnKind.CRON, 0.0, cron=replace(run, creator=None)))
    assert turn_reach(nobody, engine.deps).search.session_key == "agent:main:-"


def test_a_cron_runs_creator_travels_in_the_turn_state() -> None:
    run = CronRun("j1", "r1", "p", creator=AL)
    assert CronRun.from_json(run.to_json()).creator == SessionSource.from_dict(compact_source(AL))
    assert CronRun.from_json({**run.to_json(), "creator": {"chat_type": "nonsense"}}).creator is None
