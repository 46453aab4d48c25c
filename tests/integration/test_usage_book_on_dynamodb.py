"""The usage book's contract (tests/contracts/usage_book.py) on DynamoDB (moto), with the tables
resources.py declares: the same checks as the in-memory fake."""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import count
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_table import Table
from hermes_gateway.adapters.dynamo_usage import DynamoUsage
from hermes_gateway.adapters.session_tables import SessionTables
from hermes_gateway.resources import ACCESS, MESSAGES, ROUTES, SESSIONS, Bindings
from hermes_gateway.wiring import stores_on
from hermes_local.aws import create_table
from tests.contracts.usage_book import CHECKS

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def make() -> Iterator[Any]:
    import boto3
    from moto import mock_aws

    saved = {name: os.environ.pop(name, None) for name in ("AWS_ENDPOINT_URL", "MOTO_PORT")}
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    from hermes_local.aws import configure_moto

    configure_moto()
    made = count(1)
    try:
        with mock_aws():
            client = boto3.client("dynamodb", region_name="us-east-1")

            def factory() -> Any:
                names = {spec.name: f"usage-{next(made)}-{spec.name}" for spec in (ROUTES, SESSIONS, MESSAGES, ACCESS)}
                for spec in (ROUTES, SESSIONS, MESSAGES, ACCESS):
                    create_table(client, spec, names[spec.name])
                stores = stores_on(SessionTables(Bindings(names, {}, {}), "us-east-1", client=client))
                book = DynamoUsage(Table(client, names[ROUTES.name]), Table(client, names[ACCESS.name]))
                return book, stores

            yield factory
    finally:
        os.environ.update({k: v for k, v in saved.items() if v is not None})


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_usage_book_contract_on_dynamodb(check: Any, make: Any) -> None:
    check(make)
