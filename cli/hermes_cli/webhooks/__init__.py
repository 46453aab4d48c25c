"""`hermes-gateway webhooks urls|register|status`: the URL to give each platform, and registering it.

`urls` prints the webhook URL of every enabled platform of every profile the target serves: the
deployment's own (`/webhooks/<platform>`) and each named profile of gateway.yaml's `profiles:`
(`/p/<profile>/webhooks/<platform>`), from a deployed stack's outputs or the running local mode's
state file. `register <platform>` sets it through the platform's API where it has one (Telegram
`setWebhook`, the Discord interactions endpoint, LINE, Twilio, a BlueBubbles server's webhooks)
and `status <platform>` shows what the platform has registered; other platforms are registered
in their consoles (docs/platforms/).

Profiles (`--profile NAME`, on every action; NAME is a named profile, or the deployment's own
profile's name, which is the same as leaving it out):

- `urls` (text) lists every profile, one `profile` column naming each (the deployment's own shown
  by its `profile` setting); `--profile NAME` lists that profile only.
- `urls --json` prints `{platform: url}` for ONE profile, as before: the deployment's own unless
  `--profile NAME` picks another, so scripts that read it keep working.
- `register` / `status` use the profile's URL, its platform settings and its own secrets
  (`<SECRET>__<PROFILE>`, e.g. `TELEGRAM_BOT_TOKEN__CODER`).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_cli.target import add_target_arguments, local_state, profile_settings, stack_outputs
from hermes_gateway.errors import ConfigError, GatewayError
from hermes_gateway.outputs import webhook_output_key
from hermes_gateway.platforms import catalog
from hermes_gateway.resources import secrets_prefix

if TYPE_CHECKING:
    from hermes_gateway.settings import Settings

# The platforms whose webhook URL is set through their API, and the module beside this one that
# does it (`register_webhook(context, url)`, `webhook_status(context)`); the others are set in
# their consoles. The functions never register anything, so none of this is in the Lambda layer.
_REGISTRARS = {
    "telegram": "telegram",
    "discord": "discord",
    "line": "line",
    "sms": "twilio",
    "bluebubbles": "bluebubbles",
}
REGISTRABLE = tuple(_REGISTRARS)


def add_commands(commands: Any) -> None:
    webhooks = commands.add_parser("webhooks", help="webhook URLs per platform; register them where an API exists")
    actions = webhooks.add_subparsers(dest="action", required=True)

    urls = actions.add_parser("urls", help="the webhook URL of every enabled platform, per profile")
    urls.add_argument("--json", action="store_true", help="machine-readable {platform: url} of one profile")
    _profile_argument(urls, "only this profile (--json: this profile instead of the deployment's own)")
    add_target_arguments(urls)
    urls.set_defaults(run=_urls)

    register = actions.add_parser("register", help="set the webhook URL through the platform's API")
    register.add_argument("platform", choices=REGISTRABLE)
    register.add_argument("--url", default=None, help="register this URL instead (e.g. a tunnel to local mode)")
    _profile_argument(register, "the named profile's bot (its URL, settings and secrets)")
    add_target_arguments(register)
    register.set_defaults(run=_register)

    status = actions.add_parser("status", help="what the platform has registered")
    status.add_argument("platform", choices=REGISTRABLE)
    _profile_argument(status, "the named profile's bot")
    add_target_arguments(status)
    status.set_defaults(run=_status)


def _profile_argument(parser: Any, help_text: str) -> None:
    parser.add_argument("--profile", default=None, metavar="NAME", help=help_text)


def _settings() -> Settings:
    from hermes_gateway.settings import load_settings_file

    return load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))


ProfileUrls = tuple[str, str | None, dict[str, str]]


def profile_urls(args: argparse.Namespace) -> list[ProfileUrls]:
    """(profile name, its URL segment or None for the deployment's own, platform -> webhook URL),
    the deployment's own profile first, then each named one."""
    if args.local:
        state = local_state()
        base = str(state.get("url", "")).rstrip("/")
        own_name = str(state.get("profile") or "default")
        own = {name: f"{base}{catalog.webhook_path(name)}" for name in _webhooks(state.get("platforms"))}
        found: list[ProfileUrls] = [(own_name, None, own)]
        named: dict[str, list[str]] = state.get("profiles") or {}
        for name, platforms in named.items():
            found.append((name, name, {p: f"{base}{catalog.webhook_path(p, name)}" for p in _webhooks(platforms)}))
        return found
    settings = _settings()
    outputs = stack_outputs(args.stage or settings.stage)
    result: list[ProfileUrls] = []
    for profile in settings.all_profiles():
        served = profile.served_profile
        urls = {spec.name: outputs.get(webhook_output_key(spec.name, served)) for spec in catalog.CATALOG}
        result.append((profile.profile, served, {name: url for name, url in urls.items() if url}))
    return result


def _webhooks(platforms: list[str] | None) -> list[str]:
    """The platforms that have a webhook URL (e-mail comes through SES: `hermes-gateway email`)."""
    return [name for name in platforms or () if (spec := catalog.spec(name)) is not None and spec.webhook]


def _selected(args: argparse.Namespace) -> tuple[str, str | None, dict[str, str]]:
    """The profile `--profile` names (the deployment's own without it), with its URLs."""
    found = profile_urls(args)
    wanted = getattr(args, "profile", None)
    if not wanted:
        return found[0]
    for entry in found:
        if wanted in (entry[0], entry[1]):
            return entry
    where = "the running local mode" if args.local else "the configuration"
    known = ", ".join(name for name, served, _ in found if served) or "none"
    raise ConfigError(f"no profile {wanted!r} in {where} (named profiles: {known})")


def webhook_urls(args: argparse.Namespace) -> dict[str, str]:
    """Platform name -> webhook URL, for each platform the selected profile serves."""
    return _selected(args)[2]


def _stage(args: argparse.Namespace) -> str:
    return str(args.stage) if args.stage else _settings().stage


def _urls(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(webhook_urls(args), indent=2))
        return 0
    entries = [_selected(args)] if args.profile else profile_urls(args)
    if not any(urls for _, _, urls in entries):
        print("no platform is enabled (set <PLATFORM>_ENABLED or platforms.<name>.enabled)")
    width = max(len(name) for name, _, _ in entries)
    for name, served, urls in entries:
        for platform, url in urls.items():
            how = f"docs/platforms/{platform}.md"
            if platform in REGISTRABLE:
                how = "hermes-gateway webhooks register " + platform + (f" --profile {served}" if served else "")
            print(f"{name:<{width}} {platform:<12} {url}    ({how})")
    return 0


def _context(args: argparse.Namespace, platform: str) -> Any:
    """The platform's adapter context as the functions build it for the profile: gateway.yaml plus
    the environment, and the profile's secrets from SSM (deployed) or the environment (local)."""
    from hermes_gateway.platforms.base import AdapterContext
    from hermes_gateway.secrets import Secrets

    settings = profile_settings(_settings(), getattr(args, "profile", None))
    env = dict(os.environ)
    if not args.local:
        env.update(_stored_secrets(secrets_prefix(_stage(args)), platform, settings.served_profile))
    return AdapterContext(settings.platforms[platform], settings, Secrets(env).for_profile(settings.served_profile))


def _stored_secrets(prefix: str, platform: str, profile: str | None) -> dict[str, str]:
    """The platform's secrets of the profile as stored in SSM, read with the operator's own
    credentials (no region, credentials or network: the AWS SDK's error, said in one line by `main`)."""
    import boto3

    from hermes_gateway.secrets import profile_secret_name

    names = [profile_secret_name(name, profile) for name in catalog.BY_NAME[platform].secrets]
    if not names:
        return {}
    found = boto3.client("ssm").get_parameters(Names=[prefix + n for n in names], WithDecryption=True)
    return {p["Name"].removeprefix(prefix): p["Value"] for p in found.get("Parameters", [])}


def _module(platform: str) -> Any:
    """The platform's registration module, imported only by the command that uses it."""
    import importlib

    return importlib.import_module(f"{__name__}.{_REGISTRARS[platform]}")


def _secrets_hint(context: Any) -> str:
    """For a named profile's failure: where its secrets are (a message names the plain secret)."""
    profile = context.settings.served_profile
    return f" (profile {profile}: its secrets are named <NAME>__{profile.upper()})" if profile else ""


def _register(args: argparse.Namespace) -> int:
    context = _context(args, args.platform)
    url = args.url or webhook_urls(args).get(args.platform)
    if not url:
        raise ConfigError(f"no webhook URL for {args.platform}: is it enabled and deployed? (or pass --url)")
    try:
        print(_module(args.platform).register_webhook(context, url))
    except GatewayError as exc:
        print(f"{args.platform}: registration failed: {exc}{_secrets_hint(context)}")
        return 1
    return 0


def _status(args: argparse.Namespace) -> int:
    context = _context(args, args.platform)
    try:
        status = _module(args.platform).webhook_status(context)
    except GatewayError as exc:
        print(f"{args.platform}: cannot read the registration: {exc}{_secrets_hint(context)}")
        return 1
    expected = webhook_urls(args).get(args.platform)
    shown: dict[str, Any] = {"platform": args.platform, "expected_url": expected, "registered": status}
    if context.settings.served_profile:
        shown["profile"] = context.settings.served_profile
    print(json.dumps(shown, indent=2))
    return 0
