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

processor = SqsFifoPartialProcessor(skip_group_on_error=True)
# A busy session is expected, not an error: report its records as failed instead of failing the
# invocation (which would count as a function error and trip the alarm).
processor.raise_on_entire_batch_failure = False
_busy_groups: dict[str, int] = {}  # message group -> seconds until its messages come back


def record_handler(record: SQSRecord) -> None:
    message = InboundMessage.from_dict(json.loads(record.body))
    profile = message.source.profile  # set by ingress from the webhook's path, never by the platform
    try:
        route_message(
            message,
            settings=wiring.profile_settings(profile),
            store=wiring.session_store(),
            lease=wiring.session_store(),
            starter=wiring.turn_starter(),
            access=wiring.access(profile),
            now=time.time(),
        )
    except SessionBusy as exc:
        _busy_groups[record.attributes.message_group_id or ""] = exc.retry_after
        raise
    except Exception as exc:
        # Retried by the queue (then dead-lettered with an alarm); said here, or nobody would know why.
        logger.exception("routing failed; the message will be retried", extra={"error": type(exc).__name__})
        raise


def _retry_busy_sessions_later(event: dict[str, Any], failed: set[str]) -> None:
    """A busy session's messages (the one that met the lease and those queued behind it in its
    group) come back together after the delay the router chose, not the queue's whole visibility
    timeout. Issue #10 replaces retry-until-free with input queued on the lease."""
    inbound = wiring.queue("inbound")
    for raw in event.get("Records", []):
        record = SQSRecord(raw)
        delay = _busy_groups.get(record.attributes.message_group_id or "")
        if record.message_id in failed and delay is not None:
            inbound.delay_retry(record.receipt_handle, delay)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    _busy_groups.clear()
    response = process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
    _retry_busy_sessions_later(event, {str(item["itemIdentifier"]) for item in response.get("batchItemFailures", [])})
    return dict(response)
