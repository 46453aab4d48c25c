"""Spoken replies (BEHAVIOUR §6a): when a chat's answer is also sent as a voice note, and what of
it is spoken.

Each chat chooses with `/voice on | off | auto` (kept on its route; `auto`, the default, answers a
voice note with a voice note). The turn carries the chat's choice and whether the messages it
answers hold a voice note; the delivery that sends the answer synthesizes it, once, where speech
is set up (`tts.provider`) and the platform shows a voice note (`platforms.catalog.VOICE_PLATFORMS`).
The text is always sent too: a voice note is never the only copy of an answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from hermes_gateway.domain.media import Attachment

VOICE_MODES = ("on", "off", "auto")
DEFAULT_MODE = "auto"

_FENCE = re.compile(r"```.*?(```|$)", re.DOTALL)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"https?://\S+")
_MARKUP = re.compile(r"(\*\*|__|~~|`|^#{1,6}\s+|^\s*[-*+]\s+|^>\s?)", re.MULTILINE)
_SENTENCE_END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f](?=\s|$)")


def mode_of(value: str | None) -> str:
    """A stored mode, or the default for a chat that never chose (or a value from elsewhere)."""
    return value if value in VOICE_MODES else DEFAULT_MODE


def wants_voice(mode: str | None, attachments: Iterable[Attachment]) -> bool:
    """The chat wants the answer spoken: `on`; or `auto` and a voice note among the messages answered."""
    chosen = mode_of(mode)
    if chosen == "on":
        return True
    return chosen == "auto" and any(a.kind == "voice" for a in attachments)


def speech_text(text: str, max_chars: int) -> str:
    """What of an answer is read aloud: its words without Markdown, code blocks or URLs (which
    sound like noise), at most `max_chars` characters, cut after the last whole sentence that
    fits (else the last whole word). "" when nothing is left to say."""
    plain = _FENCE.sub(" ", text)
    plain = _LINK.sub(r"\1", plain)
    plain = _URL.sub(" ", plain)
    plain = _MARKUP.sub("", plain)
    plain = " ".join(plain.split())
    if len(plain) <= max_chars:
        return plain
    head = plain[:max_chars]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends and ends[-1] >= max_chars // 2:  # a cut that keeps at least half the room
        return head[: ends[-1]].strip()
    space = head.rfind(" ")
    return (head[:space] if space > 0 else head).strip()
