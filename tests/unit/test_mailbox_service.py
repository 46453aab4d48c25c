"""A forwarder's mailbox (services/mailbox.py): replies are posted by the delivery service as
letters and marked sent only by the forwarder's report (with signal-cli's timestamp); files go by
pre-signed URL both ways."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from hermes_gateway.services.ingress import MailboxCall
from hermes_gateway.services.mailbox import MailboxDeps, serve
from tests.fakes import platforms
from tests.fakes.services import FakeOutbox, make_settings

ALICE = "+15555550123"
GROUP = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
NOW = 1000.0


class Links:
    def __init__(self) -> None:
        self.uploads: list[tuple[str, str, int]] = []

    def url(self, key: str, expires_seconds: int) -> str:
        return f"https://media.example/{key}?expires={expires_seconds}"

    def upload_url(self, key: str, mime: str, size: int, expires_seconds: int) -> str:
        self.uploads.append((key, mime, size))
        return f"https://media.example/{key}?put"


class Events:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict[str, Any]]] = []

    def emit(self, name: str, detail: dict[str, Any]) -> None:
        self.emitted.append((name, detail))


def post(
    outbox: FakeOutbox, delivery_id: str, letter: dict[str, Any], *, mailbox: str = "signal#", at: float = NOW
) -> None:
    outbox.record_claimed(delivery_id, platform="signal", chat_id=ALICE, thread_id=None, text=letter["text"],
                          turn_id="t", chunk=1, chunks=1, now=at, mailbox=(mailbox, letter))  # fmt: skip


def call(outbox: FakeOutbox, kind: str, body: dict[str, Any], *, profile: str | None = None, **deps: Any) -> Any:
    built = MailboxDeps(letters=outbox, files=deps.pop("files", Links()), max_bytes=deps.pop("max_bytes", 1000), **deps)
    return serve("signal", profile, MailboxCall(kind, body), built, NOW + 5)


# --- collecting and settling ------------------------------------------------------------------


def test_letters_are_collected_oldest_first_within_the_limit() -> None:
    outbox = FakeOutbox()
    for n in (3, 1, 2):
        post(outbox, f"d{n}#1", {"recipient": ALICE, "text": f"reply {n}"}, at=NOW + n)

    answer = call(outbox, "outbox", {"limit": 2})

    assert answer.status == 200
    assert [letter["id"] for letter in answer.body["letters"]] == ["d1#1", "d2#1"]
    assert answer.body["letters"][0] == {"id": "d1#1", "recipient": ALICE, "text": "reply 1"}
    assert outbox.entries["d1#1"].status == "queued"  # collecting settles nothing


def test_a_sent_report_marks_the_row_sent_with_the_platforms_timestamp() -> None:
    outbox, events = FakeOutbox(), Events()
    post(outbox, "d1#1", {"recipient": ALICE, "text": "hi"})

    answer = call(outbox, "outbox", {"reports": [{"id": "d1#1", "status": "sent", "timestamp": 1752345601500}]},
                  events=events)  # fmt: skip

    assert answer.body == {"settled": ["d1#1"], "ignored": [], "letters": []}
    row = outbox.entries["d1#1"]
    assert (row.status, row.platform_message_id, row.attempts) == ("sent", "1752345601500", 1)
    assert events.emitted == [
        ("delivery:sent", {"platform": "signal", "delivery_id": "d1#1", "status": "sent", "chunks": 1})
    ]


def test_a_repeated_report_is_answered_again_and_changes_nothing() -> None:
    outbox = FakeOutbox()
    post(outbox, "d1#1", {"recipient": ALICE, "text": "hi"})
    report = {"reports": [{"id": "d1#1", "status": "sent", "timestamp": "17"}]}
    call(outbox, "outbox", report)

    again = call(outbox, "outbox", report)

    assert again.body["settled"] == ["d1#1"]
    assert outbox.entries["d1#1"].attempts == 1


def test_failures_are_recorded_with_their_reasons(caplog: pytest.LogCaptureFixture) -> None:
    outbox, events = FakeOutbox(), Events()
    for n in (1, 2, 3):
        post(outbox, f"d{n}#1", {"recipient": ALICE, "text": "hi"})
    reports = [
        {"id": "d1#1", "status": "gone", "error": "not registered"},
        {"id": "d2#1", "status": "failed", "error": "-4: Untrusted identity"},
        {"id": "d3#1", "status": "unknown"},
    ]

    call(outbox, "outbox", {"reports": reports}, events=events)

    assert [(outbox.entries[f"d{n}#1"].status, outbox.entries[f"d{n}#1"].error) for n in (1, 2, 3)] == [
        ("gone", "not registered"),
        ("failed", "-4: Untrusted identity"),
        ("unknown", "no reason given"),
    ]
    assert [d["reason"] for _, d in events.emitted] == ["target_gone", "refused", "outcome_unknown"]
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert [r.getMessage() for r in errors] == ["the forwarder could not send a letter"]  # the alarm's line


def test_another_mailboxs_letter_cannot_be_settled_or_collected() -> None:
    # Given a letter of the coder profile's bot
    outbox = FakeOutbox()
    post(outbox, "c1#1", {"recipient": ALICE, "text": "coder's"}, mailbox="signal#coder")

    # When the deployment's own forwarder reports it and collects
    answer = call(outbox, "outbox", {"reports": [{"id": "c1#1", "status": "sent", "timestamp": 1}]})

    # Then nothing of it is touched or handed over
    assert answer.body == {"settled": [], "ignored": ["c1#1"], "letters": []}
    assert outbox.entries["c1#1"].status == "queued"
    assert [letter["id"] for letter in call(outbox, "outbox", {}, profile="coder").body["letters"]] == ["c1#1"]


def test_a_report_of_a_letter_already_settled_otherwise_is_ignored() -> None:
    outbox = FakeOutbox()
    post(outbox, "d1#1", {"recipient": ALICE, "text": "hi"})
    call(outbox, "outbox", {"reports": [{"id": "d1#1", "status": "unknown"}]})

    answer = call(outbox, "outbox", {"reports": [{"id": "d1#1", "status": "sent", "timestamp": 9}]})

    assert answer.body["ignored"] == ["d1#1"]
    assert outbox.entries["d1#1"].status == "unknown"  # never sent again, never called sent after all


def test_a_letters_file_is_handed_over_as_a_download_url() -> None:
    outbox = FakeOutbox()
    file = {"key": "default/s/out/d-1", "name": "reply.ogg", "mime": "audio/ogg", "kind": "voice", "size": 5}
    post(outbox, "d1#m1", {"recipient": ALICE, "text": "", "attachments": [file]})

    (letter,) = call(outbox, "outbox", {}).body["letters"]

    assert letter["attachments"] == [
        {"name": "reply.ogg", "mime": "audio/ogg", "kind": "voice", "size": 5,
         "url": "https://media.example/default/s/out/d-1?expires=900"}
    ]  # fmt: skip


@pytest.mark.parametrize(
    "body",
    [
        {"reports": "all"},
        {"reports": [{"id": "d1#1", "status": "delivered"}]},
        {"reports": [{"id": "d1#1", "status": "sent"}]},
        {"reports": [{"id": "d1#1", "status": "sent", "timestamp": "soon"}]},
        {"reports": [{"id": "d1#1", "status": "sent", "timestamp": "1" * 16}]},
        {"reports": [{"id": "", "status": "sent", "timestamp": 1}]},
        {"reports": [{"id": "d1#1", "status": "failed", "error": 7}]},
        {"reports": [{"id": "d", "status": "unknown"}] * 101},
        {"limit": 0},
        {"limit": 21},
        {"limit": True},
    ],
)
def test_a_malformed_call_is_refused_and_settles_nothing(body: dict[str, Any]) -> None:
    outbox = FakeOutbox()
    post(outbox, "d1#1", {"recipient": ALICE, "text": "hi"})
    good = {"id": "d1#1", "status": "sent", "timestamp": 1}
    with_good = {**body, "reports": [good, *body["reports"]]} if isinstance(body.get("reports"), list) else body

    assert call(outbox, "outbox", with_good).status == 400
    assert outbox.entries["d1#1"].status == "queued"


# --- uploads --------------------------------------------------------------------------------------


def test_uploads_get_a_url_each_under_the_bots_profile() -> None:
    links = Links()
    files = [
        {"id": "x7Qm2Vb9KpL4sN8dW3Zr.jpg", "size": 482, "content_type": "image/jpeg"},
        {"id": "doc.txt", "size": 9},
    ]

    answer = call(FakeOutbox(), "uploads", {"files": files}, profile="coder", files=links)

    assert answer.status == 200
    first, second = answer.body["uploads"]
    assert first["id"] == "x7Qm2Vb9KpL4sN8dW3Zr.jpg" and len(first["upload_id"]) == 32
    assert first["headers"] == {"Content-Type": "image/jpeg", "Content-Length": "482"}
    assert second["headers"]["Content-Type"] == "application/octet-stream"
    assert links.uploads == [
        (f"uploads/signal/coder/{first['upload_id']}", "image/jpeg", 482),
        (f"uploads/signal/coder/{second['upload_id']}", "application/octet-stream", 9),
    ]


def test_a_file_over_the_limit_is_refused_the_others_uploaded() -> None:
    files = [{"id": "big.mp4", "size": 1001}, {"id": "small.jpg", "size": 1000}]
    answer = call(FakeOutbox(), "uploads", {"files": files}, max_bytes=1000)
    assert [u["id"] for u in answer.body["uploads"]] == ["small.jpg"]
    assert answer.body["refused"] == [{"id": "big.mp4", "reason": "over media.max_bytes (1000 bytes)"}]


@pytest.mark.parametrize(
    "files",
    [
        [],
        "x",
        [{"id": "../etc/passwd", "size": 1}],
        [{"id": "a.jpg", "size": 0}],
        [{"id": "a.jpg", "size": "1"}],
        [{"id": "a.jpg", "size": 1, "content_type": "text/html\r\nx-injected: 1"}],
        [{"id": "a.jpg", "size": 1}] * 33,
    ],
)
def test_malformed_uploads_are_refused(files: Any) -> None:
    links = Links()
    assert call(FakeOutbox(), "uploads", {"files": files}, files=links).status == 400
    assert not links.uploads


def test_an_unknown_call_is_not_found() -> None:
    assert call(FakeOutbox(), "inbox", {}).status == 404


# --- the delivery service posts letters ---------------------------------------------------------


def signal_deps(outbox: FakeOutbox, **changes: Any) -> DeliveryDeps:
    settings = make_settings({"SIGNAL_ENABLED": "true"})
    mailbox = platforms.sender("signal", settings, {})
    return DeliveryDeps(
        outbox=outbox,
        sender_for=lambda platform, via: mailbox,
        now=lambda: NOW,
        reply_to_mode=lambda platform: "first",
        **changes,
    )


def signal_job(text: str, **target: Any) -> DeliveryJob:
    raw = {"delivery_id": "turn-1", "turn_id": "turn-1", "text": text, "reply_to_message_id": "1752345601001",
           "target": {"platform": "signal", "chat_id": ALICE, **target}}  # fmt: skip
    return DeliveryJob.from_dict(raw)


def test_a_reply_is_posted_as_letters_and_waits_for_the_forwarder() -> None:
    outbox = FakeOutbox()

    result = deliver(signal_job("word " * 500), signal_deps(outbox))  # 2,500 characters: two messages

    assert result.status == "queued" and result.sent_chunks == 2
    assert [(e.delivery_id, e.status) for e in result.entries] == [("turn-1#1", "queued"), ("turn-1#2", "queued")]
    assert outbox.writes == ["record_claimed", "record_claimed"]  # one write each, no mark
    first, second = (letter for _, letter in sorted(outbox.letters.values(), key=lambda m: m[1].delivery_id))
    assert first.letter["quote"] == {"timestamp": 1752345601001, "author": ALICE}  # the first chunk answers
    assert "quote" not in second.letter
    assert len(first.letter["text"]) <= 2000 and first.letter["recipient"] == ALICE


def test_a_repeated_job_posts_nothing_again_whatever_became_of_the_letters() -> None:
    outbox = FakeOutbox()
    deliver(signal_job("hello"), signal_deps(outbox))
    call(outbox, "outbox", {"reports": [{"id": "turn-1#1", "status": "sent", "timestamp": 5}]})

    again = deliver(signal_job("hello"), signal_deps(outbox))

    assert again.sent_chunks == 0
    assert outbox.entries["turn-1#1"].status == "sent"
    assert not outbox.letters


def test_a_reply_to_a_chat_signal_cannot_have_is_dead_lettered() -> None:
    from hermes_gateway.services.delivery import Undeliverable

    with pytest.raises(Undeliverable, match="number, a UUID or a group id"):
        deliver(signal_job("hello", chat_id="../../etc"), signal_deps(FakeOutbox()))


# --- the tick: a forwarder that stopped collecting ----------------------------------------------


def test_a_letter_waiting_past_a_quarter_hour_is_an_error_each_minute(caplog: pytest.LogCaptureFixture) -> None:
    from hermes_gateway.services.mailbox import check_mailboxes

    settings = make_settings({"SIGNAL_ENABLED": "true"})
    outbox = FakeOutbox()
    assert check_mailboxes(outbox, settings, NOW) == {"mailboxes_stalled": 0}  # empty
    post(outbox, "d1#1", {"recipient": ALICE, "text": "hi"}, at=NOW)
    assert check_mailboxes(outbox, settings, NOW + 14 * 60) == {"mailboxes_stalled": 0}  # a slow forwarder

    assert check_mailboxes(outbox, settings, NOW + 16 * 60) == {"mailboxes_stalled": 1}

    (line,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "is its forwarder running?" in line.getMessage()
    assert check_mailboxes(outbox, make_settings({}), NOW + 16 * 60) == {"mailboxes_stalled": 0}  # Signal off


def test_each_bots_mailbox_is_checked() -> None:
    from hermes_gateway.services.mailbox import check_mailboxes

    config = {"profiles": {"coder": {"platforms": {"signal": {"enabled": True}}}}}
    settings = make_settings({"SIGNAL_ENABLED": "true"}, config)
    outbox = FakeOutbox()
    post(outbox, "c1#1", {"recipient": ALICE, "text": "hi"}, mailbox="signal#coder", at=NOW)
    assert check_mailboxes(outbox, settings, NOW + 3600) == {"mailboxes_stalled": 1}
