"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, LiteLLM, …).

Requests go over the process's pooled connections (`hermes_gateway.http_pool`). The API key is
sent in a header and never appears in an error.
Tools go out as `tools` (type function); the model's `tool_calls` come back as ToolCalls, and
tool results go in as role `tool` messages naming the call. A request that meets 429 (after its
Retry-After), 5xx or a timeout is tried again within the retry budget.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hermes_gateway import http_pool
from hermes_gateway.errors import ConfigError, PermanentError, RateLimited, TransientError
from hermes_gateway.providers.base import (
    INVALID_ARGUMENTS,
    ChatMessage,
    ModelReply,
    TextSoFar,
    ToolCall,
    ToolSpec,
    repair_history,
)
from hermes_gateway.providers.retry import RetryPolicy, call_with_retries, retry_after_seconds
from hermes_gateway.providers.server_errors import server_message

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_MAX_ERROR_TEXT = 300


class OpenAICompatProvider:
    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout: float,
        retry: RetryPolicy | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if not base_url.startswith(("https://", "http://")):
            raise ConfigError("the OpenAI base URL must be an http(s) URL")
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key or None
        self._model = model
        self._max_tokens = max_tokens  # the answer's share of the context window (provider.max_output_tokens)
        self._timeout = timeout
        self._retry = retry or RetryPolicy(budget_seconds=max(timeout, RetryPolicy().budget_seconds))

    def __repr__(self) -> str:
        return f"OpenAICompatProvider({self._url!r}, model={self._model!r})"

    def complete(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None = None) -> ModelReply:
        payload = json.dumps(self._body(system, messages, tools)).encode("utf-8")
        return call_with_retries(lambda left: self._attempt(payload, left), self._retry, provider=self.name)

    def stream(
        self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None, on_text: TextSoFar
    ) -> ModelReply:
        """`stream: true`: the answer as server-sent events, its usage in the last one. A server
        that answers with a plain completion instead is read as one (`on_text` is not called)."""
        body = {**self._body(system, messages, tools), "stream": True, "stream_options": {"include_usage": True}}
        payload = json.dumps(body).encode("utf-8")
        return call_with_retries(lambda left: self._streamed(payload, left, on_text), self._retry, provider=self.name)

    def _body(self, system: str, messages: list[ChatMessage], tools: list[ToolSpec] | None) -> dict[str, Any]:
        wire = [{"role": "system", "content": system}] if system else []
        wire += [_wire_message(m) for m in repair_history(messages)]
        body: dict[str, Any] = {"model": self._model, "messages": wire}
        if self._max_tokens:
            body["max_tokens"] = self._max_tokens
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                }
                for t in tools
            ]
        return body

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _streamed(self, payload: bytes, seconds_left: float, on_text: TextSoFar) -> ModelReply:
        timeout = min(self._timeout, max(seconds_left, 0.1))  # per read: the answer may take longer
        headers = self._headers("text/event-stream")
        try:
            with http_pool.stream("POST", self._url, body=payload, headers=headers, timeout=timeout) as answer:
                if not 200 <= answer.status < 300:
                    raise self._http_failure(http_pool.Reply(answer.status, answer.read(), answer.headers))
                if "text/event-stream" not in str(answer.headers.get("Content-Type", "")):
                    return self._reply(answer.read(16 * 1024 * 1024))
                return self._reply_of_events(answer.lines(), on_text)
        except http_pool.NoAnswer as exc:
            raise exc.transient("openai") from None
        except http_pool.Unsendable:
            raise PermanentError("openai: the base URL is not usable") from None

    def _reply_of_events(self, lines: Iterator[bytes], on_text: TextSoFar) -> ModelReply:
        """The completion the events add up to, read as `_reply` reads one."""
        text, model, finish, usage = "", self._model, "stop", None
        calls: dict[int, dict[str, Any]] = {}
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # comments (keep-alives), event names, blank separators
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            try:
                event = json.loads(data)
            except ValueError:
                raise PermanentError("openai: a streamed event is not JSON") from None
            if not isinstance(event, dict):
                continue
            if isinstance(event.get("error"), dict):
                raise PermanentError(f"openai: the stream failed: {self._server_message(data)}")
            model = str(event.get("model") or model)
            usage = event["usage"] if isinstance(event.get("usage"), dict) else usage
            choices = event.get("choices")
            choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
            finish = str(choice.get("finish_reason") or finish)
            delta: dict[str, Any] = choice["delta"] if isinstance(choice.get("delta"), dict) else {}
            for call in delta.get("tool_calls") or ():
                _add_call_delta(calls, call)
            piece = delta.get("content")
            if isinstance(piece, str) and piece:
                text += piece
                on_text(text)
        tool_calls = [calls[i] for i in sorted(calls)]
        message: dict[str, Any] = {"content": text if text or not tool_calls else None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        body = {"model": model, "choices": [{"message": message, "finish_reason": finish}], "usage": usage}
        return self._reply(json.dumps(body).encode("utf-8"))

    def _attempt(self, payload: bytes, seconds_left: float) -> ModelReply:
        timeout = min(self._timeout, max(seconds_left, 0.1))
        headers = self._headers("application/json")
        try:
            reply = http_pool.send("POST", self._url, body=payload, headers=headers, timeout=timeout)
        except http_pool.NoAnswer as exc:
            raise exc.transient("openai") from None
        except http_pool.Unsendable:
            raise PermanentError("openai: the base URL is not usable") from None
        if not 200 <= reply.status < 300:
            raise self._http_failure(reply)
        return self._reply(reply.body)

    def _reply(self, raw: bytes) -> ModelReply:
        try:
            body = json.loads(raw)
        except ValueError:
            raise PermanentError("openai: the response is not JSON") from None
        try:
            choice = body["choices"][0]
            message = choice["message"]
            content = message.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise PermanentError("openai: the response has no choices[0].message") from None
        finish_reason = choice.get("finish_reason") or "stop"
        tool_calls = _tool_calls(message.get("tool_calls"))
        if not isinstance(content, str) and not tool_calls:
            # A null content without tool calls means a refusal or a filtered answer.
            raise PermanentError(f"openai: the reply has no text (finish_reason {str(finish_reason)[:40]})")
        usage: dict[str, Any] = body["usage"] if isinstance(body.get("usage"), dict) else {}
        details: dict[str, Any] = (
            usage["prompt_tokens_details"] if isinstance(usage.get("prompt_tokens_details"), dict) else {}
        )
        prompt, cached = _count(usage.get("prompt_tokens")), _count(details.get("cached_tokens"))
        return ModelReply(
            text=content if isinstance(content, str) else "",
            model=str(body.get("model") or self._model),
            # as Bedrock counts: input excludes what was read from the prompt cache
            input_tokens=max(0, prompt - cached),
            output_tokens=_count(usage.get("completion_tokens")),
            stop_reason=str(finish_reason),
            tool_calls=tool_calls,
            cache_read_tokens=cached,
        )

    def _http_failure(self, reply: http_pool.Reply) -> Exception:
        status = reply.status
        retry_after = reply.headers.get("Retry-After")
        if status in _RETRYABLE_STATUS or status >= 500:
            hint = f"; retry after {retry_after.strip()[:20]} s" if retry_after else ""
            wait = retry_after_seconds(retry_after)
            if status == 429 and wait is not None:
                return RateLimited(wait, f"openai: HTTP {status}{hint}")
            return TransientError(f"openai: HTTP {status}{hint}")
        if status in (401, 403):
            # Servers echo part of a rejected key in the message, so it is not passed on.
            return PermanentError(f"openai: HTTP {status}: the API key was refused")
        return PermanentError(f"openai: HTTP {status}: {self._server_message(reply.body)}")

    def _server_message(self, raw: bytes) -> str:
        return server_message(raw, self._api_key, _MAX_ERROR_TEXT)


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.images:
        # Content parts: the text, then each image as a data URL of the bytes received.
        parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
        parts += [{"type": "image_url", "image_url": {"url": image.data_url()}} for image in message.images]
        wire["content"] = parts
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
            }
            for call in message.tool_calls
        ]
    return wire


def _add_call_delta(calls: dict[int, dict[str, Any]], delta: Any) -> None:
    """One streamed piece of a tool call: its id and name come first, its arguments in pieces."""
    if not isinstance(delta, dict):
        return
    index: int = delta["index"] if isinstance(delta.get("index"), int) else len(calls)
    call = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": None, "arguments": ""}})
    call["id"] = delta.get("id") or call["id"]
    function: dict[str, Any] = delta["function"] if isinstance(delta.get("function"), dict) else {}
    call["function"]["name"] = function.get("name") or call["function"]["name"]
    if isinstance(function.get("arguments"), str):
        call["function"]["arguments"] += function["arguments"]


def _tool_calls(raw: Any) -> tuple[ToolCall, ...]:
    if not isinstance(raw, list):
        return ()
    calls = []
    for index, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise PermanentError("openai: a tool call has no function name")
        calls.append(
            ToolCall(str(item.get("id") or f"call_{index}"), function["name"], _arguments(function.get("arguments")))
        )
    return tuple(calls)


def _arguments(raw: Any) -> dict[str, Any]:
    """The model's JSON arguments; unreadable ones are kept for the tool loop to report back."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    try:
        parsed = json.loads(raw)
    except (TypeError, ValueError):
        return {INVALID_ARGUMENTS: str(raw)[:500]}
    return parsed if isinstance(parsed, dict) else {INVALID_ARGUMENTS: str(raw)[:500]}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
