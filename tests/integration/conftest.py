"""Integration tests run against moto in-process: the real adapters and handlers, no network."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from moto import mock_aws

from hermes_gateway import wiring
from hermes_gateway.resources import Bindings
from hermes_local.aws import configure_moto, create_resources

REGION = "us-east-1"


@dataclass
class Aws:
    bindings: Bindings
    env: dict[str, str]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    """Given every table, queue and the state machine of the deployment, created in moto."""
    for name in ("AWS_ENDPOINT_URL", "MOTO_PORT", "HERMES_SECRETS_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    configure_moto()
    with mock_aws():
        bindings, env = create_resources(REGION, prefix=f"it-{os.getpid()}")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        wiring.reset()
        yield Aws(bindings, env)
    wiring.reset()
