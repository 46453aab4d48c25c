"""bench/connection_reuse.py over real TLS on loopback: before, every send opened a connection;
after, a warm sender opens none (its connection from the warm-up is reused)."""

from __future__ import annotations

import os

from bench.connection_reuse import run


def test_a_warm_sender_opens_no_connection_after_the_change() -> None:
    had = os.environ.get("SSL_CERT_FILE")
    report = run(sends=4)
    assert report["before_urllib_connection_per_request"]["connections_opened"] == 4
    assert report["after_pooled_urllib3"]["connections_opened"] == 0
    # the throwaway certificate is trusted only while the bench runs
    assert os.environ.get("SSL_CERT_FILE") == had
