"""Expiry: invoked every minute by EventBridge Scheduler: leases that outlived their turn with
something waiting on them, due cron jobs, mailboxes whose forwarder stopped collecting, and
sessions whose reset policy expired them (flushed, then ended). Idle routes go by their TTL."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services import cron
from hermes_gateway.services.expiry import LeaseRecovery, recover_expired_leases, run_tick
from hermes_gateway.services.mailbox import check_mailboxes
from hermes_gateway.services.session_sweep import sweep_expired_sessions


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
@wiring.publishes_events
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    now = time.time()
    stores = wiring.session_stores()
    return run_tick(
        {
            "leases": lambda: recover_expired_leases(
                LeaseRecovery(
                    wiring.settings(),
                    stores.routes,
                    stores.leases,
                    stores.control,
                    stores.transcript,
                    wiring.turn_starter(),
                ),
                now,
            ),
            "cron": lambda: cron.tick(wiring.cron_deps(), now).to_dict(),
            "mailboxes": lambda: check_mailboxes(wiring.outbox(), wiring.settings(), now),
            "sessions": lambda: asdict(
                sweep_expired_sessions(
                    stores.sweep,
                    stores.catalogue,
                    wiring.turn_starter(),
                    wiring.settings(),
                    now,
                    events=wiring.events(),
                )
            ),
        }
    )
