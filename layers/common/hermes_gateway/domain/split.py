"""Splitting a long reply into chunks a platform accepts (BEHAVIOUR §6).

Rules, in order of preference for each cut:
1. a newline that leaves the chunk at least half full;
2. a space;
3. any newline;
4. a space or newline inside inline code or a fence line, when nothing else fits;
5. a hard cut, moved back before an inline code span or a fence line that it would break.
The whitespace at a cut is dropped (trailing whitespace of the chunk, and the whitespace after the
cut up to the next text, or up to the start of its line when a line break lies between), so chunks
neither end with blank lines nor start with them; indentation after a line break is kept because it
matters in code, unless it alone leaves no room for the text after it. A cut inside a ``` block
closes the block at the end of the chunk and reopens it, with its language, at the start of the
next one.

When there is more than one chunk each ends with " (i/N)", and that suffix counts toward the limit.

Lengths are Python `len()` (code points). Telegram counts its limit after entity parsing and measures
entity offsets in UTF-16 units, where an emoji outside the basic plane counts twice; a caller that
sends such text close to the limit should pass a smaller limit. Cuts never fall inside a code point.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_FENCE_OPEN = re.compile(r" {0,3}(`{3,})[ \t]*([^`\s]*)[^`]*")
_FENCE_CLOSE = re.compile(r" {0,3}(`{3,})[ \t]*")
# An inline code span: a run of backticks closed by a run of the same length on the same line.
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)")
# Spaces before a ``` that does not start its line.
_BEFORE_MIDLINE_FENCE = re.compile(r"(?<=[^\n])[ \t]*(?=```)")
_SUFFIX_FRAME = len(" (/)")


@dataclass(frozen=True)
class _Fence:
    start: int  # first character of the opening line
    body_start: int  # first character after the opening line
    close_start: int  # first character of the closing line; len(text) when never closed
    end: int  # just past the closing line, before its newline
    marker: str
    language: str


def _find_fences(text: str) -> list[_Fence]:
    fences: list[_Fence] = []
    pos = 0
    opened: tuple[int, int, str, str] | None = None
    for line in text.split("\n"):
        line_end = pos + len(line)
        if opened is None:
            match = _FENCE_OPEN.fullmatch(line)
            if match:
                opened = (pos, min(line_end + 1, len(text)), match.group(1), match.group(2))
        else:
            match = _FENCE_CLOSE.fullmatch(line)
            if match and len(match.group(1)) >= len(opened[2]):
                fences.append(_Fence(opened[0], opened[1], pos, line_end, opened[2], opened[3]))
                opened = None
        pos = line_end + 1
    if opened is not None:
        fences.append(_Fence(opened[0], opened[1], len(text), len(text), opened[2], opened[3]))
    return fences


class _Layout:
    """Where a cut may fall in one text, and what a chunk cut there needs around it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.fences = _find_fences(text)
        self._starts = [f.start for f in self.fences]
        # avoid[k] marks cuts that would break a construct: inside inline code, inside a fence's
        # opening or closing line, or just before a ``` in mid-line (the next chunk would start
        # with it and turn ordinary text into a fence).
        self.avoid = bytearray(len(text) + 1)
        outside_start = 0
        for fence in self.fences:
            self._mark_inline_code(outside_start, fence.start)
            self._mark(fence.start, fence.body_start)
            self._mark(fence.close_start, fence.end)
            outside_start = fence.end
        self._mark_inline_code(outside_start, len(text))
        for match in _BEFORE_MIDLINE_FENCE.finditer(text):
            self._mark(match.start() - 1, match.end() + 1)
        # content_end[k]: where the text before k ends once trailing whitespace is dropped.
        self.content_end = [0] * (len(text) + 1)
        for k, char in enumerate(text, 1):
            self.content_end[k] = self.content_end[k - 1] if char.isspace() else k
        # content_start[k]: where the text from k starts once leading whitespace is dropped.
        self.content_start = [len(text)] * (len(text) + 1)
        for k in range(len(text) - 1, -1, -1):
            self.content_start[k] = self.content_start[k + 1] if text[k].isspace() else k

    def _mark(self, lo: int, hi: int) -> None:
        if hi - lo > 1:
            self.avoid[lo + 1 : hi] = b"\x01" * (hi - lo - 1)

    def _mark_inline_code(self, lo: int, hi: int) -> None:
        for match in _INLINE_CODE.finditer(self.text, lo, hi):
            self._mark(match.start(), match.end())

    def fence_at(self, pos: int) -> _Fence | None:
        i = bisect.bisect_left(self._starts, pos) - 1
        if i >= 0 and pos < self.fences[i].end:
            return self.fences[i]
        return None

    def body_end(self, start: int, cut: int) -> int:
        return max(start, self.content_end[cut])

    def closer(self, cut: int) -> str:
        """What a chunk ending at `cut` must append to leave no block open."""
        fence = self.fence_at(cut)
        return "\n" + fence.marker if fence is not None else ""

    def reopener(self, start: int, room: int) -> str:
        """What a chunk starting at `start` must put first to be back inside its block."""
        fence = self.fence_at(start)
        if fence is None or start < fence.body_start:
            return ""
        # A long language tag would eat the chunk; the block still renders as code without it.
        if len(fence.marker) + len(fence.language) + 1 > room // 4:
            return fence.marker + "\n"
        return fence.marker + fence.language + "\n"

    def resume_at(self, pos: int) -> int:
        """Where the next chunk starts when the previous one ended just before `pos`."""
        fence = self.fence_at(pos)
        # The closer already ended this block, so its own closing line would open an empty one.
        if fence is not None and pos == fence.close_start < len(self.text):
            return self.after_cut(fence.end)
        return pos

    def after_cut(self, cut: int) -> int:
        """Where the text after a cut at `cut` starts: past the whitespace there, but at the start of
        the next text's line when a line break lies between, to keep its indentation."""
        if cut == len(self.text) or not self.text[cut].isspace():
            return cut
        return self.line_of_text(cut)

    def line_of_text(self, pos: int) -> int:
        """Where the next text from `pos` starts, or the start of its line if a line break lies between."""
        text_start = self.content_start[pos]
        line_break = self.text.rfind("\n", pos, text_start)
        return text_start if line_break < 0 else line_break + 1


@dataclass
class _Best:
    """The highest fitting cut of each kind found while scanning a window backwards."""

    newline: int = -1
    space: int = -1
    newline_avoided: int = -1
    space_avoided: int = -1
    hard: int = -1
    hard_avoided: int = -1


def _scan(layout: _Layout, start: int, room: int) -> _Best:
    text = layout.text
    best = _Best()
    for cut in range(min(len(text), start + room), start, -1):
        end = layout.body_end(start, cut)
        if end == start or end - start + len(layout.closer(cut)) > room:
            continue
        char = text[cut] if cut < len(text) else ""
        kind = {"\n": "newline", " ": "space"}.get(char, "hard")
        name = kind + "_avoided" if layout.avoid[cut] else kind
        if getattr(best, name) < 0:
            setattr(best, name, cut)
            if name == "newline" and cut - start >= room // 2:
                break  # nothing lower can beat a newline in the upper half
    return best


def _choose_cut(best: _Best, start: int, room: int) -> int | None:
    """The cut position; None when no cut leaves text in the chunk."""
    if best.newline >= 0 and best.newline - start >= room // 2:
        return best.newline
    for cut in (best.space, best.newline, best.space_avoided, best.newline_avoided, best.hard, best.hard_avoided):
        if cut >= 0:
            return cut
    return None


def _split_bodies(layout: _Layout, budget: int) -> list[str]:
    text = layout.text
    bodies: list[str] = []
    start = layout.line_of_text(0)
    while layout.content_end[len(text)] > start:
        prefix = layout.reopener(start, budget)
        room = budget - len(prefix)
        rest_end = layout.body_end(start, len(text))
        if rest_end - start <= room:
            bodies.append(prefix + text[start:rest_end])
            break
        cut = _choose_cut(_scan(layout, start, room), start, room)
        if cut is None and text[start].isspace():
            # The indentation before the next text leaves no room for it, counting the closer a
            # chunk inside a block needs, or the rest of the block is blank up to its closing line:
            # the chunk starts at that text.
            start = layout.resume_at(layout.content_start[start])
            continue
        if cut is None:
            raise ValueError("the limit leaves no room for text in a chunk")
        bodies.append(prefix + text[start : layout.body_end(start, cut)] + layout.closer(cut))
        start = layout.resume_at(layout.after_cut(cut))
    return bodies


def split_message(text: str, limit: int) -> list[str]:
    """Chunks of at most `limit` characters; [] when there is nothing to send.

    Raises ValueError when the limit is too small to make progress (a few dozen characters are
    always enough).
    """
    if not text or text.isspace():
        return []
    if len(text) <= limit:
        return [text]
    layout = _Layout(text)
    digits = 1
    while True:
        bodies = _split_bodies(layout, limit - _SUFFIX_FRAME - 2 * digits)
        if len(bodies) < 10**digits:
            break
        digits += 1
    if len(bodies) == 1:
        return bodies
    total = len(bodies)
    return [f"{body} ({i}/{total})" for i, body in enumerate(bodies, 1)]
