"""The directory on moto: home channels, chats by name across platforms, gone marks that expire."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_directory import GONE_SECONDS, DynamoDirectory
from hermes_gateway.domain.targets import Channel

pytestmark = pytest.mark.integration
NOW = 1_764_400_000.0


def test_home_channels(aws: Any) -> None:
    directory = DynamoDirectory(aws.bindings)
    assert directory.home("telegram") is None
    directory.set_home("telegram", "-100", "7", "42", NOW)
    directory.set_home("telegram", "-200", None, "42", NOW + 1)
    assert directory.home("telegram") == ("-200", None)


def test_channels_by_name_on_every_platform_or_one(aws: Any) -> None:
    directory = DynamoDirectory(aws.bindings)
    directory.remember(Channel("slack", "C1", None, "General", "group"), NOW)
    directory.remember(Channel("discord", "D9", "T1", "general", "thread"), NOW)
    directory.remember(Channel("slack", "C1", None, "General", "group"), NOW + 5)  # seen again: one row
    assert {(c.platform, c.chat_id, c.thread_id) for c in directory.channels_named("#GENERAL")} == {
        ("slack", "C1", None),
        ("discord", "D9", "T1"),
    }
    assert [c.chat_id for c in directory.channels_named("general", "discord")] == ["D9"]
    assert directory.channels_named("random") == []


def test_gone_marks_are_read_until_they_expire_or_are_cleared(aws: Any) -> None:
    directory = DynamoDirectory(aws.bindings)
    directory.mark_gone("telegram", "99", None, "bot was blocked", NOW)
    assert directory.gone_reason("telegram", "99", None, NOW + 10) == "bot was blocked"
    assert directory.gone_reason("telegram", "99", "3", NOW + 10) is None
    assert directory.gone_reason("telegram", "99", None, NOW + GONE_SECONDS + 1) is None
    directory.clear_gone("telegram", "99", None)
    assert directory.gone_reason("telegram", "99", None, NOW + 10) is None


def test_a_separator_inside_an_id_never_makes_two_places_one(aws: Any) -> None:
    # Given chat "a" in thread "b#" and chat "a#b" without a thread (one key before: "a#b#")
    directory = DynamoDirectory(aws.bindings)
    directory.remember(Channel("webhook", "a", "b#", "Ops", "group"), NOW)
    directory.remember(Channel("webhook", "a#b", None, "Ops", "group"), NOW)
    directory.mark_gone("webhook", "a", "b#", "removed", NOW)
    # Then both chats are listed, and only the one marked is gone
    assert {(c.chat_id, c.thread_id) for c in directory.channels_named("ops")} == {("a", "b#"), ("a#b", None)}
    assert directory.gone_reason("webhook", "a#b", None, NOW + 1) is None
    assert directory.gone_reason("webhook", "a", "b#", NOW + 1) == "removed"
    # and an id without a separator keeps the key it always had
    directory.mark_gone("telegram", "99", "7", "blocked", NOW)
    assert directory.model.get("gone#telegram", "99#7").reason == "blocked"
