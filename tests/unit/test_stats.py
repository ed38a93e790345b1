"""Analysis on canned step records: throughput, intervals, gap, efficiency, verdicts."""

import math

import numpy as np
import pandas as pd
import pytest

from pipeprof.analysis import stats
from pipeprof.records import STEP_COLUMNS


def steps(np_, variant, times_ms, batch=32, warmup=2, waits_ms=None, ranks=None):
    rows = []
    for rank in range(ranks or np_):
        for i, t in enumerate(times_ms):
            rows.append(dict(np=np_, variant=variant, rank=rank, step=i, warmup=i < warmup,
                             input_wait_ms=(waits_ms[i] if waits_ms else 0.0), step_time_ms=t,
                             batch_size=batch, end_unix_s=0.0))
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def test_constant_steps_give_exact_throughput_and_zero_interval():
    t = stats.throughput(steps(2, "real", [999, 999] + [100.0] * 20))  # warm-up dropped
    assert t["samples_per_s"] == pytest.approx(64 / 0.1)
    assert t["samples_per_s_ci95"] == pytest.approx(0.0)
    assert t["measured_steps"] == 20
    assert t["step_time_ms_p50"] == pytest.approx(100.0)


def test_interval_covers_the_truth_about_95_percent_of_the_time():
    rng = np.random.default_rng(1)
    true_rate = 32 / 0.05
    hits = 0
    for _ in range(400):
        times = rng.normal(50.0, 5.0, size=42)
        t = stats.throughput(steps(1, "real", list(times)))
        hits += abs(t["samples_per_s"] - true_rate) <= t["samples_per_s_ci95"]
    assert 0.88 <= hits / 400 <= 0.99


def test_input_wait_share():
    t = stats.throughput(steps(1, "real", [100.0] * 10, warmup=0, waits_ms=[25.0] * 10))
    assert t["input_wait_pct"] == pytest.approx(25.0)


def test_gap_and_its_interval():
    g, h = stats.gap(600.0, 0.0, 1000.0, 0.0)
    assert g == pytest.approx(40.0) and h == pytest.approx(0.0)
    g, h = stats.gap(600.0, 30.0, 1000.0, 50.0)
    assert h == pytest.approx(100 * 0.6 * math.sqrt(0.05**2 + 0.05**2))


@pytest.mark.parametrize("gap,expected", [(-3.0, "not input-bound"), (4.99, "not input-bound"),
                                          (5.0, "moderately input-bound"), (19.9, "moderately input-bound"),
                                          (20.0, "highly input-bound"), (42.0, "highly input-bound")])
def test_verdict_thresholds(gap, expected):
    assert stats.verdict(gap) == expected


def test_warning_when_interval_spans_a_threshold():
    assert stats.gap_warning(12.0, 2.0) == ""
    assert "spans 5%" in stats.gap_warning(6.0, 3.0)
    assert "0%" in stats.gap_warning(1.0, 2.0)


def test_t_quantiles():
    assert stats.t975(1) == pytest.approx(12.706)
    assert stats.t975(9) == pytest.approx(2.262)
    assert stats.t975(100) == pytest.approx(1.96)


def test_summary_rows_gap_and_scaling_efficiency():
    frames = [
        steps(1, "synthetic", [100.0] * 22),  # 320 samples/s
        steps(1, "real", [125.0] * 22),  # 256 samples/s → gap 20%
        steps(2, "synthetic", [100.0] * 22),  # 640 samples/s → 100% efficient
        steps(2, "real", [200.0] * 22),  # 320 samples/s → gap 50%, efficiency 62.5%
    ]
    s = stats.summarize(pd.concat(frames), {"synthetic"})
    assert list(s.columns) == stats.SUMMARY_COLUMNS
    row = s.set_index(["np", "variant"])
    assert row.loc[(1, "real"), "gap_pct"] == pytest.approx(20.0)
    assert row.loc[(2, "real"), "gap_pct"] == pytest.approx(50.0)
    assert row.loc[(2, "synthetic"), "scaling_efficiency_pct"] == pytest.approx(100.0)
    assert row.loc[(2, "real"), "scaling_efficiency_pct"] == pytest.approx(62.5)
    assert row.loc[(2, "real"), "verdict"] == "highly input-bound"
    assert row.loc[(1, "synthetic"), "verdict"] == "ceiling"
    assert row.loc[(2, "real"), "samples_per_s_per_worker"] == pytest.approx(160.0)
    assert list(s["np"]) == [1, 1, 2, 2] and list(s["variant"]) == ["synthetic", "real", "synthetic", "real"]


def test_no_np1_run_means_no_efficiency():
    s = stats.summarize(steps(2, "synthetic", [100.0] * 10), {"synthetic"})
    assert math.isnan(s.loc[0, "scaling_efficiency_pct"])


def test_empty_input_gives_empty_summary_with_the_columns():
    s = stats.summarize(pd.DataFrame(columns=STEP_COLUMNS), {"synthetic"})
    assert s.empty and list(s.columns) == stats.SUMMARY_COLUMNS
