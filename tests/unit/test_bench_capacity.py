"""bench/capacity.py: the simulation finds the knee near the analytic ceiling of the step that
binds, whether it is a stage's concurrency, a rate limit or the account's Lambda concurrency."""

from __future__ import annotations

from bench.capacity import Pipeline, Step, ceilings, default_pipeline, resolve, sweep, with_scenario


def tiny(concurrency: int, limit: float, account: int = 1000) -> Pipeline:
    return Pipeline(
        (
            Step("throttle", "limit", "", "", per_second=limit, burst=limit),
            Step("worker", "stage", "", "", service_ms=100.0, concurrency=concurrency),
        ),
        account,
    )


def test_a_stage_with_two_slots_of_100_ms_binds_at_20_messages_a_second() -> None:
    pipeline = tiny(concurrency=2, limit=1000)
    assert ceilings(pipeline) == {"throttle": 1000.0, "worker": 20.0, "account_concurrency": 10_000.0}
    result = sweep(pipeline, [2, 5, 10, 15, 25, 40], seconds=30, hot=False)
    assert result["binding_limit"] == "worker"
    assert 10 <= result["knee_messages_per_second"] < 20


def test_a_rate_limit_below_the_stages_binds_first() -> None:
    result = sweep(tiny(concurrency=50, limit=8), [2, 4, 6, 12, 20], seconds=60, hot=False)
    assert result["binding_limit"] == "throttle"
    assert result["knee_messages_per_second"] == 6


def test_the_account_concurrency_binds_a_new_account() -> None:
    pipeline = with_scenario(default_pipeline(model_seconds=2.0), "new-account")
    pipeline = resolve(pipeline, {"ingress": 60.0, "router": 200.0, "agent": 250.0, "delivery": 250.0}, {})
    found = ceilings(pipeline)
    assert min(found, key=found.__getitem__) == "account_concurrency"
    assert found["account_concurrency"] == 10 / 2.76
