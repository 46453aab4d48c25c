"""Router: consumes the inbox stream (new items only); each message is routed by `services.router`.

`services.consumer` keeps a session's messages in order when one fails, counts the failed attempts
on the message's inbox item, and dead-letters a message it still cannot route after its attempts
(with the reason and the message). A busy session or a throttled call is retried without counting.
Lambda retries a stream batch from its first failed record, so records of other sessions after it
come again too: routing is idempotent on the event id.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.domain.source import InboundMessage
from hermes_gateway.errors import SessionBusy, TransientError
from hermes_gateway.observability import logger, metrics
from hermes_gateway.resources import INBOX_SOURCE
from hermes_gateway.services.consumer import Consumer, Record
from hermes_gateway.services.router import route_message

PAUSE_MARGIN_SECONDS = 2.0  # the pause before a retry leaves this much of the invocation's time


def route(envelope: dict[str, Any]) -> None:
    message = InboundMessage.from_dict(envelope)
    profile = message.source.profile  # set by ingress from the webhook's path, never by the platform
    route_message(
        message,
        settings=wiring.profile_settings(profile),
        stores=wiring.session_stores(),
        starter=wiring.turn_starter(),
        access=wiring.access(profile),
        now=time.time(),
    )


def stream_record(raw: dict[str, Any], now: float) -> Record:
    """A new inbox item, from its stream record (NEW_IMAGE)."""
    change = raw.get("dynamodb") or {}
    keys = change.get("Keys") or {}
    key = (str((keys.get("group") or {}).get("S", "")), str((keys.get("event_id") or {}).get("S", "")))
    body, unreadable = _envelope(change.get("NewImage"))
    return Record(
        id=str(change.get("SequenceNumber", "")),
        partition=key[0],
        body=body,
        key=key,
        age_seconds=now - float(change.get("ApproximateCreationDateTime") or now),
        unreadable=unreadable,
    )


def _envelope(image: Any) -> tuple[dict[str, Any] | None, str | None]:
    """The message an item holds, or None and why it cannot be read."""
    try:
        body = json.loads(image["envelope"]["S"])
    except (KeyError, TypeError, ValueError) as exc:
        return None, type(exc).__name__
    return (body, None) if isinstance(body, dict) else (None, "not an object")


def records(event: dict[str, Any]) -> list[Record]:
    now = time.time()
    return [stream_record(raw, now) for raw in event.get("Records", [])]


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    consumer = Consumer(
        handle=route,
        dead_letters=wiring.dead_letters(),
        kind="inbound",
        metric="InboundDeadLettered",
        attempts=wiring.inbox(),
        max_attempts=INBOX_SOURCE.max_attempts,
        retryable=(SessionBusy, TransientError),
        pause_floor_seconds=wiring.settings().sessions.busy_retry_seconds,
        pause_cap_seconds=INBOX_SOURCE.retry_pause_cap_seconds,
    )
    outcome = consumer.consume(records(event))
    # Lambda retries a failed stream batch at once: give the cause (a throttled table, a busy
    # session) a moment first.
    pause = min(outcome.pause_seconds, context.get_remaining_time_in_millis() / 1000 - PAUSE_MARGIN_SECONDS)
    if pause > 0:
        time.sleep(pause)
    return outcome.response()
