"""`hermes-gateway send TARGET`: hand a message to the delivery function, as a job or tool would.

The target takes every form of BEHAVIOUR §6 (`telegram`, `slack:C123`, `telegram:-100:5`,
`#ops`, `local`, ...); one that names nothing is refused with the reason before anything is
sent. The text comes from `--text` or standard input. The message is a push: it skips a target
marked gone, and it is mirrored into the target chat's session when exactly one session is it.
A WhatsApp user whose last message is over 24 hours old (domain/service_window.py) gets the
re-engagement template (the command says so), or nothing: the command refuses, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_cli.target import add_target_arguments, bindings_for
from hermes_gateway.domain.service_window import window_applies, window_closed
from hermes_gateway.domain.targets import Directory, ResolvedTarget, resolve_target
from hermes_gateway.errors import OutsideWindow
from hermes_gateway.resources import Bindings
from hermes_gateway.settings import Settings, load_settings_file

# (platform, chat id) -> when the person last wrote (services.delivery.last_heard)
Heard = Callable[[str, str], float | None]


def add_commands(commands: Any) -> None:
    send = commands.add_parser("send", help="send a message to a target (platform:chat, #name, a home channel)")
    send.add_argument("target", help="origin-less target: telegram, slack:C123, telegram:-100:5, #ops, local")
    send.add_argument("--text", default=None, help="the message (default: standard input)")
    send.add_argument("--no-mirror", action="store_true", help="do not add it to the chat's session transcript")
    send.add_argument("--profile", default=None, help="send as a named profile's bot (default: the deployment's)")
    add_target_arguments(send)
    send.set_defaults(run=_send)


def home_channels(settings: Settings) -> dict[str, str]:
    return {name: p.home_channel for name, p in settings.platforms.items() if p.home_channel}


def queue_message(
    target_spec: str,
    text: str,
    *,
    settings: Settings,
    directory: Directory,
    queue: Any,
    mirror: bool = True,
    heard: Heard | None = None,
    now: float | None = None,
) -> tuple[ResolvedTarget, str, str | None]:
    """Resolve the target (raising UnresolvableTarget with the reason) and hand a push job to
    `queue` (the delivery function's asynchronous invokes), sent by the bot of the profile
    `settings` are (give the directory as that profile sees it). With `heard`, a person outside
    their platform's service window is refused (OutsideWindow) unless a re-engagement template is
    configured; the third value then says the message goes as that template."""
    target = resolve_target(target_spec, origin=None, home_channels=home_channels(settings), directory=directory)
    note = _window_note(target, settings, heard, time.time() if now is None else now)
    delivery_id = f"send-{uuid.uuid4().hex}"
    job_target = target.to_dict(settings.served_profile)
    queue.send({"delivery_id": delivery_id, "kind": "push", "mirror": mirror, "target": job_target, "text": text})
    return target, delivery_id, note


def _window_note(target: ResolvedTarget, settings: Settings, heard: Heard | None, now: float) -> str | None:
    if heard is None or not window_applies(target.platform, target.chat_id):
        return None
    if not window_closed(target.platform, heard(target.platform, target.chat_id), now):
        return None
    found = settings.platforms.get(target.platform)
    template = str(found.options.get("reengage_template") or "") if found is not None else ""
    if not template:
        raise OutsideWindow(
            f"the person last wrote to the bot more than 24 hours ago ({target.platform}'s customer service "
            f"window), so only a template can reach them: set platforms.{target.platform}.reengage_template"
        )
    return f"outside the 24-hour window: sent as the template {template.partition(':')[0]}"


def heard_from_routes(bindings: Bindings, settings: Settings) -> Heard:
    """When a person last wrote to the profile's bot: their chat's route, one read per target."""
    from hermes_gateway.adapters.dynamo_routes import DynamoRoutes
    from hermes_gateway.adapters.session_tables import SessionTables
    from hermes_gateway.services.delivery import last_heard

    routes = DynamoRoutes(SessionTables(bindings))
    return lambda platform, chat_id: last_heard(routes, platform, chat_id, settings.profile)


def _send(args: argparse.Namespace) -> int:
    from hermes_gateway.adapters.aws import LambdaDeliveries
    from hermes_gateway.adapters.dynamo_directory import DynamoDirectory
    from hermes_gateway.domain.profiles import directory_for
    from hermes_gateway.domain.targets import UnresolvableTarget
    from hermes_gateway.errors import UnknownProfile

    text = args.text if args.text is not None else sys.stdin.read()
    if not text.strip():
        print("nothing to send: give --text or standard input", file=sys.stderr)
        return 2
    settings = load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))
    try:
        settings = settings.for_profile(args.profile)
    except UnknownProfile as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    bindings = bindings_for(args)
    try:
        target, delivery_id, note = queue_message(
            args.target,
            text,
            settings=settings,
            directory=directory_for(DynamoDirectory(bindings), settings.served_profile),
            queue=LambdaDeliveries(bindings.function("delivery")),
            mirror=not args.no_mirror,
            heard=heard_from_routes(bindings, settings),
        )
    except (UnresolvableTarget, OutsideWindow) as exc:
        print(f"cannot send to {args.target!r}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"queued": delivery_id, "target": target.to_dict(), **({"note": note} if note else {})}))
    return 0
