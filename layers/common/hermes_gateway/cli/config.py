"""`hermes-gateway config check|reference`: validate gateway.yaml; print the settings reference.

`reference` writes docs/configuration.md's content from the settings model itself (every field,
its environment variable, default and meaning, and each platform's secrets), so the document
cannot drift from the code: a test compares them.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from hermes_gateway.platforms import catalog
from hermes_gateway.settings import FIELDS, Field, load_settings_file


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


def _default(field: Field) -> str:
    value = field.default
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value in ((), {}, ""):
        return "(empty)"
    if isinstance(value, tuple):
        return "`" + ", ".join(value) + "`"
    return f"`{value}`"


def _cell(text: str) -> str:
    """Table-safe: a '|' in the text would end the cell."""
    return text.replace("|", "\\|")


def reference() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from the settings model (`hermes-gateway config reference`); do not edit by hand.",
        "Each setting is a key in `gateway.yaml` and the environment variable that overrides it.",
        "Secrets are never settings: see the last section.",
        "",
    ]
    sections: dict[str, list[Field]] = {}
    for field in FIELDS:
        head, _, rest = field.path.partition(".")
        section = f"platforms.{rest.partition('.')[0]}" if head == "platforms" else (head if rest else "gateway")
        sections.setdefault(section, []).append(field)
    for section, fields in sections.items():
        lines += [f"## {section}", "", "| key | variable | default | meaning |", "|---|---|---|---|"]
        lines += [f"| `{f.path}` | `{f.env}` | {_default(f)} | {_cell(f.doc)} |" for f in fields]
        lines.append("")
    lines += ["## Secrets", "", "| platform | verifies webhooks with | sends with |", "|---|---|---|"]
    for spec in catalog.CATALOG:
        inbound = ", ".join(f"`{s}`" for s in spec.verify_env) or "-"
        send = ", ".join(f"`{s}`" for s in spec.send_secrets) or "-"
        lines.append(f"| {spec.name} | {inbound} | {send} |")
    lines += ["", "The model provider: `OPENAI_API_KEY` (for `provider.name: openai`).", ""]
    lines += _profiles_reference()
    return "\n".join(lines)


def _profiles_reference() -> list[str]:
    from hermes_gateway.settings import _DEPLOYMENT_WIDE, MAX_PROFILES, PROFILES_ENV

    wide = ", ".join(f"`{path}*`" if path.endswith((".", "_")) else f"`{path}`" for path in _DEPLOYMENT_WIDE)
    return [
        "## Named profiles",
        "",
        f"`profiles.<name>` (environment: `{PROFILES_ENV}`, JSON of each profile's variables) serves a further",
        f"bot from the same deployment; at most {MAX_PROFILES}. A name is 1-30 lower-case letters, digits or `_`.",
        "A profile takes every setting above from the deployment unless it sets its own, except that it",
        "serves only the platforms it enables. Its webhooks are `/p/<name>/webhooks/<platform>`; its",
        "platform secrets are its own, `<SECRET>__<NAME>` (e.g. `TELEGRAM_BOT_TOKEN__CODER`); other secrets",
        "fall back to the deployment's. These are set once for the whole deployment and refused in a profile:",
        f"{wide}.",
        "",
    ]


def _reference(args: argparse.Namespace) -> int:
    print(reference(), end="")
    return 0
