"""Delivery (services/delivery.py): chunk, write to the outbox, send, mark; never send a chunk twice."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hermes_gateway.errors import BadRequest, PermanentError, TransientError
from hermes_gateway.platforms.base import Sender
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, RecordOnly, deliver
from tests.fakes.services import FakeOutbox, FakeSender

NOW = 1_764_400_000.0
SUFFIX = re.compile(r" \((\d+)/(\d+)\)$")


def job(
    text: str, *, platform: str = "telegram", chat_id: Any = "99", thread_id: Any = None, delivery_id: str = "turn-abc"
) -> DeliveryJob:
    return DeliveryJob.from_dict(
        {
            "delivery_id": delivery_id,
            "turn_id": "turn-abc",
            "target": {"platform": platform, "chat_id": chat_id, "thread_id": thread_id},
            "text": text,
        }
    )


def deps(outbox: FakeOutbox, sender: Sender | None, expected_platform: str = "telegram") -> DeliveryDeps:
    def sender_for(platform: str, via: str) -> Sender | None:
        assert platform == expected_platform
        return sender

    return DeliveryDeps(outbox=outbox, sender_for=sender_for, now=lambda: NOW)


def long_text() -> str:
    # About 10 000 characters of paragraphs: three Telegram messages.
    paragraph = " ".join(f"word{i}" for i in range(60))
    return "\n\n".join(f"{n}. {paragraph}" for n in range(25))


def test_a_short_reply_is_one_message_without_a_suffix() -> None:
    outbox, sender = FakeOutbox(), FakeSender()

    entries = deliver(job("Echo: hi", thread_id=17), deps(outbox, sender)).entries

    assert sender.sent == [("99", "Echo: hi", "17")]
    assert [e.delivery_id for e in entries] == ["turn-abc#1"]
    stored = outbox.entries["turn-abc#1"]
    assert (stored.status, stored.platform_message_id, stored.chunk, stored.chunks) == ("sent", "1001", 1, 1)
    assert (stored.turn_id, stored.chat_id, stored.thread_id) == ("turn-abc", "99", "17")


def test_a_long_telegram_reply_is_split_into_numbered_chunks_sent_in_order() -> None:
    # Given a reply well over Telegram's 4096-character limit
    text = long_text()
    assert len(text) > 2 * 4096
    outbox, sender = FakeOutbox(), FakeSender()

    # When it is delivered
    deliver(job(text), deps(outbox, sender))

    # Then several chunks, each within the limit, numbered (i/N) and sent in order
    sent = [t for _, t, _ in sender.sent]
    total = len(sent)
    assert total >= 3
    assert all(len(t) <= 4096 for t in sent)
    assert [SUFFIX.search(t).groups() for t in sent] == [(str(i), str(total)) for i in range(1, total + 1)]  # type: ignore[union-attr]
    # Nothing is lost: the bodies, without suffixes, hold every word in order
    words = " ".join(SUFFIX.sub("", t) for t in sent).split()
    assert words == text.split()
    # Each chunk has its own outbox entry, marked sent with its message id
    assert [(e.chunk, e.chunks, e.status) for e in sorted(outbox.entries.values(), key=lambda e: e.chunk)] == [
        (i, total, "sent") for i in range(1, total + 1)
    ]
    assert [outbox.entries[f"turn-abc#{i}"].platform_message_id for i in range(1, total + 1)] == [
        str(1000 + i) for i in range(1, total + 1)
    ]


def test_unknown_platforms_use_the_default_limit() -> None:
    outbox, sender = FakeOutbox(), FakeSender()

    deliver(job("x " * 3000, platform="irc"), deps(outbox, sender, "irc"))

    assert len(sender.sent) == 2
    assert all(len(t) <= 4000 for _, t, _ in sender.sent)


def test_running_the_same_job_again_sends_nothing() -> None:
    # Given a job delivered in full
    outbox, sender = FakeOutbox(), FakeSender()
    deliver(job(long_text()), deps(outbox, sender))
    sent_before = list(sender.sent)

    # When the queue hands the same job over again
    entries = deliver(job(long_text()), deps(outbox, sender)).entries

    # Then nothing more is sent, and the entries come back as stored
    assert sender.sent == sent_before
    assert {e.status for e in entries} == {"sent"}


def test_a_failed_chunk_is_marked_and_re_raised_and_a_later_run_sends_only_what_is_missing() -> None:
    # Given a sender that fails on the second chunk
    text = long_text()
    outbox, sender = FakeOutbox(), FakeSender(fail_on={2}, error=TransientError("telegram timed out"))

    # When the job runs, Then the failure propagates (the queue retries the job)
    with pytest.raises(TransientError):
        deliver(job(text), deps(outbox, sender))

    # And the first chunk is sent, the second marked failed with its reason, the rest not yet written
    assert len(sender.sent) == 1
    assert outbox.entries["turn-abc#1"].status == "sent"
    failed = outbox.entries["turn-abc#2"]
    assert failed.status == "failed"
    assert failed.error == "TransientError: telegram timed out"
    assert "turn-abc#3" not in outbox.entries

    # When the queue retries the job
    deliver(job(text), deps(outbox, sender))

    # Then chunk 1 is not sent again; 2 and the rest go out in order
    chunks = [SUFFIX.search(t).group(1) for _, t, _ in sender.sent]  # type: ignore[union-attr]
    total = int(SUFFIX.search(sender.sent[0][1]).group(2))  # type: ignore[union-attr]
    assert chunks == [str(i) for i in range(1, total + 1)]
    assert all(outbox.entries[f"turn-abc#{i}"].status == "sent" for i in range(1, total + 1))
    assert outbox.entries["turn-abc#2"].attempts == 2


def test_a_permanent_sender_failure_is_re_raised_too() -> None:
    outbox, sender = FakeOutbox(), FakeSender(fail_on={1}, error=PermanentError("chat not found"))

    with pytest.raises(PermanentError, match="chat not found"):
        deliver(job("hi"), deps(outbox, sender))
    assert outbox.entries["turn-abc#1"].status == "failed"


def test_no_sender_for_the_platform_is_a_permanent_error_and_nothing_is_recorded() -> None:
    outbox = FakeOutbox()

    with pytest.raises(PermanentError, match="telegram"):
        deliver(job("hi"), deps(outbox, None))
    assert outbox.entries == {}


def test_a_target_without_a_chat_id_is_a_permanent_error() -> None:
    outbox, sender = FakeOutbox(), FakeSender()

    with pytest.raises(PermanentError):
        deliver(job("hi", chat_id=None), deps(outbox, sender))
    assert sender.sent == [] and outbox.entries == {}


def test_record_only_targets_are_marked_recorded_and_never_sent_twice() -> None:
    outbox = FakeOutbox()

    deliver(job("hi", platform="webchat", chat_id="c1"), deps(outbox, RecordOnly(), "webchat"))
    deliver(job("hi", platform="webchat", chat_id="c1"), deps(outbox, RecordOnly(), "webchat"))

    entry = outbox.entries["turn-abc#1"]
    assert (entry.status, entry.platform_message_id, entry.attempts) == ("recorded", None, 1)
    assert outbox.marks == [("turn-abc#1", "recorded")]


def test_an_empty_reply_sends_nothing() -> None:
    outbox, sender = FakeOutbox(), FakeSender()

    assert deliver(job("   \n"), deps(outbox, sender)).entries == []
    assert sender.sent == []


def test_job_from_dict_reads_a_turn_delivery() -> None:
    parsed = DeliveryJob.from_dict(
        {
            "delivery_id": "t-1",
            "turn_id": "t",
            "target": {"platform": "telegram", "chat_id": -100, "thread_id": 17},
            "text": "hi",
        }
    )

    assert parsed == DeliveryJob("t-1", "t", "telegram", "-100", "17", "hi")


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"delivery_id": "d", "text": "hi"},
        {"delivery_id": "d", "target": {"chat_id": "1"}, "text": "hi"},
        {"delivery_id": "d", "target": {"platform": "telegram", "chat_id": "1"}},
        {"target": {"platform": "telegram", "chat_id": "1"}, "text": "hi"},
        {"delivery_id": "d", "target": None, "text": "hi"},
        {"delivery_id": "d", "target": "telegram:1", "text": "hi"},
        None,
        ["delivery_id"],
    ],
)
def test_a_malformed_job_is_a_bad_request(data: Any) -> None:
    with pytest.raises(BadRequest, match="malformed delivery job"):
        DeliveryJob.from_dict(data)


@pytest.mark.parametrize("field", ["text", "delivery_id"])
def test_a_null_text_or_delivery_id_is_a_bad_request(field: str) -> None:
    data: dict[str, Any] = {"delivery_id": "d", "target": {"platform": "telegram", "chat_id": "1"}, "text": "hi"}
    data[field] = None

    with pytest.raises(BadRequest):
        DeliveryJob.from_dict(data)


def claimed_chunk(outbox: FakeOutbox, at: float) -> None:
    """The one chunk of `job("hi")`, recorded and claimed by a worker at `at`."""
    _, claimed = outbox.record_claimed(
        "turn-abc#1",
        platform="telegram",
        chat_id="99",
        thread_id=None,
        text="hi",
        turn_id="turn-abc",
        chunk=1,
        chunks=1,
        now=at,
    )
    assert claimed


def test_a_second_worker_does_not_send_a_chunk_another_worker_is_sending() -> None:
    # Given a chunk claimed by a worker that is still sending it
    outbox, sender = FakeOutbox(), FakeSender()
    claimed_chunk(outbox, NOW)
    # When the same job reaches a second worker
    with pytest.raises(TransientError):
        deliver(job("hi"), deps(outbox, sender))
    # Then it sent nothing, and it will retry after the first worker's claim
    assert sender.sent == []


def test_a_claim_left_by_a_worker_that_stopped_mid_send_is_settled_unknown_not_resent() -> None:
    outbox, sender = FakeOutbox(), FakeSender()
    claimed_chunk(outbox, NOW - 600)
    result = deliver(job("hi"), deps(outbox, sender))
    assert result.status == "unknown" and sender.sent == []
    assert outbox.entries["turn-abc#1"].status == "unknown"


def test_a_throttled_sent_mark_is_retried_and_the_chunk_is_not_sent_twice() -> None:
    class FlakyOutbox(FakeOutbox):
        failures = 2

        def mark(self, delivery_id: str, status: str, now: float, **kw: Any) -> None:
            if status == "sent" and self.failures:
                self.failures -= 1
                raise TransientError("DynamoDB is throttling")
            super().mark(delivery_id, status, now, **kw)

    outbox, sender = FlakyOutbox(), FakeSender()
    d = deps(outbox, sender)
    d.sleep = lambda seconds: None
    deliver(job("hi"), d)
    assert len(sender.sent) == 1 and outbox.entries["turn-abc#1"].status == "sent"


def test_a_pairing_code_is_sent_but_kept_masked_in_the_outbox() -> None:
    outbox, sender = FakeOutbox(), FakeSender()
    pairing = DeliveryJob.from_dict(
        {
            "delivery_id": "pairing-1",
            "target": {"platform": "telegram", "chat_id": "99"},
            "text": "Your pairing code is ABCD2345.",
            "redact": ["ABCD2345"],
        }
    )
    deliver(pairing, deps(outbox, sender))
    assert sender.sent[0][1] == "Your pairing code is ABCD2345."
    stored = outbox.entries["pairing-1#1"].text
    assert "ABCD2345" not in stored and stored.startswith("Your pairing code is ")
    # Local mode keeps it: its in-memory outbox is the only place a newcomer can read it
    local = FakeOutbox()
    deliver(pairing, DeliveryDeps(outbox=local, sender_for=lambda p, v: sender, now=lambda: NOW, store_sensitive=True))
    assert "ABCD2345" in local.entries["pairing-1#1"].text


def test_buttons_go_under_the_last_chunk_only_and_are_kept_with_it() -> None:
    from hermes_gateway.platforms.base import Button, Target

    class Recording(FakeSender):
        def __init__(self) -> None:
            super().__init__()
            self.buttons: list[tuple[Button, ...]] = []

        def send(self, target: Target, text: str) -> str:
            self.buttons.append(target.buttons)
            return super().send(target, text)

    outbox, sender = FakeOutbox(), Recording()
    approval = [{"label": "Approve", "reply": "/approve"}, {"label": "Deny", "reply": "/deny"}, {"label": ""}]
    with_buttons = DeliveryJob.from_dict(
        {
            "delivery_id": "ask-1",
            "target": {"platform": "telegram", "chat_id": "99"},
            "text": long_text(),
            "buttons": approval,
        }
    )

    deliver(with_buttons, deps(outbox, sender))

    *earlier, last = sender.buttons
    assert earlier and all(b == () for b in earlier)
    assert last == (Button("Approve", "/approve"), Button("Deny", "/deny"))
    rows = sorted(outbox.entries.values(), key=lambda e: e.chunk)
    assert [r.buttons for r in rows[:-1]] == [None] * (len(rows) - 1)
    assert rows[-1].buttons == [{"label": "Approve", "reply": "/approve"}, {"label": "Deny", "reply": "/deny"}]
