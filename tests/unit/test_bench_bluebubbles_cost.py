"""bench/bluebubbles_cost.py: its messages are the BlueBubbles server's own bodies, read by the
adapter as messages in the right chats; the echoes it posts for each reply are read as the bot's
own messages (acknowledged, never answered); run_all merges its keys."""

from __future__ import annotations

import time

from bench.bluebubbles_cost import message, own_messages, plan, sessions
from bench.run_all import bluebubbles_cost_keys
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.platforms.bluebubbles import parse_event
from hermes_gateway.services.ingress import Ignored


def test_the_load_is_dms_and_groups_from_the_servers_own_bodies() -> None:
    found = sessions(4)
    keys = []
    for n, session in enumerate(found):
        parsed = parse_event(message(n, session, f"hello {n}"), received_at=time.time())
        assert isinstance(parsed, InboundMessage)
        assert parsed.source.chat_id == session.chat and parsed.source.user_id == session.address
        assert parsed.text == f"hello {n}"
        keys.append(build_session_key(parsed.source))
    assert [k.split(":")[3] for k in keys] == ["dm", "group", "dm", "group"]
    assert len(set(keys)) == 4
    steps = plan(found, 40, seed=3, first=0)
    assert sum(len(events) for events in steps.values()) == 40
    texts = [e["data"]["text"] for events in steps.values() for e in events]
    assert texts.count("/help") == 2  # 5% gateway commands


def test_each_reply_comes_back_twice_as_the_bots_own_message() -> None:
    echoes = own_messages("iMessage;+;chat900001", "B0000000-0000-4000-8000-000000000001", "Echo: hi", "temp-1")
    assert len(echoes) == 2 and {e["data"]["guid"] for e in echoes} == {"B0000000-0000-4000-8000-000000000001"}
    assert echoes[0]["data"]["tempGuid"] == "temp-1" and "tempGuid" not in echoes[1]["data"]
    for event in echoes:
        assert parse_event(event, received_at=time.time()) == Ignored("own_message")


def test_run_all_merges_the_message_cost_with_and_without_echoes() -> None:
    report = {"usd_per_million_messages": 12.6, "usd_per_million_messages_without_echoes": 9.9}
    assert bluebubbles_cost_keys(report) == {
        "bluebubbles_usd_per_million_messages": 12.6,
        "bluebubbles_usd_per_million_messages_without_echoes": 9.9,
    }
