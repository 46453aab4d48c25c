"""Amazon Bedrock through the Converse API. boto3 is imported only when this provider is built."""

from __future__ import annotations

from typing import Any

from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.providers.base import ChatMessage, ModelReply

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

    def __init__(self, model: str, region: str | None = None, client: Any = None, timeout: float | None = None) -> None:
        self._model = model
        if client is None:
            import boto3
            from botocore.config import Config

            # Few SDK retries: the turn workflow already retries a TransientError, and the two multiply.
            config = Config(retries={"mode": "standard", "max_attempts": 2}, read_timeout=timeout or 60)
            client = boto3.client("bedrock-runtime", region_name=region, config=config)
        self._client = client

    def complete(self, system: str, messages: list[ChatMessage]) -> ModelReply:
        from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        request: dict[str, Any] = {"modelId": self._model, "messages": _converse_messages(messages)}
        if system:
            request["system"] = [{"text": system}]
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
        except (KeyError, TypeError):
            raise PermanentError("bedrock: the response has no output.message.content") from None
        if not texts:
            raise PermanentError(f"bedrock: the reply has no text (stopReason {response.get('stopReason')})")
        usage = response.get("usage") or {}
        return ModelReply(
            text="".join(texts),
            model=self._model,
            input_tokens=int(usage.get("inputTokens") or 0),
            output_tokens=int(usage.get("outputTokens") or 0),
            stop_reason=str(response.get("stopReason") or "end_turn"),
        )


def _converse_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Converse wants user first, roles alternating and no empty text; a trimmed history may break all three."""
    converse: list[dict[str, Any]] = []
    for message in messages:
        if not message.content or (not converse and message.role != "user"):
            continue
        if converse and converse[-1]["role"] == message.role:
            converse[-1]["content"].append({"text": message.content})
        else:
            converse.append({"role": message.role, "content": [{"text": message.content}]})
    return converse
