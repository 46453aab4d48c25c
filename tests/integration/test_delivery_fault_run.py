"""A reduced run of bench/delivery_faults.py in the suite: under random platform faults every job is
accounted for (sent, gone, unknown or dead-lettered) and no chunk reaches the platform twice."""

from __future__ import annotations

import pytest

from bench.delivery_faults import run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [1, 2])
def test_no_reply_is_lost_or_duplicated_under_faults(seed: int) -> None:
    report = run(jobs=40, seed=seed)
    assert report["duplicated"] == 0
    assert report["lost"] == 0
    outcomes = report["jobs_sent"] + report["jobs_dead_lettered"] + report["gone"] + report["unknown"]
    assert outcomes == report["jobs"]
    assert report["dead_lettered"] == report["jobs_dead_lettered"]
    assert sum(report["faults_injected"].values()) > 0  # the run did meet faults
