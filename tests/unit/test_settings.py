"""Settings: gateway.yaml overlaid by the environment, validated once, carried as env vars."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import SECRET_NAMES
from hermes_gateway.settings import FIELDS, PROVIDERS, Settings, load_settings, load_settings_file, settings_env


def load(env: dict[str, str] | None = None, config: dict[str, Any] | None = None) -> Settings:
    return load_settings(env=env or {}, config=config or {})


def config_error(env: dict[str, str] | None = None, config: dict[str, Any] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load(env, config)
    return str(caught.value)


# --- defaults and sources --------------------------------------------------------------------


def test_defaults_without_config_or_environment() -> None:
    s = load()

    assert (s.stage, s.time_zone, s.profile) == ("dev", "UTC", "default")
    assert (s.provider.name, s.provider.model) == ("echo", "")
    assert s.provider.openai_base_url == "https://api.openai.com/v1"
    assert (s.provider.timeout_seconds, s.provider.max_history_messages) == (60, 40)
    assert s.access.allowed_users == () and s.access.allow_all_users is False
    assert s.sessions.group_sessions_per_user is True
    assert s.sessions.thread_sessions_per_user is False
    assert s.sessions.turn_timeout_seconds == 300
    assert s.sessions.busy_retry_seconds == 1
    assert s.max_body_bytes == 65536
    tg, wc = s.platforms["telegram"], s.platforms["webchat"]
    assert tg.enabled is True and tg.allowed_users == () and tg.allow_all_users is False
    assert tg.api_base_url == "https://api.telegram.org"
    # The web chat page is a local-mode platform: off unless asked for, but open to all once on.
    assert wc.enabled is False and wc.allow_all_users is True
    assert s.platform("telegram") is tg
    assert s.platform("webchat") is None
    assert s.platform("slack") is None


def test_every_yaml_value_lands_in_its_field() -> None:
    # Given a gateway.yaml that sets every field
    config = {
        "stage": "prod",
        "time_zone": "Europe/Berlin",
        "profile": "coder",
        "provider": {
            "name": "openai",
            "model": "gpt-test",
            "openai_base_url": "http://127.0.0.1:9000/v1/",
            "timeout_seconds": 12,
            "max_history_messages": 8,
        },
        "access": {"allowed_users": ["alice", 42], "allow_all_users": "yes"},
        "sessions": {
            "group_sessions_per_user": False,
            "thread_sessions_per_user": "on",
            "turn_timeout_seconds": "90",
            "busy_retry_seconds": 3,
        },
        "ingress": {"max_body_bytes": 2048},
        "platforms": {
            "telegram": {
                "enabled": False,
                "api_base_url": "https://tg.example/",
                "allowed_users": "1, 2 ,,3",
                "allow_all_users": True,
            },
            "webchat": {"enabled": True, "allow_all_users": False},
        },
    }

    # When it is loaded with an empty environment
    s = load(config=config)

    # Then each value is parsed into its place (URLs lose a trailing slash, lists are strings)
    assert (s.stage, s.time_zone, s.profile) == ("prod", "Europe/Berlin", "coder")
    assert (s.provider.name, s.provider.model) == ("openai", "gpt-test")
    assert s.provider.openai_base_url == "http://127.0.0.1:9000/v1"
    assert (s.provider.timeout_seconds, s.provider.max_history_messages) == (12, 8)
    assert s.access.allowed_users == ("alice", "42")
    assert s.access.allow_all_users is True
    assert (s.sessions.group_sessions_per_user, s.sessions.thread_sessions_per_user) == (False, True)
    assert (s.sessions.turn_timeout_seconds, s.sessions.busy_retry_seconds) == (90, 3)
    assert s.max_body_bytes == 2048
    tg, wc = s.platforms["telegram"], s.platforms["webchat"]
    assert (tg.enabled, tg.api_base_url, tg.allowed_users, tg.allow_all_users) == (
        False,
        "https://tg.example",
        ("1", "2", "3"),
        True,
    )
    assert (wc.enabled, wc.allow_all_users) == (True, False)
    assert s.platform("telegram") is None  # disabled platforms are not offered


def test_environment_overrides_yaml() -> None:
    # Given a YAML that picks openai, restricts Telegram and turns the web chat on
    config = {
        "provider": {"name": "openai", "model": "gpt-test"},
        "platforms": {"telegram": {"allowed_users": ["1"]}, "webchat": {"enabled": True}},
        "sessions": {"group_sessions_per_user": True},
    }
    # And an environment that says otherwise
    env = {
        "GATEWAY_PROVIDER": "echo",
        "TELEGRAM_ALLOWED_USERS": "100, 200",
        "WEBCHAT_ENABLED": "false",
        "GATEWAY_GROUP_SESSIONS_PER_USER": "0",
        "GATEWAY_ALLOW_ALL_USERS": "TRUE",
        "GATEWAY_MAX_BODY_BYTES": " 4096 ",
    }

    # When both are loaded
    s = load(env, config)

    # Then the environment wins field by field, and YAML still fills what the environment leaves
    assert s.provider.name == "echo"
    assert s.provider.model == "gpt-test"
    assert s.platforms["telegram"].allowed_users == ("100", "200")
    assert s.platforms["webchat"].enabled is False
    assert s.sessions.group_sessions_per_user is False
    assert s.access.allow_all_users is True
    assert s.max_body_bytes == 4096


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1", True),
        ("true", True),
        ("Yes", True),
        (" on ", True),
        ("0", False),
        ("false", False),
        ("NO", False),
        ("off", False),
    ],
)
def test_boolean_spellings_in_the_environment(raw: str, expected: bool) -> None:
    assert load({"TELEGRAM_ALLOW_ALL_USERS": raw}).platforms["telegram"].allow_all_users is expected


def test_an_empty_list_variable_clears_a_yaml_list() -> None:
    s = load({"GATEWAY_ALLOWED_USERS": ""}, {"access": {"allowed_users": ["alice"]}})
    assert s.access.allowed_users == ()


# --- to_env round trip -------------------------------------------------------------------------


def test_to_env_names_every_field_and_no_secret() -> None:
    env = settings_env(load())

    assert set(env) == {f.env for f in FIELDS}
    assert not set(env) & set(SECRET_NAMES)
    assert all(isinstance(v, str) for v in env.values())


def test_to_env_round_trips_a_fully_configured_settings() -> None:
    # Given settings built from YAML that touches every field
    original = load(
        {"TELEGRAM_ALLOWED_USERS": "7,8"},
        {
            "stage": "qa-1",
            "time_zone": "America/New_York",
            "profile": "main",
            "provider": {"name": "bedrock", "model": "anthropic.test", "timeout_seconds": 5},
            "access": {"allowed_users": ["x@example.com", "*"], "allow_all_users": True},
            "platforms": {"webchat": {"enabled": True, "allow_all_users": False}},
        },
    )

    # When it travels as environment variables into a function
    rebuilt = load_settings(env=settings_env(original), config={})

    # Then the function sees the same settings
    assert rebuilt == original


_IDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-@.", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    stage=st.from_regex(r"[a-z][a-z0-9-]{0,19}", fullmatch=True),
    profile=st.from_regex(r"[A-Za-z0-9_-]{1,40}", fullmatch=True),
    provider=st.sampled_from(PROVIDERS),
    model=st.from_regex(r"[a-z0-9.:-]{1,20}", fullmatch=True),
    time_zone=st.sampled_from(["UTC", "Europe/Berlin", "Asia/Kolkata", "America/Sao_Paulo"]),
    timeout=st.integers(1, 80),
    busy_retry=st.integers(1, 5),
    body=st.integers(1024, 200_000),
    flags=st.tuples(*[st.booleans()] * 7),
    tg_users=st.lists(_IDS, max_size=4),
    gw_users=st.lists(_IDS, max_size=4),
)
def test_to_env_round_trip_property(
    stage: str,
    profile: str,
    provider: str,
    model: str,
    time_zone: str,
    timeout: int,
    busy_retry: int,
    body: int,
    flags: tuple[bool, ...],
    tg_users: list[str],
    gw_users: list[str],
) -> None:
    config = {
        "stage": stage,
        "profile": profile,
        "time_zone": time_zone,
        "provider": {"name": provider, "model": model, "timeout_seconds": timeout},
        "access": {"allowed_users": gw_users, "allow_all_users": flags[0]},
        "sessions": {
            "group_sessions_per_user": flags[1],
            "thread_sessions_per_user": flags[2],
            "busy_retry_seconds": busy_retry,
        },
        "ingress": {"max_body_bytes": body},
        "platforms": {
            "telegram": {"enabled": flags[3], "allowed_users": tg_users, "allow_all_users": flags[4]},
            "webchat": {"enabled": flags[5], "allow_all_users": flags[6]},
        },
    }
    original = load(config=config)

    assert load_settings(env=settings_env(original), config={}) == original


def test_an_allowlist_entry_that_the_environment_could_not_carry_is_refused() -> None:
    # A comma inside an entry would split it in two on the way into a function ("alice,*" would
    # become "alice" and "*", allowing everyone), so the file may not hold one.
    for entry in ("alice,*", "al ice"):
        with pytest.raises(ConfigError, match=r"access\.allowed_users.*comma or white space"):
            load(config={"access": {"allowed_users": [entry]}})


# --- validation: every error names the key and the reason --------------------------------------


@pytest.mark.parametrize(
    ("env", "config", "key", "reason"),
    [
        ({}, {"colour": "blue"}, "colour", "unknown setting"),
        ({}, {"provider": {"nmae": "echo"}}, "provider.nmae", "unknown setting"),
        ({"GATEWAY_PROVIDER": "anthropic"}, {}, "provider.name", "must be one of echo, openai, bedrock"),
        ({}, {"provider": {"name": "openai"}}, "provider.model", "is required for provider openai"),
        ({"GATEWAY_PROVIDER": "bedrock"}, {}, "provider.model", "is required for provider bedrock"),
        ({"OPENAI_BASE_URL": "api.openai.com/v1"}, {}, "provider.openai_base_url", "must be an http(s) URL"),
        (
            {},
            {"platforms": {"telegram": {"api_base_url": "ftp://x"}}},
            "platforms.telegram.api_base_url",
            "must be an http(s) URL",
        ),
        (
            {"GATEWAY_PROVIDER_TIMEOUT_SECONDS": "ten"},
            {},
            "GATEWAY_PROVIDER_TIMEOUT_SECONDS",
            "expected a whole number, got 'ten'",
        ),
        (
            {},
            {"sessions": {"turn_timeout_seconds": 1.5}},
            "sessions.turn_timeout_seconds",
            "expected a whole number, got 1.5",
        ),
        ({}, {"sessions": {"turn_timeout_seconds": True}}, "sessions.turn_timeout_seconds", "expected a whole number"),
        ({"GATEWAY_TURN_TIMEOUT_SECONDS": "0"}, {}, "sessions.turn_timeout_seconds", "must be greater than zero"),
        ({"GATEWAY_BUSY_RETRY_SECONDS": "-5"}, {}, "sessions.busy_retry_seconds", "must be greater than zero"),
        ({}, {"provider": {"max_history_messages": -1}}, "provider.max_history_messages", "must be greater than zero"),
        (
            {"GATEWAY_CONTEXT_WINDOW": "2000", "GATEWAY_MAX_OUTPUT_TOKENS": "1500"},
            {},
            "provider.max_output_tokens",
            "at most half of the context window",
        ),
        ({"GATEWAY_COMPRESSION_THRESHOLD": "1.5"}, {}, "compression.threshold", "at most 0.9"),
        ({}, {"compression": {"threshold": "half"}}, "compression.threshold", "expected a number"),
        ({"TELEGRAM_ENABLED": "maybe"}, {}, "TELEGRAM_ENABLED", "expected true or false, got 'maybe'"),
        ({}, {"access": {"allow_all_users": "sure"}}, "access.allow_all_users", "expected true or false"),
        ({"GATEWAY_TIME_ZONE": "Mars/Olympus_Mons"}, {}, "time_zone", "unknown time zone 'Mars/Olympus_Mons'"),
        ({}, {"time_zone": "../../etc/passwd"}, "time_zone", "unknown time zone"),
        ({"GATEWAY_STAGE": "Prod"}, {}, "stage", "lower-case letters"),
        ({}, {"stage": "a" * 21}, "stage", "1-20"),
        ({}, {"stage": "1st"}, "stage", "starting with a letter"),
        ({}, {"stage": {"name": "dev"}}, "stage", "expected text, got dict"),
        ({"GATEWAY_PROFILE": "my profile"}, {}, "profile", "letters, digits"),
        ({"GATEWAY_MAX_BODY_BYTES": "1023"}, {}, "ingress.max_body_bytes", "between 1024 and 200000"),
        ({}, {"ingress": {"max_body_bytes": 200_001}}, "ingress.max_body_bytes", "between 1024 and 200000"),
    ],
)
def test_validation_errors_name_the_key_and_the_reason(
    env: dict[str, str], config: dict[str, Any], key: str, reason: str
) -> None:
    message = config_error(env, config)

    assert key in message
    assert reason in message


@pytest.mark.parametrize("limit", [1024, 200_000])
def test_body_limit_bounds_are_inclusive(limit: int) -> None:
    assert load({"GATEWAY_MAX_BODY_BYTES": str(limit)}).max_body_bytes == limit


def test_an_error_from_the_environment_names_the_variable() -> None:
    message = config_error({"GATEWAY_MAX_BODY_BYTES": "lots"})

    assert "environment variable GATEWAY_MAX_BODY_BYTES" in message


def test_an_error_from_yaml_names_the_file() -> None:
    with pytest.raises(ConfigError, match=r"^conf/gw\.yaml: provider\.name \(GATEWAY_PROVIDER\)"):
        load_settings(env={}, config={"provider": {"name": "gpt"}}, source="conf/gw.yaml")


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"platforms": {"telegram": {"bot_token": "123:abc"}}}, "platforms.telegram.bot_token"),
        ({"platforms": {"telegram": {"webhook_secret": "s"}}}, "platforms.telegram.webhook_secret"),
        ({"provider": {"api_key": "sk-test"}}, "provider.api_key"),
        ({"TELEGRAM_BOT_TOKEN": "123:abc"}, "TELEGRAM_BOT_TOKEN"),
        ({"openai_api_key": "sk-test"}, "openai_api_key"),
        ({"platforms": {"webchat": {"WEBCHAT_TOKEN": "t"}}}, "platforms.webchat.WEBCHAT_TOKEN"),
    ],
)
def test_a_secret_in_the_config_file_is_refused_with_where_secrets_go(config: dict[str, Any], key: str) -> None:
    message = config_error(config=config)

    assert key in message
    assert "secrets do not belong in the config file" in message
    assert "hermes-gateway secrets set" in message and "environment" in message
    # The refusal never repeats the secret itself.
    assert "123:abc" not in message and "sk-test" not in message


def test_a_secret_in_the_environment_is_not_a_setting() -> None:
    # Local mode reads secrets from the environment: they must neither fail settings nor leak into to_env.
    env = {"TELEGRAM_BOT_TOKEN": "123:abc", "OPENAI_API_KEY": "sk-test"}

    assert "123:abc" not in str(settings_env(load(env)))


def test_an_empty_yaml_section_is_no_settings() -> None:
    assert load(config={"platforms": {"telegram": None}}) == load()


# --- the file -----------------------------------------------------------------------------------


def test_missing_file_gives_defaults(tmp_path: Path) -> None:
    assert load_settings_file(tmp_path / "gateway.yaml", env={}) == load()


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("# nothing yet\n", encoding="utf-8")

    assert load_settings_file(path, env={}) == load()


def test_file_values_are_read_and_the_environment_still_wins(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("stage: prod\nplatforms:\n  telegram:\n    allowed_users: [11, 12]\n", encoding="utf-8")

    s = load_settings_file(path, env={"GATEWAY_STAGE": "qa"})

    assert s.stage == "qa"
    assert s.platforms["telegram"].allowed_users == ("11", "12")


def test_invalid_yaml_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("stage: [unclosed\n", encoding="utf-8")

    with pytest.raises(ConfigError, match="not valid YAML") as caught:
        load_settings_file(path, env={})
    assert str(path) in str(caught.value)


def test_a_yaml_list_at_the_top_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("- stage\n- dev\n", encoding="utf-8")

    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_settings_file(path, env={})


def test_an_unknown_key_in_a_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("sessions:\n  idle_minutes: 5\n", encoding="utf-8")

    with pytest.raises(ConfigError) as caught:
        load_settings_file(path, env={})
    assert str(caught.value) == f"{path}: sessions.idle_minutes: unknown setting"


@pytest.mark.parametrize("url", ["https://api.openai.com/v1 extra", "https://exa mple.com"])
def test_a_url_with_whitespace_is_refused(url: str) -> None:
    message = config_error({"OPENAI_BASE_URL": url})

    assert "provider.openai_base_url" in message


def test_the_busy_retry_pause_is_bounded_by_the_inbox_consumers_longest_pause() -> None:
    # A message for a busy session waits on the lease as queued input; the router retries only a
    # message whose route changed under it, after this pause.
    assert load().sessions.busy_retry_seconds == 1
    with pytest.raises(ConfigError, match=r"sessions\.busy_retry_seconds"):
        load({"GATEWAY_BUSY_RETRY_SECONDS": "6"})


def test_group_users_from_yaml_and_from_the_environment_round_trip() -> None:
    s = load(config={"platforms": {"telegram": {"group_users": {"-100": ["42", "43"], -200: [7]}}}})
    assert s.platforms["telegram"].group_users == {"-100": ("42", "43"), "-200": ("7",)}
    assert load_settings(env=settings_env(s), config={}) == s
    with pytest.raises(ConfigError, match="TELEGRAM_GROUP_USERS"):
        load_settings(env={"TELEGRAM_GROUP_USERS": "-100"}, config={})
    with pytest.raises(ConfigError, match="group_users"):
        load(config={"platforms": {"telegram": {"group_users": {"a=b": ["1"]}}}})


def test_to_env_changed_only_round_trips_and_leaves_the_defaults_out() -> None:
    original = load_settings(env={"SLACK_ENABLED": "true", "TELEGRAM_ALLOWED_USERS": "1,2", "GATEWAY_STAGE": "prod"})
    env = settings_env(original, changed_only=True)
    assert env == {"SLACK_ENABLED": "true", "TELEGRAM_ALLOWED_USERS": "1,2", "GATEWAY_STAGE": "prod"}
    assert load_settings(env=env, config={}) == original
