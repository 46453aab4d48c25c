"""Local mode's pure parts: the API Gateway payload 2.0 event the HTTP front builds, and the
settings local mode starts with."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from hermes_gateway.errors import ConfigError
from hermes_gateway.services.ingress import decode_body
from hermes_gateway.settings import load_settings
from hermes_local.http_front import api_gateway_v2_event
from hermes_local.runtime import local_settings_env

# --- api_gateway_v2_event ---------------------------------------------------------------------


def event(
    method: str = "POST",
    target: str = "/webhooks/telegram",
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b'{"update_id": 1}',
) -> dict[str, object]:
    return api_gateway_v2_event(method, target, headers or [], body, "127.0.0.1")


def test_headers_are_lower_cased_and_repeats_comma_joined() -> None:
    # Given headers as an HTTP client sends them, one of them repeated
    headers = [
        ("Content-Type", "application/json"),
        ("X-Telegram-Bot-Api-Secret-Token", "s3cret"),
        ("Accept", "text/html"),
        ("ACCEPT", "application/json"),
        ("Host", "localhost:8080"),
    ]

    # When the front builds the event
    built = event(headers=headers)

    # Then names are lower-case (the adapters look them up so) and repeats joined in order
    assert built["headers"] == {
        "content-type": "application/json",
        "x-telegram-bot-api-secret-token": "s3cret",
        "accept": "text/html,application/json",
        "host": "localhost:8080",
    }
    assert built["requestContext"]["domainName"] == "localhost:8080"  # type: ignore[index]


def test_query_parameters_are_parsed_and_repeats_joined() -> None:
    built = event(target="/webhooks/telegram?a=1&b=&a=2")

    assert built["rawQueryString"] == "a=1&b=&a=2"
    assert built["queryStringParameters"] == {"a": "1,2", "b": ""}


def test_no_query_gives_none_like_api_gateway() -> None:
    built = event()

    assert built["queryStringParameters"] is None
    assert built["rawQueryString"] == ""


@pytest.mark.parametrize(
    ("target", "params"),
    [
        ("/webhooks/telegram", {"platform": "telegram"}),
        ("/webhooks/webchat/", {"platform": "webchat"}),
        ("/webhooks/telegram?x=1", {"platform": "telegram"}),
        ("/webhooks", {}),
        ("/webhooks/matrix/transactions/7", {"platform": "matrix", "proxy": "transactions/7"}),
        ("/other/telegram", {}),
    ],
)
def test_the_platform_path_parameter(target: str, params: dict[str, str]) -> None:
    assert event(target=target)["pathParameters"] == params


def test_method_route_key_and_raw_path() -> None:
    built = event(method="GET", target="/webhooks/telegram?a=1")

    assert built["version"] == "2.0"
    assert built["routeKey"] == "GET /webhooks/{platform}"
    assert built["rawPath"] == "/webhooks/telegram"
    context = built["requestContext"]
    assert context["routeKey"] == "GET /webhooks/{platform}"  # type: ignore[index]
    assert context["http"]["method"] == "GET"  # type: ignore[index]
    assert context["http"]["path"] == "/webhooks/telegram"  # type: ignore[index]
    assert context["http"]["sourceIp"] == "127.0.0.1"  # type: ignore[index]


def test_a_utf8_body_is_passed_as_text() -> None:
    built = event(body='{"text": "héllo €"}'.encode())

    assert built["isBase64Encoded"] is False
    assert built["body"] == '{"text": "héllo €"}'


def test_a_non_utf8_body_is_base64_and_decodes_back_to_the_same_bytes() -> None:
    raw = b"\xff\xfe\x00binary"

    built = event(body=raw)

    assert built["isBase64Encoded"] is True
    assert base64.b64decode(built["body"]) == raw  # type: ignore[arg-type]
    # and the ingress function reads it back to the same bytes
    assert decode_body(built["body"], True, 1024) == raw  # type: ignore[arg-type]


def test_an_empty_body() -> None:
    built = event(method="GET", body=b"")

    assert (built["body"], built["isBase64Encoded"]) == ("", False)


def test_each_event_has_its_own_request_id() -> None:
    assert event()["requestContext"]["requestId"] != event()["requestContext"]["requestId"]  # type: ignore[index]


# --- local_settings_env -----------------------------------------------------------------------


def test_no_allowlist_means_allow_all_with_a_notice() -> None:
    # Given a newcomer's empty environment and no config file
    env, notices = local_settings_env(None, {})

    # Then everyone may chat, the web chat page is on, and start-up says so
    assert env["GATEWAY_ALLOW_ALL_USERS"] == "true"
    assert env["WEBCHAT_ENABLED"] == "true"
    assert len(notices) == 1 and "allows EVERY user" in notices[0]
    settings = load_settings(env=env, config={})
    assert settings.access.allow_all_users is True
    assert settings.platform("webchat") is not None


@pytest.mark.parametrize(
    "environ",
    [
        {"TELEGRAM_ALLOWED_USERS": "42"},
        {"GATEWAY_ALLOWED_USERS": "alice"},
        {"TELEGRAM_ALLOW_ALL_USERS": "true"},
        {"GATEWAY_ALLOW_ALL_USERS": "false"},
    ],
)
def test_a_configured_allowlist_means_no_allow_all(environ: dict[str, str]) -> None:
    env, notices = local_settings_env(None, environ)

    assert env["GATEWAY_ALLOW_ALL_USERS"] == "false"
    assert notices == []


def test_the_allowlist_survives_into_the_function_environment() -> None:
    env, _ = local_settings_env(None, {"TELEGRAM_ALLOWED_USERS": "42, 43"})

    assert env["TELEGRAM_ALLOWED_USERS"] == "42,43"


def test_an_allowlist_in_the_config_file_counts(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("platforms:\n  telegram:\n    allowed_users: [42]\n", encoding="utf-8")

    env, notices = local_settings_env(path, {})

    assert env["GATEWAY_ALLOW_ALL_USERS"] == "false"
    assert env["TELEGRAM_ALLOWED_USERS"] == "42"
    assert notices == []


def test_the_web_chat_can_be_turned_off() -> None:
    env, _ = local_settings_env(None, {"WEBCHAT_ENABLED": "false"})

    assert env["WEBCHAT_ENABLED"] == "false"


def test_the_web_chat_turned_off_in_the_file_stays_off(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("platforms:\n  webchat:\n    enabled: false\n", encoding="utf-8")

    env, _ = local_settings_env(path, {})

    assert env["WEBCHAT_ENABLED"] == "false"


def test_a_missing_config_file_is_defaults(tmp_path: Path) -> None:
    env, notices = local_settings_env(tmp_path / "absent.yaml", {"GATEWAY_STAGE": "local"})

    assert env["GATEWAY_STAGE"] == "local"
    assert len(notices) == 1


def test_invalid_settings_fail_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="GATEWAY_PROVIDER"):
        local_settings_env(None, {"GATEWAY_PROVIDER": "nope"})


def test_secrets_in_the_environment_do_not_leak_into_the_settings_env() -> None:
    env, _ = local_settings_env(None, {"TELEGRAM_BOT_TOKEN": "123:abc", "PATH": "/usr/bin"})

    assert "TELEGRAM_BOT_TOKEN" not in env and "PATH" not in env


def test_an_explicit_no_allow_all_in_the_file_is_respected(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("access:\n  allow_all_users: false\n", encoding="utf-8")

    env, _ = local_settings_env(path, {})

    assert env["GATEWAY_ALLOW_ALL_USERS"] == "false"
