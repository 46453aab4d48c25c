"""The model's context window (BEHAVIOUR §10): how large a model's window is, how a request's
size is estimated without a tokenizer, and how a message too large for the window is cut.

The estimate is about four characters per token plus a few tokens per message, an image a fixed
cost. It is calibrated by what the provider reported for the last request (`calibrated`): the
ratio of reported to estimated tokens, kept between 0.5 and 3, carried by the turn's state and
kept on the session's route by the turn's finishing write (`SessionTally.prompt_ratio`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from hermes_gateway.providers.base import ChatMessage, ToolSpec

CHARS_PER_TOKEN = 4
MESSAGE_TOKENS = 4  # a message's role and framing
IMAGE_TOKENS = 1_000  # one image, whatever its size (providers scale them down)
FALLBACK_WINDOW = 8_192  # a model not in the table: small enough for any current model
MAX_OUTPUT_DEFAULT = 4_096
RATIO_RANGE = (0.5, 3.0)
# Model-name prefixes and their context windows (tokens); the longest matching prefix wins. A
# Bedrock id is matched from each of its dotted parts too ("us.anthropic.claude-..." is claude).
KNOWN_WINDOWS: tuple[tuple[str, int], ...] = (
    ("gpt-4.1", 128_000),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 128_000),
    ("o3", 128_000),
    ("o4", 128_000),
    ("claude", 200_000),
    ("llama3.1", 128_000),
    ("llama3-1", 128_000),
    ("llama3.2", 128_000),
    ("llama3-2", 128_000),
    ("llama3.3", 128_000),
    ("llama3-3", 128_000),
    ("llama3", 8_192),
    ("mistral", 32_000),
    ("nova", 128_000),
)
CUT_NOTE = "[message cut: {over} characters over the model's window]"
# What the /compress command routes as its turn's user message (services/commands.py). A user who
# types it gets the command, so only the command makes such a turn (services/turn/compaction.py).
COMPRESS_COMMAND = "/compress"


def default_window(model: str) -> int:
    """The window of a model by its name, else FALLBACK_WINDOW."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    parts = name.split(".")
    candidates = [".".join(parts[i:]) for i in range(len(parts))]
    matched = [(len(p), size) for p, size in KNOWN_WINDOWS if any(c.startswith(p) for c in candidates)]
    return max(matched)[1] if matched else FALLBACK_WINDOW


def default_output_tokens(window: int) -> int:
    """The answer's reserve: a quarter of the window, at most MAX_OUTPUT_DEFAULT."""
    return max(1, min(MAX_OUTPUT_DEFAULT, window // 4))


def limits(context_window: int, max_output_tokens: int, model: str) -> tuple[int, int]:
    """(the window, the answer's reserve) from the settings (0: the defaults) and the model."""
    window = context_window or default_window(model)
    return window, max_output_tokens or default_output_tokens(window)


def text_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def message_tokens(message: ChatMessage) -> int:
    calls = json.dumps([c.to_dict() for c in message.tool_calls]) if message.tool_calls else ""
    return MESSAGE_TOKENS + text_tokens(message.content) + text_tokens(calls) + IMAGE_TOKENS * len(message.images)


def request_tokens(system: str, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] | None = None) -> int:
    """The estimated size of one model request: its system prompt, messages and tool schemas."""
    schema = json.dumps([[t.name, t.description, t.parameters] for t in tools]) if tools else ""
    return text_tokens(system) + text_tokens(schema) + sum(message_tokens(m) for m in messages)


def calibrated(ratio: float, reported: int, estimated: int) -> float:
    """The ratio after a request: what the provider reported over what was estimated (clamped);
    unchanged when the provider reported nothing."""
    if reported <= 0 or estimated <= 0:
        return ratio
    low, high = RATIO_RANGE
    return min(high, max(low, reported / estimated))


def cut(message: ChatMessage, tokens: int) -> ChatMessage:
    """The message shortened to about `tokens` (its estimate), its end replaced by a note saying
    how much was cut; a message that fits is returned as it is."""
    if message_tokens(message) <= tokens:
        return message
    room = max(0, tokens - MESSAGE_TOKENS - IMAGE_TOKENS * len(message.images)) * CHARS_PER_TOKEN
    keep = max(0, room - len(CUT_NOTE) - 12)  # the note itself takes room too
    note = CUT_NOTE.format(over=len(message.content) - keep)
    return ChatMessage(
        message.role, message.content[:keep] + "\n" + note, images=message.images, tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id, name=message.name, is_error=message.is_error,
    )  # fmt: skip


__all__ = [
    "COMPRESS_COMMAND",
    "CUT_NOTE",
    "FALLBACK_WINDOW",
    "KNOWN_WINDOWS",
    "calibrated",
    "cut",
    "default_output_tokens",
    "default_window",
    "limits",
    "message_tokens",
    "request_tokens",
    "text_tokens",
]
