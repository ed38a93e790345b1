"""The write-up's story, measured: the augmentation-story scenario at np 1 and 2 (emulated
devices), its real pipeline, the classic fixes (its variants), every remedy that applies and
the synthetic ceiling, side by side in one launch per np.

    .venv/bin/python benchmarks/remedies_story.py [--runs 1] [--out DIR]

Prints, per run and np: samples/s, the gap, the share of the real gap each remedy closed, and
the CPU cores per rank (a rank's process over its measured steps); for tf.data service, also
the cores its workers used on this host. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import harness
import pandas as pd

from pipeprof import scenario as scen
from pipeprof.workflows.compare import CompareRequest, compare


def service_cores(run_dir: Path, np_: int) -> float:
    """The tf.data service workers' CPU at ``np_`` over the service variant's wall time, in cores."""
    info = run_dir / "service" / f"np{np_}" / "workers.json"
    if not info.is_file():
        return math.nan
    cpu = sum(json.loads(info.read_text())["cpu_s"])
    wall = sum(
        r["wall_s"]
        for r in harness.variant_runs(run_dir)
        if r["np"] == np_ and r["variant"] == "remedy:data-service"
    )
    return cpu / wall if wall > 0 else math.nan


def one_run(out: Path) -> pd.DataFrame:
    t0 = time.monotonic()
    result = compare(
        CompareRequest(
            scen.load("augmentation-story"), [1, 2], out=str(out), remedies="all", report=False
        )
    )
    if result.failure:
        raise SystemExit(result.failure)
    s = result.summary
    rows = s[
        [
            "np",
            "variant",
            "samples_per_s",
            "gap_pct",
            "gap_pct_ci95",
            "gap_closed_pct",
            "cpu_cores_per_rank",
        ]
    ].copy()
    rows["service_cores"] = [
        service_cores(out, n) if v == "remedy:data-service" else math.nan
        for n, v in zip(s["np"], s["variant"])
    ]
    print(f"run {out.name}: {time.monotonic() - t0:.0f} s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    base = harness.out_dir(args.out, "pipeprof-story-")
    pd.set_option("display.width", 200)
    closed = []
    for k in range(args.runs):
        rows = one_run(base / f"run{k}")
        print(rows.to_string(index=False, float_format=lambda v: f"{v:,.2f}"))
        at2 = rows[(rows["np"] == 2) & rows["variant"].str.startswith("remedy:")]
        best = at2.sort_values("gap_closed_pct", ascending=False).iloc[0]
        closed.append(float(best["gap_closed_pct"]))
        print(
            f"np=2: best remedy {best['variant']} closed {best['gap_closed_pct']:.0f}% of the real gap"
        )
    ok = sum(c >= 50 for c in closed)
    print(
        f"best remedy closed at least half of the np=2 gap in {ok} of {len(closed)} runs "
        f"(closed: {', '.join(f'{c:.0f}%' for c in closed)})"
    )


if __name__ == "__main__":
    main()
