"""Delivery targets (domain/targets.py): every form of BEHAVIOUR §6, and clear rejections."""

from __future__ import annotations

import pytest

from hermes_gateway.domain.targets import Channel, ResolvedTarget, UnresolvableTarget, resolve_target
from tests.fakes.services import FakeDirectory

ORIGIN = ResolvedTarget("telegram", "-1001", "17")


def resolve(spec: str, directory: FakeDirectory | None = None, homes: dict[str, str] | None = None) -> ResolvedTarget:
    return resolve_target(spec, origin=ORIGIN, home_channels=homes or {}, directory=directory or FakeDirectory())


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("origin", ("telegram", "-1001", "17")),
        ("local", ("local", "local", None)),
        ("telegram:-1002", ("telegram", "-1002", None)),
        ("Telegram:-1002:5", ("telegram", "-1002", "5")),
        ("slack:C0ABCdef:1700000000.000100", ("slack", "C0ABCdef", "1700000000.000100")),
        ("telegram:@news_channel", ("telegram", "@news_channel", None)),
        ("matrix:!room:example.org", ("matrix", "!room:example.org", None)),
        ("matrix:!room:example.org:$thread", ("matrix", "!room:example.org", "$thread")),
        ("google_chat:spaces/AAA", ("google_chat", "spaces/AAA", None)),
    ],
)
def test_explicit_forms(spec: str, expected: tuple[str, str, str | None]) -> None:
    got = resolve(spec)
    assert (got.platform, got.chat_id, got.thread_id) == expected


def test_a_bare_platform_is_its_home_channel_from_sethome_before_config() -> None:
    directory = FakeDirectory()
    assert resolve("telegram", homes={"telegram": "-100:3"}).to_dict() == {
        "platform": "telegram",
        "chat_id": "-100",
        "thread_id": "3",
    }
    directory.set_home("telegram", "-200", None, "42", 0.0)
    assert resolve("telegram", directory, homes={"telegram": "-100:3"}).chat_id == "-200"


def test_channel_names_resolve_through_the_directory() -> None:
    directory = FakeDirectory()
    directory.remember(Channel("slack", "C1", None, "Ops Team", "group"), 0.0)
    directory.remember(Channel("discord", "D1", None, "general", "group"), 0.0)
    directory.remember(Channel("telegram", "-5", None, "general", "group"), 0.0)
    assert resolve("#ops  team", directory).chat_id == "C1"
    assert resolve("discord:#general", directory).chat_id == "D1"
    with pytest.raises(UnresolvableTarget, match="several chats"):
        resolve("#general", directory)


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("", "empty"),
        ("fax:123", "unknown platform"),
        ("webchat:abc", "unknown platform"),
        ("telegram", "no home channel"),
        ("#nowhere", "no chat named"),
        ("slack:@someone", "Telegram public chats"),
        ("telegram:has space", "without white space"),
    ],
)
def test_unresolvable_targets_say_why(spec: str, reason: str) -> None:
    with pytest.raises(UnresolvableTarget, match=reason):
        resolve(spec)


def test_origin_needs_an_origin() -> None:
    with pytest.raises(UnresolvableTarget, match="no chat here"):
        resolve_target("origin", origin=None, home_channels={}, directory=FakeDirectory())
