"""The CLI's AWS-side commands without what AWS needs: one clear line each, with the fix, and a
network failure named as one (cli/hermes_cli/aws_errors.py). No network: the region and the
credentials are missing before any request, and "the network" is a closed loopback port."""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from hermes_cli import main
from hermes_cli.deploy import check_aws

AWS_VARIABLES = (
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SSM",
    "HERMES_LOCAL_STATE",
)
# The commands that work on a deployed stack (with --local: also on the running local mode).
DEPLOYED = [
    (["secrets", "list"], False),
    (["secrets", "check"], True),
    (["secrets", "set", "TELEGRAM_BOT_TOKEN"], False),
    (["webhooks", "status", "telegram"], True),
    (["pairing", "list"], True),
    (["outbox", "list"], True),
    (["cron", "list"], True),
]


@pytest.fixture
def no_aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine with no AWS configuration at all, and no gateway.yaml."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("GATEWAY_CONFIG", str(tmp_path / "gateway.yaml"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # nothing resolved by an earlier test
    monkeypatch.setattr("sys.stdin", io.StringIO("a-secret-value\n"))  # what `secrets set` reads
    monkeypatch.chdir(tmp_path)
    yield
    boto3.DEFAULT_SESSION = None


def one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("argv", "has_local"), DEPLOYED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_no_region_is_one_line_naming_the_variable(
    no_aws: None, capsys: pytest.CaptureFixture[str], argv: list[str], has_local: bool
) -> None:
    err = one_line(capsys, argv)
    assert err.startswith("error: no AWS region: set AWS_DEFAULT_REGION (or AWS_REGION")
    assert "--region" in err
    assert ("add --local" in err) is has_local


@pytest.mark.parametrize(("argv", "has_local"), DEPLOYED, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_no_credentials_is_one_line(
    no_aws: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], has_local: bool
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    err = one_line(capsys, argv)
    assert err.startswith("error: no usable AWS credentials (NoCredentialsError): run `aws configure`")
    assert ("add --local" in err) is has_local


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unreachable_aws(monkeypatch: pytest.MonkeyPatch) -> str:
    endpoint = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    return endpoint


def test_a_network_failure_is_named_a_network_failure(
    no_aws: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = unreachable_aws(monkeypatch)
    err = one_line(capsys, ["secrets", "list"])
    network = "a network failure; check the connection or proxy"
    assert err == f"error: cannot reach {endpoint}/ (EndpointConnectionError): {network}"


def test_the_deploy_check_says_network_not_credentials(no_aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = unreachable_aws(monkeypatch)
    check, account, _ = check_aws()
    assert (check.ok, account) == (False, None)
    assert "network failure" in check.detail and endpoint in check.detail
    assert "credentials" not in check.detail


def test_the_deploy_check_without_a_region_names_the_variable_botocore_reads(no_aws: None) -> None:
    check, _, _ = check_aws()
    assert not check.ok and "AWS_DEFAULT_REGION" in check.detail


def test_aws_region_alone_is_used(
    no_aws: None, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The AWS CLI and the CDK read AWS_REGION; botocore does not: the CLI copies it over
    monkeypatch.setenv("AWS_REGION", "ap-southeast-2")
    err = one_line(capsys, ["secrets", "list"])
    assert "no usable AWS credentials" in err  # past the region


def test_region_before_the_command_is_used(no_aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line(capsys, ["--region", "eu-central-1", "pairing", "list"])
    assert "no usable AWS credentials" in err
