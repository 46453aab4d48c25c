"""A stream poller that plays Lambda's DynamoDB stream event source mapping in local mode.

moto keeps a table's stream (DynamoDB Streams' GetRecords) but runs no mapping that would retry a
batch or honour a partial failure, so local mode reads the stream itself (the records the embedded
moto keeps, `hermes_local.aws.EmbeddedStream`) and does what the mapping does
(resources.StreamSource): only new items pass (the INSERT filter), records go to one of
`parallelization_factor` lanes by their partition key's hash (one session's messages stay in one
lane, in order; lanes run in parallel), each lane hands its function batches of `batch_size`, and a
batch whose records the function reports failed (`batchItemFailures`) is retried from the first of
them, the records after it included. A batch still failing after `max_retry_attempts`, or older than
`max_record_age_seconds`, is given up: its metadata goes to the on-failure queue, as Lambda sends it.
An invocation that raises fails its whole batch, which is bisected for the next try.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
import uuid
from collections import deque
from datetime import UTC, datetime
from typing import Any, Protocol

import boto3

from hermes_gateway.resources import TABLES, FunctionSpec
from hermes_local.aws import EmbeddedStream, stream_writes, wait_for_stream_write

RETRY_DELAY_SECONDS = 0.05  # Lambda retries at once; this keeps a crashing function from spinning a core


class Invoker(Protocol):
    region: str

    def invoke(self, name: str, event: dict[str, Any]) -> Any: ...


def lambda_record(record: dict[str, Any], stream_arn: str, region: str) -> dict[str, Any]:
    """A stream record as GetRecords gives it (boto3, or `EmbeddedStream`), as Lambda puts it in the
    function's event."""
    change = dict(record["dynamodb"])
    created = change.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        change["ApproximateCreationDateTime"] = created.timestamp()
    return {
        "eventID": record.get("eventID", ""),
        "eventName": record.get("eventName", ""),
        "eventVersion": record.get("eventVersion", "1.1"),
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "dynamodb": change,
        "eventSourceARN": stream_arn,
    }


class Lane:
    """One of a shard's concurrent batches: its records in order, the head retried until done."""

    def __init__(self) -> None:
        self.records: deque[dict[str, Any]] = deque()
        self.changed = threading.Condition()
        self.retries = 0  # failed tries of the batch at the head
        self.size = 0  # the next batch's size (bisected after a crash; 0: the source's batch size)

    def put(self, record: dict[str, Any]) -> None:
        with self.changed:
            self.records.append(record)
            self.changed.notify()

    def head(self, size: int, timeout: float) -> list[dict[str, Any]]:
        with self.changed:
            if not self.records:
                self.changed.wait(timeout)
            return list(self.records)[:size]

    def drop(self, count: int) -> None:
        with self.changed:
            for _ in range(count):
                self.records.popleft()
            self.retries, self.size = 0, 0


class StreamPoller:
    def __init__(
        self,
        functions: Invoker,
        spec: FunctionSpec,
        stream_arn: str,
        on_failure_url: str,
        stop: threading.Event,
        idle_seconds: float = 1.0,
    ) -> None:
        assert spec.consumes is not None
        self.functions, self.spec, self.source = functions, spec, spec.consumes
        self.stream_arn, self.on_failure_url, self.stop = stream_arn, on_failure_url, stop
        self.idle_seconds = idle_seconds
        self.partition_key = next(t for t in TABLES if t.name == self.source.table).partition.name
        self.lanes = [Lane() for _ in range(self.source.parallelization_factor)]
        self.shard_id = ""
        self._sqs = boto3.client("sqs", region_name=functions.region)

    def pending(self) -> int:
        """Records read from the stream and not yet done (waiting in a lane, or being handled)."""
        return sum(len(lane.records) for lane in self.lanes)

    def threads(self) -> list[threading.Thread]:
        """The reader and one thread per lane; their names start with `poll-` (Lambda's own work)."""
        name = self.spec.name
        found = [threading.Thread(target=self.read, name=f"poll-{name}-stream", daemon=True)]
        for n, lane in enumerate(self.lanes):
            found.append(threading.Thread(target=self.work, args=(lane,), name=f"poll-{name}-lane{n}", daemon=True))
        return found

    # -- the reader: the stream's records, into the lanes

    def read(self) -> None:
        stream = EmbeddedStream(self.stream_arn)  # the embedded moto's records: no GetRecords request
        self.shard_id = stream.shard_id
        while not self.stop.is_set():
            seen = stream_writes()  # before the look: a write during it is not missed
            records = stream.read(1000)
            if not records:
                wait_for_stream_write(seen, self.idle_seconds)
                continue
            for record in records:
                if self.source.inserts_only and record.get("eventName") != "INSERT":
                    continue
                self.lane_of(record).put(lambda_record(record, self.stream_arn, self.functions.region))

    def lane_of(self, record: dict[str, Any]) -> Lane:
        key = json.dumps(record["dynamodb"]["Keys"][self.partition_key], sort_keys=True)
        return self.lanes[int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % len(self.lanes)]

    # -- a lane: batches to the function, retried from the first failed record

    def work(self, lane: Lane) -> None:
        while not self.stop.is_set():
            batch = lane.head(lane.size or self.source.batch_size, timeout=0.5)
            if not batch:
                continue
            if self._too_old(batch[0]):
                self._give_up(lane, batch, "RecordAgeExceeded")
                continue
            done = self._invoke(lane, batch)
            if done == len(batch):
                lane.drop(done)
                continue
            if done:
                lane.drop(done)  # the failed record is the new head; its tries start again
            lane.retries += 1
            if lane.retries > self.source.max_retry_attempts:
                self._give_up(lane, batch[done:], "RetryAttemptsExhausted")
                continue
            self.stop.wait(RETRY_DELAY_SECONDS)

    def _invoke(self, lane: Lane, batch: list[dict[str, Any]]) -> int:
        """How many records at the batch's head are done: all of them, or those before the first
        (lowest sequence number) reported failed."""
        try:
            result = self.functions.invoke(self.spec.name, {"Records": batch}) or {}
        except Exception as exc:  # noqa: BLE001 - a crashed invocation fails the whole batch, as in Lambda
            print(f"[local] {self.spec.name}: batch failed, retried: {type(exc).__name__}", file=sys.stderr)
            if self.source.bisect_on_error:
                lane.size = max(1, len(batch) // 2)
            return 0
        failed = {str(item.get("itemIdentifier")) for item in result.get("batchItemFailures", [])}
        for index, record in enumerate(batch):
            if record["dynamodb"]["SequenceNumber"] in failed:
                return index
        return len(batch)

    def _too_old(self, record: dict[str, Any]) -> bool:
        created = float(record["dynamodb"].get("ApproximateCreationDateTime") or time.time())
        return time.time() - created > self.source.max_record_age_seconds

    def _give_up(self, lane: Lane, batch: list[dict[str, Any]], condition: str) -> None:
        """Skip the batch; its metadata (never its records) goes to the on-failure queue."""
        first, last = batch[0]["dynamodb"], batch[-1]["dynamodb"]
        body = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": f"arn:aws:lambda:{self.functions.region}:123456789012:function:{self.spec.name}",
                "condition": condition,
                "approximateInvokeCount": lane.retries + 1,
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": ""},
            "version": "1.0",
            "timestamp": _iso(time.time()),
            "DDBStreamBatchInfo": {
                "shardId": self.shard_id,
                "startSequenceNumber": first["SequenceNumber"],
                "endSequenceNumber": last["SequenceNumber"],
                "approximateArrivalOfFirstRecord": _iso(float(first.get("ApproximateCreationDateTime") or 0)),
                "approximateArrivalOfLastRecord": _iso(float(last.get("ApproximateCreationDateTime") or 0)),
                "batchSize": len(batch),
                "streamArn": self.stream_arn,
            },
        }
        print(f"[local] {self.spec.name}: gave up on a batch of {len(batch)} ({condition})", file=sys.stderr)
        self._sqs.send_message(QueueUrl=self.on_failure_url, MessageBody=json.dumps(body))
        lane.drop(len(batch))


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
