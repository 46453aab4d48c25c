"""A provider without a model: it answers with the user's own words, for tests and local runs."""

from __future__ import annotations

from hermes_gateway.providers.base import ChatMessage, ModelReply


def _estimate_tokens(text: str) -> int:
    # About four characters per token, rounded up: good enough for counters, and deterministic.
    return (len(text) + 3) // 4


class EchoProvider:
    name = "echo"

    def complete(self, system: str, messages: list[ChatMessage]) -> ModelReply:
        last = next((m.content for m in reversed(messages) if m.role == "user"), "")
        text = f"Echo: {last}"
        prompt = system + "".join(m.content for m in messages)
        return ModelReply(
            text=text,
            model="echo",
            input_tokens=_estimate_tokens(prompt),
            output_tokens=_estimate_tokens(text),
            stop_reason="stop",
        )
