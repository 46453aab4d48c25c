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

from hermes_gateway.settings import load_settings_file


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
    return 0


def _reference(args: argparse.Namespace) -> int:
    from hermes_gateway.settings.reference import reference

    print(reference(), end="")
    return 0
