"""The tuner against an exhaustive grid over the same space, in one run, on the quickstart pipeline.

Both search the same space (parallel calls, prefetch depth, private thread pool, max
intra-op parallelism, cache placement; the shuffle buffer is held at the scenario's) in the
same worker pinned to --cores cores. The grid measures every point for the trial length;
the tuner's trials are adaptive, as in `pipeprof tune` (half to one trial length: until the
rate is known to ±1%, or it cannot beat the incumbent). Then the tuner's winner,
the grid's winner, tf.data AUTOTUNE and the scenario's own settings are measured again
head to head: in each round every one once, in an order rotated from round to round, and the
tuner-to-grid ratio is taken within each round (the median over rounds is the figure), so
the comparison rests neither on the grid's single luckiest short measurement nor on which
one ran in a fast spell of the machine. Targets: tuner >= 95% of the grid's best,
tuner wall time <= 25% of the grid's.

    .venv/bin/python benchmarks/tune_vs_grid.py [--cores 1] [--trial-seconds 1.0]

``--smoke`` (CI): a tiny scenario, one knob of two values, trials of 0.2 s and one
head-to-head round, then a check that every trial and contender measured a rate.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from pipeprof.data.stagebench import StageBench
from pipeprof.tune import space as sp
from pipeprof.tune.search import Window, coordinate_descent
from pipeprof.workflows.tune import bench_evaluate

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="quickstart")
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--trial-seconds", type=float, default=1.0)
    ap.add_argument(
        "--rounds", type=int, default=12, help="head-to-head rounds (each contender once a round)"
    )
    ap.add_argument(
        "--final-seconds", type=float, default=2.0, help="length of a head-to-head trial"
    )
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, then check the figures (CI)")
    args = ap.parse_args()
    if args.smoke:
        with tempfile.TemporaryDirectory(prefix="pipeprof-tvg-") as tmp:
            args.scenario = str(harness.smoke_scenario(tmp))
            args.trial_seconds, args.rounds, args.final_seconds = 0.2, 1, 0.2
            s, data_root = harness.prepared(args.scenario)
    else:
        s, data_root = harness.prepared(args.scenario)
    base = s.variant_pipeline(s.variants[0])
    space = [d for d in sp.default_space(args.cores, shuffle=False)]
    if args.smoke:  # one knob of two values: two grid points
        space = [dataclasses.replace(d, values=d.values[:2]) for d in space[:1]]
    points = sp.grid(space)
    print(
        f"tune vs grid · {s.name} · {args.cores} core(s) · {len(points)} grid points · {args.trial_seconds}s per trial"
    )

    with StageBench(
        s.data,
        data_root,
        s.train.batch_size,
        cores=args.cores,
        seconds=args.trial_seconds,
        cache_dir=f"/tmp/pipeprof-tvg-{os.getpid()}",
        log_path=Path(f"/tmp/pipeprof-tvg-{os.getpid()}/stagebench.log"),
    ) as bench:
        measure = bench_evaluate(bench, base)

        def evaluate(
            point: sp.Point, seconds: float
        ) -> dict:  # the grid's and the final's: fixed length
            return measure(point, Window(seconds, seconds))

        t0 = time.monotonic()
        tuned = coordinate_descent(
            space, sp.point_of(base, space), measure, budget_s=1e9, trial_s=args.trial_seconds
        )
        tune_wall = time.monotonic() - t0
        if tuned.best is None:
            raise harness.Failed("the tuner measured no trial")
        best = tuned.best
        stops = {
            s: sum(t.stop == s for t in tuned.trials)
            for s in dict.fromkeys(t.stop for t in tuned.trials)
        }
        for t in tuned.trials:
            print(
                f"    {t.phase:<8} {t.samples_per_s:7,.0f} samples/s {t.stop:<8} "
                + " ".join(f"{k}={v}" for k, v in t.point.items())
            )
        print(
            f"  tuner: {len(tuned.trials)} trials in {tune_wall:.0f}s, best {best.samples_per_s:,.0f} samples/s "
            f"(trials ended: {', '.join(f'{k} {v}' for k, v in stops.items())}; same-setting spread "
            f"{tuned.noise_pct:.1f}%, so moves needed +{tuned.margin_pct:.1f}%)",
            flush=True,
        )

        t0 = time.monotonic()
        grid_results = []
        for i, p in enumerate(points):
            r = evaluate(p, args.trial_seconds)
            grid_results.append((r.get("samples_per_s", 0.0), p))
            if (i + 1) % 20 == 0:
                print(f"  grid: {i + 1}/{len(points)}", flush=True)
        grid_wall = time.monotonic() - t0
        grid_best_sps, grid_best = max(grid_results, key=lambda r: r[0])
        print(
            f"  grid:  {len(points)} trials in {grid_wall:.0f}s, best {grid_best_sps:,.0f} samples/s",
            flush=True,
        )

        contenders = {
            "tuner's winner": best.point,
            "grid's winner": grid_best,
            "AUTOTUNE": sp.autotune_point(base, space),
            "scenario default": sp.point_of(base, space),
        }
        # Head to head in rounds: every contender once per round, the order rotated each round,
        # so the machine's drift (±10% over tens of seconds here) lands on all alike; the ratio
        # is taken within each round, where the two were measured seconds apart.
        trials = harness.in_rounds(
            args.rounds,
            {k: partial(evaluate, p, args.final_seconds) for k, p in contenders.items()},
        )
        final = {k: [t["samples_per_s"] for t in v] for k, v in trials.items()}

    med = {k: statistics.median(v) for k, v in final.items()}
    same = sp.key(contenders["tuner's winner"]) == sp.key(contenders["grid's winner"])
    # the same setting is as good as itself: its rounds measure only the machine's noise
    ratios = (
        [1.0] * args.rounds
        if same
        else [t / g for t, g in zip(final["tuner's winner"], final["grid's winner"])]
    )
    print()
    print(
        f"  {'configuration':<18} {'samples/s (median of ' + str(args.rounds) + ')':>28}  settings"
    )
    for name, p in contenders.items():
        print(f"  {name:<18} {med[name]:28,.0f}  {' '.join(f'{k}={v}' for k, v in p.items())}")
    ratio = statistics.median(ratios)
    wall = tune_wall / grid_wall
    print()
    how = (
        "both found the same setting"
        if same
        else f"median of {len(ratios)} rounds' ratios, {min(ratios):.3f}-{max(ratios):.3f}"
    )
    print(
        f"  tuner / grid best samples/s: {ratio:.3f}  ({how}; target >= 0.95)  {'PASS' if ratio >= 0.95 else 'FAIL'}"
    )
    print(
        f"  tuner / grid wall time:      {wall:.3f}  (target <= 0.25)  {'PASS' if wall <= 0.25 else 'FAIL'}"
    )
    print(
        f"  in the search itself: tuner {best.samples_per_s:,.0f} vs grid {grid_best_sps:,.0f} samples/s"
    )
    if args.smoke:
        check, positive = harness.smoke_check, harness.finite_positive
        check(all(positive(t.samples_per_s) for t in tuned.trials), "a tuner's trial measured 0")
        check(all(positive(r) for r, _ in grid_results), f"the grid's rates {grid_results}")
        check(all(positive(v) for v in med.values()), f"the head-to-head rates {med}")
        check(positive(ratio) and positive(wall), f"the ratios {ratio}, {wall}")


if __name__ == "__main__":
    harness.entry(main)
