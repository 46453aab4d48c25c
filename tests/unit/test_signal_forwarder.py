"""The reference Signal forwarder (relays/signal-cli/forwarder.py) against a fake signal-cli on a
loopback socket (JSON-RPC, as `signal-cli daemon --tcp`) or HTTP (signal-cli-rest-api), and the
gateway's own Signal endpoint on loopback (tests/fakes/signal_gateway.py: the Signal adapter, which
verifies every signed post, and the mailbox service, over fakes). No real Signal.

The forwarder ships apart from the gateway, so it is loaded from its path and may import nothing
but the standard library.
"""

from __future__ import annotations

import ast
import base64
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hermes_gateway.platforms.standard_webhook import verify
from tests.fakes.signal_cli import (
    ACCOUNT,
    FIRST_TIMESTAMP,
    FORWARDER,
    FakeSignalCli,
    FakeSignalRest,
    fixture,
    load_forwarder,
    run_loops,
)
from tests.fakes.signal_gateway import SignalGateway

SECRET = "whsec_" + base64.b64encode(b"signal-forwarder-secret-for-test").decode()
ALICE, ALICE_UUID = "+15555550123", "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
GROUP = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
JPEG = b"\xff\xd8\xff\xe0signal" + bytes(range(256)) * 8 + b"\xff\xd9"
VOICE = b"OggS\x00\x02voice-note" + bytes(range(200))
# The fixtures' messages were sent in July 2025: the gateway and the forwarder's signatures live a
# minute later (the gateway drops a message older than it remembers event ids).
FIXTURE_NOW = 1752345660.0


@pytest.fixture(scope="module")
def forwarder() -> ModuleType:
    return load_forwarder()


@pytest.fixture
def gateway() -> Iterator[SignalGateway]:
    with SignalGateway(secret=SECRET, clock=lambda: FIXTURE_NOW) as running:
        yield running


@pytest.fixture
def signal_cli() -> Iterator[FakeSignalCli]:
    with FakeSignalCli() as running:
        yield running


def config(forwarder: ModuleType, gateway: SignalGateway, state: Path, signal: str, **changes: Any) -> Any:
    values = {"relay_url": gateway.url, "secret": SECRET, "account": ACCOUNT, "state_dir": state, "signal_cli": signal}
    return forwarder.Config(**{**values, **changes})


def connected(forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, state: Path) -> Any:
    """A forwarder whose JSON-RPC connection to the fake signal-cli is open (its receiving loop is
    not running: the tests hand it notifications themselves)."""
    built = forwarder.build(config(forwarder, gateway, state, signal_cli.address), clock=lambda: FIXTURE_NOW)
    built.signal.connect()
    signal_cli.wait_connected()
    return built


def until(check: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError("timed out")


def dm_letter(**changes: Any) -> dict[str, Any]:
    return {"recipient": ALICE, "text": "Echo: Hello from Signal", **changes}


# --- what it is made of ---------------------------------------------------------------------


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(str(node.module).split(".")[0])
    return names


def test_the_forwarder_imports_only_the_standard_library() -> None:
    imported = _imported(ast.parse(FORWARDER.read_text())) - {"__future__"}
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    requirements = (FORWARDER.parent / "requirements.txt").read_text()
    assert not [line for line in requirements.splitlines() if line.strip() and not line.startswith("#")]


def test_its_copy_of_sign_reproduces_the_published_vector(forwarder: ModuleType) -> None:
    signature = forwarder.sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


@pytest.mark.parametrize(
    ("name", "posted"),
    [
        ("receive_dm_text.json", True),
        ("receive_group_text.json", True),
        ("receive_group_mention.json", True),
        ("receive_dm_attachment.json", True),
        ("receive_dm_quote_reply.json", True),
        ("receive_dm_text_manual_subscription.json", True),
        ("receive_typing_started.json", False),
        ("receive_typing_group_stopped.json", False),
        ("receive_receipt_read.json", False),
        ("receive_sync_sent_message.json", False),
        ("receive_dm_reaction.json", False),
        ("receive_dm_remote_delete.json", False),
        ("receive_dm_edit.json", False),
    ],
)
def test_only_data_messages_of_others_are_posted(forwarder: ModuleType, name: str, posted: bool) -> None:
    assert forwarder.forwardable(fixture(name), ACCOUNT) is posted


def test_rest_receive_items_and_captured_lines_are_read_too(forwarder: ModuleType) -> None:
    items = fixture("rest_v1_receive_normal_mode_response.json")
    assert [forwarder.forwardable(item, ACCOUNT) for item in items] == [True, True]
    captures = {c["id"]: c for c in fixture("receive_captures.json")["captures"]}
    assert forwarder.forwardable(json.loads(captures["A2_dm_text"]["line"]), ACCOUNT)
    assert not forwarder.forwardable(json.loads(captures["A1_typing_started"]["line"]), ACCOUNT)
    assert not forwarder.forwardable(captures["D1_note_to_self_sync_rest_receive_item"]["body"], ACCOUNT)


# --- what signal-cli's answers mean ------------------------------------------------------------


def test_send_results_are_read_as_signal_cli_writes_them(forwarder: ModuleType) -> None:
    send = fixture("jsonrpc_send.json")
    assert forwarder.outcome_of_result(send["response_dm"]["result"]) == forwarder.Outcome("sent", 1752345601500)
    assert forwarder.outcome_of_result(send["response_group"]["result"]).status == "sent"
    manpage = {e["name"]: e["line"] for e in fixture("jsonrpc_manpage_examples.json")["entries"]}
    assert forwarder.outcome_of_result(json.loads(manpage["send_to_number_response"])["result"]).timestamp == 999

    def with_types(*kinds: str) -> dict[str, Any]:
        return {"timestamp": 7, "results": [{"recipientAddress": {"number": ALICE}, "type": k} for k in kinds]}

    assert forwarder.outcome_of_result(with_types("UNREGISTERED_FAILURE")).status == "gone"
    assert forwarder.outcome_of_result(with_types("NETWORK_FAILURE")).status == "retry"
    assert forwarder.outcome_of_result(with_types("RATE_LIMIT_FAILURE", "UNREGISTERED_FAILURE")).status == "retry"
    assert forwarder.outcome_of_result(with_types("IDENTITY_FAILURE")).status == "failed"
    assert forwarder.outcome_of_result(with_types("IDENTITY_FAILURE", "SUCCESS")) == forwarder.Outcome("sent", 7)


def test_send_errors_are_told_apart(forwarder: ModuleType) -> None:
    assert forwarder.outcome_of_error({"code": -3, "message": "Failed to send message"}).status == "retry"
    assert forwarder.outcome_of_error({"code": -1, "message": f"The user {ALICE} is not registered."}).status == "gone"
    assert forwarder.outcome_of_error({"code": -4, "message": "Untrusted identity"}).status == "failed"
    carried = {"code": -1, "message": "x", "data": {"response": {"timestamp": 5, "results": [{"type": "SUCCESS"}]}}}
    assert forwarder.outcome_of_error(carried) == forwarder.Outcome("sent", 5)


# --- messages in: signed posts the gateway verifies ----------------------------------------------


def test_a_dm_is_posted_signed_and_the_gateway_takes_it(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    assert running.received(fixture("receive_dm_text.json"))

    (post,) = gateway.answered
    verify(SECRET, post.headers, post.raw, FIXTURE_NOW)  # the gateway's own check, on what was sent
    assert post.status == 200
    (envelope,) = gateway.enqueue.sent
    assert envelope["event_id"] == f"signal:{ALICE_UUID}:1752345601001"
    assert envelope["session_key"] == f"agent:main:signal:dm:{ALICE}"
    assert envelope["text"] == "Hello from Signal"
    assert not list(running.spool.pending())  # taken: nothing left to post


def test_the_same_message_received_twice_is_answered_once(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    running = connected(forwarder, gateway, signal_cli, tmp_path)
    running.received(fixture("receive_dm_text.json"))
    running.received(fixture("receive_dm_text_manual_subscription.json"))  # the same message, another form

    assert [a.status for a in gateway.answered] == [200, 200]
    assert len(gateway.enqueue.sent) == 1
    assert json.loads(gateway.answered[1].raw)["params"]["subscription"] == 0  # posted as signal-cli wrote it


def test_a_files_bytes_are_uploaded_before_the_message_names_them(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    signal_cli.files["x7Qm2Vb9KpL4sN8dW3Zr.jpg"] = JPEG
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    running.received(fixture("receive_dm_attachment.json"))

    (envelope,) = gateway.enqueue.sent
    (media,) = envelope["attachments"]
    upload_id = media["ref"]["upload_id"]
    assert gateway.store[f"uploads/signal/default/{upload_id}"] == (JPEG, "image/jpeg")
    assert (media["kind"], media["mime"], media["name"]) == ("image", "image/jpeg", "IMG_0421.jpg")
    assert [a.path for a in gateway.answered] == ["/webhooks/signal/uploads", "/webhooks/signal"]


def test_a_file_signal_cli_cannot_hand_over_is_named_not_uploaded(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    running = connected(forwarder, gateway, signal_cli, tmp_path)  # the fake has no such file

    running.received(fixture("receive_dm_attachment.json"))

    (envelope,) = gateway.enqueue.sent
    assert envelope["attachments"] == [{"kind": "image", "mime": "image/jpeg", "size": 482133, "name": "IMG_0421.jpg"}]
    assert not gateway.store


def test_what_the_gateway_does_not_take_stays_in_the_spool_and_goes_later(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    # Given a gateway that is busy for the first post
    running = connected(forwarder, gateway, signal_cli, tmp_path)
    gateway.answer_next(503, {"ok": False, "error": "busy, retry"})

    # When a message comes, and later the spool is retried (a restart would do the same)
    assert not running.received(fixture("receive_dm_text.json"))
    assert len(list(running.spool.pending())) == 1
    restarted = connected(forwarder, gateway, signal_cli, tmp_path)
    restarted.retry_spool()

    # Then the message is taken once, under the same webhook-id both times
    assert len(gateway.enqueue.sent) == 1
    assert not list(restarted.spool.pending())
    assert len({r.headers["webhook-id"] for r in gateway.requests}) == 1


def test_a_wrong_secret_is_refused_by_the_gateway_and_the_message_is_kept(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    wrong = "whsec_" + base64.b64encode(b"not-the-secret-the-gateway-has!!").decode()
    settings = config(forwarder, gateway, tmp_path, signal_cli.address, secret=wrong)
    running = forwarder.build(settings, lambda: FIXTURE_NOW)

    assert not running.received(fixture("receive_dm_text.json"))

    assert [a.status for a in gateway.answered] == [401]
    assert not gateway.enqueue.sent
    assert len(list(running.spool.pending())) == 1  # a secret being rotated: it goes once both agree


def test_a_message_the_gateway_refuses_for_good_is_set_aside(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    running = connected(forwarder, gateway, signal_cli, tmp_path)
    broken = fixture("receive_dm_text.json")
    broken["params"]["envelope"]["sourceNumber"] = "../../etc/passwd"

    assert running.received(broken)

    assert [a.status for a in gateway.answered] == [400]
    assert not list(running.spool.pending())
    assert len(list((tmp_path / "rejected").iterdir())) == 1


# --- replies out: collected, sent through signal-cli, reported ----------------------------------


def test_a_reply_is_sent_through_signal_cli_and_marked_sent_with_its_timestamp(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    gateway.post_letter("t1#1", dm_letter(quote={"timestamp": 1752345601001, "author": ALICE}))
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    assert running.collect() == 1
    assert gateway.outbox.entries["t1#1"].status == "queued"  # sent, not yet reported
    assert running.collect() == 0  # the report goes with the next call

    assert signal_cli.sent == [
        {"message": "Echo: Hello from Signal", "recipient": [ALICE], "quoteTimestamp": 1752345601001,
         "quoteAuthor": ALICE}
    ]  # fmt: skip
    row = gateway.outbox.entries["t1#1"]
    assert (row.status, row.platform_message_id) == ("sent", str(FIRST_TIMESTAMP))
    assert not running.reports


def test_a_group_reply_goes_to_the_group(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    gateway.post_letter("t2#1", {"group_id": GROUP, "text": "Echo: Who is in for Saturday?"})
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    running.collect()

    assert signal_cli.sent == [{"message": "Echo: Who is in for Saturday?", "groupId": GROUP}]


def test_a_replys_file_reaches_signal_cli_as_an_attachment(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    # Given a spoken reply: an audio file in the media bucket, its letter naming it
    gateway.store["default/s1/out/t3-1"] = (VOICE, "audio/ogg")
    file = {"key": "default/s1/out/t3-1", "name": "reply.ogg", "mime": "audio/ogg", "kind": "voice", "size": len(VOICE)}
    gateway.post_letter("t3#m1", dm_letter(text="here it is", attachments=[file]))
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    running.collect()
    running.collect()

    (sent,) = signal_cli.sent
    (uri,) = sent["attachments"]
    head, _, data = uri.partition(";base64,")
    assert head == "data:audio/ogg;filename=reply.ogg"
    assert base64.b64decode(data) == VOICE
    assert gateway.outbox.entries["t3#m1"].status == "sent"


def test_a_letter_collected_again_is_reported_from_the_ledger_not_sent_twice(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    # Given a letter sent, whose report never reached the gateway (the forwarder restarted)
    gateway.post_letter("t4#1", dm_letter())
    connected(forwarder, gateway, signal_cli, tmp_path).collect()
    assert gateway.outbox.entries["t4#1"].status == "queued"

    # When the restarted forwarder collects it again
    restarted = connected(forwarder, gateway, signal_cli, tmp_path)
    restarted.collect()
    restarted.collect()

    # Then signal-cli sent it once, and the row is sent with that send's timestamp
    assert len(signal_cli.sent) == 1
    row = gateway.outbox.entries["t4#1"]
    assert (row.status, row.platform_message_id) == ("sent", str(FIRST_TIMESTAMP))


def test_a_send_cut_short_is_reported_unknown_never_sent_again(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    # Given a forwarder that stopped while signal-cli was sending (its ledger says "sending")
    gateway.post_letter("t5#1", dm_letter())
    (tmp_path / "sent.json").write_text(json.dumps({"t5#1": {"status": "sending"}}))

    running = connected(forwarder, gateway, signal_cli, tmp_path)
    running.collect()
    running.collect()

    assert not signal_cli.sent
    assert gateway.outbox.entries["t5#1"].status == "unknown"


def test_no_answer_from_signal_cli_is_unknown_too(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    gateway.post_letter("t6#1", dm_letter())
    signal_cli.answer_next(None)
    running = forwarder.build(config(forwarder, gateway, tmp_path, signal_cli.address), lambda: FIXTURE_NOW)
    running.signal._timeout = 0.3  # (deployed: a minute)
    running.signal.connect()

    running.collect()
    running.collect()
    running.collect()

    assert len(signal_cli.sent) == 1
    assert gateway.outbox.entries["t6#1"].status == "unknown"


def test_an_unregistered_recipient_is_gone_and_a_refusal_failed(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    gateway.post_letter("t7#1", dm_letter(recipient="+15555550199"))
    gateway.post_letter("t7#2", dm_letter())
    signal_cli.answer_next({"error": {"code": -1, "message": "The user +15555550199 is not registered."}})
    signal_cli.answer_next({"error": {"code": -4, "message": "Untrusted identity for +15555550123"}})
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    running.collect()
    running.collect()

    assert gateway.outbox.entries["t7#1"].status == "gone"
    failed = gateway.outbox.entries["t7#2"]
    assert failed.status == "failed" and "Untrusted identity" in str(failed.error)


def test_a_reply_signal_cli_cannot_send_now_waits_and_keeps_its_place(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    # Given two replies, and Signal's servers unreachable for the first try
    gateway.post_letter("t8#1", dm_letter(text="first"))
    gateway.post_letter("t8#2", dm_letter(text="second"))
    result = {"timestamp": 1, "results": [{"recipientAddress": {"number": ALICE}, "type": "NETWORK_FAILURE"}]}
    signal_cli.answer_next({"result": result})
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    # When it is collected: the first is tried and waits, the second waits behind it
    running.collect()
    assert [s["message"] for s in signal_cli.sent] == ["first"]
    assert gateway.outbox.entries["t8#1"].status == "queued"

    # Then the next collection sends both, in order
    running.collect()
    running.collect()
    assert [s["message"] for s in signal_cli.sent] == ["first", "first", "second"]
    assert [gateway.outbox.entries[f"t8#{n}"].status for n in (1, 2)] == ["sent", "sent"]


def test_replies_are_awaited_after_a_message_and_not_otherwise(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    now = [1000.0]
    running = connected(forwarder, gateway, signal_cli, tmp_path)
    running.clock = lambda: now[0]
    assert running.interval() == 30.0  # nothing awaited: rarely

    running.received(fixture("receive_dm_text.json"))
    assert running.interval() == 1.0  # a reply is awaited: often

    gateway.post_letter("t9#1", dm_letter())
    running.collect()
    assert running.interval() == 1.0  # the report still waits to be told
    running.collect()
    assert running.interval() == 30.0  # the reply came and was reported

    running.received(fixture("receive_group_text.json"))
    now[0] += 61
    assert running.interval() == 30.0  # no reply within a minute: rarely again


def test_a_typing_indicator_is_shown_while_the_reply_is_made(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    running = connected(forwarder, gateway, signal_cli, tmp_path)

    running.received(fixture("receive_group_text.json"))

    typing = [r["params"] for r in signal_cli.requests if r["method"] == "sendTyping"]
    assert typing == [{"groupId": GROUP}]


# --- the loops, as they run -----------------------------------------------------------------------


def test_the_running_forwarder_forwards_what_signal_cli_receives_and_sends_the_reply(
    forwarder: ModuleType, gateway: SignalGateway, signal_cli: FakeSignalCli, tmp_path: Path
) -> None:
    settings = config(forwarder, gateway, tmp_path, signal_cli.address, poll_seconds=0.2)
    built = forwarder.build(settings, lambda: FIXTURE_NOW)
    with run_loops(built):
        signal_cli.wait_connected()
        signal_cli.notify(fixture("receive_typing_started.json"))  # not posted
        signal_cli.notify(fixture("receive_dm_text.json"))
        until(lambda: gateway.enqueue.sent)
        gateway.post_letter("t10#1", dm_letter())
        until(lambda: gateway.outbox.entries["t10#1"].status == "sent")
        assert [s["message"] for s in signal_cli.sent] == ["Echo: Hello from Signal"]
        assert [a.path for a in gateway.answered].count("/webhooks/signal") == 1

        signal_cli.disconnect_all()  # signal-cli restarted: the forwarder connects again
        signal_cli.wait_connected()
        signal_cli.notify(fixture("receive_group_text.json"))
        until(lambda: len(gateway.enqueue.sent) == 2)


# --- signal-cli-rest-api ---------------------------------------------------------------------------


def test_through_the_rest_api_messages_come_in_and_replies_go_out(
    forwarder: ModuleType, gateway: SignalGateway, tmp_path: Path
) -> None:
    with FakeSignalRest() as rest:
        rest.files["x7Qm2Vb9KpL4sN8dW3Zr.jpg"] = JPEG
        rest.queue_items(*fixture("rest_v1_receive_normal_mode_response.json"))
        rest.queue_items(fixture("receive_dm_attachment.json")["params"])
        running = forwarder.build(config(forwarder, gateway, tmp_path, rest.base_url), lambda: FIXTURE_NOW)

        for item in running.signal.receive():
            running.received(item)

        assert [e["source"]["chat_type"] for e in gateway.enqueue.sent] == ["dm", "group", "dm"]
        upload_id = gateway.enqueue.sent[2]["attachments"][0]["ref"]["upload_id"]
        assert gateway.store[f"uploads/signal/default/{upload_id}"][0] == JPEG

        gateway.post_letter("t11#1", {"group_id": GROUP, "text": "Echo: Who is in for Saturday?"})
        running.collect()
        running.collect()

    send = fixture("rest_v2_send.json")
    assert rest.sent == [send["request_example_group"]]  # the recipient as the REST API wants a group
    row = gateway.outbox.entries["t11#1"]
    assert (row.status, row.platform_message_id) == ("sent", str(FIRST_TIMESTAMP))


def test_a_rest_api_refusal_is_read_like_signal_clis(forwarder: ModuleType, tmp_path: Path) -> None:
    with FakeSignalRest() as rest:
        signal = forwarder.RestSignal(rest.base_url, ACCOUNT)
        rest.answer_next(400, {"error": "Failed to send message: The user +15555550199 is not registered."})
        rest.answer_next(429, fixture("rest_v2_send.json")["response_429_rate_limit"])
        rest.answer_next(400, fixture("rest_v2_send.json")["response_400"])

        outcomes = [signal.send(dm_letter(), []).status for _ in range(3)]

    assert outcomes == ["gone", "retry", "failed"]
