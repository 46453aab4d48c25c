"""The model provider port: one request in, one reply out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class ChatMessage:
    role: str  # user | assistant
    content: str


@dataclass(frozen=True)
class ModelReply:
    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str = "stop"


class Provider(Protocol):
    name: str

    def complete(self, system: str, messages: list[ChatMessage]) -> ModelReply:
        """One model request. Raises TransientError (retry) or PermanentError (do not)."""
        ...
