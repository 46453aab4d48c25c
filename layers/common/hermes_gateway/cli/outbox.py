"""`hermes-gateway outbox list|redrive`: what was sent, what failed, and a second chance for dead letters.

`list` shows the newest outbox rows (a scan: an operator's tool, never a hot path) and the depth of
the delivery dead-letter queue. `redrive` moves dead-lettered jobs back to the delivery queue;
the outbox makes that safe: a chunk already sent (or whose outcome is unknown) is not sent again.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hermes_gateway.cli.target import add_target_arguments, bindings_for
from hermes_gateway.resources import DELIVERY_QUEUE

STATUSES = ("pending", "sending", "sent", "recorded", "failed", "gone", "unknown")


def add_commands(commands: Any) -> None:
    outbox = commands.add_parser("outbox", help="list sent and failed messages; redrive dead letters")
    actions = outbox.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="the newest outbox rows and the dead-letter count")
    listing.add_argument("--status", choices=STATUSES, default=None)
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    add_target_arguments(listing)
    listing.set_defaults(run=_list)

    redrive = actions.add_parser("redrive", help="send dead-lettered deliveries again (each chunk at most once)")
    redrive.add_argument("--max", type=int, default=100, help="move at most this many jobs")
    add_target_arguments(redrive)
    redrive.set_defaults(run=_redrive)


def _queues(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    from hermes_gateway.adapters.aws import SqsQueue
    from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox

    bindings = bindings_for(args)
    dead = SqsQueue(bindings.queue(DELIVERY_QUEUE.dead_letter_name))
    live = SqsQueue(bindings.queue(DELIVERY_QUEUE.name))
    return DynamoOutbox(bindings), live, dead


def _list(args: argparse.Namespace) -> int:
    outbox, _, dead = _queues(args)
    rows = [r for r in outbox.recent(limit=10_000) if args.status is None or r.status == args.status]
    rows = rows[-max(1, args.limit) :]
    depth = dead.depth()
    if args.json:
        print(json.dumps({"rows": [r.to_dict() for r in rows], "dead_letters": depth}, indent=2))
        return 0
    for row in rows:
        where = f"{row.platform}:{row.chat_id}" + (f":{row.thread_id}" if row.thread_id else "")
        text = row.text.replace("\n", " ")
        text = text if len(text) <= 50 else text[:47] + "..."
        error = f"  ({row.error[:80]})" if row.error and row.status != "sent" else ""
        print(f"{row.status:<9} {row.delivery_id:<48} {where:<28} {text}{error}")
    print(f"{len(rows)} rows; {depth} job(s) in the dead-letter queue" + (" (outbox redrive)" if depth else ""))
    return 0


def redrive(live: Any, dead: Any, limit: int) -> int:
    """Move up to `limit` jobs from the dead-letter queue back to the delivery queue."""
    moved = 0
    while moved < limit:
        batch = dead.receive(max_messages=min(10, limit - moved), wait_seconds=0)
        if not batch:
            break
        for message in batch:
            # Sent before deleted: a failure in between leaves a duplicate job, which the outbox absorbs.
            # A de-duplication id of its own: the job's first one may be within SQS's 5-minute window.
            live.send(json.loads(message["Body"]), dedup_id=f"redrive|{message['MessageId']}")
            dead.delete(message["ReceiptHandle"])
            moved += 1
    return moved


def _redrive(args: argparse.Namespace) -> int:
    _, live, dead = _queues(args)
    moved = redrive(live, dead, args.max)
    print(f"moved {moved} job(s) from the dead-letter queue back to delivery")
    return 0
