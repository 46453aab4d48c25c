"""Webhook registration through the platforms' APIs (`hermes-gateway webhooks register|status`),
for Discord, LINE and Twilio against their fake servers on loopback; Telegram's goes through the
command itself in test_cli_webhooks.py. The registration code is the CLI's (`hermes_cli.webhooks`),
not the platform modules the functions load."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from hermes_cli.webhooks import discord, line, twilio
from hermes_gateway.errors import ConfigError, PermanentError, TransientError
from hermes_gateway.platforms.base import AdapterContext
from tests.fakes import platforms
from tests.fakes.discord_server import APPLICATION_ID, FakeDiscord
from tests.fakes.line_server import FakeLine
from tests.fakes.services import make_settings
from tests.fakes.twilio_server import DEFAULT_NUMBER, FakeTwilio, twilio_error

pytest_plugins = ("tests.fakes.discord_server",)

# The fake Discord application's verify_key (RFC 8032 §7.1 TEST 1).
DISCORD_PUBLIC_KEY = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
DISCORD_ENV = {
    "DISCORD_ENABLED": "true",
    "DISCORD_PUBLIC_KEY": DISCORD_PUBLIC_KEY,
    "DISCORD_APPLICATION_ID": APPLICATION_ID,
}


@pytest.fixture
def fake_line() -> Iterator[FakeLine]:
    with FakeLine() as fake:
        yield fake


@pytest.fixture
def fake_twilio() -> Iterator[FakeTwilio]:
    with FakeTwilio() as fake:
        yield fake


def assert_secret_free(exc: BaseException, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in str(exc)
        assert secret not in repr(exc)
    assert exc.__cause__ is None


def twilio_context(fake: FakeTwilio, *, token: str | None = None, **env: str) -> AdapterContext:
    settings = make_settings(
        {
            "SMS_ENABLED": "true",
            "SMS_API_BASE_URL": fake.base_url,
            "TWILIO_ACCOUNT_SID": fake.account_sid,
            "TWILIO_FROM_NUMBER": DEFAULT_NUMBER,
            **env,
        }
    )
    return platforms.context("sms", settings, {"TWILIO_AUTH_TOKEN": token or fake.auth_token})


# --- Discord: the interactions endpoint and the slash command ----------------------------------


def registration_context(fake: FakeDiscord, secrets: Mapping[str, str] | None = None, **env: str) -> Any:
    config = make_settings({**DISCORD_ENV, "DISCORD_API_BASE_URL": fake.base_url, **env})
    return platforms.context("discord", config, {"DISCORD_BOT_TOKEN": fake.token} if secrets is None else secrets)


def test_discord_register_sets_the_endpoint_and_the_slash_command(fake_discord: FakeDiscord) -> None:
    url = "https://abc.execute-api.eu-west-1.amazonaws.com/webhooks/discord"

    summary = discord.register_webhook(registration_context(fake_discord), url)

    assert url in summary
    assert fake_discord.application["interactions_endpoint_url"] == url
    (patch,) = fake_discord.calls("PATCH", "/applications/@me")
    assert patch.json == {"interactions_endpoint_url": url}
    assert patch.headers["authorization"] == f"Bot {fake_discord.token}"
    (put,) = fake_discord.calls("PUT", f"/applications/{APPLICATION_ID}/commands")
    assert put.json == [
        {
            "name": "ask",
            "type": 1,
            "description": "Talk to the agent",
            "options": [{"type": 3, "name": "prompt", "description": "What to ask or tell", "required": True}],
        }
    ]
    assert [c["name"] for c in fake_discord.commands] == ["ask"]


def test_discord_register_takes_the_application_id_from_discord_when_unset(fake_discord: FakeDiscord) -> None:
    discord.register_webhook(
        registration_context(fake_discord, DISCORD_APPLICATION_ID="", DISCORD_COMMAND_NAME="hermes"),
        "https://x.example/d",
    )
    assert [c["name"] for c in fake_discord.commands] == ["hermes"]


def test_discord_status_reports_the_endpoint_and_the_key(fake_discord: FakeDiscord) -> None:
    context = registration_context(fake_discord)
    assert discord.webhook_status(context) == {
        "url": None,
        "application_id": APPLICATION_ID,
        "public_key_matches": True,
    }

    discord.register_webhook(context, "https://x.example/webhooks/discord")
    status = discord.webhook_status(registration_context(fake_discord, DISCORD_PUBLIC_KEY="ab" * 32))

    assert status["url"] == "https://x.example/webhooks/discord"
    assert status["public_key_matches"] is False


def test_discord_registration_needs_the_bot_token(fake_discord: FakeDiscord) -> None:
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        discord.register_webhook(registration_context(fake_discord, {}), "https://x.example/d")
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        discord.webhook_status(registration_context(fake_discord, {}))


def test_discord_a_refused_registration_is_permanent_and_leaks_no_token(fake_discord: FakeDiscord) -> None:
    fake_discord.answer_next(400, {"message": "Invalid Form Body", "code": 50035})
    with pytest.raises(PermanentError, match="Invalid Form Body") as caught:
        discord.register_webhook(registration_context(fake_discord), "https://x.example/d")
    assert_secret_free(caught.value, fake_discord.token)
    assert fake_discord.calls("PUT", "/applications") == []


# --- LINE: the channel's webhook endpoint ------------------------------------------------------


def line_context(fake: FakeLine, token: str | None = None) -> AdapterContext:
    settings = make_settings({"LINE_ENABLED": "true", "LINE_API_BASE_URL": fake.base_url})
    secrets = {"LINE_CHANNEL_ACCESS_TOKEN": token if token is not None else fake.token}
    return platforms.context("line", settings, secrets)


def test_line_register_webhook_sets_the_endpoint(fake_line: FakeLine) -> None:
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/webhooks/line"

    result = line.register_webhook(line_context(fake_line), url)

    assert url in result
    request = fake_line.requests[0]
    assert (request.http_method, request.path, request.json) == (
        "PUT",
        "/v2/bot/channel/webhook/endpoint",
        {"endpoint": url},
    )
    assert request.headers["authorization"] == f"Bearer {fake_line.token}"
    assert line.webhook_status(line_context(fake_line)) == {"endpoint": url, "active": True}


def test_line_register_webhook_refuses_a_non_https_url(fake_line: FakeLine) -> None:
    with pytest.raises(PermanentError, match="https"):
        line.register_webhook(line_context(fake_line), "http://abc.example/webhooks/line")
    assert fake_line.requests == []


def test_line_registration_needs_the_access_token(fake_line: FakeLine) -> None:
    with pytest.raises(PermanentError, match="LINE_CHANNEL_ACCESS_TOKEN"):
        line.webhook_status(line_context(fake_line, token=""))


def test_line_registration_failures_are_mapped_and_scrubbed(fake_line: FakeLine) -> None:
    fake_line.answer_next(503, {"message": "unavailable"})
    with pytest.raises(TransientError):
        line.webhook_status(line_context(fake_line))
    wrong = "wrong-line-token-for-registration"
    with pytest.raises(PermanentError) as caught:
        line.register_webhook(line_context(fake_line, token=wrong), "https://x.example/webhooks/line")
    assert_secret_free(caught.value, wrong)


# --- Twilio: the number's SmsUrl ----------------------------------------------------------------


def test_twilio_register_webhook_sets_the_numbers_sms_url(fake_twilio: FakeTwilio) -> None:
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/webhooks/sms"

    result = twilio.register_webhook(twilio_context(fake_twilio), url)

    assert url in result and DEFAULT_NUMBER in result
    lookup, update = fake_twilio.requests
    assert lookup.http_method == "GET" and lookup.query == {"PhoneNumber": DEFAULT_NUMBER}
    assert update.path.endswith(f"/IncomingPhoneNumbers/{'PN' + 'f' * 32}.json")
    assert update.form == {"SmsUrl": url, "SmsMethod": "POST"}
    assert twilio.webhook_status(twilio_context(fake_twilio)) == {
        "phone_number": DEFAULT_NUMBER,
        "sid": "PN" + "f" * 32,
        "sms_url": url,
        "sms_method": "POST",
    }


def test_twilio_register_webhook_for_a_number_not_in_the_account(fake_twilio: FakeTwilio) -> None:
    with pytest.raises(PermanentError, match="no phone number"):
        twilio.register_webhook(
            twilio_context(fake_twilio, TWILIO_FROM_NUMBER="+15550001111"), "https://x.example/webhooks/sms"
        )


def test_twilio_register_webhook_needs_configuration_and_an_http_url(fake_twilio: FakeTwilio) -> None:
    with pytest.raises(PermanentError, match="TWILIO_FROM_NUMBER"):
        twilio.webhook_status(twilio_context(fake_twilio, TWILIO_FROM_NUMBER=""))
    with pytest.raises(PermanentError, match="TWILIO_ACCOUNT_SID"):
        twilio.webhook_status(twilio_context(fake_twilio, TWILIO_ACCOUNT_SID=""))
    with pytest.raises(PermanentError, match="http"):
        twilio.register_webhook(twilio_context(fake_twilio), "ftp://x.example/webhooks/sms")
    assert fake_twilio.requests == []


def test_twilio_registration_failures_are_mapped_and_scrubbed(fake_twilio: FakeTwilio) -> None:
    fake_twilio.answer_next(500, twilio_error(500, 20500, "Internal Server Error"))
    with pytest.raises(TransientError):
        twilio.webhook_status(twilio_context(fake_twilio))
    wrong = "wrong-token-for-registration"
    with pytest.raises(PermanentError) as caught:
        twilio.register_webhook(twilio_context(fake_twilio, token=wrong), "https://x.example/webhooks/sms")
    assert_secret_free(caught.value, wrong)
