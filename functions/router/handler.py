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
from hermes_gateway.settings import busy_retry_delay

processor = SqsFifoPartialProcessor(skip_group_on_error=True)
_busy_groups: set[str] = set()


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
        _busy_groups.add(record.attributes.message_group_id or "")
        raise


def _retry_busy_sessions_soon(event: dict[str, Any], failed: set[str]) -> None:
    """A busy session's messages (the one that met the lease and those queued behind it in its
    group) come back after a short, doubling delay, not the queue's whole visibility timeout.
    Issue #10 replaces retry-until-free with input queued on the lease."""
    base = wiring.settings().sessions.busy_retry_seconds
    inbound = wiring.queue("inbound")
    for raw in event.get("Records", []):
        record = SQSRecord(raw)
        if record.message_id in failed and (record.attributes.message_group_id or "") in _busy_groups:
            receives = int(record.attributes.approximate_receive_count or 1)
            inbound.delay_retry(record.receipt_handle, busy_retry_delay(base, receives))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    _busy_groups.clear()
    every_id = {raw["messageId"] for raw in event.get("Records", [])}
    try:
        response = process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )
    except Exception:
        _retry_busy_sessions_soon(event, every_id)  # the whole batch failed and comes back
        raise
    failures = response.get("batchItemFailures", [])
    _retry_busy_sessions_soon(event, {str(item["itemIdentifier"]) for item in failures})
    return dict(response)
