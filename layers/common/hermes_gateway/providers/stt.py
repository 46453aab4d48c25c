"""Speech to text (BEHAVIOUR §6a): a voice note or audio file transcribed before the turn.

Any OpenAI-compatible `POST {base}/audio/transcriptions` (OpenAI, Groq, a local whisper server):
multipart `file` and `model`, the answer's `text`. The key goes in a header and never appears in
an error. No retries here beyond the HTTP call itself: a failure is told to the chat and the turn
goes on with what it has (the caption, a note naming the voice note).
"""

from __future__ import annotations

import json
from typing import Protocol

from hermes_gateway import http_pool
from hermes_gateway.errors import ConfigError, PermanentError, RateLimited, TransientError
from hermes_gateway.providers.retry import retry_after_seconds
from hermes_gateway.providers.server_errors import scrubbed, server_message

TRANSCRIBE_TIMEOUT_SECONDS = 30.0
_EXTENSIONS = {"audio/ogg": "ogg", "audio/mpeg": "mp3", "audio/mp4": "m4a", "audio/wav": "wav", "audio/webm": "webm"}


class Transcriber(Protocol):
    def transcribe(self, data: bytes, mime: str, name: str) -> str:
        """The spoken text. Raises TransientError (429, 5xx, timeouts) or PermanentError."""
        ...


class OpenAITranscriber:
    def __init__(self, base_url: str, api_key: str | None, model: str, timeout: float = TRANSCRIBE_TIMEOUT_SECONDS):
        if not base_url.startswith(("https://", "http://")):
            raise ConfigError("the speech-to-text base URL must be an http(s) URL")
        self._url = base_url.rstrip("/") + "/audio/transcriptions"
        self._api_key = api_key or None
        self._model = model
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"OpenAITranscriber({self._url!r}, model={self._model!r})"

    def transcribe(self, data: bytes, mime: str, name: str) -> str:
        base = mime.split(";", 1)[0].strip().lower()
        filename = name or f"voice.{_EXTENSIONS.get(base, 'ogg')}"
        # Telegram calls its voice notes audio/ogg; servers know the type from the file name too.
        body, content_type = http_pool.multipart(
            {"file": (filename, data, base or "application/octet-stream"), "model": self._model}
        )
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        try:
            reply = http_pool.send("POST", self._url, body=body, headers=headers, timeout=self._timeout)
        except http_pool.NoAnswer as exc:
            raise exc.transient("speech to text", self._scrub) from None
        except http_pool.Unsendable:
            raise PermanentError("speech to text: the URL or the API key cannot be sent") from None
        if reply.status == 429:
            wait = retry_after_seconds(reply.headers.get("Retry-After")) or 1.0
            raise RateLimited(wait, "speech to text: rate limited")
        if reply.status >= 500:
            raise TransientError(f"speech to text: server error HTTP {reply.status}")
        if reply.status >= 300:
            detail = server_message(reply.body, self._api_key)
            raise PermanentError(f"speech to text refused the audio: HTTP {reply.status}: {detail}")
        try:
            text = json.loads(reply.body).get("text")
        except (ValueError, AttributeError):
            text = None
        if not isinstance(text, str):
            raise PermanentError("speech to text: the answer has no text")
        return text.strip()

    def _scrub(self, text: str) -> str:
        return scrubbed(text, self._api_key)
