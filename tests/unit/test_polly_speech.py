"""Amazon Polly as the text to speech (`tts.provider: polly`, adapters/polly_speech.py), against a
fake Polly on loopback: botocore signs and sends `SynthesizeSpeech` as it would to AWS, asking for
Ogg/Opus; Polly's refusals, throttling and failures become the speech errors the delivery tells
apart (the answer then goes as text, with a note: tests/unit/test_voice.py)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import pytest

from hermes_gateway.adapters.polly_speech import PollySpeech
from hermes_gateway.errors import ConfigError, PermanentError, RateLimited, TransientError
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.services.delivery import deliver
from hermes_gateway.services.speech import Speaking
from hermes_gateway.settings import load_settings
from tests.fakes.media_server import FakeSpeech, ogg_opus
from tests.fakes.media_store import MemoryMedia
from tests.fakes.telegram_server import FakeTelegram
from tests.unit.test_voice import ANSWER, voice_deps, voice_job

SPOKEN = ogg_opus(1.5, vendor=b"polly voice")


@pytest.fixture
def polly(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSpeech]:
    # botocore signs with whatever credentials it finds; these are the fake's, not a secret
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPOLLYTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "polly-test")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    with FakeSpeech(voice=SPOKEN) as fake:
        yield fake


def synthesizer(polly: FakeSpeech, voice: str = "Joanna", engine: str = "neural") -> PollySpeech:
    return PollySpeech(voice, engine, region="eu-west-1", endpoint_url=polly.polly_url, timeout=5)


def test_polly_is_asked_for_ogg_opus_with_the_voice_and_engine_and_the_audio_streams_in(polly: FakeSpeech) -> None:
    into = io.BytesIO()
    assert synthesizer(polly, "Matthew", "generative").synthesize("Water them at dawn.", into, limit=1_000_000) == (
        "audio/ogg"
    )
    assert into.getvalue() == SPOKEN
    assert polly.polly == [
        {"Engine": "generative", "OutputFormat": "ogg_opus", "Text": "Water them at dawn.", "TextType": "text",
         "VoiceId": "Matthew"},
    ]  # fmt: skip
    # signed for Polly in the client's region, as AWS checks it (whose keys: the environment's, or
    # moto's while another test of the worker holds its mock)
    authorization = polly.requests[0].headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=")
    assert "/eu-west-1/polly/aws4_request, SignedHeaders=" in authorization


def test_polly_refusals_throttling_and_failures_are_told_apart(polly: FakeSpeech) -> None:
    synth = synthesizer(polly)
    too_long = {"x-amzn-ErrorType": "TextLengthExceededException"}
    polly.answer_next(400, {"message": "Maximum text length has been exceeded"}, headers=too_long)
    with pytest.raises(PermanentError, match="TextLengthExceededException: Maximum text length"):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)
    polly.answer_next(400, {"message": "This voice does not support the selected engine"},
                      headers={"x-amzn-ErrorType": "EngineNotSupportedException"})  # fmt: skip
    with pytest.raises(PermanentError, match="EngineNotSupported"):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)
    polly.answer_next(400, {"message": "Rate exceeded"}, headers={"x-amzn-ErrorType": "ThrottlingException"})
    with pytest.raises(RateLimited):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)
    polly.answer_next(500, {"message": "oops"}, headers={"x-amzn-ErrorType": "ServiceFailureException"})
    with pytest.raises(TransientError):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)
    assert len(polly.requests) == 4  # one try each: a failure leaves the answer as text


def test_polly_audio_over_the_limit_empty_or_late_is_refused(polly: FakeSpeech) -> None:
    synth = synthesizer(polly)
    with pytest.raises(PermanentError, match="over the limit"):
        synth.synthesize("hi", io.BytesIO(), limit=100)
    polly.answer_next(200, b"", headers={"Content-Type": "audio/ogg"})
    with pytest.raises(PermanentError, match="no audio"):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)
    with pytest.raises(TransientError, match="no time left"):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000, deadline=time.monotonic() - 1)
    asked = len(polly.requests)
    assert asked == 2  # the late one was never sent


def test_a_slow_polly_is_given_up_by_the_replys_deadline_not_the_clients_timeout(polly: FakeSpeech) -> None:
    synth = PollySpeech("Joanna", "neural", region="eu-west-1", endpoint_url=polly.polly_url, timeout=30)
    polly.answer_next(200, SPOKEN, headers={"Content-Type": "audio/ogg"}, delay=4.0)
    # 1.5 s left for the reply: the socket gives up after a second, not after the client's 30
    with pytest.raises(TransientError, match="polly: ReadTimeoutError"):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000, deadline=time.monotonic() + 1.5)
    # with the whole timeout left, the same slow answer arrives
    polly.answer_next(200, SPOKEN, headers={"Content-Type": "audio/ogg"}, delay=1.5)
    into = io.BytesIO()
    assert synth.synthesize("hi", into, limit=1_000_000) == "audio/ogg" and into.getvalue() == SPOKEN


def test_polly_out_of_reach_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPOLLYTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "polly-test")
    with FakeSpeech() as gone:
        url = gone.polly_url
    synth = PollySpeech("Joanna", "neural", region="eu-west-1", endpoint_url=url, timeout=2)
    with pytest.raises(TransientError, match="polly: EndpointConnectionError"):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)


def test_telegram_gets_a_polly_voice_note_with_the_answer_as_its_caption(polly: FakeSpeech) -> None:
    store = MemoryMedia()
    speaking = Speaking(lambda: synthesizer(polly), 1500)
    with FakeTelegram() as telegram:
        sender = TelegramSender(telegram.base_url, telegram.token)
        result = deliver(voice_job(), voice_deps(sender, store, polly, speaking=speaking))
        ((method, fields),) = telegram.uploads()
    assert result.status == "sent" and method == "sendVoice"
    assert fields["voice"].value == SPOKEN and fields["caption"].text == ANSWER
    assert [asked["Text"] for asked in polly.polly] == [ANSWER] and polly.spoken == []


def test_polly_settings_hold_its_limit_and_engines() -> None:
    chosen = load_settings(env={"GATEWAY_TTS_PROVIDER": "polly"}, config={})
    assert (chosen.tts.polly_voice, chosen.tts.polly_engine, chosen.tts.max_chars) == ("Joanna", "neural", 1500)
    with pytest.raises(ConfigError, match=r"max_chars.*3000 with provider polly"):
        load_settings(env={"GATEWAY_TTS_PROVIDER": "polly", "GATEWAY_TTS_MAX_CHARS": "4000"}, config={})
    with pytest.raises(ConfigError, match="polly_engine"):
        load_settings(env={"GATEWAY_TTS_PROVIDER": "polly", "GATEWAY_TTS_POLLY_ENGINE": "turbo"}, config={})
    # the OpenAI-compatible API takes 4096 characters; only Polly holds it to 3000
    assert load_settings(env={"GATEWAY_TTS_PROVIDER": "openai", "GATEWAY_TTS_MAX_CHARS": "4000"}, config={})
