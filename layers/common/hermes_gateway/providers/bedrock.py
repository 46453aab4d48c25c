"""Amazon Bedrock through the Converse API. boto3 is imported only when this provider is built.

Tools go out as `toolConfig`; the model's `toolUse` blocks come back as ToolCalls, and tool
results go in as `toolResult` blocks of a user message. Throttling, outages and timeouts are
tried again within the retry budget (the SDK's own retries are off: the two would multiply).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.providers.base import (
    INVALID_ARGUMENTS,
    ChatMessage,
    ModelReply,
    TextSoFar,
    ToolCall,
    ToolSpec,
    repair_history,
)
from hermes_gateway.providers.retry import RetryPolicy, call_with_retries

_TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelTimeoutException",
        "ModelNotReadyException",
        "InternalServerException",
    }
)


class BedrockProvider:
    name = "bedrock"

    def __init__(
        self,
        model: str,
        region: str | None = None,
        client: Any = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self._model = model
        self._max_tokens = max_tokens  # the answer's share of the context window (provider.max_output_tokens)
        self._retry = retry or RetryPolicy()
        if client is None:
            import boto3
            from botocore.config import Config

            config = Config(retries={"mode": "standard", "total_max_attempts": 1}, read_timeout=timeout or 60)
            client = boto3.client("bedrock-runtime", region_name=region, config=config)
        self._client = client

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        request = self._request(system, messages, tools)
        return call_with_retries(lambda _left: self._attempt(request), self._retry, provider=self.name)

    def stream(
        self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None, on_text: TextSoFar
    ) -> ModelReply:
        """`ConverseStream`: the answer's text as it is written; the reply as `converse` gives it."""
        request = self._request(system, messages, tools)
        return call_with_retries(lambda _left: self._streamed(request, on_text), self._retry, provider=self.name)

    def _request(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None) -> dict[str, Any]:
        request: dict[str, Any] = {"modelId": self._model, "messages": _converse_messages(messages)}
        if system:
            request["system"] = [{"text": system}]
        if self._max_tokens:
            request["inferenceConfig"] = {"maxTokens": self._max_tokens}
        if tools:
            request["toolConfig"] = {
                "tools": [
                    {"toolSpec": {"name": t.name, "description": t.description, "inputSchema": {"json": t.parameters}}}
                    for t in tools
                ]
            }
        return request

    def _attempt(self, request: dict[str, Any]) -> ModelReply:
        with _errors_mapped():
            response = self._client.converse(**request)
        return self._reply(response)

    def _streamed(self, request: dict[str, Any], on_text: TextSoFar) -> ModelReply:
        """The events added up to what `converse` answers: text and tool-use blocks by index."""
        blocks: dict[int, dict[str, Any]] = {}
        text, stop = "", "end_turn"
        usage: dict[str, Any] = {}
        with _errors_mapped():
            events = self._client.converse_stream(**request)["stream"]
            for event in events:
                error = next((name for name in event if name.endswith("Exception")), None)
                if error is not None:
                    code = error[0].upper() + error[1:]
                    kind = TransientError if code in _TRANSIENT_CODES else PermanentError
                    raise kind(f"bedrock: {code} in the stream")
                if "contentBlockStart" in event:
                    start = event["contentBlockStart"]
                    use = (start.get("start") or {}).get("toolUse")
                    if use:
                        blocks[int(start.get("contentBlockIndex", len(blocks)))] = {"toolUse": {**use, "input": ""}}
                elif "contentBlockDelta" in event:
                    part = event["contentBlockDelta"]
                    index, delta = int(part.get("contentBlockIndex", 0)), part.get("delta") or {}
                    if "text" in delta:
                        block = blocks.setdefault(index, {"text": ""})
                        block["text"] = block.get("text", "") + delta["text"]
                        text += delta["text"]
                        on_text(text)
                    elif "toolUse" in delta and "toolUse" in blocks.get(index, {}):
                        blocks[index]["toolUse"]["input"] += delta["toolUse"].get("input") or ""
                elif "messageStop" in event:
                    stop = str(event["messageStop"].get("stopReason") or stop)
                elif "metadata" in event:
                    usage = event["metadata"].get("usage") or usage
        content = [_parsed_block(blocks[i]) for i in sorted(blocks)]
        return self._reply({"output": {"message": {"content": content}}, "stopReason": stop, "usage": usage})

    def _reply(self, response: dict[str, Any]) -> ModelReply:
        try:
            blocks = response["output"]["message"]["content"]
            # Reasoning models put a reasoningContent block before the answer; only text is the reply.
            texts = [block["text"] for block in blocks if "text" in block]
            calls = tuple(
                ToolCall(str(use["toolUseId"]), str(use["name"]), dict(use.get("input") or {}))
                for use in (block["toolUse"] for block in blocks if "toolUse" in block)
            )
        except (KeyError, TypeError, ValueError):
            raise PermanentError("bedrock: the response has no output.message.content") from None
        if not texts and not calls:
            raise PermanentError(f"bedrock: the reply has no text (stopReason {response.get('stopReason')})")
        usage = response.get("usage") or {}
        return ModelReply(
            text="".join(texts),
            model=self._model,
            input_tokens=int(usage.get("inputTokens") or 0),
            output_tokens=int(usage.get("outputTokens") or 0),
            stop_reason=str(response.get("stopReason") or "end_turn"),
            tool_calls=calls,
            cache_read_tokens=int(usage.get("cacheReadInputTokens") or 0),
            cache_write_tokens=int(usage.get("cacheWriteInputTokens") or 0),
        )


def _blocks(message: ChatMessage) -> tuple[str, list[dict[str, Any]]]:
    """The Converse role and content blocks of one message (tool results are user content)."""
    if message.role == "tool":
        result = {
            "toolUseId": message.tool_call_id or "",
            "content": [{"text": message.content or "(empty)"}],
            "status": "error" if message.is_error else "success",
        }
        return "user", [{"toolResult": result}]
    blocks: list[dict[str, Any]] = [{"text": message.content}] if message.content else []
    blocks += [{"image": {"format": image.format, "source": {"bytes": image.data}}} for image in message.images]
    blocks += [{"toolUse": {"toolUseId": c.id, "name": c.name, "input": c.arguments}} for c in message.tool_calls]
    return message.role, blocks


def _converse_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Converse wants user first, roles alternating and no empty text; a trimmed history may break all three."""
    history = repair_history(messages)
    first_user = next((i for i, m in enumerate(history) if m.role == "user" and (m.content or m.images)), len(history))
    converse: list[dict[str, Any]] = []
    for message in history[first_user:]:
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if converse and converse[-1]["role"] == role:
            converse[-1]["content"].extend(blocks)
        else:
            converse.append({"role": role, "content": blocks})
    return converse


@contextmanager
def _errors_mapped() -> Iterator[None]:
    """Bedrock's failures as the workflow's: throttling, outages and timeouts are transient."""
    from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
    from botocore.exceptions import ConnectionError as BotoConnectionError

    try:
        yield
    except ClientError as exc:  # a stream's error event too (EventStreamError)
        code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
        message = str(exc.response.get("Error", {}).get("Message", ""))[:300]
        error = TransientError if code in _TRANSIENT_CODES else PermanentError
        raise error(f"bedrock: {code}: {message}") from None
    except (HTTPClientError, BotoConnectionError) as exc:  # timeouts, resets, unreachable endpoint
        raise TransientError(f"bedrock: {type(exc).__name__}") from None
    except BotoCoreError as exc:
        raise PermanentError(f"bedrock: {type(exc).__name__}") from None


def _parsed_block(block: dict[str, Any]) -> dict[str, Any]:
    """A streamed block as `converse` gives it: a tool use's input is JSON text until here."""
    use = block.get("toolUse")
    if use is None:
        return block
    try:
        arguments = json.loads(use["input"]) if use["input"].strip() else {}
    except ValueError:
        arguments = {INVALID_ARGUMENTS: use["input"][:500]}
    return {
        "toolUse": {
            **use,
            "input": arguments if isinstance(arguments, dict) else {INVALID_ARGUMENTS: use["input"][:500]},
        }
    }
