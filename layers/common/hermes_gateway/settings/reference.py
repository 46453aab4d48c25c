"""docs/configuration.md, written from the declarations: every setting, its environment variable,
default, rule and meaning, each platform's secrets, and the rules of named profiles. A test
compares the committed file with this; `make reference` rewrites it."""

from __future__ import annotations

from hermes_gateway.platforms import catalog
from hermes_gateway.settings.declare import Setting
from hermes_gateway.settings.profiles import MAX_PROFILES
from hermes_gateway.settings.shipped import SETTINGS_FILE_ENV, SHIPPED_PATH
from hermes_gateway.settings.table import FIELDS, PROFILES_ENV

REGENERATE = "make reference"


def _default(s: Setting) -> str:
    value = s.default
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


def _section_of(path: str) -> str:
    head, _, rest = path.partition(".")
    if head == "platforms":
        return f"platforms.{rest.partition('.')[0]}"
    return head if rest else "gateway"


def reference() -> str:
    lines = [
        "# Configuration reference",
        "",
        f"Generated from the settings' declarations (`{REGENERATE}`); do not edit by hand.",
        "Each setting is a key in `gateway.yaml` and the environment variable that overrides it.",
        "Secrets are never settings: see the last section.",
        "",
    ]
    sections: dict[str, list[Setting]] = {}
    for s in FIELDS:
        sections.setdefault(_section_of(s.path), []).append(s)
    for section, settings in sections.items():
        lines += [f"## {section}", "", "| key | variable | default | allowed | meaning |", "|---|---|---|---|---|"]
        lines += [
            f"| `{s.path}` | `{s.env}` | {_default(s)} | {_cell(s.check.allowed) if s.check else ''} | {_cell(s.doc)} |"
            for s in settings
        ]
        lines.append("")
    lines += ["## Secrets", "", "| platform | verifies webhooks with | sends with |", "|---|---|---|"]
    for spec in catalog.CATALOG:
        inbound = ", ".join(f"`{s}`" for s in spec.verify_env) or "-"
        send = ", ".join(f"`{s}`" for s in spec.send_secrets) or "-"
        lines.append(f"| {spec.name} | {inbound} | {send} |")
    lines += ["", "The model provider: `OPENAI_API_KEY` (for `provider.name: openai`).", ""]
    lines += _profiles_reference()
    return "\n".join(lines)


def _deployment_wide() -> list[str]:
    """The deployment-wide settings, a section named once (`cron.*`) when all of it is."""
    by_section: dict[str, list[Setting]] = {}
    for s in FIELDS:
        by_section.setdefault(s.path.rpartition(".")[0] or s.path, []).append(s)
    named: list[str] = []
    for section, settings in by_section.items():
        if "." in settings[0].path and all(s.wide for s in settings):
            named.append(f"{section}.*")
        else:
            named += [s.path for s in settings if s.wide]
    return named


def _profiles_reference() -> list[str]:
    wide = ", ".join(f"`{path}`" for path in _deployment_wide())
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
        "## How the settings reach the functions",
        "",
        "`cdk synth` validates `gateway.yaml` and writes the result (what differs from the defaults, and",
        "each named profile's own) to one JSON file in a small Lambda layer of its own, which every function",
        f"mounts: `{SHIPPED_PATH}`, named by `{SETTINGS_FILE_ENV}`. A function reads it",
        "once per cold start; a variable of the table above in its environment still overrides the file.",
        "Changing a setting publishes a new version of that layer and so updates every function.",
        "",
    ]


def main() -> None:
    print(reference(), end="")


if __name__ == "__main__":
    main()
