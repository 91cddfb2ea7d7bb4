"""summary.json's worker_utilisation: the share of the dispatch span a worker ran batches."""

from __future__ import annotations

import pytest

from adaptive_eval.dispatch.stats import DispatchStats, covered_length


def test_overlapping_batches_on_one_worker_count_once() -> None:
    """Found on the H100: with batches queued behind each other at one worker (per-batch mode,
    in_flight_per_worker 8), each batch's busy time included its wait, and the summed busy
    times gave worker_utilisation 1.58."""
    stats = DispatchStats(first_submit=0.0, last_result=10.0)
    stats.worked("w0", result_at=6.0, busy_s=6.0)  # ran 0..6
    stats.worked("w0", result_at=10.0, busy_s=10.0)  # queued from 0, ran 6..10
    assert stats.utilisation() == pytest.approx(1.0)
    stats.worked("w1", result_at=4.0, busy_s=2.0)  # 2..4
    stats.worked("w1", result_at=9.0, busy_s=2.0)  # 7..9
    assert stats.utilisation() == pytest.approx((10.0 + 4.0) / 20.0)


def test_windows_are_clipped_to_the_dispatch_span() -> None:
    # A batch that loaded its model before the first submit counts only from then on.
    assert covered_length([(-5.0, 3.0), (2.0, 12.0)], 0.0, 10.0) == pytest.approx(10.0)
    assert covered_length([], 0.0, 10.0) == 0.0
    assert DispatchStats().utilisation() == 0.0
