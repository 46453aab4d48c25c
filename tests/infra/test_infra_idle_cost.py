"""The idle monthly cost read from the synthesized template (bench/idle_cost.py): what is billed
with no traffic at all, so a change that adds a monthly charge shows in review."""

from __future__ import annotations

from bench.idle_cost import idle_cost
from tests.infra.conftest import Synthesized


def test_idle_cost_is_the_alarms_the_dashboard_the_topic_key_and_the_tick(synthesized: Synthesized) -> None:
    report = idle_cost(synthesized.resources)
    kinds = {line.split(" x")[0].removesuffix(": Lambda, query, logs") for line in report["lines"]}
    assert kinds == {"AWS::CloudWatch::Alarm", "AWS::CloudWatch::Dashboard", "AWS::KMS::Key", "schedule rate(1 minute)"}
    assert report["idle_cost_per_month_usd"] < 6.0
    # Without the dashboard (or within an account's first three) it is under half of that.
    assert idle_cost(synthesized.resources, dashboards_already_in_account=0)["idle_cost_per_month_usd"] < 3.0
