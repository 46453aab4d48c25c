"""Expiry: invoked every minute by EventBridge Scheduler: leases that outlived their turn with
something waiting on them, due cron jobs, mailboxes whose forwarder stopped collecting, sessions
whose reset policy expired them (flushed, then ended), the chats' confirmed `/forget` requests,
and sessions idle past their retention. Idle routes go by their TTL."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from hermes_gateway import wiring
from hermes_gateway.observability import logger, metrics
from hermes_gateway.services import cron
from hermes_gateway.services.expiry import LeaseRecovery, recover_expired_leases, run_tick
from hermes_gateway.services.forget import ScanPace, erase_confirmed
from hermes_gateway.services.mailbox import check_mailboxes
from hermes_gateway.services.retention import sweep_retention
from hermes_gateway.services.session_sweep import sweep_expired_sessions

# The erasures' share of the tick: what the other parts and a margin leave of its 60 s
ERASURE_SECONDS = 30
TICK_MARGIN_SECONDS = 15


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
            "erasures": lambda: erase_confirmed(
                wiring.erasure_requests(),
                wiring.personal_stores(),
                wiring.deliveries(),
                now,
                ScanPace(deadline=time.monotonic() + _erasure_budget(context)),
            ).to_dict(),
            "retention": lambda: asdict(
                sweep_retention(
                    stores.retention,
                    stores.personal,
                    tuple(scope.namespace for scope in wiring.personal_stores().scopes),
                    now,
                    wiring.settings().sessions.retention_days,
                )
            ),
        }
    )


def _erasure_budget(context: LambdaContext) -> float:
    """Seconds the erasures may take: at most ERASURE_SECONDS, and never the tick's last ones."""
    left = context.get_remaining_time_in_millis() / 1000 - TICK_MARGIN_SECONDS
    return max(0.0, min(float(ERASURE_SECONDS), left))
