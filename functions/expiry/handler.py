"""Expiry: invoked every minute by EventBridge Scheduler."""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services.expiry import release_expired_leases


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    released = release_expired_leases(wiring.session_store(), time.time())
    return {"leases_released": released}
