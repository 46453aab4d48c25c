"""Text to speech with Amazon Polly (`tts.provider: polly`), as `providers.tts.Synthesizer`.

`SynthesizeSpeech` with `OutputFormat: ogg_opus` answers Ogg/Opus, the format Telegram and WhatsApp
show as a voice note, so nothing is transcoded, as with the OpenAI-compatible speech API. No key:
the function's role may call `polly:SynthesizeSpeech` (infra/capabilities/functions.py). The audio
streams from Polly into the caller's file (`copy_audio`), its socket waits bounded by the reply's
deadline. Polly takes at most 3,000 billed characters a request; `tts.max_chars` is held to that
(POLLY_MAX_CHARS, settings/sections.py). No retries here: a failure leaves the answer as text, with
a short note (services/speech.py).
"""

from __future__ import annotations

import time
from typing import Any, BinaryIO

from hermes_gateway.adapters.aws import client_error
from hermes_gateway.errors import PermanentError, RateLimited, TransientError
from hermes_gateway.providers.tts import SPEECH_MIME, SPEECH_TIMEOUT_SECONDS, copy_audio

_RATE_LIMITED = ("ThrottlingException", "Throttling", "TooManyRequestsException")
# A socket's longest wait, by what is left of the reply's time: the longest step that fits (1 s at least).
_WAIT_STEPS = (1.0, 2.0, 5.0, 10.0, 20.0, SPEECH_TIMEOUT_SECONDS)


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
        self._clients: dict[float, Any] = {}  # by their socket wait (_WAIT_STEPS)

    def __repr__(self) -> str:
        return f"PollySpeech(voice={self._voice!r}, engine={self._engine!r})"

    def _client(self, deadline: float | None) -> Any:
        """A client none of whose socket waits is longer than what is left until `deadline` (a
        time.monotonic()), as the other provider's request is bounded; botocore fixes the waits per
        client, so one is kept per step."""
        import boto3
        from botocore.config import Config

        left = self._timeout if deadline is None else min(self._timeout, deadline - time.monotonic())
        wait = max((step for step in _WAIT_STEPS if step <= left), default=_WAIT_STEPS[0])
        if wait not in self._clients:
            # One try: a failed synthesis leaves the answer as text (services/speech.py). Polly itself
            # checks the request: the runtime's botocore may predate `ogg_opus` in its Polly model (the
            # layer ships no boto3), and must not refuse what Polly takes.
            config = Config(
                connect_timeout=min(5.0, wait), read_timeout=wait, retries={"total_max_attempts": 1},
                parameter_validation=False,
            )  # fmt: skip
            self._clients[wait] = boto3.client(
                "polly", region_name=self._region, endpoint_url=self._endpoint_url, config=config
            )
        return self._clients[wait]

    def synthesize(self, text: str, into: BinaryIO, *, limit: int, deadline: float | None = None) -> str:
        from botocore.exceptions import BotoCoreError, ClientError

        if deadline is not None and time.monotonic() >= deadline:
            raise TransientError("text to speech: no time left for the reply")
        try:
            answer = self._client(deadline).synthesize_speech(
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
