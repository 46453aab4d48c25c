"""`hermes-gateway webhooks`: URLs per enabled platform, and registration through a platform's API
(Telegram here, against the fake Bot API; the other platforms' functions are tested with them)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hermes_cli import main
from hermes_cli.target import LOCAL_STATE_ENV
from tests.fakes.telegram_server import FakeTelegram


@pytest.fixture
def local_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "local.json"
    state = {"pid": 1, "url": "http://127.0.0.1:8080", "platforms": ["telegram", "slack", "webchat"]}
    path.write_text(json.dumps({**state, "aws_environment": {}, "resources": {}}), encoding="utf-8")
    monkeypatch.setenv(LOCAL_STATE_ENV, str(path))
    return path


def test_urls_lists_every_enabled_platform(local_state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["webhooks", "urls", "--local", "--json"]) == 0
    urls: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert urls["telegram"] == "http://127.0.0.1:8080/webhooks/telegram"
    assert set(urls) == {"telegram", "slack", "webchat"}
    assert main(["webhooks", "urls", "--local"]) == 0
    text = capsys.readouterr().out
    assert "hermes-gateway webhooks register telegram" in text and "docs/platforms/slack.md" in text


def test_register_and_status_use_the_bot_api(
    local_state: Path, fake_telegram: FakeTelegram, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", fake_telegram.token)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", "hook-secret")
    monkeypatch.setenv("TELEGRAM_API_BASE_URL", fake_telegram.base_url)
    monkeypatch.setenv("GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    url = "https://abc.execute-api.us-east-1.amazonaws.com/webhooks/telegram"
    assert main(["webhooks", "register", "telegram", "--local", "--url", url]) == 0
    (call,) = fake_telegram.calls("setWebhook")
    assert call["url"] == url and call["secret_token"] == "hook-secret"
    out = capsys.readouterr().out
    assert url in out and "hook-secret" not in out and fake_telegram.token not in out

    fake_telegram.answer_next(200, {"ok": True, "result": {"url": url, "pending_update_count": 2}})
    assert main(["webhooks", "status", "telegram", "--local"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["registered"] == {"url": url, "pending_update_count": 2}


def test_register_fails_clearly_without_the_bot_token(
    local_state: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    monkeypatch.setenv("GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    assert main(["webhooks", "register", "telegram", "--local", "--url", "https://x.example/webhooks/telegram"]) == 1
    assert "TELEGRAM_BOT_TOKEN" in capsys.readouterr().out


def test_every_guide_the_urls_name_exists(local_state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `webhooks urls` names each platform's guide (docs/platforms/<name>.md) where no API registers it
    from hermes_gateway.platforms.catalog import CATALOG

    root = Path(__file__).resolve().parents[2]
    assert main(["webhooks", "urls", "--local"]) == 0
    named = re.findall(r"\((docs/platforms/[a-z_]+\.md)\)", capsys.readouterr().out)
    assert "docs/platforms/webchat.md" in named
    missing = [guide for guide in named if not (root / guide).is_file()]
    missing += [spec.name for spec in CATALOG if not (root / "docs" / "platforms" / f"{spec.name}.md").is_file()]
    assert missing == []


# --- BlueBubbles: the server's own webhook API --------------------------------------------------


@pytest.fixture
def fake_bluebubbles() -> Any:
    from tests.fakes.bluebubbles_server import FakeBlueBubbles

    with FakeBlueBubbles() as fake:
        yield fake


def test_bluebubbles_register_gives_the_server_the_url_with_the_secret_and_never_prints_it(
    local_state: Path, fake_bluebubbles: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "bb-hook-" + "x9" * 8
    monkeypatch.setenv("BLUEBUBBLES_PASSWORD", fake_bluebubbles.password)
    monkeypatch.setenv("BLUEBUBBLES_WEBHOOK_SECRET", secret)
    monkeypatch.setenv("BLUEBUBBLES_SERVER_URL", fake_bluebubbles.base_url)
    monkeypatch.setenv("GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    url = "https://abc.execute-api.us-east-1.amazonaws.com/webhooks/bluebubbles"
    # Given a webhook registered before the secret was rotated
    fake_bluebubbles.webhooks.append({"id": 40, "url": f"{url}?password=old-secret", "events": ["*"], "created": "x"})
    # When the operator registers the gateway's URL
    assert main(["webhooks", "register", "bluebubbles", "--local", "--url", url]) == 0
    # Then the server posts new messages to it with the current secret, and the stale one is gone
    registered = [(w["url"], w["events"]) for w in fake_bluebubbles.webhooks]
    assert registered == [(f"{url}?password={secret}", ["new-message"])]
    out = capsys.readouterr().out
    assert url in out and "earlier secret removed" in out
    assert secret not in out and fake_bluebubbles.password not in out
    # And registering again changes nothing (the server returns the stored webhook)
    assert main(["webhooks", "register", "bluebubbles", "--local", "--url", url]) == 0
    assert len(fake_bluebubbles.webhooks) == 1
    capsys.readouterr()

    assert main(["webhooks", "status", "bluebubbles", "--local"]) == 0
    out = capsys.readouterr().out
    shown = json.loads(out)
    assert shown["registered"]["webhooks"] == [
        {"id": 1, "url": f"{url}?password=<redacted>", "events": ["new-message"]}
    ]
    assert secret not in out and fake_bluebubbles.password not in out


def test_bluebubbles_register_fails_clearly_without_its_secrets_or_with_a_wrong_password(
    local_state: Path, fake_bluebubbles: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GATEWAY_CONFIG", "/nonexistent/gateway.yaml")
    monkeypatch.setenv("BLUEBUBBLES_SERVER_URL", fake_bluebubbles.base_url)
    monkeypatch.delenv("BLUEBUBBLES_WEBHOOK_SECRET", raising=False)
    url = "https://abc.example/webhooks/bluebubbles"
    assert main(["webhooks", "register", "bluebubbles", "--local", "--url", url]) == 1
    assert "BLUEBUBBLES_WEBHOOK_SECRET" in capsys.readouterr().out
    monkeypatch.setenv("BLUEBUBBLES_WEBHOOK_SECRET", "some-secret-value")
    monkeypatch.setenv("BLUEBUBBLES_PASSWORD", "not-the-password")
    assert main(["webhooks", "register", "bluebubbles", "--local", "--url", url]) == 1
    out = capsys.readouterr().out
    assert "401" in out and "not-the-password" not in out and "some-secret-value" not in out
    assert main(["webhooks", "register", "bluebubbles", "--local", "--url", "http://gw.example/webhooks/bb"]) == 1
    assert "https" in capsys.readouterr().out
    assert fake_bluebubbles.webhooks == []
