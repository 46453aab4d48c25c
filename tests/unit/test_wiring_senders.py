"""Senders are reused while their secrets stay the same and rebuilt after a rotation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_gateway import wiring
from hermes_gateway.services.delivery import RecordOnly


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("HERMES_SECRETS_PREFIX", "HERMES_LOCAL_MODE", "TELEGRAM_BOT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    wiring.reset()
    yield
    wiring.reset()


def test_a_rotated_token_builds_a_new_sender(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "111:first")
    first = wiring.sender_for("telegram")
    assert first is not None and wiring.sender_for("telegram") is first
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "111:second")
    rotated = wiring.sender_for("telegram")
    assert rotated is not None and rotated is not first


def test_no_credentials_means_no_sender_deployed_and_a_recorder_locally(monkeypatch: pytest.MonkeyPatch) -> None:
    assert wiring.sender_for("telegram") is None
    assert wiring.sender_for("fax") is None
    assert isinstance(wiring.sender_for("local"), RecordOnly)
    monkeypatch.setenv("HERMES_LOCAL_MODE", "1")
    assert isinstance(wiring.sender_for("telegram"), RecordOnly)
