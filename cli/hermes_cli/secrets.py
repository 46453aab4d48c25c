"""`hermes-gateway secrets set|list|check`: the deployment's secrets as SSM SecureString parameters.

`set NAME` reads the value from a hidden prompt (or standard input when it is not a terminal),
never from the command line, so it stays out of shell history and process lists. `list` shows
names and dates, never values. `check` says, for every enabled platform (and the model provider),
which secrets it still needs. The functions read the parameters with a 5-minute cache, so a
rotation needs no redeploy. Local mode reads the same names from the environment (`check --local`).

Named profiles (gateway.yaml's `profiles:`, each its own bot) have their own secrets:
`set NAME --profile P` stores `<prefix>NAME__P` (upper case: `TELEGRAM_BOT_TOKEN__CODER`), the
same name local mode reads from the environment. `--profile` must name a profile of gateway.yaml
(the deployment's own profile's name is the same as leaving it out). `list` shows every name under
the prefix, a profile's with the profile beside it. `check` reports per profile: a named
profile's platform secrets must be its own (`NAME__P`); the others (the model's API key) may be
its own or fall back to the deployment's.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from pathlib import Path
from typing import Any

from hermes_cli.target import profile_settings
from hermes_gateway.errors import ConfigError
from hermes_gateway.platforms import catalog
from hermes_gateway.resources import SECRET_NAMES, secrets_prefix
from hermes_gateway.secrets import PLATFORM_SECRETS, profile_secret_name
from hermes_gateway.settings import Settings, load_settings_file


def add_commands(commands: Any) -> None:
    secrets = commands.add_parser("secrets", help="set, list and check the deployment's secrets (SSM)")
    actions = secrets.add_subparsers(dest="action", required=True)

    put = actions.add_parser("set", help="store NAME; the value is read from a prompt or standard input")
    put.add_argument("name", choices=SECRET_NAMES, metavar="NAME", help=", ".join(SECRET_NAMES))
    put.add_argument("--stage", default=None, help="the deployed stage (default: gateway.yaml's stage)")
    put.add_argument("--profile", default=None, metavar="P", help="a named profile's own value (NAME__P)")
    put.set_defaults(run=_set)

    listing = actions.add_parser("list", help="the names that are set (never the values)")
    listing.add_argument("--stage", default=None)
    listing.set_defaults(run=_list)

    check = actions.add_parser("check", help="what every enabled platform still needs")
    where = check.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="check the environment, as local mode reads it")
    where.add_argument("--stage", default=None)
    check.set_defaults(run=_check)


def _settings() -> Settings:
    return load_settings_file(Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml")))


def _prefix(args: argparse.Namespace) -> str:
    return secrets_prefix(args.stage or _settings().stage)


def _ssm() -> Any:
    import boto3

    return boto3.client("ssm")


def read_value(name: str) -> str:
    """The secret's value from a hidden prompt, or the first line of standard input."""
    value = getpass.getpass(f"{name}: ") if sys.stdin.isatty() else sys.stdin.readline().rstrip("\r\n")
    if not value.strip():
        raise ConfigError(f"{name}: an empty value was given; nothing was stored")
    return value


def _set(args: argparse.Namespace) -> int:
    settings = _settings()
    secret = profile_secret_name(args.name, profile_settings(settings, args.profile).served_profile)
    value = read_value(secret)
    name = secrets_prefix(args.stage or settings.stage) + secret
    _ssm().put_parameter(Name=name, Value=value, Type="SecureString", Overwrite=True, Tier="Standard")
    print(f"stored {name} (SecureString); functions pick it up within 5 minutes")
    return 0


def stored_names(prefix: str) -> dict[str, str]:
    """Secret name -> last modified (ISO), for the parameters under the prefix. Values are not read."""
    found: dict[str, str] = {}
    pages = _ssm().get_paginator("get_parameters_by_path").paginate(Path=prefix, WithDecryption=False)
    for page in pages:
        for parameter in page.get("Parameters", []):
            short = parameter["Name"].removeprefix(prefix)
            modified = parameter.get("LastModifiedDate")
            found[short] = modified.isoformat(timespec="seconds") if modified else ""
    return found


def _list(args: argparse.Namespace) -> int:
    prefix = _prefix(args)
    names = stored_names(prefix)
    width = max([36, *(len(name) for name in names)])
    for name in sorted(names):
        base, separator, profile = name.rpartition("__")
        whose = f"  (profile {profile.lower()})" if separator and base in SECRET_NAMES else ""
        print(f"{name:<{width}} set {names[name]}{whose}")
    print(f"{len(names)} secret(s) under {prefix}")
    return 0


def needed(settings: Settings) -> dict[str, tuple[str, ...]]:
    """Per enabled platform (and the provider), the secrets it needs to verify and to send."""
    needs: dict[str, tuple[str, ...]] = {}
    for spec in catalog.CATALOG:
        if spec.local_only or settings.platform(spec.name) is None:
            continue
        needs[spec.name] = spec.secrets
    if settings.provider.name == "openai" and "api.openai.com" in settings.provider.openai_base_url:
        needs["provider"] = ("OPENAI_API_KEY",)
    return needs


def missing_secrets(names: tuple[str, ...], profile: str | None, have: set[str]) -> list[str]:
    """The names (as the profile reads them) of the secrets not set. A named profile's platform
    secrets are its own only; another secret may be its own or the deployment's."""
    missing = []
    for name in names:
        own = profile_secret_name(name, profile)
        either = (own,) if not profile or name in PLATFORM_SECRETS else (own, name)
        if not any(n in have for n in either):
            missing.append(own)
    return missing


def _check(args: argparse.Namespace) -> int:
    settings = _settings()
    if args.local:
        names = {profile_secret_name(n, p.served_profile) for p in settings.all_profiles() for n in SECRET_NAMES}
        have = {name for name in names | set(SECRET_NAMES) if os.environ.get(name)}
        where = "the environment"
    else:
        prefix = secrets_prefix(args.stage or settings.stage)
        have = set(stored_names(prefix))
        where = prefix
    missing_any = False
    for profile in settings.all_profiles():
        if settings.profiles:
            own = " (the deployment's own)" if profile.served_profile is None else ""
            print(f"profile {profile.profile}{own}:")
        for owner, needs in needed(profile).items():
            missing = missing_secrets(needs, profile.served_profile, have)
            missing_any |= bool(missing)
            state = "ok" if not missing else "missing " + ", ".join(missing)
            print(f"{owner:<12} {state}")
    print(f"(checked {where})")
    return 1 if missing_any else 0
