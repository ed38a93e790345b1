"""Two runs' summaries, row by row: what changed, with the 95% interval of the change, and
whether that interval says better, worse or no change.

Pure: two summary frames in, one frame out. Rows meet on (np, variant). For each, the
change in samples/s in percent of the first run's, and the change of the gap in points;
each change's 95% half-width is the two runs' half-widths added in quadrature (independent
runs; for samples/s, in percent of the first run's rate, its own uncertainty in the
denominator left out: a second-order term for half-widths of a few percent). A change whose
interval lies wholly on one side of zero is "better" or "worse"; one whose interval holds
zero is "no change"; a row without an interval on either side says "no interval".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

BETTER, WORSE, SAME, UNKNOWN = "better", "worse", "no change", "no interval"
# what --fail-on names, each with the unit its threshold is in, and whether up is better
FIGURES = {"samples_per_s": ("%", True), "gap": ("points", False)}
KEYS = ["np", "variant"]
COLUMNS = [
    "np",
    "variant",
    "samples_per_s_before",
    "samples_per_s_after",
    "samples_per_s_change_pct",
    "samples_per_s_change_ci95",
    "samples_per_s_call",
    "gap_before_pct",
    "gap_after_pct",
    "gap_change_points",
    "gap_change_ci95",
    "gap_call",
]


def call(change: float, half: float, up_is_better: bool) -> str:
    """better / worse / no change, from a change and its 95% half-width."""
    if math.isnan(change) or math.isnan(half):
        return UNKNOWN
    if change - half > 0:
        return BETTER if up_is_better else WORSE
    if change + half < 0:
        return WORSE if up_is_better else BETTER
    return SAME


def _f(value: object) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def diff(before: pd.DataFrame, after: pd.DataFrame) -> pd.DataFrame:
    """One row per (np, variant) that both summaries have, in the second's order."""
    a = before.drop_duplicates(KEYS).set_index(KEYS)
    rows = []
    for _, b in after.iterrows():
        key = (int(b["np"]), str(b["variant"]))
        if key not in a.index:
            continue
        r = a.loc[key]
        s0, s1 = _f(r["samples_per_s"]), _f(b["samples_per_s"])
        h0, h1 = _f(r.get("samples_per_s_ci95")), _f(b.get("samples_per_s_ci95"))
        s_change = 100.0 * (s1 - s0) / s0 if s0 > 0 else math.nan
        s_half = 100.0 * math.hypot(h0, h1) / s0 if s0 > 0 else math.nan
        g0, g1 = _f(r.get("gap_pct")), _f(b.get("gap_pct"))
        gh0, gh1 = _f(r.get("gap_pct_ci95")), _f(b.get("gap_pct_ci95"))
        g_change, g_half = g1 - g0, math.hypot(gh0, gh1)
        rows.append(
            {
                "np": key[0],
                "variant": key[1],
                "samples_per_s_before": s0,
                "samples_per_s_after": s1,
                "samples_per_s_change_pct": s_change,
                "samples_per_s_change_ci95": s_half,
                "samples_per_s_call": call(s_change, s_half, up_is_better=True),
                "gap_before_pct": g0,
                "gap_after_pct": g1,
                "gap_change_points": g_change,
                "gap_change_ci95": g_half,
                "gap_call": call(g_change, g_half, up_is_better=False)
                if not (math.isnan(g0) and math.isnan(g1))
                else "",  # a synthetic row has no gap: nothing to call
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def unmatched(before: pd.DataFrame, after: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The (np, variant) rows only the first run has, and those only the second has."""

    def keys(frame: pd.DataFrame) -> list[tuple[int, str]]:
        return [(int(n), str(v)) for n, v in zip(frame["np"], frame["variant"])]

    ka, kb = keys(before), keys(after)
    only = [f"np={n} {v}" for n, v in ka if (n, v) not in kb]
    new = [f"np={n} {v}" for n, v in kb if (n, v) not in ka]
    return only, new


@dataclass(frozen=True)
class FailOn:
    """``--fail-on FIGURE:THRESHOLD``: fail where FIGURE got worse, by its interval, and by
    more than THRESHOLD (percent of samples/s, or points of gap)."""

    figure: str
    threshold: float

    @classmethod
    def parse(cls, text: str) -> FailOn:
        name, _, value = text.partition(":")
        if name not in FIGURES:
            raise ValueError(
                f"--fail-on {text}: the figure must be one of {', '.join(FIGURES)} "
                "(e.g. gap:2 or samples_per_s:5)"
            )
        try:
            threshold = float(value.rstrip("%")) if value else 0.0
        except ValueError:
            raise ValueError(
                f"--fail-on {text}: the threshold after ':' must be a number "
                f"({FIGURES[name][0]})"
            ) from None
        if threshold < 0 or math.isnan(threshold):
            raise ValueError(f"--fail-on {text}: the threshold must be 0 or more")
        return cls(name, threshold)


def failures(diffed: pd.DataFrame, rules: list[FailOn]) -> list[str]:
    """A line for each row and rule it fails."""
    out = []
    for _, r in diffed.iterrows():
        for rule in rules:
            if rule.figure == "samples_per_s":
                change, half, call_ = (
                    r["samples_per_s_change_pct"],
                    r["samples_per_s_change_ci95"],
                    r["samples_per_s_call"],
                )
                worse_by = -change
                said = f"samples/s {change:+.1f}% ±{half:.1f}"
            else:
                change, half, call_ = (
                    r["gap_change_points"],
                    r["gap_change_ci95"],
                    r["gap_call"],
                )
                worse_by = change
                said = f"gap {change:+.1f} points ±{half:.1f}"
            by = (
                f"{rule.threshold:g}%"
                if rule.figure == "samples_per_s"
                else (f"{rule.threshold:g} points")
            )
            if call_ == WORSE and worse_by > rule.threshold:
                out.append(
                    f"np={r['np']} {r['variant']}: {said}: worse by more than {by} "
                    f"(--fail-on {rule.figure}:{rule.threshold:g})"
                )
    return out


def unjudged(diffed: pd.DataFrame, rules: list[FailOn], only_before: list[str]) -> list[str]:
    """What ``rules`` could not judge: a row whose figure has no interval in one of the runs,
    and a row the first run has and the second lost (a CI gate must not pass on those)."""
    out = [f"{row}: measured before, not after" for row in only_before] if rules else []
    for _, r in diffed.iterrows():
        for rule in rules:
            call_ = r["samples_per_s_call" if rule.figure == "samples_per_s" else "gap_call"]
            if call_ == UNKNOWN:  # ("" is a ceiling's gap: nothing to judge)
                out.append(f"np={r['np']} {r['variant']}: {rule.figure} has no interval in one run")
    return out
