"""bench/compare.py: two result files in, each numeric key's old → new and relative change out,
with the changes that go the wrong way flagged as regressions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.compare import compare, direction, flatten, main, render

OLD = {
    "measured_at": "2026-11-29T10:00:00Z",
    "git_commit": "abc",
    "cost_per_million_usd": 30.0,
    "cost_by_service": {"dynamodb": 17.0, "lambda": 6.0},
    "ack_aws_calls": 3,
    "hops": 15,
    "ack_p50_ms": 20.0,
    "local_messages_per_second": {"1": 3.0, "10": 4.0},
    "messages_tested": 1000,
    "hops_list": ["ingress: dynamodb.PutItem idempotency"],
    "git_dirty": False,
}


def verdicts(old: dict[str, object], new: dict[str, object], tolerance: float = 0.05) -> dict[str, str]:
    return {row.key: row.verdict for row in compare(old, new, tolerance)}


def test_flatten_keeps_numbers_under_dotted_keys_and_drops_text_lists_and_booleans() -> None:
    assert flatten(OLD) == {
        "cost_per_million_usd": 30.0,
        "cost_by_service.dynamodb": 17.0,
        "cost_by_service.lambda": 6.0,
        "ack_aws_calls": 3.0,
        "hops": 15.0,
        "ack_p50_ms": 20.0,
        "local_messages_per_second.1": 3.0,
        "local_messages_per_second.10": 4.0,
        "messages_tested": 1000.0,
    }


@pytest.mark.parametrize(
    ("key", "sense"),
    [
        ("cost_per_million_usd", -1),
        ("cost_by_service.dynamodb", -1),
        ("ack_aws_calls", -1),
        ("hops", -1),
        ("ack_p99_ms", -1),
        ("ingress_import_ratio", -1),
        ("delivery_faults.duplicated", -1),
        ("local_messages_per_second.100", 1),
        ("levels.10.messages_per_second", 1),
        ("messages_tested", 0),
        ("load.seed", 0),
        ("delivery_faults.jobs_sent", 0),
    ],
)
def test_direction_knows_which_way_is_better(key: str, sense: int) -> None:
    assert direction(key) == sense


def test_higher_cost_more_calls_and_less_throughput_are_regressions() -> None:
    new = json.loads(json.dumps(OLD))
    new["cost_per_million_usd"] = 33.0
    new["cost_by_service"]["dynamodb"] = 20.0
    new["ack_aws_calls"] = 4
    new["local_messages_per_second"]["10"] = 3.0
    new["hops"] = 14
    new["local_messages_per_second"]["1"] = 3.5
    found = verdicts(OLD, new)
    assert found["cost_per_million_usd"] == "regression"
    assert found["cost_by_service.dynamodb"] == "regression"
    assert found["ack_aws_calls"] == "regression"
    assert found["local_messages_per_second.10"] == "regression"
    assert found["hops"] == "better"
    assert found["local_messages_per_second.1"] == "better"
    assert found["cost_by_service.lambda"] == "same"


def test_changes_within_the_tolerance_are_not_flagged() -> None:
    new = {**OLD, "ack_p50_ms": 20.8, "cost_per_million_usd": 29.0}
    found = verdicts(OLD, new, tolerance=0.05)
    assert found["ack_p50_ms"] == "same"  # +4%
    assert found["cost_per_million_usd"] == "same"  # -3.3%
    assert verdicts(OLD, new, tolerance=0.01)["ack_p50_ms"] == "regression"


def test_relative_change_and_added_removed_and_neutral_keys() -> None:
    new = {key: value for key, value in OLD.items() if key != "hops"}
    new.update(messages_tested=200, idle_cost_per_month_usd=5.44, ack_p50_ms=30.0)
    rows = {row.key: row for row in compare(OLD, new)}
    assert rows["ack_p50_ms"].change == pytest.approx(0.5)
    assert rows["hops"].verdict == "removed" and rows["hops"].new is None
    assert rows["idle_cost_per_month_usd"].verdict == "added" and rows["idle_cost_per_month_usd"].old is None
    assert rows["messages_tested"].verdict == "changed"  # shown, never flagged


def test_a_zero_old_value_has_no_relative_change_but_still_a_direction() -> None:
    rows = {row.key: row for row in compare({"lost": 0, "busy_retries": 0}, {"lost": 2, "busy_retries": 0})}
    assert rows["lost"].change is None and rows["lost"].verdict == "regression"
    assert rows["busy_retries"].change == 0.0 and rows["busy_retries"].verdict == "same"


def test_render_prints_old_new_change_and_the_flag() -> None:
    new = {**OLD, "cost_per_million_usd": 33.0, "ack_p50_ms": 10.0}
    text = render(compare(OLD, new))
    assert "cost_per_million_usd" in text and "30 → 33" in text and "+10.0%" in text and "REGRESSION" in text
    assert "ack_p50_ms" in text and "-50.0%" in text and "better" in text
    assert "hops" not in text  # unchanged keys only with show_all
    assert "hops" in render(compare(OLD, new), show_all=True)
    assert text.splitlines()[-1] == "1 regression(s), 1 improvement(s)"
    assert render(compare(OLD, OLD)) == "no numeric change beyond the tolerance"


def test_the_command_compares_two_files_and_exits_0_even_with_regressions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_file, new_file = tmp_path / "old.json", tmp_path / "new.json"
    old_file.write_text(json.dumps(OLD))
    new_file.write_text(json.dumps({**OLD, "hops": 18}))
    assert main([str(old_file), str(new_file)]) == 0
    out = capsys.readouterr().out
    assert "hops" in out and "15 → 18" in out and "REGRESSION" in out
