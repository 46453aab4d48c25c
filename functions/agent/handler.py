"""Agent: one task of a turn, as the turn state machine invokes it: `{"step", "state"}`. The
attachments function runs this handler too, sized for files: the workflow gives it the PrepareMedia
task (`step: media`) alone.

Errors propagate on purpose: Step Functions matches their class names (TransientError is
retried, anything else goes to the Fail state, which apologizes and releases the lease)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services.turn import run_step, turn_profile


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state = dict(event.get("state") or {})
    # The turn runs as its profile: that profile's model, tools, memory and bots.
    profile = wiring.profile_settings(turn_profile(state)).served_profile
    retry = event.get("retry")  # the task's tries before this one (the workflow passes $$.State.RetryCount)
    tried = retry if isinstance(retry, int) else 0
    return run_step(str(event.get("step")), state, wiring.turn_deps(profile), retry=tried)
