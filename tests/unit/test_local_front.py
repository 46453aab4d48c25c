"""Local mode's pure parts: the API Gateway payload 2.0 event the HTTP front builds, the settings
local mode starts with, and the web chat page's endpoints (`/local/session`, `/local/info`)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_gateway import __version__, wiring
from hermes_gateway.domain.sessions import SessionEntry, SessionInfo
from hermes_gateway.errors import ConfigError
from hermes_gateway.services.ingress import decode_body
from hermes_gateway.settings import Settings, load_settings
from hermes_local.http_front import api_gateway_v2_event, gateway_info, is_webhook_path, serve, webchat_session
from hermes_local.runtime import local_settings_env, profile_platforms, profile_secrets

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


def test_a_named_profiles_webhook_event() -> None:
    built = event(target="/p/coder/webhooks/telegram?a=1")

    assert built["rawPath"] == "/p/coder/webhooks/telegram"  # the ingress function reads the profile here
    assert built["pathParameters"] == {"platform": "telegram"}
    assert built["routeKey"] == "POST /p/coder/webhooks/{platform}"
    assert built["requestContext"]["routeKey"] == built["routeKey"]  # type: ignore[index]
    assert built["requestContext"]["http"]["path"] == "/p/coder/webhooks/telegram"  # type: ignore[index]


def test_a_named_profiles_webhook_sub_path() -> None:
    built = event(method="PUT", target="/p/coder/webhooks/matrix/_matrix/app/v1/transactions/1")

    assert built["rawPath"] == "/p/coder/webhooks/matrix/_matrix/app/v1/transactions/1"
    assert built["pathParameters"] == {"platform": "matrix", "proxy": "_matrix/app/v1/transactions/1"}
    assert built["routeKey"] == "PUT /p/coder/webhooks/{platform}/{proxy+}"


@pytest.mark.parametrize(
    ("target", "params"),
    [("/p/coder/webhooks", {}), ("/p/coder/other/telegram", {}), ("/p//webhooks/telegram", {}), ("/p/coder", {})],
)
def test_no_platform_outside_a_profiles_webhooks(target: str, params: dict[str, str]) -> None:
    assert event(target=target)["pathParameters"] == params


@pytest.mark.parametrize(
    ("path", "webhook"),
    [
        ("/webhooks/telegram", True),
        ("/webhooks/matrix/_matrix/app/v1/transactions/1", True),
        ("/p/coder/webhooks/telegram", True),
        ("/p/coder/webhooks/matrix/_matrix/app/v1/transactions/1", True),
        ("/p/coder/webhooks", False),
        ("/p//webhooks/telegram", False),
        ("/p/coder/other/telegram", False),
        ("/api/sessions", False),
        ("/local/info", False),
    ],
)
def test_which_paths_go_to_the_ingress_function(path: str, webhook: bool) -> None:
    assert is_webhook_path(path) is webhook


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
        {"SIGNAL_ALLOWED_USERS": "+15555550123"},  # any platform's allowlist, not Telegram's only
        {"SLACK_ALLOW_ALL_USERS": "true"},
    ],
)
def test_a_configured_allowlist_means_no_allow_all(environ: dict[str, str]) -> None:
    env, notices = local_settings_env(None, environ)

    assert env["GATEWAY_ALLOW_ALL_USERS"] == "false"
    assert notices == []


def test_polly_in_local_mode_says_it_cannot_speak_unless_an_endpoint_is_named() -> None:
    environ = {"GATEWAY_ALLOW_ALL_USERS": "true", "GATEWAY_TTS_PROVIDER": "polly"}
    _, notices = local_settings_env(None, environ)
    assert len(notices) == 1 and "tts.provider polly" in notices[0] and "AWS_ENDPOINT_URL_POLLY" in notices[0]
    assert local_settings_env(None, {**environ, "AWS_ENDPOINT_URL_POLLY": "http://127.0.0.1:9"})[1] == []
    assert local_settings_env(None, {**environ, "GATEWAY_TTS_PROVIDER": "openai"})[1] == []


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


# --- the web chat page's endpoints ------------------------------------------------------------


class FakeSessions:
    def __init__(self, routes: dict[str, SessionEntry] | None = None) -> None:
        self.routes = routes or {}
        self.asked: list[str] = []

    def get(self, session_key: str) -> SessionEntry | None:
        self.asked.append(session_key)
        return self.routes.get(session_key)


def route(key: str, session_id: str = "s-1") -> SessionEntry:
    return SessionEntry(
        session_key=key,
        session_id=session_id,
        revision=1,
        execution_generation=0,
        created_at=100.0,
        updated_at=200.0,
        platform="webchat",
        chat_type="dm",
        lease_token="lease-secret",
    )


def test_a_chat_with_no_session_yet_has_a_key_and_no_session() -> None:
    store = FakeSessions()

    view = webchat_session("web-1", load_settings(env={}, config={}), store)

    assert view == {
        "chat_id": "web-1",
        "session_key": "agent:main:webchat:dm:web-1",
        "session_id": None,
        "title": None,
        "created_at": None,
        "updated_at": None,
    }
    assert store.asked == ["agent:main:webchat:dm:web-1"]


def test_a_chat_in_a_session_shows_it_and_no_lease() -> None:
    store = FakeSessions({"agent:main:webchat:dm:web-1": route("agent:main:webchat:dm:web-1")})

    view = webchat_session("web-1", load_settings(env={}, config={}), store)

    assert (view["session_id"], view["created_at"], view["updated_at"]) == ("s-1", 100.0, 200.0)
    assert "lease-secret" not in json.dumps(view)


def test_the_session_key_follows_the_profile() -> None:
    store = FakeSessions()

    view = webchat_session("web-1", load_settings(env={"GATEWAY_PROFILE": "coder"}, config={}), store)

    assert view["session_key"] == "agent:coder:webchat:dm:web-1"


def test_gateway_info_names_the_agent_platforms_version_and_commands() -> None:
    settings = load_settings(
        env={
            "GATEWAY_PROVIDER": "openai",
            "GATEWAY_MODEL": "m-1",
            "OPENAI_BASE_URL": "https://user:pw@models.example/v1",
            "GATEWAY_USER_COMMANDS": "sethome",
        },
        config={},
    )

    info = gateway_info(settings, ["webchat", "telegram"])

    assert (info["provider"], info["model"], info["platforms"]) == ("openai", "m-1", ["webchat", "telegram"])
    assert info["version"] == __version__
    commands = {c["name"]: c["everyone"] for c in info["commands"]}
    assert {"help", "whoami", "sethome"} <= set(commands)
    assert commands["help"] and commands["whoami"] and commands["sethome"]
    assert "models.example" not in json.dumps(info)  # no endpoint URL, no credentials in it


def test_admin_commands_are_marked_so() -> None:
    info = gateway_info(load_settings(env={}, config={}), [])

    assert info["model"] is None
    assert {c["name"]: c["everyone"] for c in info["commands"]}["sethome"] is False


class StubGateway:
    local_secrets = {"WEBCHAT_TOKEN": "page-token", "TELEGRAM_WEBHOOK_SECRET": "tg-secret"}

    def enabled_platforms(self) -> list[str]:
        return ["webchat"]


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, FakeSessions]]:
    store = FakeSessions({"agent:main:webchat:dm:web-1": route("agent:main:webchat:dm:web-1", "s-42")})
    settings: Settings = load_settings(env={}, config={})
    monkeypatch.setattr(wiring, "settings", lambda: settings)

    def titled(_: object, session_id: str) -> SessionInfo:
        return SessionInfo(session_id, "k", "default", "webchat", 1.0, title="Trip plans")

    titles = type("Titles", (), {"get_session": titled})()
    monkeypatch.setattr(wiring, "session_stores", lambda: type("Stores", (), {"routes": store, "catalogue": titles})())
    server = serve(StubGateway(), "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", store
    finally:
        server.shutdown()
        server.server_close()


def get(url: str, token: str | None = "page-token") -> tuple[int, Any]:
    headers = {"x-hermes-local-token": token} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("path", ["/local/session?chat_id=web-1", "/local/info"])
@pytest.mark.parametrize("token", [None, "", "wrong", "tg-secret"])
def test_the_page_endpoints_want_the_page_token(front: tuple[str, FakeSessions], path: str, token: str | None) -> None:
    base, store = front

    status, body = get(base + path, token)

    assert status == 401 and body["ok"] is False
    assert store.asked == []


def test_the_session_endpoint(front: tuple[str, FakeSessions]) -> None:
    base, _ = front

    status, body = get(base + "/local/session?chat_id=web-1")

    assert status == 200
    assert (body["session_key"], body["session_id"]) == ("agent:main:webchat:dm:web-1", "s-42")
    assert body["title"] == "Trip plans"  # the page's header shows it
    assert get(base + "/local/session?chat_id=web-2")[1]["session_id"] is None


@pytest.mark.parametrize("query", ["", "?chat_id=", "?chat_id=a%3Ab", "?chat_id=" + "x" * 65, "?chat_id=..%2Fx"])
def test_the_session_endpoint_refuses_a_chat_id_the_web_chat_would_refuse(
    front: tuple[str, FakeSessions], query: str
) -> None:
    base, store = front

    status, body = get(base + "/local/session" + query)

    assert status == 400 and "chat_id" in body["error"]
    assert store.asked == []


def test_the_info_endpoint_holds_no_secret(front: tuple[str, FakeSessions]) -> None:
    base, _ = front

    status, body = get(base + "/local/info")

    assert status == 200
    assert (body["provider"], body["platforms"]) == ("echo", ["webchat"])
    assert "page-token" not in json.dumps(body) and "tg-secret" not in json.dumps(body)


def test_the_page_embeds_the_token_as_a_javascript_string() -> None:
    class OddToken(StubGateway):
        local_secrets = {"WEBCHAT_TOKEN": 'a"b</script><b>'}

    server = serve(OddToken(), "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/", timeout=5) as res:
            page = res.read().decode()
    finally:
        server.shutdown()
        server.server_close()

    assert 'const TOKEN = "a\\"b\\u003c/script>\\u003cb>";' in page
    assert "__WEBCHAT_TOKEN__" not in page and "</script><b>" not in page


class RecordingFunctions:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def invoke(self, name: str, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append((name, event))
        return {"statusCode": 200, "body": "{}"}


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/p/coder/webhooks/telegram"),
        ("GET", "/p/coder/webhooks/whatsapp"),
        ("PUT", "/p/coder/webhooks/matrix/_matrix/app/v1/transactions/1"),
        ("POST", "/webhooks/telegram"),
    ],
)
def test_a_profiles_webhook_request_reaches_the_ingress_function(method: str, path: str) -> None:
    class WithFunctions(StubGateway):
        functions = RecordingFunctions()

    gateway = WithFunctions()
    server = serve(gateway, "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}{path}"
        data = b'{"update_id": 1}' if method != "GET" else None
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method), timeout=5) as res:
            assert res.status == 200
        not_found = f"http://127.0.0.1:{server.server_address[1]}/p/coder/other/telegram"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(not_found, data=b"{}", method="POST"), timeout=5)
        assert refused.value.code == 404
    finally:
        server.shutdown()
        server.server_close()

    ((name, sent),) = gateway.functions.events
    assert name == "ingress" and sent["rawPath"] == path
    assert sent["requestContext"]["http"]["method"] == method


# --- named profiles in local mode -------------------------------------------------------------


def test_each_named_profile_lists_the_platforms_it_serves(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(
        "profiles:\n"
        "  coder:\n    platforms:\n      telegram: {enabled: true}\n      slack: {enabled: true}\n"
        "  quiet: {}\n",
        encoding="utf-8",
    )

    env, _ = local_settings_env(path, {})
    settings = load_settings(env=env, config={})  # as the running local mode reads its environment

    assert profile_platforms(settings) == {"coder": ["telegram", "slack"], "quiet": []}
    assert settings.platform("webchat") is not None  # the deployment's own keeps the web chat page


def test_no_named_profiles_is_an_empty_mapping() -> None:
    assert profile_platforms(load_settings(env={}, config={})) == {}


def test_only_the_named_profiles_own_secrets_are_taken_from_the_environment() -> None:
    value = "v" * 8
    environ = {
        "TELEGRAM_BOT_TOKEN__CODER": value,
        "TELEGRAM_BOT_TOKEN__OTHER": value,  # no such profile
        "TELEGRAM_BOT_TOKEN": value,  # the deployment's: copied as before, not here
        "NOT_A_SECRET__CODER": value,
        "SLACK_BOT_TOKEN__CODER": "",
    }

    assert profile_secrets(environ, ["coder"]) == {"TELEGRAM_BOT_TOKEN__CODER": value}
