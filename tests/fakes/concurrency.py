"""Run work on many threads released at the same moment, to race conditional writes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def race(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run `work(i)` for i in range(n) on n threads started together; return every result and
    re-raise the first exception any of them raised."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except BaseException as exc:  # collected and re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results
