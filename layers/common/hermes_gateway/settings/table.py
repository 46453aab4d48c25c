"""The declarations as one table, and the few things done with it: build `Settings` from values
by path (by keyword, section by section), check them, and read them back out.

`FIELDS` lists every setting once, in the order of `Settings`' fields, each with its path in
gateway.yaml, its environment variable and its default resolved; a platform's settings appear once
per catalog platform (`platforms.telegram.enabled`, `TELEGRAM_ENABLED`), followed by the platform's
own catalog options.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import fields, replace
from functools import cache
from typing import Any

from hermes_gateway.errors import ConfigError
from hermes_gateway.platforms.catalog import CATALOG, PlatformSpec
from hermes_gateway.resources import SECRET_NAMES
from hermes_gateway.settings.declare import (
    CHECKS_BY_KIND,
    PARSERS_BY_KIND,
    PLATFORMS_META,
    SECTION_META,
    SETTING_META,
    Invalid,
    Section,
    Setting,
    matches,
    optional,
)
from hermes_gateway.settings.model import Settings

PROFILES_ENV = "GATEWAY_PROFILES"


@cache
def declared(cls: type) -> tuple[tuple[str, Setting], ...]:
    """(attribute, declaration) of each setting a section dataclass declares."""
    return tuple((f.name, f.metadata[SETTING_META]) for f in fields(cls) if SETTING_META in f.metadata)


def _platform_fields(key: str, spec: PlatformSpec, cls: type) -> Iterator[Setting]:
    prefix = f"{key}.{spec.name}."
    for attr, s in declared(cls):
        default = s.default if s.per_platform is None else s.per_platform(spec)
        yield replace(
            s, env=f"{spec.name.upper()}_{s.env}", default=default, path=prefix + attr, place=(key, spec.name, attr)
        )
    for o in spec.options:
        place = (key, spec.name, "options", o.attr)
        check = optional(matches(o.pattern, f"use {o.form}", o.form)) if o.pattern else CHECKS_BY_KIND.get(o.kind)
        yield Setting(o.env, PARSERS_BY_KIND[o.kind], o.default, o.doc, check=check, path=prefix + o.attr, place=place)


def _resolve() -> Iterator[Setting]:
    for f in fields(Settings):
        if SETTING_META in f.metadata:
            yield replace(f.metadata[SETTING_META], path=f.name, place=(f.name,))
        elif SECTION_META in f.metadata:
            for attr, s in declared(f.metadata[SECTION_META]):
                wide = s.wide or f.metadata["wide"]
                yield replace(s, path=f"{f.name}.{attr}", place=(f.name, attr), wide=wide)
        elif PLATFORMS_META in f.metadata:
            for spec in CATALOG:
                yield from _platform_fields(f.name, spec, f.metadata[PLATFORMS_META])


FIELDS: tuple[Setting, ...] = tuple(_resolve())
BY_PATH = {s.path: s for s in FIELDS}
BY_ENV = {s.env: s for s in FIELDS}
# Every proper prefix of a path (`platforms`, `platforms.telegram`): a section, not a setting.
SECTIONS = frozenset(path.rsplit(".", n)[0] for path in BY_PATH for n in range(1, path.count(".") + 1))


def flatten_yaml(data: Mapping[str, Any], prefix: str, source: str) -> dict[str, Any]:
    """A config mapping as {path: raw value}; an unknown key or a secret is a ConfigError."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}{key}"
        if str(key).upper() in SECRET_NAMES or str(key).lower() in ("bot_token", "webhook_secret", "api_key"):
            raise ConfigError(
                f"{source}: {path}: secrets do not belong in the config file; "
                "set them with `hermes-gateway secrets set` (deployed) or the environment (local)"
            )
        if path in BY_PATH:
            flat[path] = value
        elif path in SECTIONS and value is None:
            continue  # a section whose lines are all commented out
        elif path in SECTIONS and isinstance(value, Mapping):
            flat.update(flatten_yaml(value, path + ".", source))
        elif path in SECTIONS:
            raise ConfigError(f"{source}: {path}: expected a section of settings, got {type(value).__name__}")
        else:
            raise ConfigError(f"{source}: {path}: unknown setting")
    return flat


def _section(cls: type, prefix: str, values: Mapping[str, Any], **fixed: Any) -> Any:
    return cls(**fixed, **{attr: values[prefix + attr] for attr, _ in declared(cls)})


def build(values: Mapping[str, Any]) -> Settings:
    """Settings from a value for every path (unchecked)."""
    built: dict[str, Any] = {}
    for f in fields(Settings):
        if SETTING_META in f.metadata:
            built[f.name] = values[f.name]
        elif SECTION_META in f.metadata:
            built[f.name] = _section(f.metadata[SECTION_META], f"{f.name}.", values)
        elif PLATFORMS_META in f.metadata:
            built[f.name] = {
                spec.name: _section(
                    f.metadata[PLATFORMS_META],
                    f"{f.name}.{spec.name}.",
                    values,
                    name=spec.name,
                    options={o.attr: values[f"{f.name}.{spec.name}.{o.attr}"] for o in spec.options},
                )
                for spec in CATALOG
            }
    return Settings(**built)


def _parts(settings: Settings) -> Iterator[tuple[str, Section]]:
    """Each section with its path prefix; the platforms', then Settings' own rules last."""
    for f in fields(Settings):
        if SECTION_META in f.metadata:
            yield f"{f.name}.", getattr(settings, f.name)
        elif PLATFORMS_META in f.metadata:
            for name, platform in getattr(settings, f.name).items():
                yield f"{f.name}.{name}.", platform
    yield "", settings


def build_checked(values: Mapping[str, Any], source: str) -> Settings:
    """Settings from parsed values, every setting's check and every section's rules kept; a
    ConfigError names the setting at fault, its variable and the reason."""
    settings = build(values)
    try:
        for s in FIELDS:
            reason = s.check.find(values[s.path]) if s.check else None
            if reason:
                raise Invalid(s.path, reason)
        for prefix, part in _parts(settings):
            try:
                part.validate()
            except Invalid as exc:
                raise Invalid(prefix + exc.where, exc.reason) from None
    except Invalid as exc:
        raise ConfigError(f"{source}: {exc.where} ({BY_PATH[exc.where].env}): {exc.reason}") from None
    return settings


def read(settings: Settings, s: Setting) -> Any:
    """A setting's value, along its place (attributes, and keys of the platform mappings)."""
    value: Any = settings
    for step in s.place:
        value = value[step] if isinstance(value, Mapping) else getattr(value, step)
    return value


def values_of(settings: Settings) -> dict[str, Any]:
    return {s.path: read(settings, s) for s in FIELDS}


def env_text(value: Any) -> str:
    """A parsed setting as the environment variable that carries it (parsed back unchanged)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, Mapping):
        return ";".join(f"{key}={','.join(items)}" for key, items in value.items())
    return str(value)


def json_value(value: Any) -> Any:
    """A parsed setting as gateway.yaml (or its JSON twin) holds it."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return {key: list(items) for key, items in value.items()}
    return value


def settings_env(settings: Settings, *, changed_only: bool = False) -> dict[str, str]:
    values = values_of(settings)
    env = {s.env: env_text(values[s.path]) for s in FIELDS if not changed_only or values[s.path] != s.default}
    if settings.profiles:
        overlays = {
            name: {BY_PATH[path].env: env_text(value) for path, value in named.overlay.items()}
            for name, named in settings.profiles.items()
        }
        env[PROFILES_ENV] = json.dumps(overlays, separators=(",", ":"), sort_keys=True)
    return env


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """{"provider.model": "m"} -> {"provider": {"model": "m"}}, values as JSON."""
    nested: dict[str, Any] = {}
    for path, value in flat.items():
        *heads, last = path.split(".")
        into = nested
        for head in heads:
            into = into.setdefault(head, {})
        into[last] = json_value(value)
    return nested


def settings_config(settings: Settings, *, changed_only: bool = False) -> dict[str, Any]:
    values = values_of(settings)
    config = nest({s.path: values[s.path] for s in FIELDS if not changed_only or values[s.path] != s.default})
    if settings.profiles:
        config["profiles"] = {name: nest(named.overlay) for name, named in settings.profiles.items()}
    return config
