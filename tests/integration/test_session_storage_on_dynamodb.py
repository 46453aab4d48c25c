"""The session storage contract on DynamoDB (moto): the same checks as the in-memory fake."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_gateway.adapters.session_tables import SessionTables
from hermes_gateway.domain.ports import SessionStores
from hermes_gateway.domain.reset_policy import SessionRules
from hermes_gateway.resources import MESSAGES, ROUTES, SESSIONS, Bindings
from hermes_gateway.wiring import stores_on
from hermes_local.aws import create_table
from tests.contracts import personal_data
from tests.contracts.session_storage import CHECKS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def make() -> Iterator[Any]:
    """Fresh tables for each store a check makes (a check may make several), in one moto for the
    module (starting moto per check costs more than the checks)."""
    import boto3
    from moto import mock_aws

    saved = {name: os.environ.pop(name, None) for name in ("AWS_ENDPOINT_URL", "MOTO_PORT")}
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    from hermes_local.aws import configure_moto

    configure_moto()  # moto's conditional writes made atomic, as DynamoDB's are
    try:
        with mock_aws():
            yield _factory(boto3.client("dynamodb", region_name="us-east-1"))
    finally:
        os.environ.update({k: v for k, v in saved.items() if v is not None})


_MADE = [0]


def _factory(client: Any) -> Any:
    made = _MADE

    def factory(rules: SessionRules) -> SessionStores:
        made[0] += 1
        names = {}
        for spec in (ROUTES, SESSIONS, MESSAGES):
            names[spec.name] = f"contract-{made[0]}-{spec.name}"
            create_table(client, spec, names[spec.name])
        return stores_on(SessionTables(Bindings(names, {}, {}), "us-east-1", rules, client=client))

    return factory


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_session_storage_contract_on_dynamodb(check: Any, make: Any) -> None:
    check(make)


@pytest.mark.parametrize("check", personal_data.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_personal_data_contract_on_dynamodb(check: Any, make: Any) -> None:
    check(make)


def test_a_long_row_is_stored_compressed_under_one_write_unit(make: Any) -> None:
    import boto3

    from hermes_gateway.adapters.session_tables import COMPRESS_ABOVE_BYTES
    from hermes_gateway.domain.sessions import TranscriptRow

    stores = make(SessionRules())
    reply = "The queue is green and the deploy went out; logs are clean. " * 30  # 1.8 KB, as the bench's
    stores.transcript.put("s-1", TranscriptRow(1, "user", "short", 1.0))
    stores.transcript.put("s-1", TranscriptRow(2, "assistant", reply, 2.0))
    client = boto3.client("dynamodb", region_name="us-east-1")
    table = f"contract-{_MADE[0]}-{MESSAGES.name}"  # the factory's name for the store just made
    items = {int(i["seq"]["N"]): i for i in client.scan(TableName=table)["Items"]}
    assert "content" in items[1] and "content_z" not in items[1]  # short rows stay plain text
    assert "content_z" in items[2] and "content" not in items[2]
    assert len(reply.encode()) > COMPRESS_ABOVE_BYTES and len(items[2]["content_z"]["B"]) < 400
    assert [r.content for r in stores.transcript.rows("s-1")] == ["short", reply]
