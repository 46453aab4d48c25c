"""Text to speech (BEHAVIOUR §6a): an answer spoken as a voice note.

Any OpenAI-compatible `POST {base}/audio/speech` (OpenAI, a local speech server): JSON `model`,
`input`, `voice` and `response_format: "opus"`, answered with the audio itself, Ogg/Opus: the
format Telegram and WhatsApp show as a voice note, so nothing is transcoded (Amazon Polly, asked
for `ogg_opus`, is adapters/polly_speech.py). The audio is written to the caller's file as it
arrives (a spooled file on its way to the media bucket). The key goes in a header and never
appears in an error. No retries here: a failure leaves the answer as text, with
a short note (services/speech.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import BinaryIO, Protocol

from hermes_gateway import http_pool
from hermes_gateway.errors import ConfigError, PermanentError, RateLimited, TransientError
from hermes_gateway.providers.retry import retry_after_seconds
from hermes_gateway.providers.server_errors import scrubbed, server_message

SPEECH_TIMEOUT_SECONDS = 30.0
SPEECH_MIME = "audio/ogg"  # Ogg with Opus inside: what `opus` answers
_CHUNK = 64 * 1024


class Synthesizer(Protocol):
    def synthesize(self, text: str, into: BinaryIO, *, limit: int, deadline: float | None = None) -> str:
        """Write `text`, spoken, into `into` as Ogg/Opus (at most `limit` bytes, done by `deadline`,
        a time.monotonic()); its mime type. Raises RateLimited or TransientError (429, 5xx,
        timeouts) or PermanentError (refused, over the limit)."""
        ...


class OpenAISpeech:
    def __init__(
        self, base_url: str, api_key: str | None, model: str, voice: str, timeout: float = SPEECH_TIMEOUT_SECONDS
    ):
        if not base_url.startswith(("https://", "http://")):
            raise ConfigError("the text-to-speech base URL must be an http(s) URL")
        self._url = base_url.rstrip("/") + "/audio/speech"
        self._api_key = api_key or None
        self._model = model
        self._voice = voice
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"OpenAISpeech({self._url!r}, model={self._model!r}, voice={self._voice!r})"

    def synthesize(self, text: str, into: BinaryIO, *, limit: int, deadline: float | None = None) -> str:
        body = json.dumps({"model": self._model, "input": text, "voice": self._voice, "response_format": "opus"})
        headers = {"Content-Type": "application/json", "Accept": "audio/ogg, audio/opus, */*"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        timeout = self._timeout if deadline is None else max(0.05, min(self._timeout, deadline - time.monotonic()))
        try:
            with http_pool.stream("POST", self._url, body=body.encode(), headers=headers, timeout=timeout) as answer:
                if answer.status == 429:
                    wait = retry_after_seconds(answer.headers.get("Retry-After")) or 1.0
                    raise RateLimited(wait, "text to speech: rate limited")
                if answer.status >= 500:
                    raise TransientError(f"text to speech: server error HTTP {answer.status}")
                if answer.status >= 300:
                    detail = server_message(answer.read(4096), self._api_key)
                    raise PermanentError(f"text to speech refused the text: HTTP {answer.status}: {detail}")
                copy_audio(answer.read, into, limit, deadline)
        except http_pool.NoAnswer as exc:
            raise exc.transient("text to speech", self._scrub) from None
        except http_pool.Unsendable:
            raise PermanentError("text to speech: the URL or the API key cannot be sent") from None
        if into.tell() == 0:
            raise PermanentError("text to speech answered no audio")
        return SPEECH_MIME

    def _scrub(self, text: str) -> str:
        return scrubbed(text, self._api_key)


def copy_audio(read: Callable[[int], bytes], into: BinaryIO, limit: int, deadline: float | None) -> None:
    """The audio as it arrives, into `into`: at most `limit` bytes, done by `deadline`."""
    written = 0
    while chunk := read(_CHUNK):
        written += len(chunk)
        if written > limit:
            raise PermanentError(f"text to speech: the audio is over the limit of {limit / 1e6:.0f} MB")
        if deadline is not None and time.monotonic() > deadline:
            raise TransientError("text to speech: the audio did not arrive in the time the reply had")
        into.write(chunk)
