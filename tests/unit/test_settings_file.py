"""The settings file a deployment ships with its functions: written from validated settings, read
once per cold start through the same loader as gateway.yaml, the environment still overriding it."""

from __future__ import annotations

import json
import secrets as random_secrets
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import SECRET_NAMES
from hermes_gateway.secrets import profile_secret_name
from hermes_gateway.settings import (
    PROVIDERS,
    SETTINGS_FILE_ENV,
    Settings,
    load_settings,
    load_shipped_settings,
    settings_env,
    settings_json,
    write_settings_file,
)

CONFIG: dict[str, Any] = {
    "stage": "prod",
    "provider": {"name": "openai", "model": "gpt-test", "openai_base_url": "http://127.0.0.1:9/v1/"},
    "sessions": {"reset_mode": "idle", "reset_policy": "dm=idle:720;group=daily@5"},
    "platforms": {
        "telegram": {"allowed_users": [42, "43"], "group_users": {-100: ["7", "8"]}},
        "slack": {"enabled": True, "busy_input_mode": "steer"},
        "sms": {"enabled": True, "from_number": "+15005550006"},
    },
    "profiles": {
        "coder": {
            "provider": {"model": "coder-model"},
            "access": {"allowed_users": ["7"]},
            "platforms": {"telegram": {"enabled": True}, "relay": {"enabled": True, "platforms": ["signal"]}},
        },
        "quiet": {},
    },
}


def shipped(tmp_path: Path, original: Settings, env: dict[str, str] | None = None) -> Settings:
    path = tmp_path / "settings.json"
    write_settings_file(original, path)
    return load_shipped_settings({**(env or {}), SETTINGS_FILE_ENV: str(path)})


def test_a_function_reads_back_exactly_the_settings_written(tmp_path: Path) -> None:
    original = load_settings(env={}, config=CONFIG)
    assert shipped(tmp_path, original) == original


def test_the_file_is_gateway_yaml_as_json_with_only_what_differs_from_the_defaults() -> None:
    document = json.loads(settings_json(load_settings(env={}, config=CONFIG)))
    assert document["stage"] == "prod"
    assert document["provider"] == {"name": "openai", "model": "gpt-test", "openai_base_url": "http://127.0.0.1:9/v1"}
    assert document["platforms"]["telegram"] == {"allowed_users": ["42", "43"], "group_users": {"-100": ["7", "8"]}}
    assert document["profiles"]["quiet"] == {}
    assert document["profiles"]["coder"]["platforms"]["relay"] == {"enabled": True, "platforms": ["signal"]}
    assert "time_zone" not in document and "cron" not in document
    assert json.loads(settings_json(load_settings(env={}, config={}))) == {}


def test_the_environment_still_overrides_the_file_setting_by_setting(tmp_path: Path) -> None:
    original = load_settings(env={}, config=CONFIG)
    overridden = shipped(tmp_path, original, {"GATEWAY_MODEL": "other", "SLACK_ENABLED": "false"})
    assert overridden.provider.model == "other" and overridden.provider.name == "openai"
    assert overridden.platform("slack") is None and overridden.platform("sms") is not None
    assert overridden.profiles["coder"].provider.model == "coder-model"


def test_without_a_file_the_environment_alone_is_read() -> None:
    env = settings_env(load_settings(env={}, config=CONFIG), changed_only=True)
    assert load_shipped_settings(env) == load_settings(env={}, config=CONFIG)
    assert load_shipped_settings({}) == load_settings(env={}, config={})


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read the settings file"),
        ("{", "not valid JSON"),
        ("[1]", "the top level must be a mapping"),
        ('{"provider": {"name": "gpt"}}', "provider.name (GATEWAY_PROVIDER): must be one of"),
        ('{"colour": "blue"}', "colour: unknown setting"),
    ],
)
def test_a_bad_settings_file_fails_the_cold_start_naming_the_file(
    tmp_path: Path, content: str | None, reason: str
) -> None:
    path = tmp_path / "settings.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_shipped_settings({SETTINGS_FILE_ENV: str(path)})
    assert str(path) in str(raised.value) and reason in str(raised.value)


def test_no_secret_reaches_the_file() -> None:
    # Given every secret, and two profiles' own, in the environment (as local mode has them)
    names = [profile_secret_name(name, p) for name in SECRET_NAMES for p in (None, "coder", "quiet")]
    secrets = {name: "s3cr3t-" + random_secrets.token_hex(8) for name in names}
    # When settings are built with them and written out
    text = settings_json(load_settings(env=secrets, config=CONFIG))
    # Then neither a secret's value nor its name is in the file
    assert [name for name, value in secrets.items() if value in text or f'"{name}"' in text] == []


def test_wiring_reads_the_file_once_per_cold_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hermes_gateway import wiring

    path = tmp_path / "settings.json"
    write_settings_file(load_settings(env={}, config=CONFIG), path)
    monkeypatch.setenv(SETTINGS_FILE_ENV, str(path))
    for name in ("GATEWAY_STAGE", "GATEWAY_PROFILES", "GATEWAY_MODEL"):
        monkeypatch.delenv(name, raising=False)
    wiring.reset()
    try:
        first = wiring.settings()
        path.unlink()  # read once: a warm function does not read it again
        assert wiring.settings() is first
        assert wiring.profile_settings("coder").provider.model == "coder-model"
    finally:
        wiring.reset()


_IDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-@.", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    provider=st.sampled_from(PROVIDERS),
    model=st.from_regex(r"[a-z0-9.:-]{1,20}", fullmatch=True),
    flags=st.tuples(*[st.booleans()] * 5),
    users=st.lists(_IDS, max_size=4),
    groups=st.dictionaries(st.from_regex(r"-?[0-9]{1,6}", fullmatch=True), st.lists(_IDS, max_size=3), max_size=2),
    profile_users=st.lists(_IDS, max_size=3),
    body=st.integers(1024, 200_000),
)
def test_to_config_round_trip_property(
    provider: str,
    model: str,
    flags: tuple[bool, ...],
    users: list[str],
    groups: dict[str, list[str]],
    profile_users: list[str],
    body: int,
) -> None:
    config = {
        "provider": {"name": provider, "model": model},
        "access": {"allowed_users": users, "allow_all_users": flags[0]},
        "ingress": {"max_body_bytes": body},
        "platforms": {
            "telegram": {"enabled": flags[1], "group_users": groups},
            "webchat": {"enabled": flags[2], "allow_all_users": flags[3]},
        },
        "profiles": {"coder": {"platforms": {"slack": {"enabled": flags[4], "allowed_users": profile_users}}}},
    }
    original = load_settings(env={}, config=config)
    assert load_settings(env={}, config=json.loads(settings_json(original))) == original
