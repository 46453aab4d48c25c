"""The session storage contract on the unit tests' in-memory DynamoDB (tests/fakes/dynamo.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.contracts import personal_data
from tests.contracts.session_storage import CHECKS
from tests.fakes.sessions import memory_stores


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_session_storage_contract_in_memory(check: Any) -> None:
    check(memory_stores)


@pytest.mark.parametrize("check", personal_data.CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_personal_data_contract_in_memory(check: Any) -> None:
    check(memory_stores)
