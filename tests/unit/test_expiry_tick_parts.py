"""The every-minute tick (services/expiry.py `run_tick`): every part runs even when one fails, and
the tick then fails with that error so the invocation is retried and alarmed on."""

from __future__ import annotations

import pytest

from hermes_gateway.errors import TransientError
from hermes_gateway.services.expiry import run_tick


def test_every_part_runs_and_their_summaries_are_merged() -> None:
    assert run_tick({"a": lambda: {"a": 1}, "b": lambda: {"b": 2}}) == {"a": 1, "b": 2}


def test_a_failing_part_does_not_stop_the_next_and_fails_the_tick_afterwards() -> None:
    ran: list[str] = []

    def leases() -> dict[str, int]:
        raise TransientError("DynamoDB is throttling")

    def jobs() -> dict[str, int]:
        ran.append("cron")
        return {"cron_started": 1}

    with pytest.raises(TransientError, match="throttling"):
        run_tick({"leases": leases, "cron": jobs})
    assert ran == ["cron"]
