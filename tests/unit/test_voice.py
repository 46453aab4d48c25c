"""Spoken replies (BEHAVIOUR §6a, §9): `/voice`, when an answer is spoken and what of it, and a
delivery that synthesizes the answer once however often it is tried."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway.domain.media import Attachment
from hermes_gateway.domain.source import InboundMessage, SessionSource
from hermes_gateway.domain.targets import ReplyTarget
from hermes_gateway.domain.turn_state import Turn, TurnKind, TurnState
from hermes_gateway.domain.turns import QueuedInput
from hermes_gateway.domain.voice import speech_text, wants_voice
from hermes_gateway.errors import PermanentError, TransientError
from hermes_gateway.platforms.base import Sender
from hermes_gateway.platforms.line import LineSender
from hermes_gateway.platforms.telegram import TelegramSender
from hermes_gateway.platforms.whatsapp import WhatsAppSender
from hermes_gateway.providers.tts import OpenAISpeech
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from hermes_gateway.services.lifecycle import Successor
from hermes_gateway.services.outbound_media import Fetching
from hermes_gateway.services.router import Access, route_message
from hermes_gateway.services.speech import Speaking
from hermes_gateway.services.turn.jobs import reply_job
from tests.fakes.access import FakePairingStore
from tests.fakes.loopback import ScriptedAnswer
from tests.fakes.media_server import FakeSpeech, ogg_opus
from tests.fakes.media_store import MemoryMedia
from tests.fakes.services import FakeDeliveryQueue, FakeEvents, FakeOutbox, FakeStarter, make_settings
from tests.fakes.sessions import memory_stores
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.upload_server import FakeApi, fields_of
from tests.unit.test_commands import Chat

NOW = 1_764_400_000.0
VOICE = Attachment("voice", mime="audio/ogg", ref={"file_id": "v1"})
SONG = Attachment("audio", mime="audio/mpeg", ref={"file_id": "a1"})
SPEECH_ON = {"GATEWAY_TTS_PROVIDER": "openai"}
ANSWER = "Water the plants at six. Then rest."


def key(*parts: str) -> str:
    return "-".join(parts)  # assembled here: no secret-shaped literal on disk


# -- when, and what --------------------------------------------------------------------------


def test_auto_answers_a_voice_note_with_a_voice_note_and_on_or_off_decide_alone() -> None:
    assert wants_voice(None, [VOICE]) and wants_voice("auto", [SONG, VOICE])
    assert not wants_voice("auto", [SONG]) and not wants_voice(None, [])
    assert wants_voice("on", []) and not wants_voice("off", [VOICE])
    assert wants_voice("loud", [VOICE])  # a value from elsewhere is the default


def test_the_spoken_part_ends_at_a_sentence_within_the_limit() -> None:
    text = "First sentence here. " * 20 + "A last one without an end"
    spoken = speech_text(text, 100)
    assert len(spoken) <= 100 and spoken.endswith("here.")
    assert speech_text("one two three four five", 12) == "one two"  # no sentence: a whole word
    assert speech_text("Short.", 100) == "Short."


def test_markup_code_and_urls_are_not_read_aloud() -> None:
    text = "## Plan\n**Water** the [plants](https://x.example/p).\n```py\nprint(1)\n```\nSee https://x.example/a ok"
    assert speech_text(text, 500) == "Plan Water the plants. See ok"
    assert speech_text("```\ncode only\n```", 500) == ""


# -- /voice ---------------------------------------------------------------------------------


def test_voice_keeps_the_chats_choice_on_its_route_through_a_new_session() -> None:
    chat = Chat(SPEECH_ON)
    assert chat.reply("/voice") == "Voice replies on auto: a voice note is answered with a voice note."
    assert chat.reply("/voice on") == "Voice replies on: every answer here comes as a voice note too."
    route = chat.stores.routes.get(chat.key)
    assert route is not None and route.voice == "on"
    chat.reply("/new")
    renewed = chat.stores.routes.get(chat.key)
    assert renewed is not None and renewed.session_id != route.session_id and renewed.voice == "on"
    assert chat.reply("/voice OFF") == "Voice replies off: answers here are text only."
    assert chat.stores.routes.get(chat.key).voice == "off"  # type: ignore[union-attr]
    assert chat.reply("/voice loud").startswith("Usage: /voice on | off | auto")
    assert chat.stores.routes.get(chat.key).voice == "off"  # type: ignore[union-attr]


def test_voice_says_where_it_cannot_speak() -> None:
    assert "not set up" in Chat({}).reply("/voice on")
    line = Chat(SPEECH_ON, source=SessionSource("line", chat_id="U1", user_id="U1"))
    assert line.reply("/voice on") == "Answers on line stay text: it has no voice notes the gateway can send."
    assert line.stores.routes.get(line.key) is None  # nothing stored


def test_voice_in_a_shared_group_is_for_admins() -> None:
    group = SessionSource("telegram", chat_id="-100", chat_type="group", user_id="42", user_name="Al")
    env = {**SPEECH_ON, "GATEWAY_GROUP_SESSIONS_PER_USER": "false"}
    assert Chat(env, source=group).reply("/voice on") == "/voice is for admins here."
    assert Chat({**env, "TELEGRAM_ADMINS": "42"}, source=group).reply("/voice on").startswith("Voice replies on")


def test_voice_runs_without_a_once_per_message_receipt() -> None:
    # Setting a mode twice changes nothing more: the command costs its one route write, no receipt
    from hermes_gateway.services.commands import CommandContext, answer_command

    class Receipts:
        claims = 0

        def claim(self, *args: Any) -> Any:
            Receipts.claims += 1
            raise AssertionError("no receipt for /voice")

    chat = Chat(SPEECH_ON)
    context = CommandContext(chat.source, chat.settings, NOW, chat.key, chat.stores, receipts=Receipts(), event_id="e1")  # type: ignore[arg-type]
    assert answer_command("/voice off", context) is not None and Receipts.claims == 0


# -- the turn carries it --------------------------------------------------------------------


def _message(event: str, text: str = "", attachments: tuple[Attachment, ...] = ()) -> InboundMessage:
    source = SessionSource("telegram", chat_id="99", user_id="42", user_name="Al", message_id=event)
    return InboundMessage(
        source=source, text=text, event_id=f"telegram:default:{event}", received_at=NOW,
        attachments=tuple(a.to_dict() for a in attachments),
    )  # fmt: skip


def _started(starter: FakeStarter, event: str) -> Turn:
    (state,) = [s for s in starter.started.values() if s["turn"]["event_id"] == f"telegram:default:{event}"]
    return TurnState.from_json(state).turn


def test_a_voice_note_starts_a_turn_that_speaks_unless_the_chat_said_off() -> None:
    stores, starter = memory_stores(), FakeStarter()
    access = Access(pairing=FakePairingStore(), replies=FakeDeliveryQueue(), events=FakeEvents())
    settings = make_settings({**SPEECH_ON, "TELEGRAM_ALLOWED_USERS": "42"})
    routed = 0

    def say(event: str, text: str = "", *files: Attachment) -> None:
        nonlocal routed
        routed += 1
        route_message(
            _message(event, text, files), settings=settings, stores=stores, starter=starter, access=access,
            now=NOW + routed * 1000,
        )  # fmt: skip

    say("1", "", VOICE)
    say("2", "typed")
    assert (_started(starter, "1").speak, _started(starter, "2").speak) == (True, False)
    say("3", "/voice off")
    say("4", "", VOICE)
    assert _started(starter, "4").speak is False and _started(starter, "4").voice == "off"
    say("5", "/voice on")
    say("6", "typed again")
    assert _started(starter, "6").speak is True


def test_the_turn_of_queued_messages_speaks_by_the_chats_mode_and_their_files() -> None:
    source = SessionSource("telegram", chat_id="99", user_id="42")
    target = ReplyTarget("telegram", "99")

    def queued(*files: Attachment) -> QueuedInput:
        return QueuedInput("e", "", NOW, source, target, attachments=files)

    plan = Successor("k", "s", NOW, answer_together=True).plan
    assert plan([queued(), queued(VOICE)], 3).turn.speak is True
    assert Successor("k", "s", NOW, answer_together=True, voice="off").plan([queued(VOICE)], 3).turn.speak is False
    assert Successor("k", "s", NOW, answer_together=False, voice="on").plan([queued()], 3).turn.voice == "on"


def test_only_the_models_answer_asks_to_be_spoken() -> None:
    turn = Turn("t1", TurnKind.CHAT, NOW, session_id="s", reply_to=ReplyTarget("telegram", "99"), speak=True)
    assert reply_job(turn, "t1", ANSWER, answer=True)["speak"] is True
    assert "speak" not in reply_job(turn, "t1-failed", "Sorry")  # an apology, a question: text only
    assert "speak" not in reply_job(Turn("t2", TurnKind.CHAT, NOW, reply_to=turn.reply_to), "t2", ANSWER, answer=True)
    assert TurnState.from_json(TurnState(turn).to_json()).turn.speak is True


# -- the delivery speaks it, once -----------------------------------------------------------


@pytest.fixture
def speech() -> Iterator[FakeSpeech]:
    with FakeSpeech() as fake:
        yield fake


def speaking(speech: FakeSpeech, max_chars: int = 1500) -> Speaking:
    return Speaking(lambda: OpenAISpeech(speech.base_url, key("sk", "tts"), "gpt-4o-mini-tts", "alloy"), max_chars)


def voice_deps(sender: Sender, store: MemoryMedia, speech: FakeSpeech, **extra: Any) -> DeliveryDeps:
    deps: dict[str, Any] = {
        "outbox": FakeOutbox(), "sender_for": lambda platform, via: sender, "now": lambda: NOW,
        "profile": "default", "media": Fetching(store, 1_000_000, local=True), "speaking": speaking(speech),
    }  # fmt: skip
    deps.update(extra)
    return DeliveryDeps(**deps)


def voice_job(text: str = ANSWER, platform: str = "telegram", chat_id: str = "99", **extra: Any) -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": "turn-1", "turn_id": "turn-1", "session": "s1", "session_id": "sess-A",
            "target": {"platform": platform, "chat_id": chat_id}, "text": text, "speak": True, **extra,
        }
    )  # fmt: skip


def test_telegram_gets_the_answer_as_a_voice_note_with_its_text_as_the_caption(speech: FakeSpeech) -> None:
    store = MemoryMedia()
    with FakeTelegram() as telegram:
        result = deliver(voice_job(), voice_deps(TelegramSender(telegram.base_url, telegram.token), store, speech))
        uploads = telegram.uploads()
        assert telegram.sent == []  # one message: the voice note, captioned
    assert result.status == "sent"
    ((method, fields),) = uploads
    assert method == "sendVoice" and fields["caption"].text == ANSWER
    assert fields["voice"].value == ogg_opus(2.0, vendor=b"spoken") and fields["voice"].content_type == "audio/ogg"
    assert speech.spoken == [{"model": "gpt-4o-mini-tts", "input": ANSWER, "voice": "alloy", "response_format": "opus"}]
    assert speech.requests[0].headers["authorization"] == "Bearer " + key("sk", "tts")
    assert store.puts == ["default/s1/out/turn-1-voice"]


def test_a_retried_delivery_never_synthesizes_or_pays_again(speech: FakeSpeech) -> None:
    store, outbox = MemoryMedia(), FakeOutbox()
    with FakeTelegram() as telegram:
        telegram.answer_next(500, {"ok": False, "error_code": 500, "description": "Internal Server Error"})
        deps = voice_deps(TelegramSender(telegram.base_url, telegram.token), store, speech, outbox=outbox)
        with pytest.raises(TransientError):
            deliver(voice_job(), deps)
        result = deliver(voice_job(), deps)
        again = deliver(voice_job(), deps)
        methods = [m for m, _ in telegram.uploads()]
    assert len(speech.spoken) == 1  # synthesized once, for three tries
    assert store.puts == ["default/s1/out/turn-1-voice"]
    assert methods == ["sendVoice", "sendVoice"] and (result.sent_chunks, again.sent_chunks) == (1, 0)
    assert outbox.entries["turn-1#v"].media == [
        {"key": "default/s1/out/turn-1-voice", "name": "reply.ogg", "kind": "voice", "mime": "audio/ogg"}
    ]


def test_whatsapp_gets_the_text_then_a_voice_message(speech: FakeSpeech) -> None:
    with FakeApi() as api:
        api.routes["/555/media"] = ScriptedAnswer(200, {"id": "MEDIA1"})
        api.routes["/555/messages"] = ScriptedAnswer(200, {"messages": [{"id": "wamid.1"}]})
        sender = WhatsAppSender(api.base_url, key("wa", "test"), "555")
        deliver(voice_job(platform="whatsapp", chat_id="15551234567"), voice_deps(sender, MemoryMedia(), speech))
        uploaded = fields_of(api.to("/555/media")[0])
        text, voice = [r.body for r in api.to("/555/messages")]
    # an audio message carries no caption: the text goes first, whole, then the voice message
    assert text["type"] == "text" and text["text"]["body"] == ANSWER
    assert voice["type"] == "audio" and voice["audio"] == {"id": "MEDIA1", "voice": True}
    assert uploaded["type"].text == "audio/ogg" and uploaded["file"].filename == "reply.ogg"


def test_only_the_first_max_chars_are_spoken_and_the_whole_answer_is_sent(speech: FakeSpeech) -> None:
    long = "This sentence is spoken. " * 100  # 2,500 characters: more than a caption too
    with FakeTelegram() as telegram:
        deps = voice_deps(TelegramSender(telegram.base_url, telegram.token), MemoryMedia(), speech)
        deps.speaking = speaking(speech, max_chars=200)
        deliver(voice_job(long), deps)
        sent = [s["text"] for s in telegram.sent]
        methods = [m for m, _ in telegram.uploads()]
    (said,) = speech.spoken
    assert len(said["input"]) <= 200 and said["input"].endswith("spoken.")
    assert sent == [long] and methods == ["sendVoice"]  # the text first, then the voice note


def test_a_synthesis_that_fails_leaves_the_text_with_a_note_and_is_not_retried(speech: FakeSpeech) -> None:
    speech.answer_next(503, {"error": {"message": "overloaded " + key("sk", "tts")}})
    with FakeTelegram() as telegram:
        sender = TelegramSender(telegram.base_url, telegram.token)
        result = deliver(voice_job(), voice_deps(sender, MemoryMedia(), speech))
        sender_calls = [s["text"] for s in telegram.sent]
        assert telegram.uploads() == []
    assert result.status == "sent"
    assert sender_calls == [ANSWER + "\n\n(I could not say this aloud: the speech service failed.)"]


def test_nothing_is_spoken_without_speech_set_up_or_on_a_platform_without_voice_notes(speech: FakeSpeech) -> None:
    with FakeTelegram() as telegram:
        deps = voice_deps(TelegramSender(telegram.base_url, telegram.token), MemoryMedia(), speech, speaking=None)
        deliver(voice_job(), deps)
        assert [s["text"] for s in telegram.sent] == [ANSWER] and telegram.uploads() == []
    with FakeApi() as api:
        api.routes["/v2/bot/message/push"] = ScriptedAnswer(200, {"sentMessages": [{"id": "L1"}]})
        line = LineSender(api.base_url, key("l", "t"))
        deliver(voice_job(platform="line", chat_id="U1"), voice_deps(line, MemoryMedia(), speech))
    assert speech.spoken == []


def test_a_streamed_answer_is_followed_by_its_voice_note_without_a_caption(speech: FakeSpeech) -> None:
    outbox = FakeOutbox()
    outbox.record_claimed(
        "turn-1#1", platform="telegram", chat_id="99", thread_id=None, text=ANSWER, turn_id="turn-1", chunk=1,
        chunks=1, now=NOW, status="streaming", platform_message_id="700",
    )  # fmt: skip
    with FakeTelegram() as telegram:
        deps = voice_deps(TelegramSender(telegram.base_url, telegram.token), MemoryMedia(), speech, outbox=outbox)
        deliver(voice_job(streamed="shown"), deps)
        ((method, fields),) = telegram.uploads()
        assert telegram.sent == []  # the streamed message shows the text already
    assert method == "sendVoice" and "caption" not in fields
    assert outbox.entries["turn-1#1"].status == "sent" and outbox.entries["turn-1#v"].status == "sent"


# -- the speech API -------------------------------------------------------------------------


def test_the_speech_apis_failures_are_told_apart_and_never_carry_the_key(speech: FakeSpeech) -> None:
    secret = key("sk", "tts")
    synth = OpenAISpeech(speech.base_url, secret, "tts-1", "nova")
    speech.answer_next(400, {"error": {"message": f"bad voice for {secret}"}})
    with pytest.raises(PermanentError) as refused:
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)
    assert "bad voice" in str(refused.value) and secret not in str(refused.value)
    speech.answer_next(500, {"error": "down"})
    with pytest.raises(TransientError):
        synth.synthesize("hi", io.BytesIO(), limit=1_000_000)
    with pytest.raises(PermanentError, match="over the limit"):
        synth.synthesize("hi", io.BytesIO(), limit=100)
    into = io.BytesIO()
    assert synth.synthesize("hi", into, limit=1_000_000) == "audio/ogg" and into.getvalue().startswith(b"OggS")
