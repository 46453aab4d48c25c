"""The in-memory stored e-mail keeps the contract S3 keeps (tests/contracts/mail_store.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hermes_gateway.domain.ports import MailStore
from tests.contracts.mail_store import CHECKS
from tests.fakes.mail import InMemoryMailStore


def make() -> tuple[MailStore, Callable[[str, bytes], None]]:
    store = InMemoryMailStore()
    return store, store.objects.__setitem__


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_the_in_memory_store_keeps_the_contract(check: Callable[..., None]) -> None:
    check(make)
