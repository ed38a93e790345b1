"""Validate `pipeprof predict` against emulated runs measured here, in one run.

1. An emulated compare at np=1 with the ablation (stage costs) on the seed-gap scenario:
   the source of every input-side figure (pipeline CPU, jitter, the loop's CPU).
2. A synthetic-only compare at np = 2, 4, 8 on the "cluster" (this machine, all ranks on one
   node): the target's synchronisation cost and CPU use with no input pipeline running, as
   one would measure in the first minutes of a booking. It reads no data.
3. `pipeprof predict` from the np=1 run, with that ceiling (and, for comparison, without it:
   synchronisation from the ring's steps at ``--hop-ms``'s default for ranks on one host).
4. Emulated compares at np = 2, 4, 8 (and more with --nps), synthetic and real, with real
   Horovod ranks: the measured gaps, from runs independent of steps 1-3.
5. Predicted against measured gap per np; each must land within ±5 points.

    .venv/bin/python benchmarks/validate_predict.py [--nps 2,4,8,16,32] [--steps 80] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import harness

TOLERANCE_POINTS = 5.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="seed-gap")
    ap.add_argument("--nps", default="2,4,8")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument(
        "--keep", type=Path, help="keep the run directories here (default: a temporary directory)"
    )
    args = ap.parse_args()
    nps = [int(n) for n in args.nps.split(",")]
    cores = len(os.sched_getaffinity(0))
    with harness.scratch(args.keep) as tmp:
        one, ceiling, multi = tmp / "np1", tmp / "ceiling", tmp / "multi"
        print(
            f"1/4 emulated compare at np=1 with the ablation ({args.scenario}, {args.steps} steps)",
            flush=True,
        )
        harness.pipeprof(
            [
                "compare",
                args.scenario,
                "--np",
                "1",
                "--ablation",
                "--steps",
                str(args.steps),
                "--out",
                str(one),
            ]
        )
        print(
            f"2/4 synthetic-only compare at np = {', '.join(map(str, nps))} (the target's ceiling)",
            flush=True,
        )
        harness.pipeprof(
            [
                "compare",
                args.scenario,
                "--np",
                ",".join(map(str, nps)),
                "--synthetic-only",
                "--steps",
                str(args.steps),
                "--oversubscribe",
                "--out",
                str(ceiling),
            ]
        )
        print(f"3/4 predict for one node of {cores} cores with up to {max(nps)} ranks", flush=True)
        target = [
            "--np",
            ",".join(map(str, [1, *nps])),
            "--gpus-per-node",
            str(max(nps)),
            "--cores-per-node",
            str(cores),
        ]
        harness.pipeprof(["predict", str(one), *target])
        network_only = harness.prediction(one).set_index("np")
        harness.pipeprof(["predict", str(one), *target, "--ceiling", str(ceiling)])
        predicted = harness.prediction(one).set_index("np")
        print(
            f"4/4 emulated compares at np = {', '.join(map(str, nps))} (real Horovod ranks)",
            flush=True,
        )
        harness.pipeprof(
            [
                "compare",
                args.scenario,
                "--np",
                ",".join(map(str, nps)),
                "--steps",
                str(args.steps),
                "--oversubscribe",
                "--out",
                str(multi),
            ]
        )
        measured = harness.summary(multi)
        measured = measured[measured["variant"] == "real"].set_index("np")
        base = harness.summary(one).set_index(["np", "variant"])

    print()
    print(
        f"{'np':>4} {'predicted gap':>14} {'measured gap':>16} {'difference':>11} {'gap from':>11}  within ±5?"
        f"   {'np=1 alone':>10}"
    )
    rows = [(1, base.loc[(1, "real"), "gap_pct"], base.loc[(1, "real"), "gap_pct_ci95"])]
    rows += [(n, measured.loc[n, "gap_pct"], measured.loc[n, "gap_pct_ci95"]) for n in nps]
    ok = True
    for n, gap, ci in rows:
        pred = predicted.loc[n, "gap_pct"]
        diff = pred - gap
        good = abs(diff) <= TOLERANCE_POINTS
        ok &= good if n != 1 else True
        print(
            f"{n:>4} {pred:13.1f}% {gap:9.1f}% ±{ci:4.1f} {diff:+10.1f} {predicted.loc[n, 'gap_cause']:>11}  "
            f"{'yes' if good else 'NO':>10}   {network_only.loc[n, 'gap_pct']:9.1f}%"
            f"{'   (the source run itself)' if n == 1 else ''}"
        )
    print()
    print(
        "'np=1 alone': predict without the ceiling, synchronisation from the ring's steps at "
        "--hop-ms's default"
    )
    print(
        "PASS: every prediction within ±5 points"
        if ok
        else "FAIL: a prediction missed by more than 5 points"
    )


if __name__ == "__main__":
    harness.entry(main)
