"""`hermes-gateway webhooks urls|register|status`: the URL to give each platform, and registering it.

`urls` prints the webhook URL of every enabled platform (a deployed stack's outputs, or the running
local mode). `register <platform>` sets it through the platform's API where it has one (Telegram
`setWebhook`, the Discord interactions endpoint, LINE, Twilio) and `status <platform>` shows what
the platform has registered; other platforms are registered in their consoles (docs/platforms/).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from hermes_gateway.cli.target import add_target_arguments, local_state, stack_outputs, webhook_output_key
from hermes_gateway.errors import ConfigError, GatewayError
from hermes_gateway.platforms import catalog
from hermes_gateway.resources import secrets_prefix

REGISTRABLE = tuple(spec.name for spec in catalog.CATALOG if spec.registrable)


def add_commands(commands: Any) -> None:
    webhooks = commands.add_parser("webhooks", help="webhook URLs per platform; register them where an API exists")
    actions = webhooks.add_subparsers(dest="action", required=True)

    urls = actions.add_parser("urls", help="the webhook URL of every enabled platform")
    urls.add_argument("--json", action="store_true", help="machine-readable output")
    add_target_arguments(urls)
    urls.set_defaults(run=_urls)

    register = actions.add_parser("register", help="set the webhook URL through the platform's API")
    register.add_argument("platform", choices=REGISTRABLE)
    register.add_argument("--url", default=None, help="register this URL instead (e.g. a tunnel to local mode)")
    add_target_arguments(register)
    register.set_defaults(run=_register)

    status = actions.add_parser("status", help="what the platform has registered")
    status.add_argument("platform", choices=REGISTRABLE)
    add_target_arguments(status)
    status.set_defaults(run=_status)


def webhook_urls(args: argparse.Namespace) -> dict[str, str]:
    """Platform name -> webhook URL, for each platform the target serves."""
    if args.local:
        state = local_state()
        base = str(state.get("url", "")).rstrip("/")
        enabled = state.get("platforms") or []
        return {name: f"{base}/webhooks/{name}" for name in enabled}
    outputs = stack_outputs(_stage(args))
    found = {spec.name: outputs.get(webhook_output_key(spec.name)) for spec in catalog.CATALOG}
    return {name: url for name, url in found.items() if url}


def _stage(args: argparse.Namespace) -> str:
    if args.stage:
        return str(args.stage)
    from hermes_gateway.settings import load_settings_file

    return load_settings_file(Path("gateway.yaml")).stage


def _urls(args: argparse.Namespace) -> int:
    urls = webhook_urls(args)
    if args.json:
        print(json.dumps(urls, indent=2))
        return 0
    if not urls:
        print("no platform is enabled (set <PLATFORM>_ENABLED or platforms.<name>.enabled)")
    for name, url in urls.items():
        how = "hermes-gateway webhooks register " + name if name in REGISTRABLE else f"docs/platforms/{name}.md"
        print(f"{name:<12} {url}    ({how})")
    return 0


def _context(args: argparse.Namespace, platform: str) -> Any:
    """The platform's adapter context as the functions build it: gateway.yaml plus the
    environment, and the secrets from SSM (deployed) or the environment (local)."""
    from hermes_gateway.platforms.base import AdapterContext
    from hermes_gateway.secrets import Secrets
    from hermes_gateway.settings import load_settings_file

    settings = load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))
    env = dict(os.environ)
    if not args.local:
        env.setdefault("HERMES_SECRETS_PREFIX", secrets_prefix(_stage(args)))
    return AdapterContext(settings.platforms[platform], settings, Secrets(env))


def _module(platform: str) -> Any:
    """The platform's module, which holds `register_webhook` and `webhook_status` beside its sender."""
    import importlib

    sender = catalog.BY_NAME[platform].sender
    assert sender is not None, f"{platform} has no sender module"
    return importlib.import_module(sender.partition(":")[0])


def _register(args: argparse.Namespace) -> int:
    url = args.url or webhook_urls(args).get(args.platform)
    if not url:
        raise ConfigError(f"no webhook URL for {args.platform}: is it enabled and deployed? (or pass --url)")
    try:
        print(_module(args.platform).register_webhook(_context(args, args.platform), url))
    except GatewayError as exc:
        print(f"{args.platform}: registration failed: {exc}")
        return 1
    return 0


def _status(args: argparse.Namespace) -> int:
    try:
        status = _module(args.platform).webhook_status(_context(args, args.platform))
    except GatewayError as exc:
        print(f"{args.platform}: cannot read the registration: {exc}")
        return 1
    expected = webhook_urls(args).get(args.platform)
    print(json.dumps({"platform": args.platform, "expected_url": expected, "registered": status}, indent=2))
    return 0
