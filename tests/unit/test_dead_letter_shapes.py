"""The shared dead-letter queue's four shapes (services.dead_letters.classify), what a listing shows
of them (never a message's text), and a redrive that leaves what came in after it began."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from hermes_gateway.services.dead_letters import classify, peek, redrive

JOB = {"delivery_id": "d-1", "target": {"platform": "telegram", "chat_id": "99"}, "text": "secret words"}
ENVELOPE = {"event_id": "telegram:default:7", "session_key": "k", "text": "secret words", "v": 1}


def message(body: Any, message_id: str = "m1", sent_ms: int = 1_000, **attributes: str) -> dict[str, Any]:
    return {
        "MessageId": message_id,
        "ReceiptHandle": f"rh-{message_id}",
        "Body": body if isinstance(body, str) else json.dumps(body),
        "Attributes": {"SentTimestamp": str(sent_ms)},
        "MessageAttributes": {k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
    }


BATCH = {
    "requestContext": {"condition": "RetryAttemptsExhausted", "approximateInvokeCount": 101},
    "version": "1.0",
    "DDBStreamBatchInfo": {
        "shardId": "shard-1",
        "startSequenceNumber": "100",
        "endSequenceNumber": "102",
        "approximateArrivalOfFirstRecord": "2026-01-01T00:00:00Z",
        "approximateArrivalOfLastRecord": "2026-01-01T00:00:02Z",
        "batchSize": 3,
        "streamArn": "arn:aws:dynamodb:us-east-1:1:table/inbox/stream/x",
    },
}


def test_each_shape_is_recognized_with_its_reason_and_a_listing_never_shows_the_text() -> None:
    letters = [
        classify(message({"kind": "inbound", "reason": "KeyError: x", "attempts": 5, "message": ENVELOPE})),
        classify(message({"kind": "delivery", "reason": "TelegramRejected: 400", "job": JOB})),
        classify(message(JOB, ErrorMessage="TransientError: 502", ErrorCode="200", RequestID="r")),
        classify(message(BATCH)),
        classify(message("not JSON at all")),
    ]
    assert [letter.kind for letter in letters] == ["inbound", "delivery", "delivery-async", "inbound-batch", "unknown"]
    assert letters[2].reason == "TransientError: 502" and letters[2].jobs == [JOB]
    assert "RetryAttemptsExhausted" in letters[3].reason
    summaries = [letter.summary() for letter in letters]
    assert summaries[0]["ids"] == ["telegram:default:7"] and summaries[1]["ids"] == ["d-1"]
    assert summaries[3]["ids"] == ["100..102 (3)"]
    assert "secret words" not in json.dumps(summaries)


class Queue:
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = {m["ReceiptHandle"]: m for m in messages}
        self.invisible: set[str] = set()
        self.deleted: list[str] = []
        self.released: list[str] = []

    def receive(
        self, max_messages: int = 10, wait_seconds: int = 0, visibility_seconds: int = 60
    ) -> list[dict[str, Any]]:
        found = [m for h, m in self.messages.items() if h not in self.invisible][:max_messages]
        if visibility_seconds:
            self.invisible.update(m["ReceiptHandle"] for m in found)
        return found

    def delete(self, receipt_handle: str) -> None:
        self.deleted.append(receipt_handle)
        del self.messages[receipt_handle]

    def release(self, receipt_handle: str) -> None:
        self.released.append(receipt_handle)
        self.invisible.discard(receipt_handle)


class Deliveries:
    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []

    def send(self, body: dict[str, Any]) -> str:
        self.jobs.append(body)
        return "r"


class Inbox:
    def __init__(self, stream: list[tuple[str, str]] | None, stored: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.stream, self.stored = stream, stored
        self.put: list[dict[str, Any]] = []
        self.windows: list[tuple[float, float]] = []

    def get(self, key: tuple[str, str]) -> dict[str, Any] | None:
        return self.stored.get(key)

    def put_back(self, envelope: dict[str, Any]) -> bool:
        self.put.append(envelope)
        return True

    def batch_keys(self, stream_arn: str, shard_id: str, first: str, last: str) -> list[tuple[str, str]] | None:
        return self.stream

    def received_between(self, start: float, end: float) -> Iterator[dict[str, Any]]:
        self.windows.append((start, end))
        yield ENVELOPE


def test_a_redrive_sends_each_shape_back_where_it_came_from() -> None:
    queue = Queue([
        message({"kind": "inbound", "reason": "x", "message": None, "key": ["g", "e7"]}, "m1"),
        message({"kind": "delivery", "reason": "refused", "job": JOB}, "m2"),
        message(JOB, "m3", ErrorMessage="TransientError"),
        message(BATCH, "m4"),
        message("?", "m5"),
    ])  # fmt: skip
    deliveries = Deliveries()
    inbox = Inbox(
        stream=[("g", "e7"), ("g", "e8")], stored={("g", "e7"): ENVELOPE, ("g", "e8"): {**ENVELOPE, "event_id": "e8"}}
    )
    report = redrive(queue, deliveries, inbox, limit=10, now=10.0)
    assert deliveries.jobs == [{**JOB, "redriven": True}] * 2  # a chunk refused for good may be sent again
    assert [e["event_id"] for e in inbox.put] == ["telegram:default:7", "telegram:default:7", "e8"]
    assert (report.inbound, report.deliveries, sum(report.left.values())) == (3, 2, 1)
    assert queue.deleted == ["rh-m1", "rh-m2", "rh-m3", "rh-m4"]  # the unknown one stays for a look


def test_a_batch_the_stream_no_longer_holds_is_found_by_its_arrival_window() -> None:
    inbox = Inbox(stream=None, stored={})
    redrive(Queue([message(BATCH)]), Deliveries(), inbox, limit=10, now=10.0)
    ((start, end),) = inbox.windows
    assert end - start == 2 + 2 * 60  # the batch's two seconds, widened by a minute each way
    assert inbox.put == [ENVELOPE]


def test_what_was_dead_lettered_after_the_redrive_began_is_left_visible_for_the_next() -> None:
    queue = Queue([message({"kind": "delivery", "reason": "r", "job": JOB}, "new", sent_ms=20_000)])
    deliveries = Deliveries()
    assert redrive(queue, deliveries, Inbox(None, {}), limit=10, now=10.0).moved == 0
    assert deliveries.jobs == [] and queue.released == ["rh-new"] and queue.deleted == []


def test_peeking_pages_through_the_queue_and_leaves_every_message_visible() -> None:
    queue = Queue([message(BATCH, f"m{n}") for n in range(25)])
    assert len(peek(queue, 100)) == 25 and queue.deleted == [] and queue.invisible == set()
    assert len(peek(queue, 12)) == 12 and queue.invisible == set()
