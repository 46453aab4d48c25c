"""Pure session rules: cost estimates, model overrides, titles, undo points and hidden ranges."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_gateway.domain.cost import (
    PRICE_FILE,
    estimate_cost,
    load_prices,
    normalize_model,
    price_for,
    session_cost_status,
)
from hermes_gateway.domain.sessions import (
    InvalidSessionRequest,
    ModelOverride,
    TokenUsage,
    TranscriptRow,
    hide_after,
    is_hidden,
    normalize_title,
    profile_of_key,
    sanitize_model_override,
    undo_point,
)


def test_the_price_table_names_its_date_and_sources() -> None:
    data = json.loads(PRICE_FILE.read_text())
    assert data["prices_as_of"] and data["sources"] and all(s.startswith("https://") for s in data["sources"])
    assert all(set(p) == {"input", "output", "cache_read", "cache_write"} for p in data["models"].values())


@pytest.mark.parametrize(
    ("model", "listed"),
    [
        ("gpt-4o", "gpt-4o"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),  # the longest listed prefix wins
        ("openai/gpt-4.1-mini", "gpt-4.1-mini"),
        ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
        ("anthropic.claude-3-haiku-20240307-v1:0", "claude-3-haiku"),
    ],
)
def test_models_match_by_name_without_provider_prefixes(model: str, listed: str) -> None:
    table = load_prices()
    assert price_for(model, table) == table.models[listed]


def test_cost_status_estimated_unknown_included() -> None:
    usage = TokenUsage(1_000_000, 1_000_000, 1_000_000, 1_000_000)
    claude = estimate_cost(usage, "claude-sonnet-4-20250514", "bedrock")
    assert claude.status == "estimated" and claude.usd == pytest.approx(3 + 15 + 0.30 + 3.75)
    assert estimate_cost(usage, "llama-99b", "openai").status == "unknown"
    assert estimate_cost(usage, "llama-99b", "openai").usd == 0
    assert estimate_cost(usage, "echo", "echo").status == "included"
    assert estimate_cost(usage, None, "openai").status == "unknown"
    assert normalize_model(" US.Anthropic.Claude-3-7-Sonnet ") == "claude-3-7-sonnet"


def test_a_sessions_cost_status_follows_its_turns() -> None:
    assert session_cost_status(0, 0, 0) == "unknown"
    assert session_cost_status(0, 0, 3) == "included"
    assert session_cost_status(2, 0, 3) == "estimated"
    assert session_cost_status(2, 1, 3) == "unknown"


@pytest.mark.parametrize(
    "raw",
    [
        {"model": "gpt-4o", "api_key": "sk-abc"},  # an unknown field
        {"model": "sk-proj-" + "abcdefghijklmnop"},
        {"model": "gpt-4o", "provider": "openai", "base_url": "https://user:secret@api.example.com/v1"},
        {"model": "gpt-4o", "base_url": "https://api.example.com/v1?key=abc"},
        {"model": "gpt-4o", "base_url": "ftp://example.com"},
        {"model": "gpt-4o", "provider": "Bearer abcdef"},
        {"model": "AKIA" + "ABCDEFGHIJKLMNOP"},
        {"model": ""},
        {"model": 5},
        {"model": "x" * 40 + "y" * 10},  # a long opaque token
    ],
)
def test_model_overrides_refuse_anything_like_a_key(raw: dict[str, object]) -> None:
    with pytest.raises(InvalidSessionRequest):
        sanitize_model_override(raw)  # type: ignore[arg-type]


def test_a_clean_model_override_keeps_three_fields() -> None:
    override = sanitize_model_override({"model": " gpt-4o ", "provider": "openai", "base_url": "https://h.test/v1/"})
    assert override == ModelOverride("gpt-4o", "openai", "https://h.test/v1")
    assert override.to_dict() == {"model": "gpt-4o", "provider": "openai", "base_url": "https://h.test/v1"}
    assert sanitize_model_override({"model": "us.anthropic.claude-3-5-sonnet-20241022-v2:0"}).provider is None


def test_titles_are_normalized_and_compared_without_case() -> None:
    assert normalize_title("  Trip\t plans ") == ("Trip plans", "trip plans")
    for bad in ("", "   ", "x" * 101, "bell\x07"):
        with pytest.raises(InvalidSessionRequest):
            normalize_title(bad)


def test_profiles_are_key_namespaces() -> None:
    assert profile_of_key("agent:main:telegram:dm:99") == "agent:main"
    assert profile_of_key("agent:main~:telegram:dm:99") == "agent:main~"
    assert profile_of_key("agent:coder:slack:group:T1:C1") == "agent:coder"


def rows(*roles: str) -> list[TranscriptRow]:
    return [TranscriptRow(i, role, f"{role}{i}", float(i)) for i, role in enumerate(roles, start=1)]


def test_undo_points() -> None:
    chat = rows("user", "assistant", "tool", "assistant", "user", "assistant")
    assert undo_point(chat, 1) == (4, chat[4])
    assert undo_point(chat, 2) == (0, chat[0])
    assert undo_point(chat, 9) == (0, chat[0])  # more than there are: all of them
    assert undo_point(rows("assistant"), 1) == (1, None)
    assert undo_point([], 1) == (0, None)
    with pytest.raises(InvalidSessionRequest):
        undo_point(chat, 0)


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 60)), max_size=8))
def test_hidden_ranges_hide_exactly_what_each_rewind_removed(cuts: list[tuple[int, int]]) -> None:
    ranges: list[tuple[int, int]] = []
    hidden: set[int] = set()
    for to_seq, last in cuts:
        ranges = hide_after(ranges, to_seq, last)
        hidden |= set(range(to_seq + 1, last + 1))
        assert all(lo <= hi for lo, hi in ranges)
        assert all(a[1] + 1 < b[0] for a, b in itertools.pairwise(ranges))  # merged, sorted
    assert {seq for seq in range(0, 62) if is_hidden(seq, ranges)} == hidden
