"""`hermes-gateway config check|reference`: validate gateway.yaml; print the settings reference.

`reference` prints docs/configuration.md's content, written from the settings' declarations
(`hermes_gateway.settings.reference`), so the document cannot drift from the code: a test
compares them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from hermes_gateway.platforms import catalog
from hermes_gateway.settings import Settings, load_settings_file


def add_commands(commands: Any) -> None:
    config = commands.add_parser("config", help="validate gateway.yaml, or print the settings reference")
    actions = config.add_subparsers(dest="action", required=True)
    check = actions.add_parser("check", help="validate gateway.yaml (and the environment) as synth would")
    check.set_defaults(run=_check)
    reference = actions.add_parser("reference", help="every setting as Markdown (docs/configuration.md)")
    reference.set_defaults(run=_reference)


def _check(args: argparse.Namespace) -> int:
    path = Path(os.environ.get("GATEWAY_CONFIG", "gateway.yaml"))
    settings = load_settings_file(path)  # a ConfigError names the key and the reason (exit 2)
    enabled = [name for name in settings.platforms if settings.platform(name) is not None]
    print(f"{path if path.exists() else 'defaults'}: valid; stage {settings.stage}; platforms: {', '.join(enabled)}")
    for warning in deploy_warnings(settings):
        print(f"WARN {warning}")
    return 0


def deploy_warnings(settings: Settings) -> list[str]:
    """What a valid configuration deploys that its owner may not mean: the echo agent (no model
    answers), or a bot anyone may talk to (an allow-all, or `*` in an allowlist). `deploy` and
    `config check` print them; neither stops."""
    warnings = []
    for profile in settings.all_profiles():
        whose = f" (profile {profile.profile})" if profile.served_profile else ""
        if profile.provider.name == "echo":
            warnings.append(
                f"provider{whose}: the echo agent answers with the user's own words; set provider.name to "
                "openai or bedrock (and provider.model) for a model"
            )
        open_to = [
            spec.name
            for spec in catalog.CATALOG
            if not spec.local_only
            and (found := profile.platform(spec.name)) is not None
            and (found.allow_all_users or "*" in found.allowed_users)
        ]
        if profile.access.allow_all_users or "*" in profile.access.allowed_users:
            open_to = ["every platform"]
        if open_to:
            warnings.append(
                f"access{whose}: anyone who finds the bot may use it on {', '.join(open_to)}; list the users "
                "who may (access.allowed_users, platforms.<name>.allowed_users) or let strangers pair"
            )
    return warnings


def _reference(args: argparse.Namespace) -> int:
    from hermes_gateway.settings.reference import reference

    print(reference(), end="")
    return 0
