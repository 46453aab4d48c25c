"""Delivery: sends jobs with `services.delivery`. Two shapes of event:

- a job (an asynchronous invoke: router replies, command answers, pushes, notices). A short 429 is
  waited out here; a longer one, a 5xx or a timeout is raised, so Lambda retries the job twice and
  then puts it, as sent, on the dead letters (the function's DeadLetterConfig);
- `{"deliveries": [job, ...]}` (a turn's replies, invoked and waited for): sent in order, each
  job's outcome returned; a failure is raised before any later job is tried, and the caller's retry
  finds the chunks already sent in the outbox.

Either way a job that can never succeed (refused by the platform, malformed, an unknown profile) is
put on the dead letters at once, with the reason, and reported done.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.errors import BadRequest, UnknownProfile
from hermes_gateway.observability import MetricUnit, logger, metrics
from hermes_gateway.services.delivery import DeliveryJob, Undeliverable, deliver_waiting

WAIT_BUDGET_SECONDS = 15.0  # at most this long waiting out rate limits in one invocation
# A turn waits for its list of jobs within a task's time limit (20 s), and tries again itself.
LIST_WAIT_BUDGET_SECONDS = 5.0
WAIT_MARGIN_SECONDS = 5.0  # and never into the invocation's last seconds


def run_job(raw: Any, wait_budget: float) -> str:
    """Deliver one job; its outcome (sent, recorded, gone, skipped, unknown, dead_lettered).
    Raises RateLimited or TransientError for the caller to retry."""
    try:
        job = DeliveryJob.from_dict(raw)
    except BadRequest as exc:
        return _dead_letter(raw, f"malformed job: {exc}")
    logger.append_keys(correlation_id=job.correlation_id or job.turn_id or job.delivery_id, session=job.session)
    try:
        deps = wiring.delivery_deps(job.profile)
    except UnknownProfile as exc:  # the profile was removed from the deployment since the job was made
        return _dead_letter(raw, str(exc))
    try:
        return deliver_waiting(job, deps, wait_budget).status
    except Undeliverable as exc:
        return _dead_letter(raw, str(exc))


def _dead_letter(raw: Any, reason: str) -> str:
    """Put the job on the dead letters now, with the reason; it is done here."""
    wiring.dead_letters().send({"kind": "delivery", "reason": reason[:1000], "job": raw})
    logger.error("delivery dead-lettered", extra={"reason": reason[:300]})
    delivery_id = raw.get("delivery_id") if isinstance(raw, dict) else None
    wiring.events().emit("delivery:failed", {"reason": "dead_lettered", "delivery_id": delivery_id})
    metrics.add_metric(name="DeliveryDeadLettered", unit=MetricUnit.Count, value=1)
    return "dead_lettered"


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    budget = min(WAIT_BUDGET_SECONDS, context.get_remaining_time_in_millis() / 1000 - WAIT_MARGIN_SECONDS)
    if "deliveries" in event:
        budget = min(budget, LIST_WAIT_BUDGET_SECONDS)
        jobs = event["deliveries"] if isinstance(event["deliveries"], list) else [event["deliveries"]]
        return {"deliveries": [_outcome(raw, budget) for raw in jobs]}  # in order; a raise stops the rest
    return _outcome(event, budget)


def _outcome(raw: Any, budget: float) -> dict[str, Any]:
    return {"delivery_id": raw.get("delivery_id") if isinstance(raw, dict) else None, "status": run_job(raw, budget)}
