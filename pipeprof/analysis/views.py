"""The frames the renderers draw, derived from a run's records: which rows are the real
variants, how each rank's step time splits into input wait and the rest, how a step-time
series is binned over the run. Pure functions over pandas frames (no TensorFlow, no plotting).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pipeprof.analysis.stages import LADDER


def real_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The scenario's real variants (not the synthetic twin, not the ablation's rungs)."""
    if summary is None or summary.empty:
        return pd.DataFrame(columns=[] if summary is None else summary.columns)
    synthetic = summary["synthetic"].astype(str).str.lower() == "true"
    return summary[~synthetic & ~summary["variant"].isin(LADDER)]


def synthetic_rows(summary: pd.DataFrame) -> pd.DataFrame:
    if summary is None or summary.empty:
        return pd.DataFrame()
    return summary[summary["synthetic"].astype(str).str.lower() == "true"]


def reference_variant(summary: pd.DataFrame) -> str | None:
    """The first real variant in launch order: the one verdicts and predictions speak of."""
    real = real_rows(summary)
    return None if real.empty else str(real.iloc[0]["variant"])


def own_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Measured steps of each variant itself (no warm-up, not the twin's alternating ones)."""
    if steps.empty:
        return steps
    paired = steps["paired"].fillna("").astype(str) if "paired" in steps else ""
    return steps[~steps["warmup"].astype(bool) & (paired == "")]


def rank_split(steps: pd.DataFrame, np_: int, variant: str) -> pd.DataFrame:
    """Per rank of one (np, variant): mean step time, mean input wait and the rest (compute,
    allreduce, update), in ms; and the rank's input wait against the median rank's. The rank
    that makes the others wait has the most input wait: in lock-step every rank's step takes
    as long as the slowest one's, and the others spend the difference in the allreduce."""
    m = own_steps(steps)
    m = m[(m["np"] == np_) & (m["variant"] == variant)]
    if m.empty:
        return pd.DataFrame(
            columns=["rank", "step_ms", "input_wait_ms", "compute_ms", "wait_vs_median"]
        )
    g = m.groupby("rank", sort=True).agg(
        step_ms=("step_time_ms", "mean"), input_wait_ms=("input_wait_ms", "mean")
    )
    g["compute_ms"] = (g["step_ms"] - g["input_wait_ms"]).clip(lower=0.0)
    median = float(g["input_wait_ms"].median())
    g["wait_vs_median"] = g["input_wait_ms"] / median if median > 0 else math.nan
    return g.reset_index()


def straggler(split: pd.DataFrame, factor: float = 1.5, floor_ms: float = 1.0) -> int | None:
    """The rank whose input wait stands out: above ``factor`` × the median rank's and by at
    least ``floor_ms``; None when no rank does (or there is only one)."""
    if len(split) < 2:
        return None
    top = split.loc[split["input_wait_ms"].idxmax()]
    median = float(split["input_wait_ms"].median())
    if top["input_wait_ms"] - median >= floor_ms and top["input_wait_ms"] >= factor * max(
        median, 1e-9
    ):
        return int(top["rank"])
    return None


def run_start(steps: pd.DataFrame, *frames: pd.DataFrame | None) -> float:
    """The run's time zero: the first step's start, or the first telemetry sample."""
    starts = []
    if not steps.empty:
        starts.append(float((steps["end_unix_s"] - steps["step_time_ms"] / 1e3).min()))
    starts += [float(f["t_unix_s"].min()) for f in frames if f is not None and not f.empty]
    return min(starts) if starts else 0.0


def binned_steps(steps: pd.DataFrame, np_: int, variant: str, bins: int = 60) -> pd.DataFrame:
    """One (np, variant)'s measured steps as a rank × time grid: the mean step time and input
    wait (ms) of each rank in each of ``bins`` equal slices of the variant's measured span."""
    m = own_steps(steps)
    m = m[(m["np"] == np_) & (m["variant"] == variant)]
    if m.empty:
        return pd.DataFrame(columns=["rank", "bin", "t_s", "step_ms", "input_wait_ms"])
    t = m["end_unix_s"].to_numpy(float)
    lo, hi = float(t.min()), float(t.max())
    width = (hi - lo) / bins if hi > lo else 1.0
    b = np.minimum(((t - lo) / width).astype(int), bins - 1)
    g = (
        m.assign(bin=b)
        .groupby(["rank", "bin"], sort=True)
        .agg(step_ms=("step_time_ms", "mean"), input_wait_ms=("input_wait_ms", "mean"))
        .reset_index()
    )
    g["t_s"] = (g["bin"] + 0.5) * width
    return g


def downsample(frame: pd.DataFrame, column: str, most: int = 400) -> pd.DataFrame:
    """At most ``most`` rows, evenly spaced in ``column`` order: plots need no more points."""
    if len(frame) <= most:
        return frame
    idx = np.linspace(0, len(frame) - 1, most).astype(int)
    return frame.sort_values(column).iloc[idx]


def variant_spans(steps: pd.DataFrame) -> pd.DataFrame:
    """When each (np, variant) ran, in wall-clock seconds (warm-up and twin rounds included)."""
    if steps.empty:
        return pd.DataFrame(columns=["np", "variant", "start", "end"])
    s = steps.assign(start=steps["end_unix_s"] - steps["step_time_ms"] / 1e3)
    own = s[s["paired"].fillna("").astype(str) == ""] if "paired" in s else s
    twins = s[s["paired"].fillna("").astype(str) != ""] if "paired" in s else s.iloc[0:0]
    parts = [
        own.groupby(["np", "variant"], as_index=False).agg(
            start=("start", "min"), end=("end_unix_s", "max")
        )
    ]
    if not twins.empty:  # a real variant's span includes its twin's alternating rounds
        t = twins.groupby(["np", "paired"], as_index=False).agg(
            start=("start", "min"), end=("end_unix_s", "max")
        )
        parts.append(t.rename(columns={"paired": "variant"}))
    spans = pd.concat(parts, ignore_index=True)
    return (
        spans.groupby(["np", "variant"], as_index=False)
        .agg(start=("start", "min"), end=("end", "max"))
        .sort_values("start", ignore_index=True)
    )
