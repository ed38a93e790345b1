"""Sizing tf.data service: workers = the ranks' rate ÷ one worker's, checked by hand."""

import math

import pytest

from pipeprof.analysis import service_sizing


def test_workers_follow_the_autoscaling_rule_by_hand():
    # one worker: 8 cores / 2.5 core-ms per sample = 3,200 samples/s
    got = {s.np: s for s in service_sizing.size({1: 1000.0, 8: 8000.0, 32: 32000.0}, 2.5, 8)}
    assert got[8].worker_samples_per_s == pytest.approx(3200.0)
    # np=8: 8,000 / 3,200 = 2.5 → 3 workers, 24 cores; half as many (1) make 3,200: 60% short
    assert (got[8].workers, got[8].cores, got[8].fewer_workers) == (3, 24.0, 1)
    assert got[8].gap_with_fewer_pct == pytest.approx(60.0)
    # np=32: exactly 10 workers (no rounding up past a whole number); 5 make half the rate
    assert (got[32].workers, got[32].cores, got[32].fewer_workers) == (10, 80.0, 5)
    assert got[32].gap_with_fewer_pct == pytest.approx(50.0)
    # np=1: one worker is enough and there is nothing fewer to try
    assert (got[1].workers, got[1].fewer_workers) == (1, 0) and math.isnan(
        got[1].gap_with_fewer_pct
    )


def test_a_worker_without_cost_or_cores_is_refused():
    with pytest.raises(ValueError):
        service_sizing.worker_rate(0.0, 8)
    with pytest.raises(ValueError):
        service_sizing.worker_rate(2.5, 0)
