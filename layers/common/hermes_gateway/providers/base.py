"""The model provider port: one request in (system, history, tools), one reply out (text and/or tool calls).

A turn's history is a list of `ChatMessage`s: user and assistant text, assistant messages that ask
for tool calls, and one `tool` message per call carrying its result (`tool_call_id` names the call).
Each provider maps this to its own wire format; the engine never sees a provider's shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# A tool call whose arguments were not a JSON object carries the raw text under this key only;
# the tool loop answers it with an error result instead of running the tool.
INVALID_ARGUMENTS = "__invalid_json__"


@dataclass(frozen=True)
class ToolCall:
    id: str  # the provider's call id; a tool result names it in `ChatMessage.tool_call_id`
    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolCall:
        return cls(str(data["id"]), str(data["name"]), dict(data.get("arguments") or {}))


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about one tool; `parameters` is a JSON schema of an object."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ImagePart:
    """An image the user sent, as the exact bytes received (never stored in the workflow's state:
    the turn reads them from the media bucket for each model request)."""

    mime: str  # image/jpeg, image/png, image/gif or image/webp
    data: bytes

    @property
    def format(self) -> str:
        """Bedrock's name for the format: jpeg, png, gif or webp."""
        return self.mime.split("/", 1)[-1].lower().replace("jpg", "jpeg")

    def data_url(self) -> str:
        import base64

        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


@dataclass(frozen=True)
class ChatMessage:
    role: str  # user | assistant | tool
    content: str
    images: tuple[ImagePart, ...] = ()  # user only: images the model sees beside the text
    tool_calls: tuple[ToolCall, ...] = ()  # assistant only: the calls the model asked for
    tool_call_id: str | None = None  # tool only: the call this result answers
    name: str | None = None  # tool only: the tool's name
    is_error: bool = False  # tool only: the result reports a failure (Bedrock passes it on)


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }


@dataclass(frozen=True)
class ModelReply:
    text: str  # may be "" when the model only asks for tool calls
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str = "stop"  # the provider's own word ("stop", "tool_calls", "end_turn", "tool_use", …)
    tool_calls: tuple[ToolCall, ...] = ()
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def usage(self) -> Usage:
        return Usage(self.input_tokens, self.output_tokens, self.cache_read_tokens, self.cache_write_tokens)

    def as_message(self) -> ChatMessage:
        """The assistant message to put back into the history before the tool results."""
        return ChatMessage("assistant", self.text, tool_calls=self.tool_calls)


def repair_history(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The history as providers accept it: every tool result answers a call of the assistant
    message just before it, and every call has its result. A history trimmed at the front, or a
    turn cut short between a call and its result, breaks that; the broken parts are dropped (an
    assistant message keeps its text)."""
    repaired: list[ChatMessage] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        index += 1
        if message.role == "tool":
            continue  # a result whose call is not right before it
        if message.role != "assistant" or not message.tool_calls:
            repaired.append(message)
            continue
        results: list[ChatMessage] = []
        while index < len(messages) and messages[index].role == "tool":
            results.append(messages[index])
            index += 1
        wanted = {call.id for call in message.tool_calls}
        answered = {r.tool_call_id for r in results if r.tool_call_id in wanted}
        if answered == wanted:
            repaired.append(message)
            seen: set[str | None] = set()
            for result in results:  # one result per call, in order
                if result.tool_call_id in wanted and result.tool_call_id not in seen:
                    seen.add(result.tool_call_id)
                    repaired.append(result)
        elif message.content:
            repaired.append(ChatMessage("assistant", message.content))
    return repaired


class Provider(Protocol):
    name: str

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        """One model request (retried inside a bounded budget). Raises TransientError (the
        workflow may retry) or PermanentError (do not)."""
        ...


# Called with the answer's text so far, whole (not a delta), each time it grows. A request tried
# again starts over: the text it is called with may be shorter than before.
TextSoFar = Callable[[str], None]


@runtime_checkable
class StreamingProvider(Protocol):
    """A provider that can also hand over the answer while the model writes it."""

    name: str

    def stream(
        self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None, on_text: TextSoFar
    ) -> ModelReply:
        """As `complete`, calling `on_text` as the answer's text grows; returns the whole reply.
        An exception `on_text` raises ends the request and is raised as it is."""
        ...


def streaming_of(provider: Provider) -> StreamingProvider | None:
    """The provider's streaming, when it has one and it is on (`streams`, True unless said)."""
    if isinstance(provider, StreamingProvider) and getattr(provider, "streams", True):
        return provider
    return None
