"""A spoken reply (BEHAVIOUR §6a): the answer synthesized once into the media bucket.

The delivery of an answer whose job says `speak` synthesizes the answer's first `tts.max_chars`
characters (domain.voice.speech_text) into the bucket at `spoken_key`, under the job's delivery id:
a retried delivery (a platform's 5xx, the turn's Deliver task after the Respond task) finds the
audio there and neither synthesizes nor pays for it again. The audio streams from the speech API
into a spooled file and on into the bucket, within the reply's one deadline for its files
(`Fetching.deadline`), and is read back only when the platform sends it. What cannot be had (the
speech API refused or failed, out of time) raises MediaRefused: the answer goes as text, with a
short note, and nothing is retried.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, cast

from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.platforms.outbound_media import LINK_SECONDS, MediaFile
from hermes_gateway.providers.tts import Synthesizer
from hermes_gateway.services.outbound_media import SPOOL_BYTES, Fetching, MediaRefused, read_stored

SPOKEN_NAME = "reply.ogg"


@dataclass(frozen=True)
class Speaking:
    """How answers are spoken: the synthesizer (built on first use; None: speech is not set up)
    and how much of an answer is spoken."""

    synthesizer: Callable[[], Synthesizer | None]
    max_chars: int


def spoken_key(profile: str | None, session: str | None, delivery_id: str) -> str:
    """Beside the delivery's fetched files (`outbound_key`), never an inbound key."""
    return f"{profile or 'default'}/{session or 'push'}/out/{delivery_id}-voice"


def stage_speech(words: str, key: str, how: Fetching, speaking: Speaking) -> MediaFile:
    """`words` (domain.voice.speech_text of the answer) spoken, stored at `key` (synthesized now
    unless an earlier try stored it)."""
    found = how.store.head(key)
    if found is None:
        found = _synthesized(words, key, how, speaking)
    size, mime = found
    return MediaFile(
        key=key,
        kind="voice",
        mime=mime or "audio/ogg",
        name=SPOKEN_NAME,
        size=size,
        read=lambda: read_stored(how.store, key),
        link=lambda: how.store.url(key, LINK_SECONDS),
    )


def _synthesized(words: str, key: str, how: Fetching, speaking: Speaking) -> tuple[int, str]:
    synthesizer = speaking.synthesizer()
    if synthesizer is None:
        raise MediaRefused("speech is not set up")
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spooled:
        spool = cast(BinaryIO, spooled)  # typeshed's SpooledTemporaryFile is no BinaryIO; it acts as one
        try:
            mime = synthesizer.synthesize(words, spool, limit=how.limit, deadline=how.deadline)
        except (TransientError, PermanentError) as exc:
            logger.info("answer not spoken", extra={"reason": str(exc)[:120]})
            metrics.add_metric(name="SpeechFailed", unit=MetricUnit.Count, value=1)
            raise MediaRefused("the speech service failed") from None
        size = spool.tell()
        spool.seek(0)
        how.store.put_file(key, spool, mime)
    metrics.add_metric(name="SpeechCharacters", unit=MetricUnit.Count, value=len(words))
    return size, mime
