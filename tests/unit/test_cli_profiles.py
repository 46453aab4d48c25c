"""Named profiles on the command line: `webhooks urls|register|status --profile`, `secrets set|list|check`
per profile, and `pairing ... --profile` on the profile's own view of the pairing store."""

from __future__ import annotations

import io
import json
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main
from hermes_cli import secrets as secrets_cli
from hermes_cli import webhooks as webhooks_cli
from hermes_cli.target import LOCAL_STATE_ENV
from hermes_gateway.domain import pairing
from hermes_gateway.domain.profiles import pairing_for
from tests.fakes.access import FakePairingStore
from tests.fakes.telegram_server import FakeTelegram

CONFIG = """\
stage: qa
provider: {name: openai, model: m-1}
platforms:
  slack: {enabled: true}
  telegram: {enabled: false}
profiles:
  coder:
    platforms:
      telegram: {enabled: true, allowed_users: ["123"]}
  writer:
    platforms:
      slack: {enabled: true}
"""

BASE = "https://abc.execute-api.us-east-1.amazonaws.com"


@pytest.fixture(autouse=True)
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """gateway.yaml with two named profiles, and none of the settings or secrets in the environment."""
    path = tmp_path / "gateway.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv("GATEWAY_CONFIG", str(path))
    for name in ("GATEWAY_STAGE", "GATEWAY_PROFILE", "GATEWAY_PROFILES", "HERMES_SECRETS_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    from hermes_gateway.resources import SECRET_NAMES

    for name in SECRET_NAMES:
        for variant in (name, name + "__CODER", name + "__WRITER"):
            monkeypatch.delenv(variant, raising=False)
    return path


@pytest.fixture
def local_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "local.json"
    state = {
        "pid": 1,
        "url": "http://127.0.0.1:8080",
        "platforms": ["telegram", "webchat"],
        "profile": "default",
        "profiles": {"coder": ["telegram"], "writer": ["slack", "matrix"]},
        "aws_environment": {},
        "resources": {},
    }
    path.write_text(json.dumps(state), encoding="utf-8")
    monkeypatch.setenv(LOCAL_STATE_ENV, str(path))
    return path


# --- webhooks urls ----------------------------------------------------------------------------


@pytest.fixture
def outputs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The deployed stack's outputs: the deployment's slack, coder's telegram, writer's slack."""
    asked: list[str] = []

    def stack_outputs(stage: str) -> dict[str, str]:
        asked.append(stage)
        return {
            "SlackWebhookUrl": f"{BASE}/webhooks/slack",
            "TelegramWebhookUrlForCoder": f"{BASE}/p/coder/webhooks/telegram",
            "SlackWebhookUrlForWriter": f"{BASE}/p/writer/webhooks/slack",
            "AccessTableName": "t",
        }

    monkeypatch.setattr(webhooks_cli, "stack_outputs", stack_outputs)
    return asked


def test_deployed_urls_list_every_profile(outputs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhooks", "urls"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert outputs == ["qa"]
    assert [line.split()[:3] for line in lines] == [
        ["default", "slack", f"{BASE}/webhooks/slack"],
        ["coder", "telegram", f"{BASE}/p/coder/webhooks/telegram"],
        ["writer", "slack", f"{BASE}/p/writer/webhooks/slack"],
    ]
    assert "hermes-gateway webhooks register telegram --profile coder" in lines[1]


def test_deployed_urls_json_is_one_profiles_platforms(outputs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhooks", "urls", "--json", "--stage", "prod"]) == 0
    assert json.loads(capsys.readouterr().out) == {"slack": f"{BASE}/webhooks/slack"}
    assert outputs == ["prod"]

    assert main(["webhooks", "urls", "--json", "--profile", "coder"]) == 0
    assert json.loads(capsys.readouterr().out) == {"telegram": f"{BASE}/p/coder/webhooks/telegram"}

    # the deployment's own profile by its name is the same as no --profile
    assert main(["webhooks", "urls", "--json", "--profile", "default"]) == 0
    assert json.loads(capsys.readouterr().out) == {"slack": f"{BASE}/webhooks/slack"}


def test_urls_for_one_profile_and_an_unknown_one(outputs: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhooks", "urls", "--profile", "writer"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [["writer", "slack", f"{BASE}/p/writer/webhooks/slack"]]

    assert main(["webhooks", "urls", "--profile", "nobody"]) == 2
    err = capsys.readouterr().err
    assert "nobody" in err and "coder, writer" in err


def test_local_urls_come_from_the_state_file(local_state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhooks", "urls", "--local"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in lines] == [
        ["default", "telegram", "http://127.0.0.1:8080/webhooks/telegram"],
        ["default", "webchat", "http://127.0.0.1:8080/webhooks/webchat"],
        ["coder", "telegram", "http://127.0.0.1:8080/p/coder/webhooks/telegram"],
        ["writer", "slack", "http://127.0.0.1:8080/p/writer/webhooks/slack"],
        ["writer", "matrix", "http://127.0.0.1:8080/p/writer/webhooks/matrix"],
    ]

    assert main(["webhooks", "urls", "--local", "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"telegram", "webchat"}
    assert main(["webhooks", "urls", "--local", "--json", "--profile", "writer"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "slack": "http://127.0.0.1:8080/p/writer/webhooks/slack",
        "matrix": "http://127.0.0.1:8080/p/writer/webhooks/matrix",
    }


def test_an_older_state_file_without_profiles_still_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"pid": 1, "url": "http://127.0.0.1:9", "platforms": ["webchat"]}), encoding="utf-8")
    monkeypatch.setenv(LOCAL_STATE_ENV, str(path))

    assert main(["webhooks", "urls", "--local", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"webchat": "http://127.0.0.1:9/webhooks/webchat"}
    assert main(["webhooks", "urls", "--local", "--profile", "coder"]) == 2
    assert "running local mode" in capsys.readouterr().err


# --- webhooks register / status ---------------------------------------------------------------


def test_register_uses_the_profiles_url_and_its_own_secrets(
    local_state: Path, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hook_secret = secrets.token_hex(8)
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN__CODER", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET__CODER", hook_secret)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", secrets.token_hex(8))  # the deployment's: never used for coder
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)

    assert main(["webhooks", "register", "telegram", "--local", "--profile", "coder"]) == 0

    (call,) = fake_telegram.calls("setWebhook")
    assert call["url"] == "http://127.0.0.1:8080/p/coder/webhooks/telegram"
    assert call["secret_token"] == hook_secret
    out = capsys.readouterr().out
    assert hook_secret not in out and fake_telegram.token not in out

    fake_telegram.answer_next(200, {"ok": True, "result": {"url": call["url"], "pending_update_count": 0}})
    assert main(["webhooks", "status", "telegram", "--local", "--profile", "coder"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["profile"] == "coder"
    assert shown["expected_url"] == shown["registered"]["url"] == call["url"]


def test_a_profile_never_registers_with_the_deployments_bot_token(
    local_state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "x" * 12)  # the deployment's bot, not coder's
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", "y" * 12)

    assert main(["webhooks", "register", "telegram", "--local", "--profile", "coder"]) == 1

    out = capsys.readouterr().out
    assert "TELEGRAM_BOT_TOKEN" in out and "__CODER" in out


def test_register_for_an_unknown_profile_is_a_configuration_error(
    local_state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["webhooks", "register", "telegram", "--local", "--profile", "nobody", "--url", BASE]) == 2
    assert "nobody" in capsys.readouterr().err


# --- secrets ----------------------------------------------------------------------------------


class FakeSsm:
    """The two SSM calls the secrets commands make, on a dict of name -> (value, type)."""

    def __init__(self) -> None:
        self.parameters: dict[str, tuple[str, str]] = {}

    def put_parameter(self, *, Name: str, Value: str, Type: str, Overwrite: bool, Tier: str) -> None:
        self.parameters[Name] = (Value, Type)

    def get_paginator(self, operation: str) -> Any:
        assert operation == "get_parameters_by_path"
        ssm = self

        class Pages:
            def paginate(self, *, Path: str, WithDecryption: bool) -> list[dict[str, Any]]:
                assert WithDecryption is False
                found = [
                    {"Name": name, "LastModifiedDate": datetime(2024, 5, 1, tzinfo=UTC)}
                    for name in sorted(ssm.parameters)
                    if name.startswith(Path) and "/" not in name.removeprefix(Path)
                ]
                return [{"Parameters": found}]

        return Pages()


@pytest.fixture
def ssm(monkeypatch: pytest.MonkeyPatch) -> FakeSsm:
    fake = FakeSsm()
    monkeypatch.setattr(secrets_cli, "_ssm", lambda: fake)
    return fake


def set_secret(monkeypatch: pytest.MonkeyPatch, value: str, *argv: str) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(value + "\n"))
    return main(["secrets", "set", *argv])


def test_set_with_a_profile_stores_the_profiles_own_parameter(
    ssm: FakeSsm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    value = secrets.token_hex(8)

    assert set_secret(monkeypatch, value, "TELEGRAM_BOT_TOKEN", "--profile", "coder") == 0

    assert ssm.parameters == {"/hermes-gateway/qa/TELEGRAM_BOT_TOKEN__CODER": (value, "SecureString")}
    out = capsys.readouterr().out
    assert "/hermes-gateway/qa/TELEGRAM_BOT_TOKEN__CODER" in out and value not in out


def test_set_without_a_profile_or_with_the_deployments_name_is_the_plain_name(
    ssm: FakeSsm, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert set_secret(monkeypatch, "a" * 8, "SLACK_BOT_TOKEN", "--stage", "prod") == 0
    assert set_secret(monkeypatch, "b" * 8, "SLACK_SIGNING_SECRET", "--profile", "default") == 0

    assert set(ssm.parameters) == {"/hermes-gateway/prod/SLACK_BOT_TOKEN", "/hermes-gateway/qa/SLACK_SIGNING_SECRET"}


def test_set_for_a_profile_not_in_the_configuration_stores_nothing(
    ssm: FakeSsm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert set_secret(monkeypatch, "c" * 8, "TELEGRAM_BOT_TOKEN", "--profile", "nobody") == 2

    assert ssm.parameters == {}
    err = capsys.readouterr().err
    assert "nobody" in err and "coder, writer" in err


def test_list_shows_profile_suffixed_names(
    ssm: FakeSsm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_secret(monkeypatch, "d" * 8, "TELEGRAM_BOT_TOKEN")
    set_secret(monkeypatch, "e" * 8, "TELEGRAM_WEBHOOK_SECRET", "--profile", "coder")
    capsys.readouterr()

    assert main(["secrets", "list"]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TELEGRAM_BOT_TOKEN", "set", "2024-05-01T00:00:00+00:00"]
    assert lines[1].split() == [
        "TELEGRAM_WEBHOOK_SECRET__CODER",
        "set",
        "2024-05-01T00:00:00+00:00",
        "(profile",
        "coder)",
    ]
    assert "d" * 8 not in "".join(lines) and "e" * 8 not in "".join(lines)


def test_check_reports_per_profile_with_platform_secrets_never_borrowed(
    ssm: FakeSsm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The deployment has its slack secrets and the model's key; coder has its bot token only.
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "OPENAI_API_KEY", "TELEGRAM_WEBHOOK_SECRET"):
        set_secret(monkeypatch, "f" * 8, name)
    set_secret(monkeypatch, "g" * 8, "TELEGRAM_BOT_TOKEN", "--profile", "coder")
    set_secret(monkeypatch, "h" * 8, "SLACK_BOT_TOKEN", "--profile", "writer")
    capsys.readouterr()

    assert main(["secrets", "check"]) == 1

    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "profile default (the deployment's own):",
        "slack        ok",
        "provider     ok",
        "profile coder:",
        "telegram     missing TELEGRAM_WEBHOOK_SECRET__CODER",
        "provider     ok",  # OPENAI_API_KEY falls back to the deployment's
        "profile writer:",
        "slack        missing SLACK_SIGNING_SECRET__WRITER",
        "provider     ok",
        "(checked /hermes-gateway/qa/)",
    ]

    set_secret(monkeypatch, "i" * 8, "TELEGRAM_WEBHOOK_SECRET", "--profile", "coder")
    set_secret(monkeypatch, "j" * 8, "SLACK_SIGNING_SECRET", "--profile", "writer")
    assert main(["secrets", "check"]) == 0


def test_check_local_reads_the_profiles_environment_variables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (
        "SLACK_BOT_TOKEN",
        "SLACK_SIGNING_SECRET",
        "SLACK_SIGNING_SECRET__WRITER",
        "TELEGRAM_BOT_TOKEN__CODER",
    ):
        monkeypatch.setenv(name, "k" * 8)
    monkeypatch.setenv("OPENAI_API_KEY__CODER", "l" * 8)  # coder's own model key; the others have none

    assert main(["secrets", "check", "--local"]) == 1

    lines = capsys.readouterr().out.splitlines()
    assert "telegram     missing TELEGRAM_WEBHOOK_SECRET__CODER" in lines
    assert "slack        missing SLACK_BOT_TOKEN__WRITER" in lines
    assert lines.count("provider     missing OPENAI_API_KEY") == 1  # the deployment's own
    assert lines.count("provider     missing OPENAI_API_KEY__WRITER") == 1
    assert lines[-1] == "(checked the environment)"


def test_check_without_named_profiles_prints_as_before(
    config: Path, ssm: FakeSsm, capsys: pytest.CaptureFixture[str]
) -> None:
    config.write_text("stage: qa\nplatforms:\n  slack: {enabled: true}\n  telegram: {enabled: false}\n")

    assert main(["secrets", "check"]) == 1

    assert capsys.readouterr().out.splitlines() == [
        "slack        missing SLACK_SIGNING_SECRET, SLACK_BOT_TOKEN",
        "(checked /hermes-gateway/qa/)",
    ]


# --- pairing ----------------------------------------------------------------------------------


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> FakePairingStore:
    """The store the pairing commands open, in memory (the DynamoDB adapter has the same rules)."""
    fake = FakePairingStore()
    monkeypatch.setattr(pairing, "HASH_ITERATIONS", 1)
    monkeypatch.setattr("hermes_cli.pairing.bindings_for", lambda args: None)
    monkeypatch.setattr("hermes_gateway.adapters.dynamo_access.DynamoAccessStore", lambda bindings: fake)
    return fake


NOW = time.time()  # the commands read the clock: codes are requested just before


def listed(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["pairing", "list", "--local", "--json", *argv]) == 0
    shown: dict[str, Any] = json.loads(capsys.readouterr().out)
    return shown


def test_an_approval_for_a_profile_is_that_profiles_only(
    local_state: Path, store: FakePairingStore, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a user who asked coder's bot for a code
    code = pairing_for(store, "coder").request_code("telegram", "42", "Al", "42", NOW).code
    assert code is not None

    # The deployment's own profile does not know the code; coder's does
    assert main(["pairing", "approve", "telegram", code, "--local"]) == 1
    assert [p["user_id"] for p in listed(capsys, "--profile", "coder")["pending"]] == ["42"]
    assert listed(capsys)["pending"] == []
    assert main(["pairing", "approve", "telegram", code, "--local", "--profile", "coder"]) == 0
    out, err = capsys.readouterr()
    assert "approved: telegram user 42" in out and '"profile":"coder"' in err.replace(" ", "")

    # Then the approval is coder's alone: stored under its own platform, shown under the plain one
    assert store.is_approved("telegram@coder", "42") and not store.is_approved("telegram", "42")
    assert [(a["platform"], a["user_id"]) for a in listed(capsys, "--profile", "coder")["approved"]] == [
        ("telegram", "42")
    ]
    assert listed(capsys)["approved"] == []
    assert listed(capsys, "--profile", "writer")["approved"] == []

    # revoking on the deployment's own profile does not touch coder's approval
    assert main(["pairing", "revoke", "telegram", "42", "--local"]) == 1
    assert main(["pairing", "revoke", "telegram", "42", "--local", "--profile", "coder"]) == 0
    assert not store.is_approved("telegram@coder", "42")


def test_clear_pending_is_per_profile(
    local_state: Path, store: FakePairingStore, capsys: pytest.CaptureFixture[str]
) -> None:
    pairing_for(store, "coder").request_code("telegram", "42", None, "42", NOW)
    store.request_code("telegram", "43", None, "43", NOW)

    assert main(["pairing", "clear-pending", "--local", "--profile", "coder"]) == 0
    assert "cleared 1 pending code" in capsys.readouterr().out
    assert store.pending("telegram@coder", NOW + 1) == []
    assert [p.user_id for p in store.pending("telegram", NOW + 1)] == ["43"]


def test_the_deployments_own_profile_name_is_no_profile(
    local_state: Path, store: FakePairingStore, capsys: pytest.CaptureFixture[str]
) -> None:
    code = store.request_code("telegram", "43", None, "43", NOW).code
    assert code is not None

    assert main(["pairing", "approve", "telegram", code, "--local", "--profile", "default"]) == 0
    assert store.is_approved("telegram", "43")


@pytest.mark.parametrize("name", ["nobody", "Bad-Name", "p/../x"])
def test_a_profile_the_target_does_not_serve_is_refused(
    local_state: Path, store: FakePairingStore, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    pairing_for(store, "coder").request_code("telegram", "42", None, "42", NOW)

    assert main(["pairing", "clear-pending", "--local", "--profile", name]) == 2

    assert f"no profile {name!r} in the running local mode" in capsys.readouterr().err
    assert len(store.pending("telegram@coder", NOW + 1)) == 1


def test_a_deployed_target_checks_the_profile_against_the_configuration(
    store: FakePairingStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pairing", "list", "--profile", "writer", "--json"]) == 0
    assert main(["pairing", "list", "--profile", "nobody"]) == 2
    assert "the configuration" in capsys.readouterr().err
