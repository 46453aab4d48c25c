"""Integration tests run against moto in-process: the real adapters and handlers, no network."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from hermes_gateway import wiring
from hermes_gateway.resources import INBOX, Bindings
from hermes_local.aws import configure_moto, create_resources, stream_env_var
from hermes_local.pollers import lambda_record

REGION = "us-east-1"


@dataclass
class Aws:
    bindings: Bindings
    env: dict[str, str]

    def inbox_records(self, after: str | None = None) -> list[dict[str, Any]]:
        """The inbox stream's new items (after sequence number `after`), as Lambda's event source
        mapping puts them in the router's event (INSERTs only)."""
        streams = boto3.client("dynamodbstreams")
        arn = self.env[stream_env_var(INBOX)]
        (shard,) = streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
        position = {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": after} if after else {}
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], **({"ShardIteratorType": "TRIM_HORIZON"} | position)
        )["ShardIterator"]
        records = streams.get_records(ShardIterator=iterator)["Records"]
        return [lambda_record(r, arn, REGION) for r in records if r["eventName"] == "INSERT"]


_DEPLOYMENTS = itertools.count(1)


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
        # A name of its own per test: an execution an earlier test left running in moto (its
        # retries still waiting) invokes its own deployment's functions, never this one's
        bindings, env = create_resources(REGION, prefix=f"it-{os.getpid()}-{next(_DEPLOYMENTS)}")
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        wiring.reset()
        yield Aws(bindings, env)
    wiring.reset()
