"""`hermes-gateway outbox list|dead-letters|redrive`: what was sent, what failed, and a second chance
for dead letters.

`list` shows the newest outbox rows (a scan: an operator's tool, never a hot path) and how many
messages wait in the dead-letter queue. `dead-letters` lists them (kind, reason, ids; never a
message's text). `redrive` sends them back (hermes_gateway.services.dead_letters): an inbound
message is put back in the inbox and routed again, a delivery job goes to the delivery function
again, an e-mail event to the ingress function again; the outbox, the inbox and the router make that
safe to repeat (nothing is sent or answered twice).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hermes_cli.target import add_target_arguments, bindings_for
from hermes_gateway.resources import DEAD_LETTERS, INBOX

STATUSES = (
    "pending",
    "sending",
    "streaming",
    "sent",
    "recorded",
    "failed",
    "dead_lettered",
    "refused",
    "gone",
    "unknown",
)


def add_commands(commands: Any) -> None:
    outbox = commands.add_parser("outbox", help="list sent and failed messages; list and redrive dead letters")
    actions = outbox.add_subparsers(dest="action", required=True)

    listing = actions.add_parser("list", help="the newest outbox rows and the dead-letter count")
    listing.add_argument("--status", choices=STATUSES, default=None)
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    add_target_arguments(listing)
    listing.set_defaults(run=_list)

    letters = actions.add_parser("dead-letters", help="what waits in the dead-letter queue, and why")
    letters.add_argument("--max", type=int, default=50, help="show at most this many")
    letters.add_argument("--json", action="store_true", help="machine-readable output")
    add_target_arguments(letters)
    letters.set_defaults(run=_dead_letters)

    redrive = actions.add_parser("redrive", help="send dead letters back (each chunk sent at most once)")
    redrive.add_argument("--max", type=int, default=100, help="move at most this many dead letters")
    add_target_arguments(redrive)
    redrive.set_defaults(run=_redrive)


def _ingress(args: argparse.Namespace) -> Any:
    """The ingress function (e-mail events are redriven to it), when the target names it."""
    from hermes_gateway.adapters.aws import LambdaDeliveries

    bindings = bindings_for(args)
    return LambdaDeliveries(bindings.function("ingress")) if "ingress" in bindings.functions else None


def _resources(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    """The outbox, the dead-letter queue, the delivery function and the inbox of the target."""
    from hermes_gateway.adapters.aws import LambdaDeliveries, SqsQueue
    from hermes_gateway.adapters.dynamo_inbox import DynamoInbox
    from hermes_gateway.adapters.dynamo_outbox import DynamoOutbox
    from hermes_gateway.services.ingress import dedup_window_seconds

    bindings = bindings_for(args)
    dead = SqsQueue(bindings.queue(DEAD_LETTERS.name))
    deliveries = LambdaDeliveries(bindings.function("delivery")) if "delivery" in bindings.functions else None
    inbox = DynamoInbox(bindings.table(INBOX.name), retention_seconds=dedup_window_seconds)
    return DynamoOutbox(bindings), dead, deliveries, inbox


def _list(args: argparse.Namespace) -> int:
    outbox, dead, _, _ = _resources(args)
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
        print(f"{row.status:<13} {row.delivery_id:<48} {where:<28} {text}{error}")
    hint = " (outbox dead-letters, outbox redrive)" if depth else ""
    print(f"{len(rows)} rows; {depth} message(s) in the dead-letter queue{hint}")
    return 0


def _dead_letters(args: argparse.Namespace) -> int:
    from hermes_gateway.services.dead_letters import peek

    _, dead, _, _ = _resources(args)
    found = [letter.summary() for letter in peek(dead, max(1, args.max))]
    if args.json:
        print(json.dumps({"dead_letters": found, "depth": dead.depth()}, indent=2))
        return 0
    for letter in found:
        print(f"{letter['kind']:<14} {', '.join(str(i) for i in letter['ids'])[:60]:<60} {letter['reason'][:100]}")
    print(f"{len(found)} shown; {dead.depth()} in the dead-letter queue")
    return 0


def _redrive(args: argparse.Namespace) -> int:
    from hermes_gateway.services.dead_letters import redrive

    _, dead, deliveries, inbox = _resources(args)
    if deliveries is None:
        print("the delivery function's ARN is unknown (a stack from before the inbox?): deploy first")
        return 1
    report = redrive(dead, deliveries, inbox, max(1, args.max), ingress=_ingress(args))
    print(f"redrove {report.inbound} inbound message(s) and {report.deliveries} delivery job(s)")
    for why, count in sorted(report.left.items()):
        print(f"left in the queue: {count} ({why})")
    return 0
