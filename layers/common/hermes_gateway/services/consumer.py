"""An ordered batch consumer: records in order, a failure holds back its partition, a poison
message is dead-lettered after its attempts instead of being retried forever.

Lambda's stream event source mappings (the inbox's) hand a function a batch in order and retry
from the first record reported failed; the records of one partition key (one session) must not
overtake each other. So a record that fails is reported, and so is every later record of its
partition in the batch (untouched); the other partitions go on.

A failure is one of two kinds. Retryable ones (a busy session, a throttled call: `retryable`) are
retried without counting. Any other is counted on the record's own item (`Attempts`, a write only
on this path); at `max_attempts` the message goes to the dead letters with the reason and the whole
message, and the record is reported done, so a message the code cannot handle never blocks its
partition for longer than a few tries. Before the retry the handler waits a little
(`retry_pause_seconds`): Lambda retries a stream batch at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from hermes_gateway.domain.ports import DeadLetters
from hermes_gateway.observability import MetricUnit, logger, metrics

REASON_CHARS = 500


@dataclass(frozen=True)
class Record:
    """One record of a batch, as the consumer sees it, whatever its source."""

    id: str  # what `batchItemFailures` names (a stream record's sequence number)
    partition: str  # records of one partition are handled in order
    body: dict[str, Any] | None  # the message; None when it could not be read (`unreadable` says why)
    key: tuple[str, str] | None = None  # the item attempts are counted on; None: not counted here
    age_seconds: float = 0.0  # since the record was written
    unreadable: str | None = None


class Attempts(Protocol):
    def failed(self, key: tuple[str, str], reason: str) -> int | None:
        """Count one failed attempt on the item; the count so far, or None when the item is gone."""
        ...


@dataclass
class Outcome:
    failed: list[str] = field(default_factory=list)  # record ids to report (retried by the source)
    dead_lettered: int = 0
    pause_seconds: float = 0.0  # how long to wait before returning (the source retries at once)

    def response(self) -> dict[str, Any]:
        return {"batchItemFailures": [{"itemIdentifier": record_id} for record_id in self.failed]}


def retry_pause_seconds(age_seconds: float, floor_seconds: float, cap_seconds: float) -> float:
    """`floor_seconds` while the oldest failed record is young, then a quarter of its age, capped:
    a throttled table or a busy session is given time, growing as it lasts."""
    return float(min(cap_seconds, max(floor_seconds, age_seconds / 4)))


@dataclass(frozen=True)
class Consumer:
    handle: Callable[[dict[str, Any]], object]  # raises to fail the record
    dead_letters: DeadLetters
    kind: str  # what the dead letters call it ("inbound")
    metric: str  # counted once per message dead-lettered
    attempts: Attempts | None = None  # None: nothing is counted (the source counts, as SQS does)
    max_attempts: int = 5
    retryable: tuple[type[BaseException], ...] = ()
    pause_floor_seconds: float = 1.0
    pause_cap_seconds: float = 5.0

    def consume(self, records: Iterable[Record]) -> Outcome:
        outcome = Outcome()
        held: set[str] = set()  # partitions with a failed record earlier in this batch
        oldest_failure = -1.0
        for record in records:
            if record.partition in held:
                outcome.failed.append(record.id)  # untouched: it must not overtake the failed one
                continue
            if self._run(record, outcome):
                continue
            held.add(record.partition)
            outcome.failed.append(record.id)
            oldest_failure = max(oldest_failure, record.age_seconds)
        if outcome.failed:
            outcome.pause_seconds = retry_pause_seconds(
                oldest_failure, self.pause_floor_seconds, self.pause_cap_seconds
            )
        return outcome

    def _run(self, record: Record, outcome: Outcome) -> bool:
        """True when the record is done (handled, or dead-lettered); False to retry it."""
        if record.body is None:
            return self._failed(record, f"unreadable record: {record.unreadable}", outcome)
        try:
            self.handle(record.body)
        except self.retryable as exc:
            logger.warning("retried later", extra={"error": type(exc).__name__, "kind": self.kind})
            return False
        except Exception as exc:  # noqa: BLE001 - any failure is counted; the message is never lost
            # Retried, then dead-lettered; said here, or nobody would know why.
            logger.exception("failed; it will be retried", extra={"error": type(exc).__name__, "kind": self.kind})
            return self._failed(record, f"{type(exc).__name__}: {exc}", outcome)
        return True

    def _failed(self, record: Record, reason: str, outcome: Outcome) -> bool:
        """Count the attempt; dead-letter the message once it has had its attempts."""
        reason = reason[:REASON_CHARS]
        if self.attempts is None or record.key is None:
            return False
        try:
            count = self.attempts.failed(record.key, reason)
        except Exception as exc:  # noqa: BLE001 - not counted this time; the record is retried anyway
            logger.warning("failed attempt not counted", extra={"error": type(exc).__name__})
            return False
        if count is not None and count < self.max_attempts:
            return False
        return self._dead_letter(record, reason, count, outcome)

    def _dead_letter(self, record: Record, reason: str, count: int | None, outcome: Outcome) -> bool:
        body = {
            "kind": self.kind,
            "reason": reason,
            "attempts": count,
            "message": record.body,  # None when unreadable: the item (`key`) still holds it
            "key": list(record.key) if record.key else None,
        }
        try:
            self.dead_letters.send(body)
        except Exception as exc:  # noqa: BLE001 - it stays failed: the next attempt dead-letters it again
            logger.error("dead letter not sent; retried", extra={"error": type(exc).__name__})
            return False
        # The reason stays in the dead letter: an exception's text may quote the message.
        logger.error("dead-lettered", extra={"kind": self.kind, "error": reason.split(":")[0], "attempts": count})
        metrics.add_metric(name=self.metric, unit=MetricUnit.Count, value=1)
        outcome.dead_lettered += 1
        return True
