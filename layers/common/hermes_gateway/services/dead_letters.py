"""The shared dead-letter queue (resources.DEAD_LETTERS): what its messages are, and a redrive.

Six shapes arrive there:

- `inbound`: `{"kind": "inbound", "reason", "attempts", "message", "key"}`, a message the router
  could not route after its attempts (services.consumer);
- `delivery`: `{"kind": "delivery", "reason", "job"}`, a job the platform refused, or malformed
  (the delivery function);
- `delivery-async`: a delivery job exactly as it was sent, whose asynchronous invoke failed after
  Lambda's retries (the function's DeadLetterConfig; the error is in the message's attributes);
- `inbound-batch`: the metadata of a batch of the inbox stream that Lambda's event source mapping
  gave up on (`DDBStreamBatchInfo`: shard, sequence numbers, times). The messages themselves are
  still in the inbox table until their TTL: read back through the stream (it keeps 24 hours), or
  else found by their arrival time;
- `email` and `email-feedback`: an SES receipt, or a sent mail's bounce or complaint, exactly as
  it invoked the ingress function, whose asynchronous invoke failed after Lambda's retries (the
  ingress's DeadLetterConfig); a redrive invokes the ingress with it again.

A redrive puts an inbound message back in the inbox (a new item: the stream routes it again; the
router is idempotent on the event id) and hands a delivery job to the delivery function again (the
outbox sends each chunk at most once), marked `redriven`: only such a job sends a chunk that is
`dead_lettered` again. A message is deleted from the queue only once redriven.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from hermes_gateway.domain.ports import Deliveries

# A batch's times are the stream's approximate arrival times: the window is widened by this much
# (a message routed twice is answered once).
BATCH_WINDOW_MARGIN_SECONDS = 60


@dataclass(frozen=True)
class DeadLetter:
    kind: str  # inbound | delivery | delivery-async | inbound-batch | email | email-feedback | unknown
    reason: str
    body: Any  # the message as it is on the queue (JSON), or its raw text when it is not JSON
    message_id: str = ""
    receipt_handle: str = ""

    @property
    def jobs(self) -> list[dict[str, Any]]:
        """The delivery jobs it holds (none for an inbound dead letter)."""
        if self.kind == "delivery":
            return [self.body["job"]] if isinstance(self.body.get("job"), dict) else []
        if self.kind == "delivery-async":
            found = self.body.get("deliveries", [self.body])
            return [job for job in found if isinstance(job, dict)]
        return []

    def summary(self) -> dict[str, Any]:
        """What an operator sees in a listing: never the message's text."""
        body = self.body if isinstance(self.body, dict) else {}
        ids = [job.get("delivery_id") for job in self.jobs]
        if self.kind == "inbound":
            ids = [(body.get("message") or {}).get("event_id") or (body.get("key") or [None, None])[1]]
        if self.kind == "email":  # SES's ids of the messages (the stored objects), never an address
            records = body.get("Records") or []
            ids = [((r.get("ses") or {}).get("mail") or {}).get("messageId") for r in records if isinstance(r, dict)]
        if self.kind == "email-feedback":
            ids = [((body.get("detail") or {}).get("mail") or {}).get("messageId")]
        if self.kind == "inbound-batch":
            info = body.get("DDBStreamBatchInfo") or {}
            ids = [f"{info.get('startSequenceNumber')}..{info.get('endSequenceNumber')} ({info.get('batchSize')})"]
        return {"kind": self.kind, "reason": self.reason[:200], "ids": ids, "message_id": self.message_id}


def classify(message: dict[str, Any]) -> DeadLetter:
    """A message received from the dead-letter queue, by its shape."""
    attributes = message.get("MessageAttributes") or {}
    try:
        body = json.loads(message.get("Body") or "")
    except ValueError:
        body = message.get("Body")
    kind, reason = "unknown", "not a dead letter the gateway writes"
    if isinstance(body, dict):
        if body.get("kind") in ("inbound", "delivery"):
            kind, reason = str(body["kind"]), str(body.get("reason") or "")
        elif "DDBStreamBatchInfo" in body:
            condition = (body.get("requestContext") or {}).get("condition", "")
            kind, reason = "inbound-batch", f"the inbox stream's mapping gave up on a batch ({condition})"
        elif "delivery_id" in body or "deliveries" in body:
            error = (attributes.get("ErrorMessage") or {}).get("StringValue") or "the asynchronous invoke failed"
            kind, reason = "delivery-async", str(error)
        elif isinstance(body.get("Records"), list) or body.get("source") == "aws.ses":
            error = (attributes.get("ErrorMessage") or {}).get("StringValue") or "the asynchronous invoke failed"
            kind, reason = ("email" if "Records" in body else "email-feedback"), str(error)
    return DeadLetter(kind, reason, body, str(message.get("MessageId", "")), str(message.get("ReceiptHandle", "")))


class Queue(Protocol):
    def receive(
        self, max_messages: int = 10, wait_seconds: int = 0, visibility_seconds: int = 60
    ) -> list[dict[str, Any]]: ...

    def delete(self, receipt_handle: str) -> None: ...

    def release(self, receipt_handle: str) -> None:
        """Make a received message visible again at once."""
        ...


class Inbox(Protocol):
    def get(self, key: tuple[str, str]) -> dict[str, Any] | None: ...

    def put_back(self, envelope: dict[str, Any]) -> bool: ...

    def batch_keys(self, stream_arn: str, shard_id: str, first: str, last: str) -> list[tuple[str, str]] | None:
        """The items a stream batch wrote (None once the stream no longer holds it)."""
        ...

    def received_between(self, start: float, end: float) -> Iterator[dict[str, Any]]: ...


@dataclass
class Redriven:
    inbound: int = 0  # messages put back in the inbox
    deliveries: int = 0  # jobs handed to the delivery function
    left: Counter[str] = field(default_factory=Counter)  # dead letters left on the queue, by why

    @property
    def moved(self) -> int:
        return self.inbound + self.deliveries


def peek(queue: Queue, limit: int) -> list[DeadLetter]:
    """Up to `limit` dead letters, left where they are: each is received (so the next receive
    pages on to others) and then made visible again at once."""
    seen: dict[str, DeadLetter] = {}
    while len(seen) < limit:
        batch = queue.receive(max_messages=min(10, limit - len(seen)), visibility_seconds=60)
        fresh = [classify(m) for m in batch if m.get("MessageId") not in seen]
        if not fresh:
            break
        seen.update((letter.message_id, letter) for letter in fresh)
    for letter in seen.values():
        queue.release(letter.receipt_handle)
    return list(seen.values())[:limit]


def redrive(
    queue: Queue,
    deliveries: Deliveries,
    inbox: Inbox,
    limit: int,
    now: float | None = None,
    ingress: Deliveries | None = None,
) -> Redriven:
    """Send up to `limit` dead letters back; each is deleted once redriven (sent before deleted: a
    failure in between leaves a duplicate, which the outbox and the router absorb). Only what was
    dead-lettered before the redrive began: a redriven job that fails again is left for the next one.
    `ingress`: the ingress function, asynchronously invoked again with an e-mail event."""
    started_ms = int((time.time() if now is None else now) * 1000)
    report, later = Redriven(), []
    while (done := report.moved + sum(report.left.values())) < limit:
        # What is left (or newer) stays invisible for the rest of the run, so it is not met twice.
        batch = queue.receive(max_messages=min(10, limit - done), wait_seconds=0, visibility_seconds=300)
        if not batch:
            break
        for message in batch:
            letter = classify(message)
            if int((message.get("Attributes") or {}).get("SentTimestamp", 0)) > started_ms:
                later.append(letter.receipt_handle)
            elif _redrive_one(letter, deliveries, inbox, report, ingress):
                queue.delete(letter.receipt_handle)
    for receipt_handle in later:
        queue.release(receipt_handle)
    return report


def _redrive_one(
    letter: DeadLetter, deliveries: Deliveries, inbox: Inbox, report: Redriven, ingress: Deliveries | None
) -> bool:
    if letter.kind in ("delivery", "delivery-async"):
        for job in letter.jobs:
            # `redriven`: the chunk the platform refused (`dead_lettered` in the outbox) is sent again
            deliveries.send({**job, "redriven": True})
            report.deliveries += 1
        return bool(letter.jobs) or _left(report, "a delivery dead letter without a job")
    if letter.kind == "inbound":
        envelope = letter.body.get("message") or _stored(inbox, letter.body.get("key"))
        if envelope is None:
            return _left(report, "an inbound message no longer in the inbox (past its TTL)")
        inbox.put_back(envelope)
        report.inbound += 1
        return True
    if letter.kind in ("email", "email-feedback"):
        if ingress is None:
            return _left(report, "an e-mail event, and the ingress function's ARN is unknown")
        # The ingress reads the stored message again (kept as long as the dead letters keep this)
        # and writes it to the inbox once: one already there is a duplicate.
        ingress.send(letter.body)
        report.inbound += 1
        return True
    if letter.kind == "inbound-batch":
        envelopes = list(_batch_messages(inbox, letter.body["DDBStreamBatchInfo"]))
        for envelope in envelopes:
            inbox.put_back(envelope)
        report.inbound += len(envelopes)
        return True
    return _left(report, letter.reason)


def _left(report: Redriven, why: str) -> bool:
    report.left[why] += 1
    return False


def _stored(inbox: Inbox, key: Any) -> dict[str, Any] | None:
    if not isinstance(key, list) or len(key) != 2:
        return None
    return inbox.get((str(key[0]), str(key[1])))


def _batch_messages(inbox: Inbox, info: dict[str, Any]) -> Iterable[dict[str, Any]]:
    """A stream batch's messages: through the stream while it holds the batch, else every message
    that arrived in the batch's time window."""
    keys = inbox.batch_keys(
        str(info.get("streamArn")), str(info.get("shardId")),
        str(info.get("startSequenceNumber")), str(info.get("endSequenceNumber")),
    )  # fmt: skip
    if keys is not None:
        return (found for found in (inbox.get(key) for key in keys) if found is not None)
    start = _epoch(info.get("approximateArrivalOfFirstRecord")) - BATCH_WINDOW_MARGIN_SECONDS
    end = _epoch(info.get("approximateArrivalOfLastRecord")) + BATCH_WINDOW_MARGIN_SECONDS
    return inbox.received_between(start, end)


def _epoch(value: Any) -> float:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
