"""Delivery: consumes the delivery queue; each job is sent by `services.delivery`.

What the service raises decides the job's fate: a rate limit comes back when the platform says
it may; a transient failure comes back after an exponential backoff with jitter (and reaches the
dead-letter queue by the queue's redrive policy when it keeps failing); a job that can never
succeed is put on the dead-letter queue at once, with the reason, where an alarm sees it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.errors import BadRequest, RateLimited, TransientError
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.resources import DELIVERY_QUEUE
from hermes_gateway.services.delivery import DeliveryJob, Undeliverable, deliver, retry_delay_seconds

# A failed job is reported, not raised: flood control and platform outages are expected, and
# the queue retries (then dead-letters) exactly the jobs reported.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def record_handler(record: SQSRecord) -> None:
    try:
        job = DeliveryJob.from_dict(json.loads(record.body))
    except (ValueError, BadRequest) as exc:
        _dead_letter(record, f"malformed job: {exc}")
        return
    logger.append_keys(correlation_id=job.correlation_id or job.turn_id or job.delivery_id, session=job.session)
    queue = wiring.queue(DELIVERY_QUEUE.name)
    try:
        deliver(job, wiring.delivery_deps())
    except RateLimited as exc:
        # Honour the platform's flood control: the job comes back when it says it may.
        queue.delay_retry(record.receipt_handle, math.ceil(exc.retry_after) + 1)
        raise
    except TransientError:
        receives = int(record.attributes.approximate_receive_count or 1)
        queue.delay_retry(record.receipt_handle, retry_delay_seconds(receives))
        raise
    except Undeliverable as exc:
        _dead_letter(record, str(exc))


def _dead_letter(record: SQSRecord, reason: str) -> None:
    """Move the job to the dead-letter queue now; it is then deleted from this queue."""
    wiring.queue(DELIVERY_QUEUE.dead_letter_name).send_raw(record.body, reason=reason)
    logger.error("delivery dead-lettered", extra={"reason": reason[:300]})
    wiring.events().emit("delivery:failed", {"reason": "dead_lettered", "message_id": record.message_id})
    metrics.add_metric(name="DeliveryDeadLettered", unit=MetricUnit.Count, value=1)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
