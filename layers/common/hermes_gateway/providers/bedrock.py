"""Amazon Bedrock through the Converse API. boto3 is imported only when this provider is built.

Tools go out as `toolConfig`; the model's `toolUse` blocks come back as ToolCalls, and tool
results go in as `toolResult` blocks of a user message. Throttling, outages and timeouts are
tried again within the retry budget (the SDK's own retries are off: the two would multiply).
"""

from __future__ import annotations

from typing import Any

from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.providers.base import ChatMessage, ModelReply, ToolCall, ToolSpec, repair_history
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
        return call_with_retries(lambda _left: self._attempt(request), self._retry, provider=self.name)

    def _attempt(self, request: dict[str, Any]) -> ModelReply:
        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        try:
            response = self._client.converse(**request)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", "Unknown"))
            message = str(exc.response.get("Error", {}).get("Message", ""))[:300]
            error = TransientError if code in _TRANSIENT_CODES else PermanentError
            raise error(f"bedrock: {code}: {message}") from None
        except (HTTPClientError, BotoConnectionError) as exc:  # timeouts, resets, unreachable endpoint
            raise TransientError(f"bedrock: {type(exc).__name__}") from None
        except BotoCoreError as exc:
            raise PermanentError(f"bedrock: {type(exc).__name__}") from None
        return self._reply(response)

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
    first_user = next(
        (i for i, m in enumerate(history) if m.role == "user" and (m.content or m.images)), len(history)
    )
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
