"""Reading secrets from SSM: only ParameterNotFound is "not set". Throttling and SSM's own
failures are worth a retry (the ingress answers 503, a delivery is retried); access denied or a KMS
key that refuses is a misconfiguration, logged as an error, never a 401 or a dropped delivery."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import boto3
import pytest
from aws_lambda_powertools.utilities.parameters import base as parameters_base
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from aws_lambda_powertools.utilities.parameters.ssm import SSMProvider
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from hermes_gateway.errors import ConfigError, SecretUnreadable, TransientError
from hermes_gateway.platforms.base import AdapterContext
from hermes_gateway.platforms.slack import SlackInbound
from hermes_gateway.secrets import Secrets
from hermes_gateway.services.delivery import DeliveryDeps, DeliveryJob, deliver
from hermes_gateway.services.ingress import HttpRequest, HttpResponse, handle_webhook
from tests.fakes.services import FakeEnqueue, FakeOutbox, make_settings

PREFIX = "/hermes-gateway/qa/"
NAME = "SLACK_SIGNING_SECRET"


@pytest.fixture
def ssm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Stubber]:
    """Powertools' SSM provider on a stubbed client: each test scripts SSM's answers."""
    client = boto3.client("ssm", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    stubber = Stubber(client)
    monkeypatch.setitem(parameters_base.DEFAULT_PROVIDERS, "ssm", SSMProvider(boto3_client=client))
    with stubber:
        yield stubber


def expect_error(stubber: Stubber, code: str, status: int = 400, name: str = NAME) -> None:
    stubber.add_client_error(
        "get_parameter",
        service_error_code=code,
        service_message=f"{code} (as SSM says it)",
        http_status_code=status,
        expected_params={"Name": PREFIX + name, "WithDecryption": True},
    )


def deployed() -> Secrets:
    return Secrets(env={"HERMES_SECRETS_PREFIX": PREFIX})


def test_a_stored_secret_is_read(ssm: Stubber) -> None:
    value = "s3cr3t-" + "x" * 8
    ssm.add_response(
        "get_parameter",
        {"Parameter": {"Name": PREFIX + NAME, "Type": "SecureString", "Value": value}},
        {"Name": PREFIX + NAME, "WithDecryption": True},
    )
    assert deployed().get(NAME) == value


def test_a_parameter_that_does_not_exist_is_not_set(ssm: Stubber) -> None:
    expect_error(ssm, "ParameterNotFound")
    assert deployed().get(NAME) is None


@pytest.mark.parametrize(("code", "status"), [("ThrottlingException", 400), ("InternalServerError", 500)])
def test_throttling_and_ssm_failures_are_transient(ssm: Stubber, code: str, status: int) -> None:
    expect_error(ssm, code, status)
    with pytest.raises(TransientError, match=NAME):
        deployed().get(NAME)


def test_an_unreachable_ssm_is_transient(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(*args: object, **kwargs: object) -> None:
        try:
            raise EndpointConnectionError(endpoint_url="https://ssm.us-east-1.amazonaws.com/")
        except EndpointConnectionError as exc:
            raise GetParameterError(str(exc))  # noqa: B904 - as Powertools raises it

    monkeypatch.setattr("aws_lambda_powertools.utilities.parameters.get_parameter", unreachable)
    with pytest.raises(TransientError, match="unreachable"):
        deployed().get(NAME)


@pytest.mark.parametrize("code", ["AccessDeniedException", "InvalidKeyId"])
def test_access_denied_or_a_kms_key_problem_is_a_loud_configuration_error(
    ssm: Stubber, code: str, caplog: pytest.LogCaptureFixture
) -> None:
    expect_error(ssm, code)
    with caplog.at_level(logging.ERROR), pytest.raises(SecretUnreadable, match=code) as raised:
        deployed().get(NAME)
    assert isinstance(raised.value, ConfigError)
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged and NAME in json.dumps([r.__dict__.get("secret") for r in logged])


# --- what the ingress and the delivery make of it ------------------------------------------------

NOW = 1_764_400_000.0


def slack_webhook(secrets: Secrets) -> HttpResponse:
    """A Slack webhook at the ingress, verified with `secrets` (what it signs does not matter: the
    signing secret is what cannot be read); nothing may be enqueued."""
    settings = make_settings({"SLACK_ENABLED": "true"})
    adapter = SlackInbound(AdapterContext(settings.platforms["slack"], settings, secrets, lambda: NOW))
    request = HttpRequest(
        method="POST",
        path="/webhooks/slack",
        headers={"x-slack-signature": "v0=" + "0" * 64, "x-slack-request-timestamp": str(int(NOW))},
        body=b'{"type": "event_callback"}',
    )
    enqueue = FakeEnqueue()
    response = handle_webhook(
        "slack",
        request,
        settings=settings,
        adapters=lambda platform, profile=None: adapter,
        enqueue_once=enqueue,
        received_at=NOW,
    )
    assert enqueue.sent == []
    return response


def test_the_ingress_asks_the_platform_to_retry_when_ssm_throttles(ssm: Stubber) -> None:
    # Given SSM throttles the read of the signing secret
    expect_error(ssm, "ThrottlingException")
    # When a webhook arrives, Then it is neither refused as forged (401) nor enqueued: 503, retry
    response = slack_webhook(deployed())
    assert (response.status, response.headers.get("retry-after")) == (503, "5")


def test_the_ingress_fails_loudly_when_the_secret_cannot_be_read(ssm: Stubber) -> None:
    # Given the function's role may not read the parameter: the invocation fails (a 5xx the
    # platform retries, an error the function-errors alarm counts), it is not answered 401
    expect_error(ssm, "AccessDeniedException")
    with pytest.raises(SecretUnreadable):
        slack_webhook(deployed())


def test_a_delivery_is_retried_not_dead_lettered_when_ssm_throttles(ssm: Stubber) -> None:
    expect_error(ssm, "ThrottlingException", name="TELEGRAM_BOT_TOKEN")
    secrets = deployed()

    def sender_for(platform: str, via: str) -> None:
        secrets.get("TELEGRAM_BOT_TOKEN")  # as wiring.sender_for reads a platform's send secrets
        return None

    job = DeliveryJob.from_dict({"delivery_id": "d1", "text": "hi", "target": {"platform": "telegram", "chat_id": "1"}})
    deps = DeliveryDeps(outbox=FakeOutbox(), sender_for=sender_for, now=lambda: NOW)
    # (before: the secret counted as not set, and the job went to the dead-letter queue at once)
    with pytest.raises(TransientError):
        deliver(job, deps)
