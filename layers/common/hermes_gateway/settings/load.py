"""gateway.yaml (or the settings file a function ships with) overlaid by the environment -> Settings."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from hermes_gateway.errors import ConfigError
from hermes_gateway.settings.model import Settings
from hermes_gateway.settings.profiles import MAX_PROFILES, named_profile, overlays_from_env, overlays_from_yaml
from hermes_gateway.settings.table import FIELDS, PROFILES_ENV, build_checked, flatten_yaml


def configured_paths(config: Mapping[str, Any], env: Mapping[str, str], source: str = "gateway.yaml") -> set[str]:
    """The settings a user set explicitly, in the config file or the environment (the
    deployment's own; named profiles' overlays are not counted)."""
    from_file = set(flatten_yaml({k: v for k, v in config.items() if k != "profiles"}, "", source))
    return from_file | {s.path for s in FIELDS if s.env in env}


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a config file; imported lazily because functions never read YAML at run time."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings")
    return data


def _values(env: Mapping[str, str], raw: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Every setting's parsed value: the environment's, else the file's, else its default."""
    values: dict[str, Any] = {}
    for s in FIELDS:
        if s.env in env:
            value, where = env[s.env], f"environment variable {s.env}"
        elif s.path in raw:
            value, where = raw[s.path], f"{source}: {s.path}"
        else:
            values[s.path] = s.default
            continue
        try:
            values[s.path] = s.parse(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return values


def load_settings(
    env: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
    source: str = "gateway.yaml",
) -> Settings:
    """Build settings from a parsed config mapping and the environment (which wins), with every
    named profile (`profiles:` in the file, or `GATEWAY_PROFILES` in the environment)."""
    env = os.environ if env is None else env
    config = dict(config or {})
    profiles_section = config.pop("profiles", None)
    values = _values(env, flatten_yaml(config, "", source), source)
    base = build_checked(values, source)
    if PROFILES_ENV in env:
        overlays = overlays_from_env(env[PROFILES_ENV])
    else:
        overlays = overlays_from_yaml(profiles_section, source)
    if len(overlays) > MAX_PROFILES:
        raise ConfigError(f"{source}: profiles: at most {MAX_PROFILES} named profiles per deployment")
    named = {name: named_profile(name, overlay, values, base, source) for name, overlay in overlays.items()}
    return replace(base, profiles=named) if named else base


def load_settings_file(path: Path, env: Mapping[str, str] | None = None) -> Settings:
    """Settings from a `gateway.yaml` (missing file = defaults) plus the environment."""
    config = read_yaml(path) if path.exists() else {}
    return load_settings(env=env, config=config, source=str(path))
