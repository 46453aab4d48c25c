"""Expiry: invoked every minute by EventBridge Scheduler: expired leases, due cron jobs, sessions
whose reset policy expired (flushed, then ended), and routes idle past their age."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services import cron
from hermes_gateway.services.expiry import LeaseRecovery, recover_expired_leases, run_tick
from hermes_gateway.services.session_sweep import prune_idle_routes, sweep_expired_sessions


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    now = time.time()
    return run_tick(
        {
            "leases": lambda: recover_expired_leases(
                LeaseRecovery(
                    wiring.settings(),
                    wiring.session_store(),
                    wiring.session_store(),
                    wiring.turn_control(),
                    wiring.turn_starter(),
                ),
                now,
            ),
            "cron": lambda: cron.tick(wiring.cron_deps(), now).to_dict(),
            "sessions": lambda: {
                "sweep": asdict(
                    sweep_expired_sessions(
                        wiring.session_store(), wiring.turn_starter(), wiring.settings(), now, events=wiring.events()
                    )
                ),
                "routes_pruned": prune_idle_routes(wiring.session_store(), wiring.settings(), now),
            },
        }
    )
