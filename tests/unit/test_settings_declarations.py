"""Every setting is declared once, on the dataclass field it fills, and everything else (the table,
the sections built by keyword, the profiles' rules) follows from the declarations."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import SECRET_NAMES
from hermes_gateway.settings import DEPLOYMENT_WIDE, FIELDS, PlatformSettings, ProviderSettings, Settings, load_settings
from hermes_gateway.settings.declare import SECTION_META, Section
from hermes_gateway.settings.table import declared, nest

SECTIONS = [f.metadata[SECTION_META] for f in fields(Settings) if SECTION_META in f.metadata]
# The fields of a section that are not settings: a platform's name and its catalog options.
PLAIN = {PlatformSettings: {"name", "options"}}


def test_each_path_and_each_variable_is_declared_once_and_no_variable_is_a_secret() -> None:
    paths = [s.path for s in FIELDS]
    variables = [s.env for s in FIELDS]
    assert len(set(paths)) == len(paths) and len(set(variables)) == len(variables)
    assert not set(variables) & set(SECRET_NAMES)
    assert all(s.doc and s.place for s in FIELDS)


@pytest.mark.parametrize("cls", [*SECTIONS, PlatformSettings], ids=lambda cls: cls.__name__)
def test_every_field_of_a_section_is_a_declared_setting(cls: type[Section]) -> None:
    undeclared = {f.name for f in fields(cls)} - {attr for attr, _ in declared(cls)}
    assert undeclared == PLAIN.get(cls, set())


def test_settings_holds_only_settings_sections_platforms_and_profiles() -> None:
    plain = {f.name for f in fields(Settings) if not f.metadata}
    assert plain == {"profiles", "overlay", "base_profile"}


def test_sections_are_built_by_keyword_only() -> None:
    with pytest.raises(TypeError):
        ProviderSettings("openai")  # type: ignore[misc]
    assert ProviderSettings(model="m").model == "m"


@pytest.mark.parametrize("name", [f.name for f in fields(Settings) if SECTION_META in f.metadata])
def test_a_sections_dataclass_defaults_are_its_settings_defaults(name: str) -> None:
    cls = next(f.metadata[SECTION_META] for f in fields(Settings) if f.name == name)
    assert getattr(load_settings(env={}, config={}), name) == cls()


def with_value(path: str, value: Any) -> dict[str, Any]:
    return nest({path: value})


@pytest.mark.parametrize("path", DEPLOYMENT_WIDE)
def test_a_profile_may_not_change_a_deployment_wide_setting(path: str) -> None:
    default = next(s.default for s in FIELDS if s.path == path)
    with pytest.raises(ConfigError, match=rf"profiles\.coder\.{path}: is set for the whole deployment"):
        load_settings(env={}, config={"profiles": {"coder": with_value(path, default)}})


def test_a_profile_may_set_every_other_setting() -> None:
    for s in FIELDS:
        if s.wide:
            continue
        coder = load_settings(env={}, config={"profiles": {"coder": with_value(s.path, s.default)}}).profiles["coder"]
        assert dict(coder.overlay) == {s.path: s.default}, s.path


def test_the_deployment_wide_settings_are_the_deployments_name_clock_limits_tick_hooks_workflow_and_memory() -> None:
    assert set(DEPLOYMENT_WIDE) == {
        "stage", "time_zone", "profile", "memory.external", "memory.honcho_base_url", "memory.honcho_workspace",
        "sessions.turn_timeout_seconds", "sessions.busy_retry_seconds", "sessions.route_max_idle_days",
        "sessions.retention_days",
        "cron.grace_seconds", "cron.max_jobs_per_tick", "hooks.enabled", "hooks.bus_events", "turns.workflow_type",
        "ingress.max_body_bytes", "ingress.endpoint", "media.retention_days", "operations.alarm_email",
        "operations.dashboard", "operations.observability",
    }  # fmt: skip
