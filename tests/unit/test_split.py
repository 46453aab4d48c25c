"""Splitting long replies (BEHAVIOUR §6): examples, then properties."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hermes_gateway.domain.split import split_message
from hermes_gateway.platforms.telegram import TELEGRAM_TEXT_LIMIT

SUFFIX = re.compile(r" \((\d+)/(\d+)\)\Z")
FENCE_LINE = re.compile(r"^ {0,3}`{3,}[^`\n]*$", re.MULTILINE)


def bodies_of(chunks: list[str]) -> list[str]:
    """The chunks without their " (i/N)" suffixes, checking the numbering on the way."""
    if len(chunks) == 1:
        return chunks
    bodies = []
    for i, chunk in enumerate(chunks, 1):
        match = SUFFIX.search(chunk)
        assert match is not None, chunk
        assert (int(match.group(1)), int(match.group(2))) == (i, len(chunks))
        bodies.append(chunk[: match.start()])
    return bodies


def rejoins(bodies: list[str], original: str) -> bool:
    """True when the original is the bodies in order with only whitespace between them.

    That is what "nothing lost or reordered" means here: a cut drops the whitespace it falls on
    (and the chunk's trailing whitespace), never anything else.
    """
    pattern = r"\s*".join(re.escape(body) for body in bodies)
    return re.fullmatch(r"\s*" + pattern + r"\s*", original) is not None


def edges_trimmed(bodies: list[str]) -> bool:
    """True when no body of a split starts with a blank line or ends with whitespace."""
    if len(bodies) == 1:
        return True  # a reply within the limit is sent unchanged
    return all(body == body.rstrip() and not re.match(r"[^\S\n]*\n", body) for body in bodies)


def fences_balanced(chunk: str) -> bool:
    opened: str | None = None
    for line in chunk.split("\n"):
        if opened is None:
            match = re.fullmatch(r" {0,3}(`{3,})[^`]*", line)
            opened = match.group(1) if match else None
        else:
            match = re.fullmatch(r" {0,3}(`{3,})\s*", line)
            if match and len(match.group(1)) >= len(opened):
                opened = None
    return opened is None


# --- examples -----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\n\n  \t"])
def test_nothing_to_send_gives_no_chunks(text: str) -> None:
    assert split_message(text, 100) == []


def test_text_within_the_limit_is_one_chunk_unchanged() -> None:
    assert split_message("  hello\n", 100) == ["  hello\n"]
    assert split_message("x" * 100, 100) == ["x" * 100]


def test_cuts_at_a_newline_first() -> None:
    text = "first line is here\nsecond line is here too"
    assert split_message(text, 30) == ["first line is here (1/2)", "second line is here too (2/2)"]


def test_cuts_at_a_space_when_the_only_newline_would_leave_a_tiny_chunk() -> None:
    text = "hi\nthe quick brown fox jumps over the lazy dog"
    chunks = split_message(text, 30)
    assert chunks[0] == "hi\nthe quick brown fox (1/2)"
    assert chunks[1] == "jumps over the lazy dog (2/2)"


def test_a_word_longer_than_the_limit_is_cut_hard() -> None:
    chunks = split_message("a" * 25, 16)
    assert chunks == ["a" * 10 + " (1/3)", "a" * 10 + " (2/3)", "aaaaa (3/3)"]


def test_whitespace_at_a_cut_is_dropped_but_indentation_is_kept() -> None:
    text = "alpha beta   \n\n\n    gamma delta"
    chunks = split_message(text, 22)
    assert chunks == ["alpha beta (1/2)", "    gamma delta (2/2)"]


def test_inline_code_is_not_cut_when_avoidable() -> None:
    text = "run this: `make deploy stage=prod region=eu` now"
    chunks = split_message(text, 45)
    assert chunks[0] == "run this: (1/2)"
    assert chunks[1] == "`make deploy stage=prod region=eu` now (2/2)"


def test_inline_code_longer_than_a_chunk_is_cut_anyway() -> None:
    chunks = split_message("`" + "a b " * 20 + "`", 30)
    assert all(len(chunk) <= 30 for chunk in chunks)
    assert rejoins(bodies_of(chunks), "`" + "a b " * 20 + "`")


def test_a_cut_inside_a_fence_closes_and_reopens_it_with_its_language() -> None:
    code = "\n".join(f"print({i})" for i in range(12))
    text = f"Here:\n```python\n{code}\n```\nDone."

    chunks = split_message(text, 80)

    assert len(chunks) > 1
    assert all(len(chunk) <= 80 for chunk in chunks)
    assert all(fences_balanced(body) for body in bodies_of(chunks))
    assert chunks[0].startswith("Here:\n```python\nprint(0)")
    assert bodies_of(chunks)[0].endswith("\n```")
    assert bodies_of(chunks)[1].startswith("```python\nprint(6)")
    assert bodies_of(chunks)[-1].endswith("Done.")


def test_a_fence_cut_right_before_its_closing_line_does_not_leave_an_empty_block() -> None:
    text = "```sh\n" + "echo 1\n" * 5 + "```\n" + "after " * 4
    for limit in range(30, 60):
        for body in bodies_of(split_message(text, limit)):
            assert "```sh\n```" not in body


def test_blank_lines_at_a_cut_are_dropped_but_indentation_is_kept() -> None:
    text = "alpha beta gamma delta\n   \n\t\n    epsilon zeta eta theta"
    assert split_message(text, 33) == ["alpha beta gamma delta (1/2)", "    epsilon zeta eta theta (2/2)"]


def test_a_block_left_with_only_blank_lines_adds_no_chunk() -> None:
    # Found by Hypothesis: the rest after the first chunk is blank lines and the closing line, one
    # character too long to fit with the reopened fence, and no cut in it left any text.
    text = "`a``aaaaaaaaaaaa`\n````sh\n   \n      \n      \n      \n  \n````"
    assert split_message(text, 40) == ["`a``aaaaaaaaaaaa`\n````sh\n````"]


def test_indentation_that_leaves_no_room_for_its_line_is_dropped() -> None:
    # 26 spaces, "y" and the closer after it are one character more than the reopened chunk holds.
    text = "```\n" + "x" * 13 + "\n" + " " * 26 + "y\n```"
    assert split_message(text, 40) == ["```\n" + "x" * 13 + "\n``` (1/2)", "```\ny\n``` (2/2)"]


def test_text_after_an_opening_fence_is_not_cut_from_its_language() -> None:
    text = "intro text " * 3 + "\n```js\nlet a = 1\n```"
    chunks = split_message(text, 40)
    assert all(fences_balanced(body) for body in bodies_of(chunks))
    assert not any(body.rstrip().endswith("```js") for body in bodies_of(chunks))


def test_suffix_counts_toward_the_limit_with_two_digit_totals() -> None:
    text = " ".join(f"word{i:03d}" for i in range(200))
    chunks = split_message(text, 40)
    assert len(chunks) >= 10
    assert chunks[-1].endswith(f" ({len(chunks)}/{len(chunks)})")
    assert all(len(chunk) <= 40 for chunk in chunks)
    assert rejoins(bodies_of(chunks), text)


def test_telegram_sized_reply() -> None:
    text = "\n\n".join(f"Paragraph {i}. " + "Lorem ipsum dolor sit amet. " * 30 for i in range(20))
    chunks = split_message(text, TELEGRAM_TEXT_LIMIT)
    assert len(chunks) == 5
    assert all(len(chunk) <= TELEGRAM_TEXT_LIMIT for chunk in chunks)
    assert all(body.startswith("Paragraph") for body in bodies_of(chunks))  # cut between paragraphs
    assert rejoins(bodies_of(chunks), text)


def test_a_limit_with_no_room_for_text_is_refused() -> None:
    with pytest.raises(ValueError, match="no room"):
        split_message("x" * 50, 6)


def test_a_long_reply_splits_quickly() -> None:
    text = ("word " * 50 + "\n") * 400 + "x" * 20_000 + " " * 10_000 + "end"
    chunks = split_message(text, TELEGRAM_TEXT_LIMIT)
    assert all(len(chunk) <= TELEGRAM_TEXT_LIMIT for chunk in chunks)
    assert rejoins(bodies_of(chunks), text)


# --- properties ---------------------------------------------------------------------------------

# Text without fences: letters, spaces, newlines, tabs, single backticks for inline code, and
# characters outside the basic plane; "```" is kept out so no line is a fence.
PLAIN_TEXT = st.text(alphabet=st.sampled_from([*"abcxyz019 \n\t`.,-", "é", "😀", "\u00a0"]), max_size=600).filter(
    lambda text: "```" not in text
)
WORDS = st.lists(
    st.one_of(
        st.from_regex(r"[a-z]{1,12}", fullmatch=True),
        st.from_regex(r"`[a-z ]{1,20}`", fullmatch=True),
        st.sampled_from([" ", " ", "\n", "\n\n", "  "]),
    ),
    max_size=150,
).map("".join)
CODE_LINE = st.from_regex(r"( {0,6})[a-z=()\[\]` ]{0,30}", fullmatch=True).filter(lambda line: "```" not in line)


@st.composite
def fenced_text(draw: st.DrawFn) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        parts.append(draw(WORDS))
        language = draw(st.sampled_from(["", "python", "sh", "js"]))
        marker = draw(st.sampled_from(["```", "````"]))
        lines = draw(st.lists(CODE_LINE, max_size=25))
        parts.append("\n".join([marker + language, *lines, marker]))
    return "\n".join(parts)


LIMITS = st.integers(min_value=24, max_value=300)


@given(text=st.one_of(PLAIN_TEXT, WORDS), limit=LIMITS)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_plain_text_chunks_fit_and_rejoin_to_the_original(text: str, limit: int) -> None:
    chunks = split_message(text, limit)

    assert all(len(chunk) <= limit for chunk in chunks)
    assert all(chunk.strip() for chunk in chunks)
    if text.strip():
        assert rejoins(bodies_of(chunks), text)
        assert edges_trimmed(bodies_of(chunks))
    else:
        assert chunks == []


@given(text=fenced_text(), limit=st.integers(min_value=40, max_value=300))
# A block left with only blank lines and its closing line, one character too long for the chunk.
@example(text="`a``aaaaaaaaaaaa`\n````sh\n   \n      \n      \n      \n  \n````", limit=40)
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_fenced_text_chunks_fit_keep_fences_balanced_and_lose_nothing(text: str, limit: int) -> None:
    chunks = split_message(text, limit)

    assert all(len(chunk) <= limit for chunk in chunks)
    bodies = bodies_of(chunks)
    assert all(fences_balanced(body) for body in bodies)
    assert edges_trimmed(bodies)

    def content(value: str) -> str:
        return re.sub(r"\s+", "", FENCE_LINE.sub("", value))

    assert content("\n".join(bodies)) == content(text)
