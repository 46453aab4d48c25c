"""Any OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, LiteLLM, …).

Standard library only. The API key is sent in a header and never appears in an error.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from http.client import HTTPException
from typing import Any

from hermes_gateway.errors import ConfigError, PermanentError, TransientError
from hermes_gateway.providers.base import ChatMessage, ModelReply

_RETRYABLE_STATUS = frozenset({408, 409, 429})
_MAX_ERROR_TEXT = 300


class OpenAICompatProvider:
    name = "openai"

    def __init__(self, base_url: str, api_key: str | None, model: str, timeout: float) -> None:
        if not base_url.startswith(("https://", "http://")):
            raise ConfigError("the OpenAI base URL must be an http(s) URL")
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._api_key = api_key or None
        self._model = model
        self._timeout = timeout
        self._opener = urllib.request.build_opener()

    def __repr__(self) -> str:
        return f"OpenAICompatProvider({self._url!r}, model={self._model!r})"

    def complete(self, system: str, messages: list[ChatMessage]) -> ModelReply:
        wire = [{"role": "system", "content": system}] if system else []
        wire += [{"role": m.role, "content": m.content} for m in messages]
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(  # noqa: S310 - the constructor admits only http(s) URLs
            self._url,
            data=json.dumps({"model": self._model, "messages": wire}).encode("utf-8"),
            headers=headers,
            method="POST",
        )
        try:
            with self._opener.open(request, timeout=self._timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._http_failure(exc) from None
        except TimeoutError:
            raise TransientError(f"openai: no answer within {self._timeout:g} s") from None
        except urllib.error.URLError as exc:
            raise TransientError(f"openai: cannot reach the server: {exc.reason}") from None
        except (HTTPException, OSError) as exc:
            raise TransientError(f"openai: the connection failed: {type(exc).__name__}") from None
        except ValueError:
            raise PermanentError("openai: the base URL is not usable") from None
        return self._reply(raw)

    def _reply(self, raw: bytes) -> ModelReply:
        try:
            body = json.loads(raw)
        except ValueError:
            raise PermanentError("openai: the response is not JSON") from None
        try:
            choice = body["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise PermanentError("openai: the response has no choices[0].message") from None
        finish_reason = choice.get("finish_reason") or "stop"
        if not isinstance(content, str):
            # A null content means a refusal, a filtered answer or tool calls we did not ask for.
            raise PermanentError(f"openai: the reply has no text (finish_reason {str(finish_reason)[:40]})")
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return ModelReply(
            text=content,
            model=str(body.get("model") or self._model),
            input_tokens=_count(usage.get("prompt_tokens")),
            output_tokens=_count(usage.get("completion_tokens")),
            stop_reason=str(finish_reason),
        )

    def _http_failure(self, exc: urllib.error.HTTPError) -> Exception:
        status = exc.code
        retry_after = exc.headers.get("Retry-After") if exc.headers else None
        if status in _RETRYABLE_STATUS or status >= 500:
            hint = f"; retry after {retry_after.strip()[:20]} s" if retry_after else ""
            return TransientError(f"openai: HTTP {status}{hint}")
        if status in (401, 403):
            # Servers echo part of a rejected key in the message, so it is not passed on.
            return PermanentError(f"openai: HTTP {status}: the API key was refused")
        return PermanentError(f"openai: HTTP {status}: {self._server_message(exc)}")

    def _server_message(self, exc: urllib.error.HTTPError) -> str:
        try:
            with exc:
                raw = exc.read()
        except (HTTPException, OSError):
            raw = b""
        try:
            error = json.loads(raw).get("error")
            message = error.get("message") if isinstance(error, dict) else error
        except (ValueError, AttributeError):
            message = None
        text = str(message) if message else raw.decode("utf-8", "replace").strip() or "no details"
        if self._api_key:
            text = text.replace(self._api_key, "<api key>")
        return text[:_MAX_ERROR_TEXT]


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
