"""Signal's inbound side (platforms/signal.py) on signal-cli's own JSON (tests/fixtures/signal/,
see SOURCES.md there), through `handle_webhook` as the ingress runs it: the signature, every form
signal-cli and signal-cli-rest-api hand a message over in, what is not a message, the bad-input
matrix, and the letters Signal's replies become."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import BadRequest, PermanentError, Unauthorized
from hermes_gateway.platforms.base import Target
from hermes_gateway.platforms.outbound_media import MediaFile
from hermes_gateway.platforms.signal import SignalMailbox, recipient
from hermes_gateway.platforms.standard_webhook import sign
from hermes_gateway.services.ingress import Handshake, HttpRequest, HttpResponse, Ignored, MailboxCall, handle_webhook
from tests.fakes import platforms
from tests.fakes.services import FakeEnqueue, make_settings
from tests.fakes.signal_cli import ACCOUNT, fixture

SECRET = "whsec_" + base64.b64encode(b"signal-relay-secret-for-tests-32").decode()
NOW = 1752345660.0  # a minute after the fixtures' messages
ALICE, ALICE_UUID = "+15555550123", "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
BOB_UUID = "b2c3d4e5-f6a7-4b8c-9d0e-1f2a3b4c5d6e"
GROUP = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
UPLOAD = "0123456789abcdef0123456789abcdef"


def signed(payload: Any, *, path: str = "/webhooks/signal", ts: float = NOW, secret: str = SECRET) -> HttpRequest:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(ts)),
        "webhook-signature": sign(secret, "msg_1", int(ts), body),
    }
    return HttpRequest("POST", path, headers, body)


def adapter(secrets: dict[str, str] | None = None, **env: str) -> Any:
    settings = make_settings({"SIGNAL_ENABLED": "true", "SIGNAL_ACCOUNT": ACCOUNT, **env})
    chosen = {"SIGNAL_RELAY_SECRET": SECRET} if secrets is None else secrets
    return platforms.adapter("signal", settings, chosen, clock=lambda: NOW)


def parse(payload: Any, **env: str) -> Any:
    return adapter(**env).parse(signed(payload), NOW)


def parse_fresh(payload: Any) -> Any:
    """A captured message parsed as if it had just arrived (they are months or years old)."""
    params = payload.get("params", payload)
    sent_at = params.get("result", params)["envelope"]["timestamp"] / 1000
    return adapter().parse(signed(payload), sent_at + 60)


def capture(name: str) -> dict[str, Any]:
    found = next(c for c in fixture("receive_captures.json")["captures"] if c["id"] == name)
    return json.loads(found["line"]) if "line" in found else found["body"]  # type: ignore[no-any-return]


def with_data(name: str, **changes: Any) -> dict[str, Any]:
    notification = copy.deepcopy(fixture(name))
    notification["params"]["envelope"]["dataMessage"].update(changes)
    return notification


def with_envelope(name: str, **changes: Any) -> dict[str, Any]:
    notification = copy.deepcopy(fixture(name))
    notification["params"]["envelope"].update(changes)
    return notification


# --- verification ------------------------------------------------------------------------------


def test_a_post_signed_with_the_relay_secret_verifies() -> None:
    adapter().verify(signed(fixture("receive_dm_text.json")))


def test_without_the_secret_every_request_is_refused() -> None:
    with pytest.raises(Unauthorized, match="not configured"):
        adapter({}).verify(signed(fixture("receive_dm_text.json")))


def test_forged_and_old_posts_are_refused() -> None:
    other = "whsec_" + base64.b64encode(b"not-the-signal-relay-secret-0000").decode()
    with pytest.raises(Unauthorized, match="no matching"):
        adapter().verify(signed(fixture("receive_dm_text.json"), secret=other))
    with pytest.raises(Unauthorized, match="stale"):
        adapter().verify(signed(fixture("receive_dm_text.json"), ts=NOW - 301))  # a replay, 5 minutes on
    with pytest.raises(Unauthorized, match="future"):
        adapter().verify(signed(fixture("receive_dm_text.json"), ts=NOW + 301))


def test_the_generic_relays_secret_does_not_open_signal() -> None:
    relay_secret = "whsec_" + base64.b64encode(b"the-generic-relay-secret-0000000").decode()
    signal = adapter({"SIGNAL_RELAY_SECRET": SECRET, "RELAY_SIGNING_SECRET": relay_secret})
    with pytest.raises(Unauthorized):
        signal.verify(signed(fixture("receive_dm_text.json"), secret=relay_secret))


# --- messages ----------------------------------------------------------------------------------


def test_a_dm_keeps_the_number_the_uuid_and_the_timestamp() -> None:
    message = parse(fixture("receive_dm_text.json"))

    assert isinstance(message, InboundMessage)
    assert message.text == "Hello from Signal"
    assert message.event_id == f"signal:{ALICE_UUID}:1752345601001"
    source = message.source
    assert (source.platform, source.chat_type, source.chat_id) == ("signal", "dm", ALICE)
    assert (source.user_id, source.user_id_alt, source.user_name) == (ALICE, ALICE_UUID, "Alice Example")
    assert source.message_id == "1752345601001"
    assert message.facts == ()  # a sender is authorized like on any platform, never trusted
    assert message.reply_context == {}
    assert build_session_key(source) == f"agent:main:signal:dm:{ALICE}"


@pytest.mark.parametrize(
    "form",
    [
        fixture("receive_dm_text_manual_subscription.json"),  # --receive-mode=manual
        fixture("rest_v1_receive_normal_mode_response.json")[0],  # signal-cli-rest-api /v1/receive
        fixture("receive_dm_text.json")["params"],  # the params object alone
    ],
)
def test_every_form_of_a_notification_is_the_same_message(form: dict[str, Any]) -> None:
    assert parse(form) == parse(fixture("receive_dm_text.json"))


def test_a_group_message_is_the_groups_with_a_session_per_member() -> None:
    message = parse(fixture("receive_group_text.json"))

    source = message.source
    assert (source.chat_type, source.chat_id, source.chat_name) == ("group", GROUP, "Weekend Plans")
    assert (source.user_id, source.user_id_alt) == ("+15555550124", BOB_UUID)
    assert build_session_key(source) == f"agent:main:signal:group:{GROUP}:{BOB_UUID}"
    assert build_session_key(source, group_sessions_per_user=False) == f"agent:main:signal:group:{GROUP}"
    assert message.reply_context == {"quote_author": "+15555550124"}  # a group reply quotes by author


def test_a_mention_of_the_bot_is_a_fact_and_leaves_the_text() -> None:
    message = parse(fixture("receive_group_mention.json"))

    assert message.text == "can you summarize the thread?"
    assert message.facts == ("mentions_bot",)


def test_another_members_mention_is_written_as_a_handle_not_their_number() -> None:
    mentions = [{"name": "+15555550124", "number": "+15555550124", "uuid": BOB_UUID, "start": 4, "length": 1}]
    message = parse(with_data("receive_group_mention.json", message="ask \ufffc about it", mentions=mentions))

    assert message.text.startswith("ask @user_") and message.text.endswith(" about it")
    assert "+15555550124" not in message.text
    assert message.facts == ()


def test_a_reply_keeps_the_quoted_messages_id_and_text() -> None:
    message = parse(fixture("receive_dm_quote_reply.json"))

    assert message.text == "Yes, exactly that"
    assert message.reply_to_message_id == "1752345601500"  # the timestamp of our earlier reply
    assert message.extra["reply_to_text"] == "Echo: Hello from Signal"


def test_an_uploaded_file_is_a_reference_the_turn_fetches() -> None:
    notification = {**fixture("receive_dm_attachment.json"), "uploads": {"x7Qm2Vb9KpL4sN8dW3Zr.jpg": UPLOAD}}

    message = parse(notification)

    assert message.text == "Look at this"
    assert message.attachments == (
        {"kind": "image", "mime": "image/jpeg", "size": 482133, "name": "IMG_0421.jpg", "ref": {"upload_id": UPLOAD}},
    )


def test_a_file_without_its_upload_is_named_only() -> None:
    message = parse(fixture("receive_dm_attachment.json"))
    assert message.attachments == ({"kind": "image", "mime": "image/jpeg", "size": 482133, "name": "IMG_0421.jpg"},)


def test_an_unnamed_audio_file_is_a_voice_note() -> None:
    voice = {"contentType": "audio/aac", "filename": None, "id": "v0ice.aac", "size": 9000, "width": None,
             "height": None, "caption": None, "uploadTimestamp": None}  # fmt: skip
    message = parse(with_data("receive_dm_attachment.json", message=None, attachments=[voice]))

    assert message.text == ""
    assert [a["kind"] for a in message.attachments] == ["voice"]


def test_captured_messages_are_read() -> None:
    styled = parse_fresh(capture("A4_dm_text_styles"))
    assert styled.text == "Hello! This is bold and also italics."

    group = parse_fresh(capture("C1_group_text_rest_receive_item"))  # an older signal-cli: no group name
    assert (group.source.chat_id, group.source.chat_name, group.text) == (GROUP, None, "Hello")

    legacy = parse_fresh(capture("G1_legacy_2021_rest_receive_array")[0])  # 2021: `source` only, nulls
    assert (legacy.source.chat_id, legacy.source.user_id_alt) == (ALICE, None)
    assert [a["kind"] for a in legacy.attachments] == ["image"]


def test_a_sender_whose_number_is_hidden_is_known_by_uuid() -> None:
    envelope = copy.deepcopy(capture("B2_group_reaction_phone_number_hidden")["envelope"])
    envelope["dataMessage"] = {"timestamp": envelope["timestamp"], "message": "hi", "groupInfo": {"groupId": GROUP}}

    message = parse_fresh({"envelope": envelope, "account": ACCOUNT})

    uuid = "c0ffee00-1111-4222-8333-444455556666"
    assert (message.source.user_id, message.source.user_id_alt) == (uuid, None)
    assert message.event_id.startswith(f"signal:{uuid}:")


# --- what is not a message ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (fixture("receive_typing_started.json"), "typing"),
        (fixture("receive_typing_group_stopped.json"), "typing"),
        (fixture("receive_receipt_read.json"), "message_status"),
        (fixture("receive_sync_sent_message.json"), "own_message"),
        (fixture("receive_dm_reaction.json"), "reaction"),
        (fixture("receive_dm_remote_delete.json"), "deleted"),
        (fixture("receive_dm_edit.json"), "edited"),
        (capture("A1_typing_started"), "typing"),
        (capture("B1_delivery_receipt_phone_number_hidden"), "message_status"),
        (capture("B2_group_reaction_phone_number_hidden"), "reaction"),
        (capture("D1_note_to_self_sync_rest_receive_item"), "own_message"),
        (capture("E1_added_to_group_no_text"), "no_text"),
        (with_data("receive_group_text.json", groupInfo={"groupId": GROUP, "type": "UPDATE"}), "group_update"),
        (with_data("receive_dm_text.json", message="", isExpirationUpdate=True), "expiration_update"),
        (
            {**fixture("receive_dm_text.json")["params"], "exception": {"message": "x", "type": "Untrusted"}},
            "undecryptable",
        ),
        (with_envelope("receive_dm_text.json", sourceNumber=ACCOUNT), "own_message"),
    ],
)
def test_what_carries_nothing_to_answer_is_acknowledged(payload: dict[str, Any], reason: str) -> None:
    assert parse(payload) == Ignored(reason)


def test_a_message_older_than_the_inbox_remembers_is_dropped() -> None:
    assert adapter().parse(signed(fixture("receive_dm_text.json"), ts=NOW), NOW + 3 * 24 * 3600) == Ignored(
        "outlived_deduplication"
    )


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b'{"jsonrpc": "2.0", ', "not JSON"),
        ([fixture("receive_dm_text.json")], "JSON object"),
        ({"jsonrpc": "2.0", "method": "listGroups", "id": "1"}, "not a receive"),
        ({"jsonrpc": "2.0", "method": "receive", "params": [1]}, "no params"),
        ({"account": ACCOUNT}, "no envelope"),
        ({"envelope": "x", "account": ACCOUNT}, "no envelope"),
        (with_envelope("receive_dm_text.json", sourceNumber="../../etc/passwd"), "not an E.164"),
        (with_envelope("receive_dm_text.json", sourceUuid="a/../b"), "not a Signal UUID"),
        (with_envelope("receive_dm_text.json", sourceNumber=None, sourceUuid=None, source=None), "names no sender"),
        (with_data("receive_dm_text.json", timestamp="yesterday"), "millisecond time"),
        (with_data("receive_dm_text.json", timestamp=10**20), "millisecond time"),
        (with_data("receive_group_text.json", groupInfo={"groupId": "../../etc/passwd"}), "not a Signal group id"),
        (with_data("receive_dm_text.json", message=["a"]), "not a string"),
        (with_data("receive_dm_text.json", attachments="a file"), "attachments must be a list"),
        (with_envelope("receive_dm_text.json", typingMessage={"action": "STARTED"}), "more than one content"),
        (with_envelope("receive_dm_text.json", dataMessage="x"), "not an object"),
        ({**fixture("receive_dm_text.json"), "uploads": {"x.jpg": "../../key"}}, "upload ids"),
        ({**fixture("receive_dm_text.json")["params"], "account": "+15555550999"}, "another Signal account"),
    ],
)
def test_malformed_notifications_are_refused_with_the_reason(payload: Any, reason: str) -> None:
    with pytest.raises(BadRequest, match=reason):
        parse(payload)


def run(request: HttpRequest, enqueue: FakeEnqueue | None = None, **env: str) -> HttpResponse:
    settings = make_settings({"SIGNAL_ENABLED": "true", "SIGNAL_ACCOUNT": ACCOUNT, **env})
    return handle_webhook(
        "signal",
        request,
        settings=settings,
        adapters=platforms.adapters(settings, {"SIGNAL_RELAY_SECRET": SECRET}, clock=lambda: NOW),
        enqueue_once=enqueue or FakeEnqueue(),
        received_at=NOW,
    )


def test_through_the_ingress_a_message_is_enqueued_once() -> None:
    enqueue = FakeEnqueue()
    first = run(signed(fixture("receive_dm_text.json")), enqueue)
    again = run(signed(fixture("receive_dm_text.json")), enqueue)

    assert (first.status, again.status) == (200, 200)
    assert again.body == {"ok": True, "duplicate": True}
    (envelope,) = enqueue.sent
    assert envelope["session_key"] == f"agent:main:signal:dm:{ALICE}"


@pytest.mark.parametrize(
    ("request_", "status"),
    [
        (signed(fixture("receive_dm_text.json"), secret="whsec_" + base64.b64encode(b"x" * 32).decode()), 401),
        (signed(fixture("receive_dm_text.json"), ts=NOW - 3600), 401),
        (HttpRequest("POST", "/webhooks/signal", {}, json.dumps(fixture("receive_dm_text.json")).encode()), 401),
        (signed(b"{oops"), 400),
        (signed(with_envelope("receive_dm_text.json", sourceNumber="../../etc")), 400),
        (signed(b"{" + b" " * 70_000 + b"}"), 413),
        (HttpRequest("GET", "/webhooks/signal", {}, b""), 405),
    ],
)
def test_the_bad_input_matrix_enqueues_nothing(request_: HttpRequest, status: int) -> None:
    enqueue = FakeEnqueue()
    assert run(request_, enqueue).status == status
    assert not enqueue.sent


def test_with_signal_disabled_there_is_no_endpoint() -> None:
    assert run(signed(fixture("receive_dm_text.json")), SIGNAL_ENABLED="false").status == 404


# --- the forwarder's mailbox calls ------------------------------------------------------------------


def test_the_mailbox_paths_are_calls_and_anything_else_is_not_found() -> None:
    assert parse_at("/webhooks/signal/outbox", {"reports": []}) == MailboxCall("outbox", {"reports": []})
    assert parse_at("/p/coder/webhooks/signal/uploads", {"files": []}) == MailboxCall("uploads", {"files": []})
    unknown = parse_at("/webhooks/signal/../outbox", {})
    assert isinstance(unknown, Handshake) and unknown.response.status == 404


def parse_at(path: str, payload: Any) -> Any:
    return adapter().parse(signed(payload, path=path), NOW)


def test_a_mailbox_call_without_a_mailbox_served_is_not_found() -> None:
    assert run(signed({"reports": []}, path="/webhooks/signal/outbox")).status == 404


# --- letters: how a reply is handed to the forwarder ---------------------------------------------


def test_a_dm_reply_quotes_the_users_message() -> None:
    target = Target("signal", ALICE, reply_to="1752345601001")
    assert SignalMailbox(None).letter(target, "Echo: Hello", None) == {
        "recipient": ALICE,
        "text": "Echo: Hello",
        "quote": {"timestamp": 1752345601001, "author": ALICE},
    }


def test_a_group_reply_goes_to_the_group_quoting_the_author_the_message_named() -> None:
    target = Target("signal", GROUP, context={"quote_author": "+15555550124"}, reply_to="1752345602002")
    letter = SignalMailbox(None).letter(target, "Count me in", None)
    assert letter == {
        "group_id": GROUP,
        "text": "Count me in",
        "quote": {"timestamp": 1752345602002, "author": "+15555550124"},
    }


def test_a_push_to_a_group_quotes_nothing() -> None:
    assert SignalMailbox(None).letter(Target("signal", GROUP, reply_to="7"), "cron", None) == {
        "group_id": GROUP,
        "text": "cron",
    }


def test_a_file_rides_in_its_letter_by_key() -> None:
    media = MediaFile("default/s/out/d-1", "voice", "audio/ogg", "reply.ogg", 321, lambda: b"", lambda: "")
    letter = SignalMailbox("coder").letter(Target("signal", ALICE), "", media)
    assert letter["attachments"] == [
        {"key": "default/s/out/d-1", "name": "reply.ogg", "mime": "audio/ogg", "kind": "voice", "size": 321}
    ]
    assert SignalMailbox("coder").mailbox == "signal#coder"


@pytest.mark.parametrize("chat_id", ["../../etc/passwd", "12345", "@alice", ""])
def test_a_chat_signal_cannot_have_is_refused(chat_id: str) -> None:
    with pytest.raises(PermanentError):
        recipient(chat_id)


def test_the_mailbox_never_sends_by_itself() -> None:
    with pytest.raises(PermanentError, match="forwarder"):
        SignalMailbox(None).send(Target("signal", ALICE), "hi")
