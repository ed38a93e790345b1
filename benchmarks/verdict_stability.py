"""Does the ablation verdict name the same stage run after run? The three cases of the test
suite (augment-bound, read-bound, model-bound), CPU-trained ranks at np=1, N runs each.

    .venv/bin/python benchmarks/verdict_stability.py [--runs 5] [--cases augment,read,none]

Prints one line per run (the verdict, the gap and how its measurement stopped, the cost
model's expected contention) and the share of runs whose verdict named the right stage.
Run it alone on the machine: other load changes what it measures.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import harness

from tests.integration.verdict_cases import CASES, TRAIN, merge  # the suite's own cases


def one_run(case: str, work: Path, data_dir: Path, index: int) -> dict:
    scenario = work / f"{case}.toml"
    scenario.write_text(merge(CASES[case], TRAIN))
    out = work / f"{case}-{index}"
    t0 = time.monotonic()
    # CPU-trained, every case: the model and the pipeline share the cores (the suite emulates
    # the model-bound case's device to save its time)
    try:
        harness.pipeprof(
            [
                "compare",
                str(scenario),
                "--np",
                "1",
                "--ablation",
                "--no-dashboard",
                "--no-report",
                "--device",
                "auto",
                "--out",
                str(out),
            ],
            cwd=work,
            env=dict(os.environ, PIPEPROF_DATA_DIR=str(data_dir)),
        )
    except harness.Failed as exc:
        return {
            "case": case,
            "run": index,
            "verdict": f"FAILED (exit {exc.code})",
            "wall_s": time.monotonic() - t0,
            "detail": (exc.last_line or "?")[:200],
        }
    wall = time.monotonic() - t0
    verdict = harness.verdicts(out)[0]
    row = harness.summary(out).set_index("variant").loc["real"]
    return {
        "case": case,
        "run": index,
        "verdict": verdict["bottleneck"],
        "gap_pct": row["gap_pct"],
        "gap_ci95": row["gap_pct_ci95"],
        "stop": row["stop_reason"],
        "measured_s": row["measured_s"],
        "contention_pct": verdict.get("contention_gap_pct"),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cases", default="augment,read,none")
    args = ap.parse_args()
    cases = args.cases.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work, data = Path(tmp) / "work", Path(tmp) / "data"
        work.mkdir()
        for i in range(
            args.runs
        ):  # cases interleaved, so a slow spell of the machine hits all of them
            for case in cases:
                r = one_run(case, work, data, i)
                rows.append(r)
                gap = (
                    f"gap {r['gap_pct']:5.1f}% ±{r['gap_ci95']:4.1f} ({r['stop']}, {r['measured_s']:.0f}s)"
                    if "gap_pct" in r
                    else r.get("detail", "")
                )
                contention = r.get("contention_pct")
                print(
                    f"{case:8s} run {i + 1}: verdict {r['verdict']:8s} {gap}; expected contention "
                    f"{'–' if contention is None else f'{contention:.1f}%'}; {r['wall_s']:.0f}s",
                    flush=True,
                )
    right = sum(r["verdict"] == r["case"] for r in rows)
    print(f"\nverdict named the right stage in {right} of {len(rows)} runs")
    for case in cases:
        mine = [r for r in rows if r["case"] == case]
        print(f"  {case:8s} {sum(r['verdict'] == case for r in mine)}/{len(mine)}")


if __name__ == "__main__":
    main()
