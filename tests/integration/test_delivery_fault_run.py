"""A reduced run of bench/delivery_faults.py in the suite: under random platform faults, with jobs
run twice and several instances of the delivery function at once, every job is accounted for (sent,
gone, unknown or dead-lettered), no chunk reaches the platform twice, and a chat's replies keep
their order."""

from __future__ import annotations

import pytest

from bench.delivery_faults import _order, run

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [1, 2])
def test_no_reply_is_lost_duplicated_or_reordered_under_faults(seed: int) -> None:
    report = run(jobs=40, seed=seed)
    assert report["duplicated"] == 0
    assert report["lost"] == 0
    assert report["order_violations"] == 0
    assert report["order_violations_unexplained"] == 0
    outcomes = report["jobs_sent"] + report["jobs_dead_lettered"] + report["gone"] + report["unknown"]
    assert outcomes == report["jobs"]
    assert report["failed_not_dead_lettered"] == 0  # every job the platform refused is in the dead letters
    assert sum(report["faults_injected"].values()) > 0 and report["invoked_twice"] > 0  # the run did meet faults


def test_only_a_reply_handed_to_the_asynchronous_retries_may_come_after_a_later_one() -> None:
    """The full run's allowance (docs/architecture.md: a reply whose waited delivery gave up may be
    passed by the next): a late reply counts as explained only when its job was handed over."""
    sent = [
        {"chat_id": 1000, "text": "j50w0 j50w1"},  # chat 1000's job 50 first,
        {"chat_id": 1000, "text": "j0w0"},  # then its job 0: late
        {"chat_id": 1001, "text": "j1w0"},
    ]
    assert _order(sent, handed_over={"job-0"}) == {"order_violations": 1, "order_violations_unexplained": 0}
    assert _order(sent, handed_over={"job-50"}) == {"order_violations": 1, "order_violations_unexplained": 1}
    assert _order(sent[2:] + sent[:1], handed_over=set()) == {"order_violations": 0, "order_violations_unexplained": 0}
