"""`hermes-gateway explain` and `hermes-gateway session-key`: why a message lands where it lands.

`explain` runs a raw webhook payload through the platform's inbound parser (WITHOUT signature
verification: a debugging tool, never a way in), then the session key and the authorization rules,
and says which session the message would land in. `session-key` prints the key of a normalized
source (BEHAVIOUR §1 field names), computed by the one function the gateway uses.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from hermes_cli.target import add_target_arguments
from hermes_gateway.domain.session_key import build_session_key
from hermes_gateway.domain.source import FACTS, InboundMessage, SessionSource
from hermes_gateway.errors import BadRequest, ConfigError, GatewayError
from hermes_gateway.settings import Settings

EXPLAIN_HELP = (
    "show how a raw webhook payload is normalized, keyed, authorized and routed. For debugging only: "
    "the payload's signature is NOT checked, so a payload that explains fine may still be refused as "
    "unsigned by the real webhook"
)


def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError("use true or false")


def add_commands(commands: Any) -> None:
    explain = commands.add_parser("explain", help=EXPLAIN_HELP, description=EXPLAIN_HELP)
    explain.add_argument("--platform", required=True, help="the platform the payload came from (telegram, slack, ...)")
    explain.add_argument("--payload", required=True, help="the raw webhook body: a file, or - for standard input")
    explain.add_argument(
        "--header", action="append", default=[], metavar="NAME:VALUE", help="a request header the parser reads"
    )
    explain.add_argument(
        "--profile", default=None, help="as the named profile's bot sees it (default: the deployment's own)"
    )
    add_target_arguments(explain)
    explain.set_defaults(run=_explain)

    key = commands.add_parser("session-key", help="print the session key of a normalized source (JSON)")
    key.add_argument("--source", required=True, help="the source as JSON (BEHAVIOUR §1 field names): a file or -")
    key.add_argument("--group-sessions-per-user", type=_bool, default=None, metavar="true|false")
    key.add_argument("--thread-sessions-per-user", type=_bool, default=None, metavar="true|false")
    key.add_argument("--profile", default=None, help="the profile (default: gateway.yaml's)")
    key.set_defaults(run=_session_key)


def _read(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


def _settings(local: bool) -> Settings:
    """The settings the gateway runs with: local mode's (its defaults included) or gateway.yaml's."""
    from hermes_gateway.settings import load_settings, load_settings_file

    config = Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml"))
    if local:
        from hermes_local.runtime import local_settings_env

        env, _ = local_settings_env(config if config.exists() else None, dict(os.environ))
        return load_settings(env=env, config={})
    return load_settings_file(config)


def session_key_of(source: dict[str, Any], settings: Settings, args: argparse.Namespace) -> str:
    """The key the gateway gives this source; the flags override the settings."""
    group, thread = args.group_sessions_per_user, args.thread_sessions_per_user
    return build_session_key(
        SessionSource.from_dict(source),
        group_sessions_per_user=settings.sessions.group_sessions_per_user if group is None else group,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user if thread is None else thread,
        profile=settings.profile if args.profile is None else args.profile,
    )


def _session_key(args: argparse.Namespace) -> int:
    try:
        source = json.loads(_read(args.source))
    except ValueError:
        print("error: --source must be a JSON object", file=sys.stderr)
        return 2
    if not isinstance(source, dict) or not source.get("platform"):
        print("error: --source must be a JSON object with at least a platform", file=sys.stderr)
        return 2
    from hermes_gateway.settings import load_settings_file

    settings = load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))
    try:
        print(session_key_of(source, settings, args))
    except (ValueError, GatewayError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


def parse_payload(
    platform: str, body: bytes, headers: dict[str, str], settings: Settings
) -> tuple[list[InboundMessage], list[str]]:
    """The messages the platform's inbound adapter reads from a payload, without verifying it, and
    the reasons it left the payload's other events out (an echo of the bot's own message, a
    reaction, an event older than the inbox remembers). Raises ConfigError for an unknown platform
    and BadRequest for a malformed payload."""
    from dataclasses import replace

    from hermes_gateway.platforms import catalog
    from hermes_gateway.platforms.base import AdapterContext
    from hermes_gateway.secrets import Secrets
    from hermes_gateway.services.ingress import Accepted, Handshake, HttpRequest

    spec = catalog.spec(platform)
    if spec is None:
        raise ConfigError(f"unknown platform {platform!r}: one of {', '.join(p.name for p in catalog.CATALOG)}")
    # Parsing a disabled platform's payload is still useful; its settings are the defaults.
    platform_settings = replace(settings.platforms[platform], enabled=True)
    # Secrets from the environment only (some payloads are encrypted): never fetched from a stack.
    env = {k: v for k, v in os.environ.items() if k != "HERMES_SECRETS_PREFIX"}
    secrets = Secrets(env).for_profile(settings.served_profile)
    adapter = catalog.load(spec.inbound)(AdapterContext(platform_settings, settings, secrets))
    request = HttpRequest(
        method="POST", path=f"/webhooks/{platform}", headers={k.lower(): v for k, v in headers.items()}, body=body
    )
    parsed = adapter.parse(request, time.time())
    if isinstance(parsed, Handshake):
        return [], ["handshake"]
    items = parsed.items if isinstance(parsed, Accepted) else (parsed,)
    profile = settings.served_profile  # as ingress stamps a named profile's messages
    messages = [
        replace(item, source=replace(item.source, profile=profile)) if profile else item
        for item in items
        if isinstance(item, InboundMessage)
    ]
    return messages, [str(getattr(item, "reason", "")) for item in items if not isinstance(item, InboundMessage)]


def explain_message(
    message: InboundMessage, settings: Settings, *, is_paired: Any, store: Any | None
) -> dict[str, Any]:
    """Source, key, authorization and the session it would land in (`store` None: not looked up)."""
    from hermes_gateway.domain.access import AccessFacts, authorize

    source = message.source
    key = build_session_key(
        source,
        group_sessions_per_user=settings.sessions.group_sessions_per_user,
        thread_sessions_per_user=settings.sessions.thread_sessions_per_user,
        profile=settings.profile,
    )
    facts = AccessFacts(**{name: True for name in message.facts if name in FACTS})
    decision = authorize(source, settings, is_paired=is_paired, facts=facts)
    session: Any
    if store is None:
        session = {"status": "unknown", "why": "give --local or --stage to look it up"}
    else:
        route = store.get(key)
        session = (
            {"status": "existing", "session_id": route.session_id, "revision": route.revision}
            if route is not None
            else {"status": "new"}
        )
    return {
        "source": source.to_dict(),
        "session_key": key,
        "authorized": decision.allowed,
        "reason": decision.reason,
        "session": session,
        "event_id": message.event_id,
    }


def _explain(args: argparse.Namespace) -> int:
    headers: dict[str, str] = {}
    for header in args.header:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            print(f"error: --header must be NAME:VALUE, got {header!r}", file=sys.stderr)
            return 2
        headers[name.strip()] = value.strip()
    try:
        settings = _settings(args.local).for_profile(args.profile)
    except BadRequest as exc:  # UnknownProfile
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        messages, ignored = parse_payload(args.platform, _read(args.payload), headers, settings)
    except BadRequest as exc:
        print(f"error: the {args.platform} parser refused the payload: {exc}", file=sys.stderr)
        return 2
    if not messages:
        why = "the payload carries no message (a handshake or an ignored event)"
        print(json.dumps({"messages": [], "why": why, "ignored": ignored}))
        return 0
    store = is_paired = None
    if args.local or args.stage:
        from hermes_cli.target import bindings_for
        from hermes_gateway.adapters.dynamo_access import DynamoAccessStore
        from hermes_gateway.adapters.dynamo_routes import DynamoRoutes
        from hermes_gateway.adapters.session_tables import SessionTables
        from hermes_gateway.domain.profiles import pairing_for

        bindings = bindings_for(args)
        store = DynamoRoutes(SessionTables(bindings))
        is_paired = pairing_for(DynamoAccessStore(bindings), settings.served_profile).is_approved
    explained = [
        explain_message(m, settings, is_paired=is_paired or (lambda platform, user: False), store=store)
        for m in messages
    ]
    print(json.dumps(explained[0] if len(explained) == 1 else {"messages": explained}, indent=2))
    return 0
