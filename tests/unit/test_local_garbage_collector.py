"""Local mode's collector settings (hermes_local.runtime): what the process holds after booting is
frozen and the young generation collected less often while it runs, and `stop` puts both back."""

from __future__ import annotations

import gc

from hermes_local.runtime import GC_YOUNG_THRESHOLD, restore_garbage_collector, tune_garbage_collector


def test_tuned_while_running_and_restored_after() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    kept = [[n] for n in range(1000)]  # containers alive at boot: frozen with the rest
    saved = tune_garbage_collector()
    try:
        assert saved == before
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
        assert gc.get_freeze_count() >= len(kept)
        assert not any(o is kept[0] for o in gc.get_objects())  # out of every collection
    finally:
        restore_garbage_collector(saved)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
