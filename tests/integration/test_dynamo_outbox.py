"""The DynamoDB outbox: one record per chunk, claimed by the same write, one claim at a time, a
refused chunk left for the redrive, a later failure report on the row (moto)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
from tests.fakes.aws_calls import aws_calls

pytestmark = pytest.mark.integration


def record(outbox: DynamoOutbox, delivery_id: str, now: float, text: str = "hi", platform: str = "telegram") -> Any:
    return outbox.record_claimed(
        delivery_id,
        platform=platform,
        chat_id="99",
        thread_id=None,
        text=text,
        turn_id="t",
        chunk=1,
        chunks=1,
        now=now,
    )


def test_a_new_chunk_is_recorded_and_claimed_in_one_write(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    with aws_calls() as made:
        entry, claimed = record(outbox, "t#1", 100.0)
    assert made == [("dynamodb", "PutItem")]
    assert claimed and (entry.status, entry.updated_at) == ("sending", 100.0)
    assert outbox.get("t#1") == entry


def test_a_repeated_chunk_gets_what_is_stored_from_the_same_write_without_a_read(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "t#1", 100.0)
    outbox.mark("t#1", "sent", 101.0, platform_message_id="7")
    with aws_calls() as made:
        again, claimed = record(outbox, "t#1", 200.0, text="changed")
    assert made == [("dynamodb", "PutItem")]  # the failed condition returned the row
    assert not claimed and again.status == "sent" and again.platform_message_id == "7"
    assert (again.created_at, again.attempts, again.text) == (100.0, 1, "hi")


def test_only_one_of_many_concurrent_records_claims_the_chunk(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        results.append(record(outbox, "t#1", 100.0)[1])

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 1


def test_a_failed_chunk_is_claimed_again_once(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "t#1", 100.0)
    outbox.mark("t#1", "failed", 101.0, error="TransientError: 502")
    entry, claimed = record(outbox, "t#1", 102.0)
    assert not claimed and entry.status == "failed"
    assert outbox.claim("t#1", 102.0)
    assert not outbox.claim("t#1", 102.5)  # taken: another worker would wait


def test_a_dead_lettered_chunk_is_claimed_only_by_a_redrive(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "t#1", 100.0)
    assert not outbox.mark_dead_lettered("t#1", 100.5)  # only a `failed` chunk: this one is being sent
    outbox.mark("t#1", "failed", 101.0, error="PermanentError: Bad Request")
    with aws_calls() as made:
        assert outbox.mark_dead_lettered("t#1", 102.0)
    assert made == [("dynamodb", "UpdateItem")]
    stored = outbox.get("t#1")
    assert stored is not None and (stored.status, stored.error) == ("dead_lettered", "PermanentError: Bad Request")
    assert not outbox.claim("t#1", 103.0)  # a repeat of the job
    assert outbox.claim("t#1", 104.0, reopen=True)  # the redriven job
    assert not outbox.claim("t#1", 104.5, reopen=True)  # taken: a duplicate of it waits


def test_a_sent_chunk_cannot_be_claimed_and_a_stale_claim_is_settled_unknown(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "a#1", 100.0)  # claimed by its first worker
    assert not outbox.claim("a#1", 130.0)  # the first worker may still be sending
    assert not outbox.settle_stale("a#1", 130.0)  # ... so its claim is not stale yet
    assert not outbox.claim("a#1", 200.0)
    assert outbox.settle_stale("a#1", 200.0)  # it stopped mid-send: the platform may have the chunk
    assert [e.status for e in outbox.recent() if e.delivery_id == "a#1"] == ["unknown"]
    assert not outbox.claim("a#1", 10_000.0)  # never resent
    record(outbox, "b#1", 100.0)
    outbox.mark("b#1", "sent", 101.0, platform_message_id="1")
    assert not outbox.claim("b#1", 10_000.0) and not outbox.settle_stale("b#1", 10_000.0)


def test_a_row_written_before_the_claim_was_part_of_the_record_is_claimed(aws: Any) -> None:
    # A `pending` row (written by a version that recorded and claimed in two writes) is still claimed
    outbox = DynamoOutbox(aws.bindings)
    outbox.model("old#1", platform="telegram", text="hi", status="pending", created_at=1.0, updated_at=1.0).save()
    entry, claimed = record(outbox, "old#1", 5.0)
    assert not claimed and entry.status == "pending"
    assert outbox.claim("old#1", 5.0)


def test_a_chunks_buttons_are_stored_with_it(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    buttons = [{"label": "Approve", "reply": "/approve"}]
    stored, _ = outbox.record_claimed(
        "ask#1", platform="webchat", chat_id="c", thread_id=None, text="ok?", turn_id="t", chunk=1, chunks=1,
        now=1.0, buttons=buttons,
    )  # fmt: skip
    assert stored.buttons == buttons
    assert record(outbox, "plain#1", 1.0)[0].buttons is None


def test_fail_sent_marks_only_the_sent_message_it_names(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "a#1", 100.0, platform="whatsapp")
    # a report that overtakes the worker recording the send: the row says so, and is left alone
    assert outbox.fail_sent("a#1", platform="whatsapp", platform_message_id="w1", error="e", now=101.0) == "sending"
    outbox.mark("a#1", "sent", 101.0, platform_message_id="w1")
    assert outbox.fail_sent("a#1", platform="line", platform_message_id="w1", error="e", now=102.0) == "sent"
    assert outbox.fail_sent("a#1", platform="whatsapp", platform_message_id="w2", error="e", now=102.0) == "sent"
    assert outbox.fail_sent("a#1", platform="whatsapp", platform_message_id="w1", error="e", now=102.0) == "marked"
    assert outbox.fail_sent("a#1", platform="whatsapp", platform_message_id="w1", error="e", now=103.0) == "failed"
    stored = outbox.get("a#1")
    assert stored is not None and (stored.status, stored.error, stored.updated_at) == ("failed", "e", 102.0)


def test_fail_sent_never_creates_a_row(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    assert outbox.fail_sent("nope#1", platform="whatsapp", platform_message_id="w", error="e", now=1.0) == "missing"
    assert outbox.get("nope#1") is None


def test_fail_sent_settles_a_row_left_open(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "u#1", 100.0, platform="whatsapp")
    outbox.mark("u#1", "unknown", 101.0, error="the platform gave no message id")
    record(outbox, "s#1", 100.0, platform="whatsapp")  # a worker that stopped mid-send, long ago
    assert outbox.fail_sent("u#1", platform="whatsapp", platform_message_id="w", error="e", now=200.0) == "marked"
    assert outbox.fail_sent("s#1", platform="whatsapp", platform_message_id="w", error="e", now=200.0) == "marked"


def test_a_streamed_row_is_completed_by_one_conditional_write_and_only_while_it_streams(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    outbox.record_claimed(
        "t#1", platform="telegram", chat_id="99", thread_id=None, text="so far", turn_id="t",
        chunk=1, chunks=1, now=100.0, status="streaming", platform_message_id="7",
    )  # fmt: skip
    with aws_calls() as made:
        done = outbox.complete_stream("t#1", 105.0, text="the whole answer")
    assert made == [("dynamodb", "UpdateItem")]
    assert done is not None and (done.status, done.platform_message_id, done.updated_at) == ("sent", "7", 105.0)
    assert done.text == "the whole answer" and outbox.get("t#1") == done
    # a repeat finds it sent (and a row that never streamed is not made one)
    assert outbox.complete_stream("t#1", 106.0, text="x") is None
    assert outbox.complete_stream("t#2", 106.0, text="x") is None
    assert outbox.get("t#2") is None


def test_a_row_can_be_read_eventually_consistently(aws: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from botocore.client import BaseClient

    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "t#1", 100.0)
    original, asked = BaseClient._make_api_call, list[Any]()

    def call(client: Any, operation: str, params: dict[str, Any]) -> Any:
        asked.append(params.get("ConsistentRead"))
        return original(client, operation, params)

    monkeypatch.setattr(BaseClient, "_make_api_call", call)
    assert outbox.get("t#1", consistent=False) is not None and outbox.get("t#1") is not None
    assert asked == [False, True]


def test_the_rows_of_several_ids_come_back_in_one_read(aws: Any) -> None:
    # (a quoted answer's sent messages, looked up by the turn: services/turn/quotes.py)
    outbox = DynamoOutbox(aws.bindings)
    record(outbox, "t#1", 100.0, text="first")
    record(outbox, "t#2", 100.0, text="second")
    outbox.mark("t#2", "sent", 101.0, platform_message_id="wamid.2")
    with aws_calls() as made:
        found = outbox.get_many(["t#1", "t#2", "t#v", "t#2"])
    assert made == [("dynamodb", "BatchGetItem")]
    assert sorted((e.delivery_id, e.platform_message_id) for e in found) == [("t#1", None), ("t#2", "wamid.2")]


# --- a forwarder's mailbox (platforms/mailbox.py) ---------------------------------------------------


def post_letter(outbox: DynamoOutbox, delivery_id: str, now: float, mailbox: str = "signal#") -> Any:
    letter = {"recipient": "+15555550123", "text": f"reply {delivery_id}"}
    return outbox.record_claimed(
        delivery_id, platform="signal", chat_id="+15555550123", thread_id=None, text=letter["text"], turn_id="t",
        chunk=1, chunks=1, now=now, mailbox=(mailbox, letter),
    )  # fmt: skip


def test_a_letter_is_posted_in_the_one_write_that_records_its_chunk(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    with aws_calls() as made:
        entry, posted = post_letter(outbox, "s#1", 100.0)
    assert made == [("dynamodb", "PutItem")]
    assert posted and entry.status == "queued"
    again, posted_again = post_letter(outbox, "s#1", 200.0)
    assert not posted_again and again.status == "queued"


def test_letters_are_collected_from_the_index_in_the_order_they_were_posted(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    for n, at in ((2, 102.0), (1, 101.0), (3, 103.0)):
        post_letter(outbox, f"s#{n}", at)
    post_letter(outbox, "c#1", 100.0, mailbox="signal#coder")
    record(outbox, "tg#1", 100.0)  # another platform's chunk is not in the index at all

    with aws_calls() as made:
        found = outbox.collect("signal#", 2)

    assert made == [("dynamodb", "Query"), ("dynamodb", "BatchGetItem")]  # a keys-only index, then the letters
    assert [(f.delivery_id, f.letter["text"], f.queued_at) for f in found] == [
        ("s#1", "reply s#1", 101.0),
        ("s#2", "reply s#2", 102.0),
    ]
    assert [f.delivery_id for f in outbox.collect("signal#coder", 10)] == ["c#1"]
    with aws_calls() as made:
        assert outbox.collect("signal#nobody", 10) == []
    assert made == [("dynamodb", "Query")]  # an empty mailbox: the query alone


def test_the_oldest_waiting_letter_is_one_query_of_the_index(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    assert outbox.oldest("signal#") is None
    post_letter(outbox, "s#2", 102.0)
    post_letter(outbox, "s#1", 101.0)
    with aws_calls() as made:
        assert outbox.oldest("signal#") == 101.0
    assert made == [("dynamodb", "Query")]
    outbox.settle("s#1", "signal#", "sent", 103.0, platform_message_id="1")
    assert outbox.oldest("signal#") == 102.0


def test_a_long_letter_is_stored_compressed_and_read_back_whole(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    text = "The plan for Saturday: meet at nine, bring water, and check the weather first. " * 25
    outbox.record_claimed(
        "long#1", platform="signal", chat_id="+15555550123", thread_id=None, text=text[:300], turn_id="t",
        chunk=1, chunks=1, now=100.0, mailbox=("signal#", {"recipient": "+15555550123", "text": text}),
    )  # fmt: skip
    raw = outbox.model.get("long#1").attribute_values
    assert "letter_z" in raw and "letter" not in raw and len(raw["letter_z"]) < len(text) / 2
    (found,) = outbox.collect("signal#", 10)
    assert found.letter == {"recipient": "+15555550123", "text": text}
    assert outbox.settle("long#1", "signal#", "sent", 101.0, platform_message_id="9") == "settled"
    assert "letter_z" not in outbox.model.get("long#1").attribute_values


def test_a_settled_letter_leaves_the_mailbox_and_its_report_is_idempotent(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    post_letter(outbox, "s#1", 100.0)

    with aws_calls() as made:
        assert outbox.settle("s#1", "signal#", "sent", 105.0, platform_message_id="1752345601500") == "settled"
    assert made == [("dynamodb", "UpdateItem")]

    stored = outbox.get("s#1")
    assert stored is not None and (stored.status, stored.platform_message_id) == ("sent", "1752345601500")
    raw = outbox.model.get("s#1").attribute_values
    assert not {"mailbox", "queued_at", "letter", "letter_z"} & raw.keys()  # out of the index; the letter gone
    assert outbox.collect("signal#", 10) == []
    assert outbox.settle("s#1", "signal#", "sent", 106.0, platform_message_id="1752345601500") == "already"
    assert outbox.settle("s#1", "signal#", "sent", 106.0, platform_message_id="99") == "sent"
    assert outbox.settle("s#1", "signal#", "failed", 106.0, error="late") == "sent"
    assert outbox.settle("nope#1", "signal#", "sent", 106.0, platform_message_id="1") == "missing"


def test_only_its_own_mailbox_settles_a_letter(aws: Any) -> None:
    outbox = DynamoOutbox(aws.bindings)
    post_letter(outbox, "c#1", 100.0, mailbox="signal#coder")
    assert outbox.settle("c#1", "signal#", "sent", 105.0, platform_message_id="1") == "queued"
    assert outbox.settle("c#1", "signal#coder", "gone", 105.0, error="not registered") == "settled"
    stored = outbox.get("c#1")
    assert stored is not None and (stored.status, stored.error) == ("gone", "not registered")
