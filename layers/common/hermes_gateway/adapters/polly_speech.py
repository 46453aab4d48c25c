"""Text to speech with Amazon Polly (`tts.provider: polly`), as `providers.tts.Synthesizer`.

`SynthesizeSpeech` with `OutputFormat: ogg_opus` answers Ogg/Opus, the format Telegram and WhatsApp
show as a voice note, so nothing is transcoded, as with the OpenAI-compatible speech API. No key:
the function's role may call `polly:SynthesizeSpeech` (infra/capabilities/functions.py). The audio
streams from Polly into the caller's file (`copy_audio`). Polly takes at most 3,000 billed
characters a request; `tts.max_chars` is held to that (POLLY_MAX_CHARS, settings/sections.py). No retries here: a
failure leaves the answer as text, with a short note (services/speech.py).
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import Any, BinaryIO

from hermes_gateway.adapters.aws import client_error
from hermes_gateway.errors import PermanentError, RateLimited, TransientError
from hermes_gateway.providers.tts import SPEECH_MIME, SPEECH_TIMEOUT_SECONDS, copy_audio

_RATE_LIMITED = ("ThrottlingException", "Throttling", "TooManyRequestsException")


class PollySpeech:
    def __init__(
        self,
        voice: str,
        engine: str,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        timeout: float = SPEECH_TIMEOUT_SECONDS,
    ) -> None:
        self._voice = voice
        self._engine = engine
        self._region = region
        self._endpoint_url = endpoint_url or None  # None: botocore's (AWS_ENDPOINT_URL_POLLY, else AWS)
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"PollySpeech(voice={self._voice!r}, engine={self._engine!r})"

    @cached_property
    def _client(self) -> Any:
        import boto3
        from botocore.config import Config

        # One try: a failed synthesis leaves the answer as text (services/speech.py). Polly itself
        # checks the request: the runtime's botocore may predate `ogg_opus` in its Polly model (the
        # layer ships no boto3), and must not refuse what Polly takes.
        config = Config(
            connect_timeout=5, read_timeout=self._timeout, retries={"total_max_attempts": 1}, parameter_validation=False
        )
        return boto3.client("polly", region_name=self._region, endpoint_url=self._endpoint_url, config=config)

    def synthesize(self, text: str, into: BinaryIO, *, limit: int, deadline: float | None = None) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        if deadline is not None and time.monotonic() >= deadline:
            raise TransientError("text to speech: no time left for the reply")
        try:
            answer = self._client.synthesize_speech(
                Engine=self._engine, OutputFormat="ogg_opus", Text=text, TextType="text", VoiceId=self._voice
            )
            with answer["AudioStream"] as audio:
                copy_audio(audio.read, into, limit, deadline)
        except ClientError as exc:
            raise _error(exc) from None
        except BotoCoreError as exc:  # no connection, a timeout
            raise TransientError(f"text to speech: polly: {type(exc).__name__}") from None
        if into.tell() == 0:
            raise PermanentError("text to speech answered no audio")
        return SPEECH_MIME


def _error(exc: Any) -> Exception:
    code, status, message = client_error(exc)
    # Polly's message says what is wrong (a voice the engine lacks, too much text); it holds no secret.
    detail = f"text to speech: polly: {code}: {message[:160]}"
    if code in _RATE_LIMITED or status == 429:
        return RateLimited(1.0, detail)
    if status >= 500 or code == "ServiceFailureException":
        return TransientError(detail)
    return PermanentError(detail)
