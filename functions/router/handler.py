"""Router: consumes the inbound FIFO queue; each record is routed by `services.router`."""

from __future__ import annotations

import json
import time
from typing import Any

from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import SessionBusy
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services.router import route_message

# A message for a busy session comes back this soon, instead of after the queue's full
# visibility timeout (issue #10 replaces retry-until-free with queued input on the lease).
BUSY_RETRY_SECONDS = 10

processor = SqsFifoPartialProcessor(skip_group_on_error=True)


def record_handler(record: SQSRecord) -> None:
    message = InboundMessage.from_dict(json.loads(record.body))
    try:
        route_message(
            message,
            settings=wiring.settings(),
            store=wiring.session_store(),
            lease=wiring.session_store(),
            starter=wiring.turn_starter(),
            now=time.time(),
        )
    except SessionBusy:
        wiring.queue("inbound").delay_retry(record.receipt_handle, BUSY_RETRY_SECONDS)
        raise


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
