"""The usage book's contract (tests/contracts/usage_book.py) on the in-memory DynamoDB."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_gateway.domain.limits import UsageBook
from hermes_gateway.domain.ports import SessionStores
from tests.contracts.usage_book import CHECKS
from tests.fakes.dynamo import session_tables_client
from tests.fakes.sessions import memory_stores, usage_book


def make() -> tuple[UsageBook, SessionStores]:
    client = session_tables_client()
    return usage_book(client), memory_stores(client=client)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_usage_book_contract_in_memory(check: Any) -> None:
    check(make)
