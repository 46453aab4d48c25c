"""Delivery: consumes the delivery queue; each job is sent by `services.delivery`."""

from __future__ import annotations

import json
import math
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.errors import RateLimited
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services.delivery import DeliveryJob, deliver

# A failed job is reported, not raised: flood control and platform outages are expected, and
# the queue retries (then dead-letters) exactly the jobs reported.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


def record_handler(record: SQSRecord) -> None:
    job = DeliveryJob.from_dict(json.loads(record.body))
    logger.append_keys(correlation_id=job.turn_id)
    try:
        deliver(job, wiring.delivery_deps())
    except RateLimited as exc:
        # Honour the platform's flood control: the job comes back when it says it may.
        wiring.queue("delivery").delay_retry(record.receipt_handle, math.ceil(exc.retry_after) + 1)
        raise


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return dict(
        process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
    )
