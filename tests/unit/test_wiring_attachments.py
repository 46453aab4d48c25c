"""The attachments function builds its turn's ports from what it is granted alone (resources.py):
no directory, no workflow; a start it is asked for says why it cannot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_gateway import wiring
from hermes_gateway.errors import ConfigError
from hermes_gateway.resources import BUCKETS, FUNCTIONS, TABLES, function


@pytest.fixture
def attachments_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The environment the stack gives the attachments function: its grants' names only."""
    for variable in [t.env_var for t in TABLES] + [b.env_var for b in BUCKETS] + [f.env_var for f in FUNCTIONS]:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.delenv("HERMES_TURN_STATE_MACHINE_ARN", raising=False)
    granted = function("attachments").grants
    for table in TABLES:
        if table.name in granted:
            monkeypatch.setenv(table.env_var, f"hermes-test-{table.name}")
    for bucket in BUCKETS:
        if bucket.name in granted:
            monkeypatch.setenv(bucket.env_var, f"hermes-test-{bucket.name}")
    for spec in FUNCTIONS:
        if spec.name in granted:
            monkeypatch.setenv(spec.env_var, f"arn:aws:lambda:us-east-1:123456789012:function:hermes-test-{spec.name}")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    wiring.reset()
    yield
    wiring.reset()


@pytest.mark.usefixtures("attachments_environment")
def test_the_attachments_functions_turn_ports_need_only_its_grants() -> None:
    deps = wiring.turn_deps()
    assert deps.media is not None and "directory" not in deps.tool_ports and deps.outbox is None
    with pytest.raises(ConfigError, match="not granted the turn workflow"):
        deps.starter.start("turn-x", {})
