"""`hermes-gateway secrets` on moto's SSM: set reads stdin (never argv), list shows names only,
check names what each enabled platform still needs."""

from __future__ import annotations

import io
import json
import secrets
from typing import Any

import boto3
import pytest

from hermes_cli import main
from hermes_gateway.secrets import Secrets

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(aws: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    monkeypatch.setenv("GATEWAY_STAGE", "qa")
    return aws


VALUE = f"test-secret-{secrets.token_hex(8)}"  # made per run, never stored on disk


def set_secret(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> int:
    monkeypatch.setattr("sys.stdin", io.StringIO(value + "\n"))
    return main(["secrets", "set", name])


def test_set_stores_a_secure_string_that_the_functions_read(
    cli: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert set_secret(monkeypatch, "SLACK_BOT_TOKEN", VALUE) == 0
    out = capsys.readouterr().out
    assert "/hermes-gateway/qa/SLACK_BOT_TOKEN" in out and VALUE not in out
    stored = boto3.client("ssm").get_parameter(Name="/hermes-gateway/qa/SLACK_BOT_TOKEN", WithDecryption=True)
    assert stored["Parameter"]["Type"] == "SecureString"
    assert Secrets({"HERMES_SECRETS_PREFIX": "/hermes-gateway/qa/"}).get("SLACK_BOT_TOKEN") == VALUE


def test_an_empty_value_or_an_unknown_name_stores_nothing(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert set_secret(monkeypatch, "SLACK_BOT_TOKEN", "") == 2
    with pytest.raises(SystemExit):
        set_secret(monkeypatch, "NOT_A_SECRET", "x")
    assert boto3.client("ssm").describe_parameters()["Parameters"] == []


def test_list_shows_names_never_values(
    cli: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_secret(monkeypatch, "TELEGRAM_BOT_TOKEN", "123:very-secret")
    capsys.readouterr()
    assert main(["secrets", "list"]) == 0
    out = capsys.readouterr().out
    assert "TELEGRAM_BOT_TOKEN" in out and "very-secret" not in out


def test_check_names_what_each_enabled_platform_needs(
    cli: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_ENABLED", "true")
    set_secret(monkeypatch, "TELEGRAM_BOT_TOKEN", "t")
    set_secret(monkeypatch, "TELEGRAM_WEBHOOK_SECRET", "w")
    set_secret(monkeypatch, "SLACK_SIGNING_SECRET", "s")
    capsys.readouterr()
    assert main(["secrets", "check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "telegram     ok" in lines
    assert "slack        missing SLACK_BOT_TOKEN" in lines
    set_secret(monkeypatch, "SLACK_BOT_TOKEN", "b")
    assert main(["secrets", "check"]) == 0


def test_webhook_status_reads_the_bot_token_from_ssm_with_the_operators_credentials(
    cli: Any, fake_telegram: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the deployed stage's token in SSM (as `secrets set` stores it) and the stack's outputs
    set_secret(monkeypatch, "TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    outputs = {"TelegramWebhookUrl": {"Value": "https://example.execute-api.test/webhooks/telegram"}}
    template = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}, "Outputs": outputs}
    boto3.client("cloudformation").create_stack(StackName="HermesGateway-qa", TemplateBody=json.dumps(template))
    capsys.readouterr()
    registered = {"url": "https://example.execute-api.test/webhooks/telegram", "pending_update_count": 0}
    fake_telegram.answer_next(200, {"ok": True, "result": registered})
    # When the operator asks Telegram what it has registered
    assert main(["webhooks", "status", "telegram"]) == 0
    # Then the Bot API was asked with the stored token, and nothing was logged as a function would
    shown = capsys.readouterr()
    assert json.loads(shown.out)["registered"] == registered
    assert [r.api_method for r in fake_telegram.requests] == ["getWebhookInfo"]
    assert shown.err == ""


def test_check_names_the_signal_forwarders_secret_and_set_stores_it(
    cli: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SIGNAL_ENABLED", "true")
    set_secret(monkeypatch, "TELEGRAM_BOT_TOKEN", "t")
    set_secret(monkeypatch, "TELEGRAM_WEBHOOK_SECRET", "w")
    capsys.readouterr()
    assert main(["secrets", "check"]) == 1
    assert "signal       missing SIGNAL_RELAY_SECRET" in capsys.readouterr().out.splitlines()
    set_secret(monkeypatch, "SIGNAL_RELAY_SECRET", "whsec_c2lnbmFs")
    assert main(["secrets", "check"]) == 0
    assert "signal       ok" in capsys.readouterr().out.splitlines()
