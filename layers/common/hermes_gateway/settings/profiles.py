"""Named profiles: further bots from one deployment, each the deployment's settings overlaid with
its own (`profiles.<name>` in gateway.yaml, or `GATEWAY_PROFILES` in the environment)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from hermes_gateway.errors import ConfigError
from hermes_gateway.settings.model import Settings
from hermes_gateway.settings.table import BY_ENV, BY_PATH, FIELDS, PROFILES_ENV, build_checked, flatten_yaml

# A named profile is a URL segment (`/p/<name>/webhooks/...`) and a secret's suffix (`NAME__<NAME>`).
NAMED_PROFILE = re.compile(r"^[a-z][a-z0-9_]{0,29}$")
MAX_PROFILES = 10
# What one deployment holds once, for every profile (declared `wide`): its name and clock, the
# webhook limits, one tick, the hooks and the bus, the workflow and its lease, the memory service.
DEPLOYMENT_WIDE = tuple(s.path for s in FIELDS if s.wide)


def overlays_from_yaml(section: Any, source: str) -> dict[str, dict[str, Any]]:
    """`profiles: {name: {settings as in the file}}` -> each profile's {path: raw value}."""
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{source}: profiles: expected a mapping of profile name to its settings")
    overlays: dict[str, dict[str, Any]] = {}
    for name, body in section.items():
        where = f"{source}: profiles.{name}"
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            raise ConfigError(f"{where}: expected a section of settings, got {type(body).__name__}")
        overlays[str(name)] = flatten_yaml(body, "", where)
    return overlays


def overlays_from_env(text: str) -> dict[str, dict[str, Any]]:
    """`GATEWAY_PROFILES`, {profile: {VARIABLE: value}} as JSON -> each profile's {path: text}."""
    where = f"environment variable {PROFILES_ENV}"
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        raise ConfigError(f"{where}: not valid JSON") from None
    if not isinstance(data, dict) or not all(
        isinstance(body, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in body.items())
        for body in data.values()
    ):
        raise ConfigError(f"{where}: expected {{profile: {{VARIABLE: value}}}}")
    for name, body in data.items():
        unknown = sorted(set(body) - set(BY_ENV))
        if unknown:
            raise ConfigError(f"{where}: profile {name}: unknown setting(s) {', '.join(unknown)}")
    return {str(name): {BY_ENV[env].path: value for env, value in body.items()} for name, body in data.items()}


def named_profile(
    name: str, overlay: Mapping[str, Any], base_values: Mapping[str, Any], base: Settings, source: str
) -> Settings:
    """A named profile: the deployment's settings, overlaid with the profile's own. It serves only
    the platforms its overlay enables (each with its own bot, so its own secrets)."""
    where = f"{source}: profiles.{name}"
    if not NAMED_PROFILE.match(name):
        raise ConfigError(f"{where}: a profile name is 1-30 lower-case letters, digits or '_', starting with a letter")
    if name in (base.profile, "default"):
        raise ConfigError(f"{where}: {name!r} is the deployment's own profile; name the others differently")
    values = dict(base_values)
    for platform in base.platforms:
        values[f"platforms.{platform}.enabled"] = False
    own: dict[str, Any] = {}
    for path, raw in overlay.items():
        if BY_PATH[path].wide:
            raise ConfigError(f"{where}.{path}: is set for the whole deployment; a profile cannot change it")
        try:
            own[path] = BY_PATH[path].parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{where}.{path}: {exc}") from None
    if own.get("platforms.email.enabled"):
        raise ConfigError(
            f"{where}.platforms.email.enabled: e-mail is served for the deployment's own profile only "
            "(one receipt rule, one address)"
        )
    values.update(own, profile=name)
    return replace(build_checked(values, where), overlay=own, base_profile=base.profile)
