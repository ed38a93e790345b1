"""Fixed step counts against adaptive measurement, side by side, on the quickstart scenario.

    .venv/bin/python benchmarks/precision.py [--np 2] [--fixed-steps 200] [--rounds 1]

Runs `pipeprof compare quickstart` with a fixed number of measured steps and with the
default adaptive measurement (alternately, when --rounds > 1), and prints per (np, variant)
row: steps, seconds measured, the gap and its 95% half-width, how the measurement stopped,
and whether the adaptive row reached ±target or cleared the nearest threshold.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import harness
import pandas as pd

THRESHOLDS = (5.0, 20.0)


def compare(out: Path, extra: list[str], nps: str) -> tuple[pd.DataFrame, float]:
    t0 = time.monotonic()
    harness.pipeprof(
        ["compare", "quickstart", "--np", nps, "--no-dashboard", "--out", str(out), *extra],
        what=" ".join(["pipeprof compare", *extra]),
    )
    return harness.summary(out), time.monotonic() - t0


def held(row: pd.Series, target: float) -> str:
    g, h = row["gap_pct"], row["gap_pct_ci95"]
    if h <= target:
        return f"±{h:.1f} ≤ ±{target:g}"
    if not any(g - h < b < g + h for b in THRESHOLDS):
        return "clear of 5%/20%"
    return "NO"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--np", default="2", help="worker counts, as for compare (default 2: np 1 and 2)"
    )
    ap.add_argument("--fixed-steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--target", type=float, default=2.0)
    args = ap.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode, extra in (("fixed", ["--steps", str(args.fixed_steps)]), ("adaptive", [])):
                summary, wall = compare(Path(tmp) / f"{mode}-{r}", extra, args.np)
                print(
                    f"round {r + 1} {mode}: {wall:.0f} s wall, {summary['measured_s'].sum():.0f} s measured",
                    flush=True,
                )
                for _, row in summary[~summary["synthetic"]].iterrows():
                    lines.append(
                        (
                            r + 1,
                            mode,
                            int(row["np"]),
                            int(row["measured_steps"]),
                            row["measured_s"],
                            row["gap_pct"],
                            row["gap_pct_ci95"],
                            row["stop_reason"],
                            held(row, args.target) if mode == "adaptive" else "",
                        )
                    )
    print(
        f"\n{'round':>5} {'mode':9} {'np':>3} {'steps':>6} {'seconds':>8} {'gap %':>7} {'±95%':>6}  stop / held"
    )
    for rnd, mode, n, steps, secs, g, h, stop, ok in lines:
        print(
            f"{rnd:>5} {mode:9} {n:>3} {steps:>6} {secs:>8.1f} {g:>7.1f} {h:>6.1f}  {stop}"
            + (f" / {ok}" if ok else "")
        )
    adaptive = [x for x in lines if x[1] == "adaptive"]
    print(
        f"\nadaptive rows that reached ±{args.target:g} or cleared the nearest threshold: "
        f"{sum(x[-1] != 'NO' for x in adaptive)} of {len(adaptive)}"
    )


if __name__ == "__main__":
    harness.entry(main)
