"""Delivery: consumes the delivery FIFO queue (one group per target chat); each job is sent by
`services.delivery`.

What the service raises decides the job's fate: a rate limit comes back when the platform says
it may; a transient failure comes back after an exponential backoff with jitter (and reaches the
dead-letter queue by the queue's redrive policy when it keeps failing); a job that can never
succeed is put on the dead-letter queue at once, with the reason, where an alarm sees it.

A chat's replies go out in the order they were queued: the first job of a chat that fails stops
its chat's later jobs in the batch (they are reported failed, untouched), and all of them come
back together after the failed job's delay. While any of them is in flight SQS hands out nothing
else of that chat, so a reply retried after a 429 is never overtaken by the next one.
"""

from __future__ import annotations

import json
import math
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.errors import BadRequest, RateLimited, TransientError, UnknownProfile
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.resources import DELIVERY_QUEUE
from hermes_gateway.services.delivery import DeliveryJob, Undeliverable, deliver, retry_delay_seconds

# A failed job is reported, not raised: flood control and platform outages are expected, and
# the queue retries (then dead-letters) exactly the jobs reported. Other chats' jobs go on.
processor = SqsFifoPartialProcessor(skip_group_on_error=True)
processor.raise_on_entire_batch_failure = False
_retry_after: dict[str, int] = {}  # message group (a chat) -> seconds until its jobs come back


def record_handler(record: SQSRecord) -> None:
    try:
        job = DeliveryJob.from_dict(json.loads(record.body))
    except (ValueError, BadRequest) as exc:
        _dead_letter(record, f"malformed job: {exc}")
        return
    logger.append_keys(correlation_id=job.correlation_id or job.turn_id or job.delivery_id, session=job.session)
    group = record.attributes.message_group_id or ""
    try:
        deps = wiring.delivery_deps(job.profile)
    except UnknownProfile as exc:  # the profile was removed from the deployment since the job was queued
        _dead_letter(record, str(exc))
        return
    try:
        deliver(job, deps)
    except RateLimited as exc:
        # Honour the platform's flood control: the job comes back when it says it may.
        _retry_after[group] = math.ceil(exc.retry_after) + 1
        raise
    except TransientError:
        _retry_after[group] = retry_delay_seconds(int(record.attributes.approximate_receive_count or 1))
        raise
    except Undeliverable as exc:
        _dead_letter(record, str(exc))


def _dead_letter(record: SQSRecord, reason: str) -> None:
    """Move the job to the dead-letter queue now; it is then deleted from this queue."""
    wiring.queue(DELIVERY_QUEUE.dead_letter_name).send_raw(record.body, reason=reason, dedup_id=record.message_id)
    logger.error("delivery dead-lettered", extra={"reason": reason[:300]})
    wiring.events().emit("delivery:failed", {"reason": "dead_lettered", "message_id": record.message_id})
    metrics.add_metric(name="DeliveryDeadLettered", unit=MetricUnit.Count, value=1)


def _retry_later(event: dict[str, Any], failed: set[str]) -> None:
    """A chat's failed job and the jobs held back behind it come back together after its delay, not
    the queue's whole visibility timeout. The held-back ones are set first and the failed one last:
    it turns visible last, so even a consumer that tracks in-flight groups loosely (the embedded
    AWS of local mode) cannot hand a later job out ahead of it."""
    queue = wiring.queue(DELIVERY_QUEUE.name)
    for raw in reversed(event.get("Records", [])):
        record = SQSRecord(raw)
        delay = _retry_after.get(record.attributes.message_group_id or "")
        if record.message_id not in failed or delay is None:
            continue
        try:
            queue.delay_retry(record.receipt_handle, delay)
        except Exception as exc:  # noqa: BLE001 - it comes back after the visibility timeout instead
            logger.warning("retry delay not set", extra={"error": type(exc).__name__})


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    _retry_after.clear()
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    _retry_later(event, {str(item["itemIdentifier"]) for item in response.get("batchItemFailures", [])})
    return dict(response)
