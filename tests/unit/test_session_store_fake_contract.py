"""The in-memory session store follows the session store contract (tests/session_contract.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermes_gateway.adapters.dynamo_sessions import DynamoSessionStore
from hermes_gateway.domain.reset_policy import SessionRules
from hermes_gateway.domain.sessions import SessionStore, SessionSweepStore, TurnLease
from tests.fakes.sessions import FakeSessionStore
from tests.session_contract import CHECKS


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.removeprefix("check_"))
def test_the_fake_follows_the_contract(check: Callable[[Callable[[SessionRules], Any]], None]) -> None:
    check(FakeSessionStore)


def _ports_are_implemented(dynamo: DynamoSessionStore, fake: FakeSessionStore) -> None:
    """Never called: mypy (strict) checks that both stores implement every port."""
    stores: list[SessionStore] = [dynamo, fake]
    sweeps: list[SessionSweepStore] = [dynamo, fake]
    leases: list[TurnLease] = [dynamo, fake]
    assert stores and sweeps and leases
