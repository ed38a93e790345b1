"""Telemetry per (np, variant): GPU utilisation, host CPU, a rank's CPU cores, peak RSS over
the measured steps.

Samples and steps meet on the wall clock (``t_unix_s`` / ``end_unix_s``), which is exact on
one host and as good as the hosts' clock sync across hosts.
"""

from __future__ import annotations

import math

import pandas as pd

# NVML's "utilisation" is the share of time any kernel ran, not how busy the SMs were, so a
# GPU can read ~100% while steps wait on input. Flag it when the two differ by this much.
DISAGREEMENT_POINTS = 25.0


def windows(steps: pd.DataFrame) -> pd.DataFrame:
    """Wall-clock windows of the measured steps of each (np, variant): one per round when
    the variant alternated with its twin (the twin's stretches between them are not its
    own), else one."""
    m = steps[~steps["warmup"].astype(bool)].copy()
    if m.empty:
        return pd.DataFrame(columns=["np", "variant", "round", "start", "end"])
    if "round" not in m.columns:
        m["round"] = -1
    m["start"] = m["end_unix_s"] - m["step_time_ms"] / 1e3
    return m.groupby(["np", "variant", "round"], as_index=False).agg(
        start=("start", "min"), end=("end_unix_s", "max")
    )


def samples_in(
    frame: pd.DataFrame | None, win: pd.DataFrame, np_: int, variant: str
) -> pd.DataFrame:
    """The telemetry samples of one (np, variant)'s windows (see ``_in``)."""
    w = win[(win["np"] == np_) & (win["variant"] == variant)]
    if frame is None or frame.empty or w.empty:
        return pd.DataFrame()
    parts = [_in(frame, a, b) for a, b in zip(w["start"], w["end"])]
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts).drop_duplicates() if parts else pd.DataFrame()


SERIES_KEYS = ("host", "rank", "gpu")  # what tells one sampler's series from another's


def _in(frame: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    """The samples of ``[start, end]``. A sample averages the interval since the previous one,
    so a series with none inside a window shorter than its interval contributes the first
    sample after the window, whose interval covers it. A series that had no sample before the
    window ended (a sampler that started later: the next launch's new rank) covers nothing."""
    if frame is None or frame.empty:
        return pd.DataFrame()
    t = frame["t_unix_s"]
    inside = frame[(t >= start) & (t <= end)]
    keys = [k for k in SERIES_KEYS if k in frame.columns]  # every sampler writes "host"
    first_after = frame[t > end].sort_values("t_unix_s").groupby(keys).head(1)
    began = frame[t < start].set_index(keys).index  # series sampling before the window
    indexed = first_after.set_index(keys).index
    covering = first_after[~indexed.isin(inside.set_index(keys).index) & indexed.isin(began)]
    return pd.concat([inside, covering]) if not covering.empty else inside


def add_telemetry(
    summary: pd.DataFrame,
    steps: pd.DataFrame,
    gpu: pd.DataFrame | None,
    host: pd.DataFrame | None,
    proc: pd.DataFrame | None,
) -> pd.DataFrame:
    out = summary.copy()
    gpu_util, cpu_util, rss_max, rank_cores, notes = [], [], [], [], []
    win = windows(steps)
    for _, r in out.iterrows():
        g = c = m = k = math.nan
        gs = samples_in(gpu, win, r["np"], r["variant"])
        if not gs.empty and gs["gpu_util_pct"].notna().any():
            g = float(gs["gpu_util_pct"].mean())
        hs = samples_in(host, win, r["np"], r["variant"])
        if not hs.empty:
            c = float(hs["cpu_pct"].mean())
        ps = samples_in(proc, win, r["np"], r["variant"])
        if not ps.empty:
            m = float(ps["rss_mb"].max())
            if (
                "cpu_pct" in ps.columns and ps["cpu_pct"].notna().any()
            ):  # a rank's process: 100% = one core
                k = float(ps.groupby(["host", "rank"])["cpu_pct"].mean().mean()) / 100.0
        gpu_util.append(g)
        cpu_util.append(c)
        rss_max.append(m)
        rank_cores.append(k)
        busy = 100.0 - r["input_wait_pct"] if not math.isnan(r["input_wait_pct"]) else math.nan
        note = ""
        if not math.isnan(g) and not math.isnan(busy) and g - busy > DISAGREEMENT_POINTS:
            note = (
                f"NVML reports the GPU {g:.0f}% utilised while {r['input_wait_pct']:.0f}% of step time is "
                f"input wait: NVML counts time with any kernel running, not how busy the GPU is"
            )
        notes.append(note)
    out["gpu_util_pct"], out["cpu_util_pct"], out["rss_mb_max"] = gpu_util, cpu_util, rss_max
    out["cpu_cores_per_rank"] = rank_cores  # what one rank's process used, pipeline included
    out["warning"] = [
        ("; ".join(w for w in (str(a) if isinstance(a, str) else "", b) if w))
        for a, b in zip(out["warning"], notes)
    ]
    return out
