"""A provider without a model: it answers with the user's own words, for tests and local runs.

It can also ask for tool calls, so local mode and tests exercise the tool loop without a model.
A user message whose lines start with `echo-tool:` asks for one call per such line:

    echo-tool:<tool name> <JSON object of arguments>

for example `echo-tool:memory {"action": "add", "text": "likes green tea"}`. When tools are
offered (the `tools` argument) and the user message has such lines, the reply is those calls
(ids `echo-<user message index>-<line index>`, no text). Once the results follow the calls in the
history, the reply is `Echo: ` and each result as `[<tool>] <result>`, one per line. A line with
arguments that are not a JSON object is answered in text (`Echo: bad echo-tool line …`), not
called. Everything is deterministic: the same history gives the same reply.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

from hermes_gateway.providers.base import ChatMessage, ModelReply, TextSoFar, ToolCall, ToolSpec

TOOL_PREFIX = "echo-tool:"
STREAM_DELAY_ENV = "HERMES_ECHO_STREAM_DELAY"  # tests only: the streaming echo's seconds per word
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def _estimate_tokens(text: str) -> int:
    # About four characters per token, rounded up: good enough for counters, and deterministic.
    return (len(text) + 3) // 4


class BadToolLine(ValueError):
    """An `echo-tool:` line the echo provider cannot turn into a call."""


def parse_tool_lines(text: str, message_index: int) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for line in text.splitlines():
        if not line.startswith(TOOL_PREFIX):
            continue
        name, _, raw = line[len(TOOL_PREFIX) :].partition(" ")
        if not _TOOL_NAME.match(name):
            raise BadToolLine("no tool name right after echo-tool:")
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise BadToolLine(f"the arguments of {name} are not JSON") from None
        if not isinstance(arguments, dict):
            raise BadToolLine(f"the arguments of {name} are not a JSON object")
        calls.append(ToolCall(f"echo-{message_index}-{len(calls)}", name, arguments))
    return tuple(calls)


class EchoProvider:
    """`chunk_delay` (tests only, HERMES_ECHO_STREAM_DELAY): when above zero the provider also
    streams, handing over its answer a word at a time with this many seconds between words."""

    name = "echo"

    def __init__(self, chunk_delay: float = 0.0, sleep: Callable[[float], None] = time.sleep) -> None:
        self.chunk_delay = chunk_delay
        self.streams = chunk_delay > 0
        self._sleep = sleep

    def stream(
        self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None, on_text: TextSoFar
    ) -> ModelReply:
        reply = self.complete(system, messages, tools)
        words = re.findall(r"\S+\s*", reply.text)
        for count in range(1, len(words) + 1):
            self._sleep(self.chunk_delay)
            on_text("".join(words[:count]))
        return reply

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        last_user = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None)
        text = f"Echo: {messages[last_user].content}" if last_user is not None else "Echo: "
        if last_user is not None and messages[last_user].images:
            # what a model would see: say how many images, of how many bytes
            seen = ", ".join(f"{i.mime} {len(i.data)} bytes" for i in messages[last_user].images)
            text += f"\n[images: {seen}]"
        calls: tuple[ToolCall, ...] = ()
        if last_user is not None and tools:
            after = messages[last_user + 1 :]
            results = [m for m in after if m.role == "tool"]
            if results:
                text = "Echo: " + "\n".join(f"[{m.name or 'tool'}] {m.content}" for m in results)
            else:
                try:
                    calls = parse_tool_lines(messages[last_user].content, last_user)
                except BadToolLine as exc:
                    text = f"Echo: bad echo-tool line ({exc})"
                if calls:
                    text = ""
        prompt = system + "".join(m.content for m in messages)
        return ModelReply(
            text=text,
            model="echo",
            input_tokens=_estimate_tokens(prompt),
            output_tokens=_estimate_tokens(text or json.dumps([c.to_dict() for c in calls])),
            stop_reason="tool_calls" if calls else "stop",
            tool_calls=calls,
        )
