"""Delivery: sends jobs with `services.delivery`. Two shapes of event:

- a job (an asynchronous invoke: router replies, command answers, pushes, notices). A short 429 is
  waited out here; a longer one, a 5xx or a timeout is raised, so Lambda retries the job twice and
  then puts it, as sent, on the dead letters (the function's DeadLetterConfig);
- `{"deliveries": [job, ...]}` (a turn's replies, or the router's notice that goes before a turn,
  invoked and waited for): sent in order, each
  job's outcome returned; a failure is raised before any later job is tried, and the caller's retry
  finds the chunks already sent in the outbox.

Either way a job that can never succeed (refused by the platform, malformed, an unknown profile) is
put on the dead letters at once, with the reason, and reported done.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services.delivery import TURN_WAIT_BUDGET_SECONDS
from hermes_gateway.services.delivery import run_job as deliver_job

WAIT_BUDGET_SECONDS = 15.0  # at most this long waiting out rate limits in one invocation
WAIT_MARGIN_SECONDS = 5.0  # and never into the invocation's last seconds
# The Deliver task's TimeoutSeconds (infra/statemachines/turn.asl.json): a turn's answer and its
# files are sent within it (tests/unit/test_delivery_deadline.py reads it from the ASL)
DELIVER_TASK_SECONDS = 15.0


def run_job(raw: Any, wait_budget: float, media_deadline: float | None = None) -> str:
    """Deliver one job (services.delivery.run_job with this deployment's ports); its outcome.
    Raises RateLimited or TransientError for the caller to retry."""
    return deliver_job(raw, wiring.delivery_deps, wiring.dead_letters(), wiring.events(), wait_budget, media_deadline)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    remaining = context.get_remaining_time_in_millis() / 1000
    budget = min(WAIT_BUDGET_SECONDS, remaining - WAIT_MARGIN_SECONDS)
    if "deliveries" in event:
        budget = min(budget, TURN_WAIT_BUDGET_SECONDS)
        # The Deliver task's own limit is shorter than the function's: its files are fetched within it.
        deadline = time.monotonic() + min(remaining, DELIVER_TASK_SECONDS) - WAIT_MARGIN_SECONDS
        jobs = event["deliveries"] if isinstance(event["deliveries"], list) else [event["deliveries"]]
        return {"deliveries": [_outcome(raw, budget, deadline) for raw in jobs]}  # in order; a raise stops the rest
    return _outcome(event, budget, time.monotonic() + remaining - WAIT_MARGIN_SECONDS)


def _outcome(raw: Any, budget: float, media_deadline: float) -> dict[str, Any]:
    delivery_id = raw.get("delivery_id") if isinstance(raw, dict) else None
    return {"delivery_id": delivery_id, "status": run_job(raw, budget, media_deadline)}
