"""Throughput with honest uncertainty, the synthetic-vs-real gap, scaling efficiency, verdicts.

Pure functions over pandas frames of step records (see ``pipeprof.records.StepRecord``).

Throughput of one (np, variant): the samples of all ranks over the measured steps divided
by the time those steps took (per step, the mean over ranks of the iteration time; ranks
are in lock-step through the allreduce). Its 95% interval uses batch means: the measured
steps are cut into contiguous blocks, each block's throughput is one observation, and a
Student-t interval is put on their mean. Blocks absorb the autocorrelation between
neighbouring steps that makes a per-step interval too narrow.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pandas as pd

# Two-sided 95% Student-t quantiles by degrees of freedom (1..30); beyond 30, ~normal.
_T975 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]

VERDICT_THRESHOLDS_PCT = (5.0, 20.0)  # TensorFlow Profiler's input-bound thresholds
MAX_BLOCKS = 10

SUMMARY_COLUMNS = [
    "np",
    "variant",
    "synthetic",
    "samples_per_s",
    "samples_per_s_ci95",
    "samples_per_s_per_worker",
    "gap_pct",
    "gap_pct_ci95",
    "twin_samples_per_s",
    "ceiling_shift_pct",
    "scaling_efficiency_pct",
    "step_time_ms_mean",
    "step_time_ms_p50",
    "step_time_ms_p95",
    "input_wait_pct",
    "input_wait_max_pct",
    "gpu_util_pct",
    "cpu_util_pct",
    "cpu_cores_per_rank",
    "rss_mb_max",
    "measured_steps",
    "measured_s",
    "stop_reason",
    "verdict",
    "warning",
    "ceiling_note",
]
# How a measurement ended: summary.csv's stop_reason (analysis.stopping decides) and the stage
# benchmark's and tune's ``stop`` (data.stagebench), one set of names for both.
STOP_FIXED, STOP_TARGET, STOP_CLEAR, STOP_MAX_TIME = (
    "fixed steps",
    "target",
    "clear of thresholds",
    "max time",
)
STOP_FIXED_TIME = "fixed time"  # the stage benchmark measured for the seconds it was given
STOP_LOST = "lost"  # the stage benchmark's rate fell far below the best found (tune gives up on it)
# The ceiling's steps beside a real pipeline used this many more CPU cores per rank than the
# synthetic run's own: the pipeline's threads kept working through them (contention). Below
# it, a ceiling that moved did so at the same CPU use: the machine's speed changed (drift).
CONTENTION_CORES = 0.05
# ... and only where those steps kept the rank's share of the host's cores this busy: a pipeline
# working beside a step with cores to spare (an accelerator's, or an emulated one's) takes none
# of the step's time. The README's first command, CPU-trained on 2 cores: 0.90-0.98 of its
# share on every row of ten runs; an emulated device's twin at np=1: 0.1-0.3.
SATURATED = 0.9
TELEMETRY_COLUMNS = (
    "gpu_util_pct",
    "cpu_util_pct",
    "cpu_cores_per_rank",
    "rss_mb_max",
)  # filled by analysis.telemetry


def t975(dof: int) -> float:
    if dof < 1:
        return math.nan
    return _T975[dof - 1] if dof <= len(_T975) else 1.96


def verdict(gap_pct: float) -> str:
    if math.isnan(gap_pct):
        return ""
    low, high = VERDICT_THRESHOLDS_PCT
    if gap_pct < low:
        return "not input-bound"
    if gap_pct < high:
        return "moderately input-bound"
    return "highly input-bound"


def per_step(steps: pd.DataFrame) -> pd.DataFrame:
    """Measured steps of one (np, variant), one row per step index across ranks."""
    measured = steps[~steps["warmup"].astype(bool)]
    agg = dict(
        step_time_ms=("step_time_ms", "mean"),
        input_wait_ms=("input_wait_ms", "mean"),
        # ranks move in lock-step: a step is as long as its longest wait makes it
        input_wait_max_ms=("input_wait_ms", "max"),
        samples=("batch_size", "sum"),
    )
    if "round" in measured.columns:
        agg["round"] = ("round", "first")
    return measured.groupby("step", sort=True).agg(**agg)


def round_sums(steps: pd.DataFrame) -> pd.DataFrame:
    """Samples and seconds per round of an alternating measurement (index: round)."""
    ps = per_step(steps)
    ps["seconds"] = ps["step_time_ms"] / 1e3
    return ps.groupby("round", sort=True)[["samples", "seconds"]].sum()


def paired_gap_interval(
    s_samples: npt.NDArray[np.float64],
    s_seconds: npt.NDArray[np.float64],
    r_samples: npt.NDArray[np.float64],
    r_seconds: npt.NDArray[np.float64],
) -> tuple[float, float]:
    """The gap in % of a real variant measured in rounds that alternate with its synthetic
    twin, and its 95% half-interval. Each array holds one value per round; contiguous rounds
    form up to MAX_BLOCKS blocks, each block's gap is one observation. A change in the
    machine's speed moves both halves of a round alike, so it cancels in the gap instead of
    landing on whichever variant ran during it."""
    n = len(s_seconds)
    if n == 0 or not s_seconds.sum() > 0 or not r_seconds.sum() > 0:
        return math.nan, math.nan

    def g(a: int, b: int) -> float:
        gap_pct: float = (
            100.0
            * (  # a numpy float64 (the sums' type is not tracked)
                1.0
                - (r_samples[a:b].sum() / r_seconds[a:b].sum())
                / (s_samples[a:b].sum() / s_seconds[a:b].sum())
            )
        )
        return gap_pct

    point = g(0, n)
    blocks = min(MAX_BLOCKS, n)
    if blocks < 2:
        return point, math.nan
    edges = np.linspace(0, n, blocks + 1).astype(int)
    gaps = np.array([g(a, b) for a, b in zip(edges[:-1], edges[1:])])
    return point, float(t975(blocks - 1) * gaps.std(ddof=1) / math.sqrt(blocks))


def cores_used(steps: pd.DataFrame) -> float:
    """CPU cores a rank's process kept busy over measured steps (their CPU time over their
    wall time, summed over ranks and divided by them); NaN where CPU time was not recorded."""
    measured = steps[~steps["warmup"].astype(bool)] if "warmup" in steps.columns else steps
    if "cpu_ms" not in measured.columns or measured.empty or measured["cpu_ms"].isna().any():
        return math.nan
    return float(measured["cpu_ms"].sum() / measured["step_time_ms"].sum())


class TwinFigures(NamedTuple):
    """A real row's twin beside the synthetic run's own: samples/s and 95% half-interval each,
    CPU cores per rank each (``cores_used``), and the rank's share of its host's cores."""

    twin_rate: float
    twin_half: float
    own_rate: float
    own_half: float
    twin_cores: float
    own_cores: float
    share: float = math.nan


def unpaired_note(variant: str) -> str:
    """Words for a real row of a script whose training ended during the synthetic run: it ran
    in a launch of its own, with no twin in rounds beside it, so its ceiling is the synthetic
    row's, which another stretch of the machine's time measured."""
    return (
        f"no twin ran beside {variant} (the script's training ended during the synthetic run, "
        "so it ran in a launch of its own): its ceiling and gap are the synthetic row's, "
        "measured apart from it"
    )


def ceiling_note(variant: str, figures: TwinFigures) -> str:
    """Words for a real row whose ceiling (its twin, measured in alternation with it) differs
    from the synthetic run's own beyond both intervals; "" when the two agree. When the twin
    is the slower and its steps used more CPU (``twin_contended``), the gap is taken against
    the synthetic run's own ceiling, and the words say so."""
    twin_rate, twin_half, own_rate, own_half, twin_cores, own_cores, _ = figures
    if any(math.isnan(v) for v in (twin_rate, own_rate)) or not own_rate > 0:
        return ""
    margin = math.hypot(
        0.0 if math.isnan(twin_half) else twin_half, 0.0 if math.isnan(own_half) else own_half
    )
    if abs(twin_rate - own_rate) <= margin:
        return ""
    shift = 100.0 * (twin_rate / own_rate - 1.0)
    text = (
        f"its ceiling, the synthetic steps measured in alternation with {variant}, ran at {twin_rate:,.1f} "
        f"samples/s: {abs(shift):.1f}% {'below' if shift < 0 else 'above'} the synthetic run's own "
        f"{own_rate:,.1f}"
    )
    if math.isnan(twin_cores) or math.isnan(own_cores):
        return text + "; the gap is against the ceiling measured beside it"
    extra = twin_cores - own_cores
    if twin_contended(figures):
        return (
            text
            + f"; those steps used {twin_cores:.2f} CPU cores per rank against {own_cores:.2f}: the real "
            f"pipeline's threads kept working through them (contention, +{extra:.2f} cores), so they "
            f"are not the model's ceiling, and the gap is against the synthetic run's own {own_rate:,.1f}"
        )
    same = " at the same CPU use" if abs(extra) < CONTENTION_CORES else ""
    return (
        text
        + f"{same} ({twin_cores:.2f} against {own_cores:.2f} cores per rank): the machine's speed "
        "changed between the two (drift), which alternation cancels: the gap is against the "
        "ceiling measured beside it"
    )


def twin_contended(figures: TwinFigures) -> bool:
    """The twin (the synthetic steps in alternation with a real variant) ran slower than the
    synthetic run's own beyond both intervals, its steps used ``CONTENTION_CORES`` more CPU
    cores per rank, and they kept at least ``SATURATED`` of the rank's ``share`` of the
    host's cores busy: the real pipeline's threads worked through them (refilling what the
    real steps drained) on cores the step needed, so they measured the model beside the
    pipeline, not the model's ceiling. Without an interval for either rate or without the
    share, the twin stays the ceiling. Seen on the README's first command (2026-11-26: a
    twin of 488.3 samples/s at 128 CPU-ms a step against the synthetic run's 789.8 at 73; the
    other nine runs' twins within 16% of theirs at 0.88-1.09 times their CPU) and on the
    truth suite's heavy pipelines at np 2 and 4 (docs/validation.md)."""
    twin_rate, twin_half, own_rate, own_half, twin_cores, own_cores, share = figures
    if any(math.isnan(v) for v in figures) or not share > 0:
        return False
    return (
        own_rate - twin_rate > math.hypot(twin_half, own_half)
        and twin_cores - own_cores >= CONTENTION_CORES
        and twin_cores >= SATURATED * share
    )


def paired_gap(real: pd.DataFrame, twin: pd.DataFrame) -> tuple[float, float, float]:
    """``paired_gap_interval`` from step records (a real variant's and its paired twin's),
    and the twin's samples/s over the same rounds: gap = 100 × (1 − real / twin)."""
    r, s = round_sums(real), round_sums(twin)
    both = r.join(s, how="inner", lsuffix="_r", rsuffix="_s")
    g, h = paired_gap_interval(
        both["samples_s"].to_numpy(float),
        both["seconds_s"].to_numpy(float),
        both["samples_r"].to_numpy(float),
        both["seconds_r"].to_numpy(float),
    )
    return g, h, float(both["samples_s"].sum() / both["seconds_s"].sum()) if len(both) else math.nan


def rate_interval(
    samples: npt.NDArray[np.float64], seconds: npt.NDArray[np.float64]
) -> tuple[float, float]:
    """Samples per second over contiguous steps, and its 95% batch-means half-interval
    (NaN with fewer than 4 steps). The adaptive stopping rule and the summary share it."""
    n = len(seconds)
    if n == 0:
        return math.nan, math.nan
    point = float(samples.sum() / seconds.sum())
    blocks = min(MAX_BLOCKS, n // 2)
    if blocks < 2:
        return point, math.nan
    edges = np.linspace(0, n, blocks + 1).astype(int)
    rates = np.array(
        [samples[a:b].sum() / seconds[a:b].sum() for a, b in zip(edges[:-1], edges[1:])]
    )
    return point, float(t975(blocks - 1) * rates.std(ddof=1) / math.sqrt(blocks))


def wait_share(ps: pd.DataFrame, column: str) -> float:
    """The share of the steps' time, in %, spent in ``column``'s wait, over the steps whose
    wait was measured (a script's jit-compiled model, or one that turned the measurement off,
    records none): NaN where none was, never a 0 that nothing measured."""
    known = ps[ps[column].notna()]
    if known.empty or not known["step_time_ms"].sum() > 0:
        return math.nan
    return float(100.0 * known[column].sum() / known["step_time_ms"].sum())


def throughput(steps: pd.DataFrame) -> dict[str, float]:
    """Throughput, its 95% half-interval and step-time figures for one (np, variant)."""
    ps = per_step(steps)
    n = len(ps)
    if n == 0:
        nan = math.nan
        return dict(
            samples_per_s=nan,
            samples_per_s_ci95=nan,
            step_time_ms_mean=nan,
            step_time_ms_p50=nan,
            step_time_ms_p95=nan,
            input_wait_pct=nan,
            input_wait_max_pct=nan,
            measured_steps=0,
            measured_s=0.0,
        )
    seconds = ps["step_time_ms"].to_numpy() / 1e3
    samples = ps["samples"].to_numpy(dtype=float)
    point, half = rate_interval(samples, seconds)
    return dict(
        samples_per_s=float(point),
        samples_per_s_ci95=float(half),
        step_time_ms_mean=float(ps["step_time_ms"].mean()),
        step_time_ms_p50=float(np.percentile(ps["step_time_ms"], 50)),
        step_time_ms_p95=float(np.percentile(ps["step_time_ms"], 95)),
        input_wait_pct=wait_share(ps, "input_wait_ms"),
        input_wait_max_pct=wait_share(ps, "input_wait_max_ms"),
        measured_steps=int(n),
        measured_s=float(seconds.sum()),
    )


def gap(real: float, real_ci: float, synth: float, synth_ci: float) -> tuple[float, float]:
    """Gap in % (100 × (1 − real/synthetic)) and its 95% half-interval (delta method)."""
    if not (synth > 0) or math.isnan(real):
        return math.nan, math.nan
    ratio = real / synth
    rel = math.sqrt((real_ci / real) ** 2 + (synth_ci / synth) ** 2) if real > 0 else math.nan
    return 100.0 * (1.0 - ratio), 100.0 * ratio * rel


def line_spanned(gap_pct: float, half: float) -> float | None:
    """The verdict threshold (5% or 20%) that the gap's 95% interval spans, else None."""
    if math.isnan(gap_pct) or math.isnan(half):
        return None
    return next((b for b in VERDICT_THRESHOLDS_PCT if gap_pct - half < b < gap_pct + half), None)


def row_verdict(gap_pct: float, half: float) -> str:
    """The verdict a row can carry: its class, or "on the 5% line" / "on the 20% line" when the
    interval spans that threshold and neither class is supported."""
    line = line_spanned(gap_pct, half)
    return verdict(gap_pct) if line is None else f"on the {line:g}% line"


def gap_warning(gap_pct: float, half: float, stop_reason: str = "") -> str:
    """Say when the interval cannot carry a class.

    A gap whose interval spans 5% or 20% is on that line, between two classes: said as such,
    whether the measurement reached its target there (the gap truly sits on the line) or ran
    out of time. Fixed step counts point at the adaptive mode; an interval that spans only 0%
    says there may be no gap at all.
    """
    if math.isnan(gap_pct):
        return ""
    fixed = stop_reason not in (STOP_TARGET, STOP_CLEAR, STOP_MAX_TIME)
    fix = "raise train.measure_steps, or set it to 0 to measure until the interval is narrow enough"
    if math.isnan(half):
        if stop_reason in (STOP_TARGET, STOP_CLEAR):
            return ""
        return f"too few measured steps for an interval; {fix if fixed else 'raise train.max_measure_s'}"
    if (line := line_spanned(gap_pct, half)) is not None:
        below, above = (
            ("not", "moderately") if line == VERDICT_THRESHOLDS_PCT[0] else ("moderately", "highly")
        )
        text = (
            f"gap {gap_pct:.1f}% ±{half:.1f} (95%) is on the {line:g}% line, between {below} and {above} "
            "input-bound"
        )
        return f"{text}; {fix}" if fixed else text
    if stop_reason in (STOP_TARGET, STOP_CLEAR) or not gap_pct - half < 0.0 < gap_pct + half:
        return ""
    ran_out = "the maximum measurement time ran out: " if stop_reason == STOP_MAX_TIME else ""
    return f"{ran_out}gap {gap_pct:.1f}% ±{half:.1f} (95%) spans 0%: there may be no gap; " + (
        "raise train.max_measure_s" if stop_reason == STOP_MAX_TIME else fix
    )


def summarize(
    steps: pd.DataFrame,
    synthetic_variants: set[str],
    order: list[str] | None = None,
    stops: dict[tuple[int, str], str] | None = None,
    shares: dict[int, float] | None = None,
) -> pd.DataFrame:
    """One row per (np, variant): throughput, gap to the synthetic run, scaling efficiency, verdict.

    Rows go by np, then synthetic first, then ``order`` (the launch order) or by name.
    ``stops`` maps (np, variant) to how its measurement ended (``VariantRun.stop_reason``);
    ``shares`` maps np to each rank's share of its host's cores (``twin_contended``).
    """
    stops = stops or {}
    shares = shares or {}
    paired = (
        steps["paired"].fillna("").astype(str)
        if "paired" in steps.columns
        else pd.Series("", index=steps.index)
    )
    twins = steps[paired != ""]
    steps = steps[paired == ""]
    rows = []
    for (np_, variant), group in steps.groupby(["np", "variant"], sort=True):
        row = {"np": int(np_), "variant": variant, "synthetic": variant in synthetic_variants}
        row.update(throughput(group))
        row["stop_reason"] = stops.get((int(np_), variant), "")
        rows.append(row)
    out = pd.DataFrame(
        rows,
        columns=[
            c
            for c in SUMMARY_COLUMNS
            if c
            not in (
                "gap_pct",
                "gap_pct_ci95",
                "twin_samples_per_s",
                "ceiling_shift_pct",
                "scaling_efficiency_pct",
                "verdict",
                "warning",
                "ceiling_note",
                "samples_per_s_per_worker",
                *TELEMETRY_COLUMNS,
            )
        ],
    )
    if out.empty:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    out["samples_per_s_per_worker"] = out["samples_per_s"] / out["np"]
    gaps, halves, twin_rates, shifts, verdicts, warnings, notes, effs = (
        [],
        [],
        [],
        [],
        [],
        [],
        [],
        [],
    )
    for _, r in out.iterrows():
        synth = out[(out["np"] == r["np"]) & out["synthetic"].astype(bool)]
        twin = twins[(twins["np"] == r["np"]) & (twins["paired"] == r["variant"])]
        note, shift = "", math.nan
        if r["synthetic"]:
            g, h, tr, v, w = math.nan, math.nan, math.nan, "ceiling", ""
        elif not twin.empty:  # measured in alternation with its own twin
            g, h, tr = paired_gap(
                steps[(steps["np"] == r["np"]) & (steps["variant"] == r["variant"])], twin
            )
            v, w = row_verdict(g, h), gap_warning(g, h, r["stop_reason"])
            if not synth.empty:
                s = synth.iloc[0]
                rounds = round_sums(twin)
                _, twin_half = rate_interval(
                    rounds["samples"].to_numpy(float), rounds["seconds"].to_numpy(float)
                )
                own = steps[(steps["np"] == r["np"]) & (steps["variant"] == s["variant"])]
                shift = (
                    100.0 * (tr / s["samples_per_s"] - 1.0) if s["samples_per_s"] > 0 else math.nan
                )
                figures = TwinFigures(
                    tr,
                    twin_half,
                    s["samples_per_s"],
                    s["samples_per_s_ci95"],
                    cores_used(twin),
                    cores_used(own),
                    shares.get(int(r["np"]), math.nan),
                )
                note = ceiling_note(r["variant"], figures)
                if twin_contended(figures):  # the twin is not the ceiling: the synthetic run is
                    g, h = gap(
                        r["samples_per_s"],
                        r["samples_per_s_ci95"],
                        s["samples_per_s"],
                        s["samples_per_s_ci95"],
                    )
                    tr = s["samples_per_s"]
                    v, w = row_verdict(g, h), gap_warning(g, h, r["stop_reason"])
        elif synth.empty:
            g, h, tr, v, w = (
                math.nan,
                math.nan,
                math.nan,
                "",
                "no synthetic run at this np to compare with",
            )
        else:  # measured with no twin beside it: against the synthetic row, said as such
            s = synth.iloc[0]
            g, h = gap(
                r["samples_per_s"],
                r["samples_per_s_ci95"],
                s["samples_per_s"],
                s["samples_per_s_ci95"],
            )
            tr, v, w = s["samples_per_s"], row_verdict(g, h), gap_warning(g, h, r["stop_reason"])
            if s["stop_reason"] == "fit ended":  # not a fixed-step run's or an ablation's
                note = unpaired_note(r["variant"])
        one = out[(out["np"] == 1) & (out["variant"] == r["variant"])]
        eff = (
            100.0 * r["samples_per_s"] / (r["np"] * one.iloc[0]["samples_per_s"])
            if not one.empty
            else math.nan
        )
        gaps.append(g)
        halves.append(h)
        twin_rates.append(tr)
        verdicts.append(v)
        warnings.append(w)
        shifts.append(shift)
        notes.append(note)
        effs.append(eff)
    out["gap_pct"], out["gap_pct_ci95"], out["twin_samples_per_s"] = gaps, halves, twin_rates
    out["ceiling_shift_pct"], out["ceiling_note"] = shifts, notes
    out["scaling_efficiency_pct"] = effs
    out["verdict"], out["warning"] = verdicts, warnings
    for c in TELEMETRY_COLUMNS:
        out[c] = math.nan
    rank = {v: i for i, v in enumerate(order or [])}
    out["_order"] = [rank.get(v, len(rank)) for v in out["variant"]]
    out = out.sort_values(
        ["np", "synthetic", "_order", "variant"], ascending=[True, False, True, True]
    )
    out = out.drop(columns="_order").reset_index(drop=True)
    return out[SUMMARY_COLUMNS]
