"""iMessage through BlueBubbles: the webhook secret in the URL, the server's events as they are
(tests/fixtures/bluebubbles/: its `new-message` DM, group, attachment, own echoes, tapback,
`updated-message`, typing and read status), what each becomes, session keys, the bad-input
matrix through the ingress, and sending, files and de-duplication against a fake server."""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import BadRequest, OutcomeUnknown, PermanentError, TransientError, Unauthorized
from hermes_gateway.platforms import bluebubbles
from hermes_gateway.platforms.base import Target, send_key
from hermes_gateway.platforms.bluebubbles import BlueBubblesSender, chat_guid, parse_event, verify_secret
from hermes_gateway.platforms.media import MediaTooLarge, MediaUnavailable
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, Ignored, handle_webhook
from tests.fakes import platforms
from tests.fakes.bluebubbles_server import FakeBlueBubbles
from tests.fakes.services import FakeEnqueue, make_settings

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bluebubbles"
SECRET = "hook-" + "s3cret" * 4  # the webhook secret of these tests, assembled at run time
NOW = 1_752_345_680.0  # the fixtures' time
DM_GUID = "iMessage;-;+15555550123"
GROUP_GUID = "iMessage;+;chat512345678901234567"


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def changed(name: str, **data: Any) -> dict[str, Any]:
    """A fixture with fields of its `data` replaced (None: removed)."""
    event = copy.deepcopy(fixture(name))
    for key, value in data.items():
        if value is None:
            event["data"].pop(key, None)
        else:
            event["data"][key] = value
    return event


def parse(event: Any) -> InboundMessage | Ignored:
    return parse_event(event, received_at=NOW)


def message(event: Any) -> InboundMessage:
    parsed = parse(event)
    assert isinstance(parsed, InboundMessage), parsed
    return parsed


# --- the webhook secret ------------------------------------------------------------------------


def test_the_secret_in_the_url_is_accepted() -> None:
    verify_secret({"password": SECRET}, SECRET)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ({}, "missing"),
        ({"password": ""}, "missing"),
        ({"token": SECRET}, "missing"),  # BlueBubbles' own aliases are not this secret's name
        ({"guid": SECRET}, "missing"),
        ({"password": SECRET[:-1]}, "does not match"),
        ({"password": SECRET + "x"}, "does not match"),
        ({"password": SECRET + "é"}, "does not match"),
        ({"password": f"{SECRET},{SECRET}"}, "does not match"),  # a repeated parameter, comma-joined
    ],
)
def test_a_wrong_or_missing_secret_is_refused_without_naming_it(query: dict[str, str], reason: str) -> None:
    with pytest.raises(Unauthorized, match=reason) as caught:
        verify_secret(query, SECRET)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("expected", [None, ""])
def test_without_a_configured_secret_everything_is_refused(expected: str | None) -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        verify_secret({"password": ""}, expected)


# --- what each event becomes -------------------------------------------------------------------


def test_a_dm_is_keyed_by_the_handle_and_answered_in_its_chat() -> None:
    found = message(fixture("new_message_dm_text"))
    source = found.source
    assert (source.platform, source.chat_type, source.chat_id) == ("bluebubbles", "dm", DM_GUID)
    assert (source.user_id, source.message_id) == ("+15555550123", "6F4D2A8E-3B1C-4E7F-9A2D-5C8B1E0F7A31")
    assert found.text == "Hello from iMessage"
    assert found.event_id == "bluebubbles:6F4D2A8E-3B1C-4E7F-9A2D-5C8B1E0F7A31"
    assert found.extra == {"sent_at": 1_752_345_678.901}
    assert found.reply_to_message_id is None and found.attachments == ()
    assert build_session_key(source) == "agent:main:bluebubbles:dm:+15555550123"


def test_a_group_message_is_keyed_by_the_chat_and_its_sender() -> None:
    source = message(fixture("new_message_group_text")).source
    assert (source.chat_type, source.chat_id, source.chat_name) == ("group", GROUP_GUID, "Weekend Plans")
    assert source.user_id == "+15555550124"
    assert build_session_key(source) == "agent:main:bluebubbles:group:chat512345678901234567:+15555550124"
    shared = build_session_key(source, group_sessions_per_user=False)
    assert shared == "agent:main:bluebubbles:group:chat512345678901234567"


def test_a_macos_26_chat_guid_keeps_the_same_session_and_is_answered_as_it_is() -> None:
    old, new = message(fixture("new_message_dm_text")), message(fixture("new_message_dm_text_macos26_any_guid"))
    assert new.source.chat_id == "any;-;+15555550123"
    assert build_session_key(new.source) == build_session_key(old.source)
    sms = changed("new_message_dm_text", chats=[{"guid": "SMS;-;+15555550123", "style": 45}])
    assert build_session_key(message(sms).source) == build_session_key(old.source)


def test_an_image_becomes_a_reference_fetched_by_its_guid() -> None:
    for name in ("new_message_attachment_image", "new_message_attachment_not_downloaded"):
        found = message(fixture(name))
        assert found.text == ""
        assert found.attachments == (
            {
                "kind": "image",
                "mime": "image/jpeg",
                "size": 482133,
                "name": "IMG_0421.jpeg",
                "ref": {"guid": "9C8B7A6F-5E4D-4C3B-A2B1-0F9E8D7C6B5A"},
            },
        )


def test_an_audio_message_is_a_voice_note_and_a_link_previews_payload_is_no_file() -> None:
    voice = {"guid": "at_0_AUDIO", "uti": "com.apple.coreaudio-format", "mimeType": "audio/x-caf",
             "transferName": "Audio Message.caf", "totalBytes": 20480}  # fmt: skip
    preview = {"guid": "at_1_PREVIEW", "uti": "dyn.x", "mimeType": None, "transferName": "X.pluginPayloadAttachment"}
    found = message(changed("new_message_attachment_image", attachments=[voice, preview]))
    assert [(a["kind"], a["ref"]["guid"]) for a in found.attachments] == [("voice", "at_0_AUDIO")]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("new_message_from_me_echo", "own_message"),
        ("new_message_from_me_send_match", "own_message"),
        ("new_message_tapback_love", "reaction"),
        ("updated_message_edited", "edited"),
        ("updated_message_delivered_read", "message_status"),
        ("typing_indicator_started", "typing"),
        ("typing_indicator_stopped", "typing"),
        ("chat_read_status_changed", "read_status"),
        ("hello_world", "unsupported_event"),
    ],
)
def test_events_that_are_no_message_are_acknowledged_and_left_out(name: str, reason: str) -> None:
    assert parse(fixture(name)) == Ignored(reason)


def test_the_docs_own_examples_are_read_too() -> None:
    examples = fixture("docs_webhook_examples")
    minimal = parse_event(examples["new_message_doc_example"], received_at=1_720_000_001.0)  # its own time
    assert isinstance(minimal, InboundMessage)
    # No handle in the minimal example: a DM's sender is the chat's other party
    assert (minimal.source.chat_type, minimal.source.user_id, minimal.text) == ("dm", "<address>", "Hello!")
    assert parse(examples["typing_indicator_doc_example"]) == Ignored("typing")
    assert parse(examples["new_server_doc_example"]) == Ignored("unsupported_event")  # `data` is a string


def test_an_unsent_message_a_sticker_and_a_group_event_are_left_out() -> None:
    assert parse(changed("updated_message_edited", dateRetracted=1_752_345_731_000)) == Ignored("unsent")
    assert parse(changed("new_message_dm_text", associatedMessageType="sticker")) == Ignored("reaction")
    assert parse(changed("new_message_group_text", itemType=2, text=None)) == Ignored("system_message")
    assert parse(changed("new_message_dm_text", text="  ")) == Ignored("no_text")


def test_an_inline_reply_keeps_the_id_of_the_message_it_answers_and_a_subject_is_text() -> None:
    replied = "0B1C2D3E-4F5A-4B6C-8D7E-9F0A1B2C3D4E"
    found = message(changed("new_message_dm_text", threadOriginatorGuid=replied, subject="Plans"))
    assert found.reply_to_message_id == replied
    assert found.text == "Plans\nHello from iMessage"


def test_a_message_older_than_the_inbox_remembers_is_dropped() -> None:
    three_days = 3 * 24 * 3600 * 1000
    old = changed("new_message_dm_text", dateCreated=fixture("new_message_dm_text")["data"]["dateCreated"] - three_days)
    assert parse(old) == Ignored("outlived_deduplication")


def test_round_trip_through_the_queue_envelope() -> None:
    found = message(fixture("new_message_attachment_image"))
    assert InboundMessage.from_dict(found.to_dict()) == found


# --- the bad-input matrix, through the ingress -------------------------------------------------


def call(body: bytes, enqueue: FakeEnqueue, *, query: dict[str, str] | None = None) -> HttpResponse:
    settings = make_settings({"BLUEBUBBLES_ENABLED": "true"})
    request = HttpRequest(
        "POST",
        "/webhooks/bluebubbles",
        {"content-type": "application/json"},
        body,
        query={"password": SECRET} if query is None else query,
    )
    return handle_webhook(
        "bluebubbles",
        request,
        settings=settings,
        adapters=platforms.adapters(settings, {"BLUEBUBBLES_WEBHOOK_SECRET": SECRET}),
        enqueue_once=enqueue,
        received_at=NOW,
    )


def encoded(event: Any) -> bytes:
    return json.dumps(event).encode()


def test_a_message_is_enqueued_once_under_its_session_key() -> None:
    enqueue = FakeEnqueue()
    first = call(encoded(fixture("new_message_dm_text")), enqueue)
    again = call(encoded(fixture("new_message_dm_text")), enqueue)
    assert first == HttpResponse(200, {"ok": True})
    assert again == HttpResponse(200, {"ok": True, "duplicate": True})
    assert [e["session_key"] for e in enqueue.sent] == ["agent:main:bluebubbles:dm:+15555550123"]


@pytest.mark.parametrize(
    "name",
    ["new_message_from_me_send_match", "new_message_from_me_echo", "new_message_tapback_love",
     "updated_message_edited", "updated_message_delivered_read", "typing_indicator_started",
     "chat_read_status_changed", "hello_world"],
)  # fmt: skip
def test_every_other_event_is_200_and_enqueues_nothing(name: str) -> None:
    enqueue = FakeEnqueue()
    response = call(encoded(fixture(name)), enqueue)
    assert response.status == 200 and response.body["ok"] is True  # type: ignore[index]
    assert enqueue.calls == 0


@pytest.mark.parametrize(
    "query", [{}, {"password": "forged"}, {"password": SECRET.upper()}, {"token": SECRET}, {"password": ""}]
)
def test_a_wrong_or_missing_secret_is_401_and_nothing_is_enqueued(query: dict[str, str]) -> None:
    enqueue = FakeEnqueue()
    response = call(encoded(fixture("new_message_dm_text")), enqueue, query=query)
    assert response.status == 401 and enqueue.calls == 0
    assert SECRET not in json.dumps(response.body)


def test_an_unreadable_body_with_a_wrong_secret_is_401_before_it_is_read() -> None:
    enqueue = FakeEnqueue()
    assert call(b"{broken", enqueue, query={"password": "forged"}).status == 401
    assert enqueue.calls == 0


GUID_2000 = "A" * 2000  # past DynamoDB's 1,024-byte sort key as an event id
MALFORMED: list[Any] = [
    b"{broken",
    b"[1, 2]",
    b'"new-message"',
    {"data": fixture("new_message_dm_text")["data"]},
    {"type": 7, "data": {}},
    {"type": "new-message", "data": "text"},
    {"type": "new-message", "data": None},
    {"type": "updated-message", "data": []},
    changed("new_message_dm_text", isFromMe=None),
    changed("new_message_dm_text", isFromMe="false"),
    changed("new_message_dm_text", guid=None),
    changed("new_message_dm_text", guid=12345),
    changed("new_message_dm_text", guid=GUID_2000),
    changed("new_message_dm_text", guid="A" * 129),
    changed("new_message_dm_text", guid="../../etc/passwd"),
    changed("new_message_dm_text", chats=None),
    changed("new_message_dm_text", chats=[]),
    changed("new_message_dm_text", chats={"guid": DM_GUID}),
    changed("new_message_dm_text", chats=["iMessage;-;+15555550123"]),
    changed("new_message_dm_text", chats=[{"guid": 15555550123}]),
    changed("new_message_dm_text", chats=[{"guid": "+15555550123"}]),
    changed("new_message_dm_text", chats=[{"guid": "../../etc/passwd"}]),
    changed("new_message_dm_text", chats=[{"guid": "iMessage;-;../../etc/passwd"}]),
    changed("new_message_dm_text", chats=[{"guid": "iMessage;-;a:b"}]),
    changed("new_message_dm_text", chats=[{"guid": "iMessage;-;two words"}]),
    changed("new_message_dm_text", chats=[{"guid": "iMessage;-;" + "1" * 2000}]),
    changed("new_message_dm_text", chats=[{"guid": "iMessage;-;" + "\U0001f600" * 150}]),  # 150 characters, 600 bytes
    changed("new_message_dm_text", chats=[{"guid": "iMessage;*;+15555550123"}]),
    changed("new_message_dm_text", handle={"address": 15555550123}),
    changed("new_message_dm_text", handle={"address": "+1 555"}),
    changed("new_message_dm_text", handle={"address": "x" * 2000}),
    changed("new_message_dm_text", handle={"address": "\u00e9" * 199}),  # within 200 characters, past 300 bytes
    changed("new_message_dm_text", handle="+15555550123"),
    changed("new_message_dm_text", text=["hi"]),
    changed("new_message_dm_text", text={"text": "hi"}),
    changed("new_message_dm_text", subject=5),
    changed("new_message_dm_text", attachments={"guid": "x"}),
    changed("new_message_dm_text", threadOriginatorGuid=7),
    changed("new_message_dm_text", threadOriginatorGuid="p:0/" + "A" * 200),
]


@pytest.mark.parametrize("body", MALFORMED, ids=lambda b: str(b)[:60])
def test_a_malformed_authentic_body_is_400_and_nothing_is_enqueued(body: Any) -> None:
    enqueue = FakeEnqueue()
    response = call(body if isinstance(body, bytes) else encoded(body), enqueue)
    assert response.status == 400, response
    assert enqueue.calls == 0


@pytest.mark.parametrize("body", MALFORMED[3:], ids=lambda b: str(b)[:60])
def test_the_parser_names_what_is_wrong(body: Any) -> None:
    with pytest.raises(BadRequest, match="bluebubbles"):
        parse(body)


def test_an_oversize_body_is_413() -> None:
    enqueue = FakeEnqueue()
    body = encoded(changed("new_message_dm_text", text="x" * 70_000))
    assert call(body, enqueue).status == 413 and enqueue.calls == 0


def test_an_attachment_entry_that_is_no_file_reference_is_left_out_of_a_good_message() -> None:
    odd = [{"guid": 5}, {"guid": "../x"}, "file", {"guid": "B" * 200}, {"mimeType": "image/png"}]
    found = message(changed("new_message_dm_text", attachments=odd))
    assert found.attachments == () and found.text == "Hello from iMessage"


# --- sending ------------------------------------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeBlueBubbles]:
    with FakeBlueBubbles() as server:
        yield server


@pytest.fixture
def sender(fake: FakeBlueBubbles) -> BlueBubblesSender:
    return BlueBubblesSender(fake.base_url, fake.password, timeout=2.0)


def chunk(n: int = 1, chat: str = DM_GUID, **fields: Any) -> Target:
    return Target("bluebubbles", chat, delivery_id=f"turn-1#{n}", **fields)


def _no_password(exc: BaseException, password: str) -> None:
    for form in (password, urllib.parse.quote(password, safe=""), urllib.parse.quote_plus(password)):
        assert form not in str(exc) and form not in repr(exc)


def test_the_catalog_sender_sends_text_to_the_chat_with_a_temp_guid_from_the_outbox_row(
    fake: FakeBlueBubbles,
) -> None:
    settings = make_settings({"BLUEBUBBLES_ENABLED": "true", "BLUEBUBBLES_SERVER_URL": fake.base_url})
    built = platforms.sender("bluebubbles", settings, {"BLUEBUBBLES_PASSWORD": fake.password})
    assert isinstance(built, BlueBubblesSender)

    guid = built.send(chunk(), "Echo: Hello from iMessage")

    [request] = fake.requests
    path, _, query = request.path.partition("?")
    assert (request.http_method, path) == ("POST", "/api/v1/message/text")
    assert urllib.parse.parse_qs(query) == {"password": [fake.password]}
    assert request.body == {
        "chatGuid": DM_GUID,
        "tempGuid": f"temp-{send_key(chunk())}",
        "message": "Echo: Hello from iMessage",
        "method": "apple-script",
    }
    assert guid == fake.sent[0]["guid"]


def test_every_try_of_one_chunk_carries_one_temp_guid_and_other_chunks_their_own(
    fake: FakeBlueBubbles, sender: BlueBubblesSender
) -> None:
    sender.send(chunk(1), "a")
    sender.send(chunk(1), "a")
    sender.send(chunk(2), "b")
    sender.send(Target("bluebubbles", DM_GUID), "no outbox row")
    temps = [m["tempGuid"] for m in fake.sent]
    assert temps[0] == temps[1] != temps[2]
    assert "turn-1" not in temps[0]  # derived from the row, not the row's id itself
    assert temps[3].startswith("temp-") and temps[3] not in temps[:3]


def test_a_try_after_a_timeout_the_server_is_still_sending_is_recorded_unknown_never_sent_twice(
    fake: FakeBlueBubbles,
) -> None:
    sender = BlueBubblesSender(fake.base_url, fake.password, timeout=0.5)
    fake.answer_slowly(2.0)
    # Given a first try the server took but answered too late
    recorded = time.time()
    with pytest.raises(TransientError):
        sender.send(chunk(), "answer")
    # When the outbox's retry comes while Messages is still sending it
    with pytest.raises(OutcomeUnknown, match="still sending"):
        sender.send(chunk(earlier_try_at=recorded), "answer")
    # Then the chat got the answer once
    assert [m["text"] for m in fake.sent] == ["answer"]


def test_a_try_after_the_earlier_one_was_sent_finds_it_and_posts_nothing(
    fake: FakeBlueBubbles, sender: BlueBubblesSender
) -> None:
    recorded = time.time()
    first = sender.send(chunk(), "answer")  # the try whose answer the gateway never read
    fake.sent.append({**fake.sent[-1], "guid": "OTHER-CHAT", "chatGuid": GROUP_GUID})
    again = sender.send(chunk(earlier_try_at=recorded), "answer")
    assert again == first
    assert [m["text"] for m in fake.posted(DM_GUID)] == ["answer"]
    assert [r.path.split("?")[0] for r in fake.requests][-1] == "/api/v1/message/query"


def test_a_try_after_a_failed_one_that_never_reached_the_chat_sends(
    fake: FakeBlueBubbles, sender: BlueBubblesSender
) -> None:
    sender.send(chunk(9), "an earlier, different answer")
    guid = sender.send(chunk(earlier_try_at=time.time() - 5), "answer")
    assert [m["text"] for m in fake.posted(DM_GUID)] == ["an earlier, different answer", "answer"]
    assert guid == fake.sent[-1]["guid"]


def test_with_the_private_api_a_reply_threads_to_the_users_message(fake: FakeBlueBubbles) -> None:
    sender = BlueBubblesSender(fake.base_url, fake.password, private_api=True, timeout=2.0)
    sender.send(chunk(reply_to="6F4D2A8E-3B1C-4E7F-9A2D-5C8B1E0F7A31"), "threaded")
    sender.send(chunk(2), "plain")
    assert [(m["method"], m["selectedMessageGuid"]) for m in fake.sent] == [
        ("private-api", "6F4D2A8E-3B1C-4E7F-9A2D-5C8B1E0F7A31"),
        ("private-api", None),
    ]


def test_a_reply_without_the_private_api_is_not_threaded(fake: FakeBlueBubbles, sender: BlueBubblesSender) -> None:
    sender.send(chunk(reply_to="6F4D2A8E-3B1C-4E7F-9A2D-5C8B1E0F7A31"), "plain")
    assert [(m["method"], m["selectedMessageGuid"]) for m in fake.sent] == [("apple-script", None)]


def test_a_message_messages_failed_is_permanent(fake: FakeBlueBubbles, sender: BlueBubblesSender) -> None:
    fake.failing_chats[DM_GUID] = 22  # the recipient is not on iMessage
    with pytest.raises(PermanentError, match="error 22"):
        sender.send(chunk(), "hi")


@pytest.mark.parametrize("status", [500, 502, 504])
def test_a_server_error_without_a_failed_message_is_retried(
    fake: FakeBlueBubbles, sender: BlueBubblesSender, status: int
) -> None:
    fake.answer_next(status, {"status": status, "message": "Message Send Error", "data": None})
    with pytest.raises(TransientError):
        sender.send(chunk(), "hi")


def test_a_wrong_password_is_permanent_and_never_echoed(fake: FakeBlueBubbles) -> None:
    wrong = "wrong pass+word/1"
    with pytest.raises(PermanentError, match="401") as caught:
        BlueBubblesSender(fake.base_url, wrong, timeout=2.0).send(chunk(), "hi")
    _no_password(caught.value, wrong)


def test_a_password_echoed_in_an_answer_is_scrubbed(fake: FakeBlueBubbles, sender: BlueBubblesSender) -> None:
    echoed = {"status": 400, "message": "bad", "error": {"type": "Validation Error", "message": fake.password}}
    fake.answer_next(400, echoed)
    with pytest.raises(PermanentError) as caught:
        sender.send(chunk(), "hi")
    _no_password(caught.value, fake.password)


def test_a_success_without_a_guid_is_not_reported_as_sent(fake: FakeBlueBubbles, sender: BlueBubblesSender) -> None:
    fake.answer_next(200, {"status": 200, "message": "Message sent!"})
    with pytest.raises(OutcomeUnknown, match="without the message's guid"):
        sender.send(chunk(), "hi")


def test_connection_refused_is_transient_and_names_no_password(fake: FakeBlueBubbles) -> None:
    url, password = fake.base_url, fake.password
    fake.stop()
    with pytest.raises(TransientError) as caught:
        BlueBubblesSender(url, password, timeout=1.0).send(chunk(), "hi")
    _no_password(caught.value, password)


def test_a_target_is_a_chat_guid_or_an_address() -> None:
    assert chat_guid(GROUP_GUID) == GROUP_GUID
    assert chat_guid("any;-;+15555550123") == "any;-;+15555550123"
    assert chat_guid("+15555550123") == "iMessage;-;+15555550123"
    assert chat_guid("alice@example.com") == "iMessage;-;alice@example.com"
    with pytest.raises(PermanentError):
        chat_guid("a:b c")


@pytest.mark.parametrize(
    ("env", "secrets"),
    [({"BLUEBUBBLES_SERVER_URL": "https://mac.example.com"}, {}), ({}, {"BLUEBUBBLES_PASSWORD": "pw"})],
)
def test_no_sender_without_a_password_or_a_server_url(env: dict[str, str], secrets: dict[str, str]) -> None:
    settings = make_settings({"BLUEBUBBLES_ENABLED": "true", **env})
    assert platforms.sender("bluebubbles", settings, secrets) is None


@pytest.mark.parametrize("url", ["http://mac.example.com", "ftp://mac.example.com", "mac.example.com"])
def test_the_server_url_is_https_unless_it_is_loopback(url: str) -> None:
    from hermes_gateway.errors import ConfigError

    with pytest.raises(ConfigError, match="BLUEBUBBLES_SERVER_URL"):
        make_settings({"BLUEBUBBLES_SERVER_URL": url})
    assert (
        make_settings({"BLUEBUBBLES_SERVER_URL": "http://localhost:1234/"})
        .platforms["bluebubbles"]
        .options["server_url"]
        == "http://localhost:1234"
    )


# --- typing ----------------------------------------------------------------------------------------


def test_the_sender_shows_typing_and_attaches_files_natively(sender: BlueBubblesSender) -> None:
    from hermes_gateway.platforms.base import presence_of
    from hermes_gateway.platforms.outbound_media import media_sender_of

    assert presence_of(sender) is sender and media_sender_of(sender) is sender


def test_typing_shows_only_with_the_private_api(fake: FakeBlueBubbles, sender: BlueBubblesSender) -> None:
    assert sender.typing(chunk(chat=GROUP_GUID)) is False
    assert fake.requests == []
    fake.private_api = True
    with_helper = BlueBubblesSender(fake.base_url, fake.password, private_api=True, timeout=2.0)
    assert with_helper.typing(chunk(chat=GROUP_GUID)) is True
    assert fake.typing == [("POST", GROUP_GUID)]
    assert fake.requests[-1].path.startswith("/api/v1/chat/iMessage%3B%2B%3Bchat512345678901234567/typing?")


def test_typing_without_the_helper_connected_is_asked_again_later(fake: FakeBlueBubbles) -> None:
    with pytest.raises(TransientError):
        BlueBubblesSender(fake.base_url, fake.password, private_api=True, timeout=2.0).typing(chunk())


# --- files out ---------------------------------------------------------------------------------


def media_file(kind: str, name: str, mime: str, data: bytes = b"\x00\x01file") -> MediaFile:
    return MediaFile("default/s/1-0", kind, mime, name, len(data), lambda: data, lambda: "https://unused")


@pytest.mark.parametrize(
    ("kind", "name", "mime", "audio_message"),
    [
        ("image", "cat.png", "image/png", False),
        ("voice", "reply.mp3", "audio/mpeg", True),  # a voice note: an iMessage audio message
        ("voice", "answer.ogg", "audio/ogg", False),  # a spoken answer (Ogg/Opus): an audio file
        ("audio", "song.m4a", "audio/mp4", False),
        ("document", "q3.pdf", "application/pdf", False),
    ],
)
def test_a_file_is_sent_as_an_attachment(
    fake: FakeBlueBubbles, sender: BlueBubblesSender, kind: str, name: str, mime: str, audio_message: bool
) -> None:
    guid = sender.send_media(chunk(), media_file(kind, name, mime), "")
    [sent] = fake.sent
    assert (sent["attachment"], sent["name"], sent["mime"]) == (b"\x00\x01file", name, mime)
    assert (sent["isAudioMessage"], sent["chatGuid"], sent["method"]) == (audio_message, DM_GUID, "apple-script")
    assert sent["tempGuid"] == f"temp-{send_key(chunk())}" and guid == sent["guid"]
    assert sender.caption_limit == 0  # the text goes before the file, as its own message


def test_a_files_retry_finds_the_earlier_try_by_its_name(fake: FakeBlueBubbles, sender: BlueBubblesSender) -> None:
    recorded = time.time()
    first = sender.send_media(chunk(), media_file("image", "cat.png", "image/png"), "")
    assert sender.send_media(chunk(earlier_try_at=recorded), media_file("image", "cat.png", "image/png"), "") == first
    assert len(fake.sent) == 1


# --- files in ------------------------------------------------------------------------------------


def media_context(fake: FakeBlueBubbles, password: str | None = None) -> Any:
    settings = make_settings({"BLUEBUBBLES_ENABLED": "true", "BLUEBUBBLES_SERVER_URL": fake.base_url})
    return platforms.context("bluebubbles", settings, {"BLUEBUBBLES_PASSWORD": password or fake.password})


def image_attachment() -> Any:
    from hermes_gateway.domain.media import Attachment

    return Attachment.from_dict(message(fixture("new_message_attachment_image")).attachments[0])


def test_an_attachment_is_downloaded_from_the_server_with_the_password(fake: FakeBlueBubbles) -> None:
    fake.attachments["9C8B7A6F-5E4D-4C3B-A2B1-0F9E8D7C6B5A"] = (b"\xff\xd8jpeg", "image/jpeg")
    fetched = bluebubbles.fetch_media(media_context(fake), image_attachment(), 1_000_000)
    assert (fetched.data, fetched.mime) == (b"\xff\xd8jpeg", "image/jpeg")
    [request] = fake.requests
    path, _, query = request.path.partition("?")
    assert path == "/api/v1/attachment/9C8B7A6F-5E4D-4C3B-A2B1-0F9E8D7C6B5A/download"
    assert urllib.parse.parse_qs(query) == {"password": [fake.password]}


def test_an_attachment_the_server_does_not_have_is_unavailable_and_names_no_password(fake: FakeBlueBubbles) -> None:
    with pytest.raises(MediaUnavailable) as caught:
        bluebubbles.fetch_media(media_context(fake), image_attachment(), 1_000_000)
    _no_password(caught.value, fake.password)


def test_a_wrong_password_for_a_download_names_no_password(fake: FakeBlueBubbles) -> None:
    wrong = "not the pass+word"
    with pytest.raises(MediaUnavailable) as caught:
        bluebubbles.fetch_media(media_context(fake, wrong), image_attachment(), 1_000_000)
    _no_password(caught.value, wrong)


def test_an_announced_size_over_the_limit_is_not_downloaded(fake: FakeBlueBubbles) -> None:
    with pytest.raises(MediaTooLarge):
        bluebubbles.fetch_media(media_context(fake), image_attachment(), 1000)
    assert fake.requests == []


def test_nothing_is_fetched_without_a_password_or_a_server_url(fake: FakeBlueBubbles) -> None:
    settings = make_settings({"BLUEBUBBLES_ENABLED": "true"})
    no_url = platforms.context("bluebubbles", settings, {"BLUEBUBBLES_PASSWORD": fake.password})
    no_password = platforms.context("bluebubbles", media_context(fake).settings, {})
    for context in (no_url, no_password):
        with pytest.raises(MediaUnavailable, match="no server password and server URL"):
            bluebubbles.fetch_media(context, image_attachment(), 1_000_000)
    assert fake.requests == []
