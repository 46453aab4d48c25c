"""A reduced run of bench/delivery_faults.py in the suite: under random platform faults, with jobs
run twice and several instances of the delivery function at once, every job is accounted for (sent,
gone, unknown or dead-lettered), no chunk reaches the platform twice, and a chat's replies keep
their order."""

from __future__ import annotations

import pytest

from bench.delivery_faults import run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [1, 2])
def test_no_reply_is_lost_duplicated_or_reordered_under_faults(seed: int) -> None:
    report = run(jobs=40, seed=seed)
    assert report["duplicated"] == 0
    assert report["lost"] == 0
    assert report["order_violations"] == 0
    outcomes = report["jobs_sent"] + report["jobs_dead_lettered"] + report["gone"] + report["unknown"]
    assert outcomes == report["jobs"]
    assert report["failed_not_dead_lettered"] == 0  # every job the platform refused is in the dead letters
    assert sum(report["faults_injected"].values()) > 0 and report["invoked_twice"] > 0  # the run did meet faults
