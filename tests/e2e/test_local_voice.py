"""Spoken replies through local mode (BEHAVIOUR §6a, §9): a voice note in, a voice note out, on
Telegram and WhatsApp against their fakes, with a fake model and one fake speech server on loopback
that both transcribes and speaks; `/voice off` stops it. Each test runs twice: speaking through the
OpenAI-compatible API, and through Amazon Polly (`tts.provider: polly`; botocore pointed at the fake
by AWS_ENDPOINT_URL_POLLY, local mode's other AWS calls at its moto).

Telegram answers with `sendVoice`, the answer's text its caption; WhatsApp with the text, then a
voice message (`voice: true`) of the audio uploaded as Ogg/Opus. The speech server is asked once per
answer, for Ogg/Opus (`response_format: opus`, Polly's `ogg_opus`), and the answer stays in the
transcript as text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from hermes_local.runtime import LocalGateway
from tests.e2e.conftest import BASE_ENV, Client
from tests.e2e.test_local_media_platforms import wait_for
from tests.fakes.loopback import ScriptedAnswer
from tests.fakes.media_server import FakeSpeech, MediaTelegram, ogg_opus
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.upload_server import FakeApi, fields_of
from tests.fakes.webhook_signers import SECRETS, Keys, Request, Sign, telegram_sign, whatsapp_sign

pytestmark = pytest.mark.e2e

HEARD = "when should I water the plants"
SPOKEN = ogg_opus(2.0, vendor=b"the answer, spoken")


@dataclass
class World:
    client: Client
    keys: Keys
    openai: FakeOpenAI
    speech: FakeSpeech
    telegram: MediaTelegram
    whatsapp: FakeApi
    provider: str

    def spoken(self) -> list[str]:
        """The texts the speech service was asked to speak, in order, each asked for Ogg/Opus."""
        if self.provider == "polly":
            assert all(asked["OutputFormat"] == "ogg_opus" for asked in self.speech.polly)
            return [asked["Text"] for asked in self.speech.polly]
        assert all(asked["response_format"] == "opus" for asked in self.speech.spoken)
        return [asked["input"] for asked in self.speech.spoken]

    def send(self, signer: Any, n: int, body: dict[str, Any]) -> None:
        host = self.client.gateway.url.removeprefix("http://")
        request: Request = signer(Sign(self.keys, host, time.time(), False), n, json.dumps(body).encode())
        status, answer = self.client.request(request.method, request.path, request.body, request.headers)
        assert status == 200, (status, answer)


@pytest.fixture(scope="module", params=["openai", "polly"])
def world(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    provider: str = request.param
    keys = Keys.generate()
    openai, speech, telegram = FakeOpenAI(), FakeSpeech(text=HEARD, voice=SPOKEN), MediaTelegram()
    whatsapp = FakeApi(fallback=ScriptedAnswer(200, {"messaging_product": "whatsapp", "messages": [{"id": "wamid.o"}]}))
    for fake in (openai, speech, telegram, whatsapp):
        fake.start()
    whatsapp.routes["/v21.0/555/media"] = ScriptedAnswer(200, {"id": "MEDIA-VOICE"})
    environ = {
        **BASE_ENV,
        **SECRETS,
        "HERMES_LOCAL_STATE": str(tmp_path_factory.mktemp("voice") / "local.json"),
        "GATEWAY_ALLOW_ALL_USERS": "true",
        "GATEWAY_PROVIDER": "openai",
        "GATEWAY_MODEL": "gpt-test",
        "OPENAI_BASE_URL": openai.base_url,
        "STT_BASE_URL": speech.base_url,
        "GATEWAY_STT_ECHO_TRANSCRIPTS": "false",
        "GATEWAY_TTS_PROVIDER": provider,
        "TTS_BASE_URL": speech.base_url,
        "AWS_ENDPOINT_URL_POLLY": speech.polly_url,
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_BASE_URL": telegram.base_url,
        "TELEGRAM_STREAMING": "false",  # the answer as one voice note with its caption (see the unit tests)
        "WHATSAPP_ACCESS_TOKEN": "-".join(("wa", "voice", "e2e")),
        "WHATSAPP_API_BASE_URL": whatsapp.base_url + "/v21.0",
        "WHATSAPP_PHONE_NUMBER_ID": "555",
    }
    local = LocalGateway(port=0, environ=environ, tick_seconds=3600, poll_wait_seconds=1).start()
    try:
        yield World(Client(local), keys, openai, speech, telegram, whatsapp, provider)
    finally:
        local.wait_idle()
        local.stop()
        for fake in (openai, speech, telegram, whatsapp):
            fake.stop()


def telegram_update(n: int, **content: Any) -> dict[str, Any]:
    chat = {"id": 4242, "type": "private", "first_name": "Al"}
    message = {"message_id": n, "date": int(time.time()), "chat": chat, "from": {"id": 42, "first_name": "Al"}}
    return {"update_id": n, "message": {**message, **content}}


def telegram_voice(w: World, n: int) -> dict[str, Any]:
    w.telegram.add_file(f"voice-{n}", ogg_opus(3.0, vendor=b"telegram"))
    voice = {"file_id": f"voice-{n}", "file_unique_id": f"u{n}", "duration": 3, "mime_type": "audio/ogg"}
    return telegram_update(n, voice=voice)


def whatsapp_voice(w: World, n: int) -> dict[str, Any]:
    media_id = f"77{n:08d}"
    data = ogg_opus(3.0, vendor=b"whatsapp")
    w.whatsapp.routes[f"/v21.0/{media_id}"] = ScriptedAnswer(200, {
        "url": w.whatsapp.base_url + f"/dl/{media_id}", "mime_type": "audio/ogg; codecs=opus", "file_size": len(data),
        "id": media_id})  # fmt: skip
    w.whatsapp.routes[f"/dl/{media_id}"] = ScriptedAnswer(200, data, {"Content-Type": "application/octet-stream"})
    audio = {"mime_type": "audio/ogg; codecs=opus", "voice": True, "sha256": "ab", "id": media_id}
    message = {"from": "15551234567", "id": f"wamid.voice{n}", "timestamp": str(int(time.time())), "type": "audio",
               "audio": audio}  # fmt: skip
    value = {"messaging_product": "whatsapp", "metadata": {"display_phone_number": "1555", "phone_number_id": "555"},
             "contacts": [{"wa_id": "15551234567", "profile": {"name": "Wa"}}], "messages": [message]}  # fmt: skip
    return {"object": "whatsapp_business_account", "entry": [{"id": "W", "changes": [{"field": "messages",
            "value": value}]}]}  # fmt: skip


def test_telegram_answers_a_voice_note_with_a_voice_note_until_voice_is_off(world: World) -> None:
    answer = "Water them at six, after the heat."
    world.openai.reply_next(answer)
    world.send(telegram_sign, 1, telegram_voice(world, 1))

    [(method, fields)] = wait_for(lambda: world.telegram.uploads("sendVoice"))
    assert method == "sendVoice" and fields["voice"].value == SPOKEN and fields["caption"].text == answer
    assert world.client.gateway.wait_idle(timeout=20.0)
    assert world.spoken() == [answer]
    assert world.telegram.sent == []  # one message: the voice note with its text
    row = [r for r in world.client.outbox(platform="telegram") if r.get("media")]
    assert [r["media"][0]["kind"] for r in row] == ["voice"]

    world.send(telegram_sign, 2, telegram_update(2, text="/voice off"))
    wait_for(lambda: [s for s in world.telegram.sent if s["text"].startswith("Voice replies off")])
    world.openai.reply_next("Six, again.")
    world.send(telegram_sign, 3, telegram_voice(world, 3))

    wait_for(lambda: [s for s in world.telegram.sent if s["text"] == "Six, again."])
    assert world.client.gateway.wait_idle(timeout=20.0)
    assert len(world.telegram.uploads("sendVoice")) == 1 and len(world.spoken()) == 1  # nothing spoken


def test_whatsapp_answers_a_voice_note_with_its_text_and_a_voice_message(world: World) -> None:
    answer = "Every other evening."
    spoken_before = len(world.spoken())
    world.openai.reply_next(answer)
    world.send(whatsapp_sign, 11, whatsapp_voice(world, 11))

    def replies() -> list[dict[str, Any]]:
        return [r.body for r in world.whatsapp.to("/v21.0/555/messages") if r.body.get("type") in ("text", "audio")]

    text, voice = wait_for(lambda: [m for m in replies() if m["type"] == "audio"] and replies())
    assert text["text"]["body"] == answer and text["context"] == {"message_id": "wamid.voice11"}
    assert voice["audio"] == {"id": "MEDIA-VOICE", "voice": True}
    [upload] = world.whatsapp.to("/v21.0/555/media")
    uploaded = fields_of(upload)
    assert uploaded["file"].value == SPOKEN and uploaded["type"].text == "audio/ogg"
    assert world.spoken()[spoken_before:] == [answer]
    assert world.client.gateway.wait_idle(timeout=20.0)
