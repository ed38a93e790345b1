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
            rows.append(
                dict(
                    np=np_,
                    variant=variant,
                    rank=rank,
                    step=i,
                    warmup=i < warmup,
                    input_wait_ms=(waits_ms[i] if waits_ms else 0.0),
                    step_time_ms=t,
                    batch_size=batch,
                    end_unix_s=0.0,
                )
            )
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


@pytest.mark.parametrize(
    "gap,expected",
    [
        (-3.0, "not input-bound"),
        (4.99, "not input-bound"),
        (5.0, "moderately input-bound"),
        (19.9, "moderately input-bound"),
        (20.0, "highly input-bound"),
        (42.0, "highly input-bound"),
    ],
)
def test_verdict_thresholds(gap, expected):
    assert stats.verdict(gap) == expected


def test_warning_when_interval_spans_a_threshold():
    assert stats.gap_warning(12.0, 2.0) == ""
    assert stats.gap_warning(6.0, 3.0, stats.STOP_MAX_TIME) == (
        "gap 6.0% ±3.0 (95%) is on the 5% line, between not and moderately input-bound"
    )
    assert "spans 0%: there may be no gap" in stats.gap_warning(1.0, 2.0)
    assert stats.gap_warning(12.0, math.nan, stats.STOP_MAX_TIME) == (
        "too few measured steps for an interval; raise train.max_measure_s"
    )


def test_a_gap_on_a_line_is_said_to_be_on_it_whether_or_not_its_measurement_reached_the_target():
    # the np=2 case: 19.0% ±1.9 would have read "moderately" with no warning
    for stop in (stats.STOP_TARGET, stats.STOP_MAX_TIME):
        assert stats.gap_warning(19.0, 1.9, stop) == (
            "gap 19.0% ±1.9 (95%) is on the 20% line, between moderately and highly input-bound"
        )
    assert stats.row_verdict(19.0, 1.9) == "on the 20% line"
    assert stats.row_verdict(19.0, 0.9) == "moderately input-bound"
    assert stats.row_verdict(6.0, 1.5) == "on the 5% line"
    assert stats.row_verdict(1.0, 2.0) == "not input-bound"  # spans 0% only: no class boundary
    assert stats.gap_warning(19.0, 0.9, stats.STOP_TARGET) == ""
    assert "raise train.measure_steps" in stats.gap_warning(19.0, 1.9, stats.STOP_FIXED)


def test_a_ceiling_that_moved_at_the_same_cpu_use_is_drift_and_one_that_used_more_cpu_is_contention():
    # the np=2 figures: twin 569.5 beside the pipeline, synthetic row 662.8
    drift = stats.ceiling_note("real", stats.TwinFigures(569.5, 10.0, 662.8, 20.0, 0.91, 0.91))
    assert drift.startswith(
        "its ceiling, the synthetic steps measured in alternation with real, ran at 569.5 "
        "samples/s: 14.1% below the synthetic run's own 662.8"
    )
    assert "(drift)" in drift and "contention" not in drift
    # a rank with one core (share 1.0), its twin's steps keeping 0.98 of it busy
    busy = stats.ceiling_note("real", stats.TwinFigures(569.5, 10.0, 662.8, 20.0, 0.98, 0.91, 1.0))
    assert "+0.07 cores" in busy and "(contention" in busy
    assert busy.endswith(
        "not the model's ceiling, and the gap is against the synthetic run's own 662.8"
    )
    assert stats.twin_contended(stats.TwinFigures(569.5, 10.0, 662.8, 20.0, 0.98, 0.91, 1.0))
    assert not stats.twin_contended(
        stats.TwinFigures(569.5, 10.0, 662.8, 20.0, 0.91, 0.91, 1.0)
    )  # drift
    # the same figures on a rank with two cores: 0.98 of 2 leaves a core to spare for the
    # pipeline, which then takes none of the step's time; without the share, nothing is known
    assert not stats.twin_contended(stats.TwinFigures(569.5, 10.0, 662.8, 20.0, 0.98, 0.91, 2.0))
    assert not stats.twin_contended(stats.TwinFigures(569.5, 10.0, 662.8, 20.0, 0.98, 0.91))
    assert "(drift)" in stats.ceiling_note(
        "real", stats.TwinFigures(569.5, 10.0, 662.8, 20.0, 0.98, 0.91, 2.0)
    )
    # nor without an interval for the twin (fewer than 4 rounds)
    assert not stats.twin_contended(
        stats.TwinFigures(569.5, math.nan, 662.8, 20.0, 0.98, 0.91, 1.0)
    )
    # a twin faster than the synthetic run is never the pipeline's doing, whatever its CPU
    faster = stats.ceiling_note(
        "real", stats.TwinFigures(760.0, 10.0, 662.8, 20.0, 0.98, 0.91, 1.0)
    )
    assert "(drift)" in faster
    assert not stats.twin_contended(stats.TwinFigures(760.0, 10.0, 662.8, 20.0, 0.98, 0.91, 1.0))
    # within both intervals (hypot(10, 20) = 22.4 samples/s): the two agree, nothing to say
    assert stats.ceiling_note("real", stats.TwinFigures(650.0, 10.0, 662.8, 20.0, 0.99, 0.91)) == ""


def test_cores_used_is_cpu_time_over_wall_time_of_measured_steps():
    steps = pd.DataFrame(
        {
            "warmup": [True, False, False],
            "step_time_ms": [50.0, 20.0, 30.0],
            "cpu_ms": [5.0, 18.0, 27.0],
        }
    )
    assert stats.cores_used(steps) == pytest.approx(45.0 / 50.0)
    assert math.isnan(stats.cores_used(steps.assign(cpu_ms=float("nan"))))


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
    assert list(s["np"]) == [1, 1, 2, 2] and list(s["variant"]) == [
        "synthetic",
        "real",
        "synthetic",
        "real",
    ]


def test_a_twin_the_real_pipeline_worked_through_is_not_the_ceiling():
    """One of five runs of the README's first command (2026-11-26), in round numbers: the synthetic
    run's steps took 40 ms at 72 CPU-ms (1.8 cores), the real ones 70 ms; the twin's, in
    alternation with them, 65 ms at 128 CPU-ms (1.97 cores). By hand: the twin ran at
    32 / 0.065 = 492.3 samples/s, 38.5% below the synthetic run's 800; against it the gap would
    be 1 - 457.14 / 492.31 = 7.1%; against the synthetic run, 1 - 457.14 / 800 = 42.9%."""

    def rounds(variant, step_ms, cpu_ms, paired=""):
        rows = [
            dict(
                np=1,
                variant=variant,
                rank=0,
                step=10 * r + i,
                warmup=False,
                input_wait_ms=0.0,
                step_time_ms=step_ms,
                batch_size=32,
                end_unix_s=0.0,
                paired=paired,
                round=r,
                cpu_ms=cpu_ms,
                host="h",
                learning_rate=0.01,
            )  # fmt: skip
            for r in range(10)
            for i in range(4)
        ]
        return pd.DataFrame(rows, columns=STEP_COLUMNS)

    own = rounds("synthetic", 40.0, 72.0).assign(round=-1)
    real = rounds("real", 70.0, 136.0)
    for twin_cpu, gap, ceiling, contended in (
        (128.0, 42.857, 800.0, True),
        (117.0, 7.143, 492.31, False),
    ):
        twin = rounds("synthetic", 65.0, twin_cpu, paired="real")
        frames = pd.concat([own, real, twin])
        s = stats.summarize(frames, {"synthetic"}, shares={1: 2.0}).set_index("variant")
        assert s.loc["real", "gap_pct"] == pytest.approx(gap, abs=0.01)
        assert s.loc["real", "twin_samples_per_s"] == pytest.approx(ceiling, abs=0.01)
        assert s.loc["real", "ceiling_shift_pct"] == pytest.approx(-38.46, abs=0.01)
        note = s.loc["real", "ceiling_note"]
        assert ("is against the synthetic run's own 800.0" in note) == contended, note
        assert ("(drift)" in note) != contended, note
    # an emulated device's step (30 ms asleep, 2 CPU-ms) beside a pipeline refilling through the
    # twin's steps (32 ms, 7 CPU-ms): slower, more CPU, but 0.22 of the rank's 2 cores: the
    # pipeline had cores to spare, the twin stays the ceiling (32 / 0.032 = 1000 samples/s)
    emulated = pd.concat(
        [
            rounds("synthetic", 30.0, 2.0).assign(round=-1),
            rounds("real", 40.0, 20.0),
            rounds("synthetic", 32.0, 7.0, paired="real"),
        ]
    )
    s = stats.summarize(emulated, {"synthetic"}, shares={1: 2.0}).set_index("variant")
    assert s.loc["real", "twin_samples_per_s"] == pytest.approx(1000.0)
    assert s.loc["real", "gap_pct"] == pytest.approx(20.0)


def test_no_np1_run_means_no_efficiency():
    s = stats.summarize(steps(2, "synthetic", [100.0] * 10), {"synthetic"})
    assert math.isnan(s.loc[0, "scaling_efficiency_pct"])


def test_empty_input_gives_empty_summary_with_the_columns():
    s = stats.summarize(pd.DataFrame(columns=STEP_COLUMNS), {"synthetic"})
    assert s.empty and list(s.columns) == stats.SUMMARY_COLUMNS


def test_a_real_row_measured_without_its_twin_takes_the_synthetic_rows_ceiling():
    """A real row with no twin beside it takes the synthetic row's ceiling (1 - 400 / 800 =
    50%). Where the script's training ended during the synthetic run (so the real variant ran
    in a launch of its own) a note says so; a fixed-step run's row, unpaired by design, has
    none."""
    rows = [
        dict(
            np=1,
            variant=v,
            rank=0,
            step=i,
            warmup=False,
            input_wait_ms=0.0,
            step_time_ms=ms,
            batch_size=32,
            end_unix_s=0.0,
            paired="",
            round=-1,
            cpu_ms=ms,
            host="h",
            learning_rate=0.01,
        )  # fmt: skip
        for v, ms in (("synthetic", 40.0), ("real", 80.0))
        for i in range(20)
    ]
    steps = pd.DataFrame(rows, columns=STEP_COLUMNS)
    for stop, noted in (("fit ended", True), ("fixed steps", False)):
        stops = {(1, "synthetic"): stop, (1, "real"): stop}
        s = stats.summarize(steps, {"synthetic"}, stops=stops).set_index("variant")
        assert s.loc["real", "gap_pct"] == pytest.approx(50.0, abs=0.01)
        assert s.loc["real", "twin_samples_per_s"] == pytest.approx(800.0, abs=0.01)
        assert s.loc["real", "verdict"] == "highly input-bound"
        note = s.loc["real", "ceiling_note"]
        assert note.startswith("no twin ran beside real (the script's training ended") == noted
        assert noted or note == "", note
