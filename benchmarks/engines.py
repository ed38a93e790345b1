"""The same scenario under both engines, side by side: Horovod (one process per worker,
horovodrun over Gloo) and tf.distribute's MirroredStrategy (one process driving every
replica) in both of its ways of feeding the replicas, at np 1 and 2 on emulated devices, the
runs alternating side by side.

Method: ``pipeprof compare SCENARIO --engine E --np 1,2`` for each side, the order rotated by
one each repeat (``--repeats``), each into its own run directory, with the emulated device,
the steps and the batch the flags give; the table lists each run's samples/s of the synthetic
twin and of the real pipeline, and the gap, per side and np, and the median over repeats.
What differs: Horovod's ranks each read their own shard with their own tf.data pipeline; the
mirrored process reads one stream of global batches that its replicas split
(``experimental_distribute_dataset``, side "mirrored"), or one stream of a replica's batches
that they take in turn (``distribute_datasets_from_function``, side "mirrored-per-replica"),
on this host's CPU.

Run: ``.venv/bin/python benchmarks/engines.py`` (about 2 minutes with the defaults).
``--smoke``: the Horovod and the mirrored side once at np 1 (batch 8, 10 steps of 20 ms), then a
check of every row printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402

SCENARIO = """name = "engines"
[data]
source = "generated"
image_size = 64
num_classes = 10
[data.generate]
images = 1024
size = 64
classes = 10
[pipeline.augment]
strength = 1.0
[train]
batch_size = {batch}
device = "emulated:{ms}"
warmup_steps = 5
measure_steps = {steps}
[[variants]]
name = "real"
"""

# --smoke: the defaults it gives the other flags (one given explicitly still wins)
SMOKE = dict(repeats=1, np="1", ms=20.0, batch=8, steps=10, sides="horovod,mirrored")

# each side: its engine and what else its compare is given
SIDES = {
    "horovod": ("horovod", []),
    "mirrored": ("mirrored", []),
    "mirrored-per-replica": (
        "mirrored",
        ["--set", "train.distribute_input=distribute_datasets_from_function"],
    ),
}


def run(side: str, scenario: Path, out: Path, data: Path, nps: str = "1,2") -> pd.DataFrame:
    engine, more = SIDES[side]
    argv = [sys.executable, "-m", "pipeprof", "compare", str(scenario), "--engine", engine]
    argv += [*more, "--np", nps, "--out", str(out), "--no-report", "--no-dashboard"]
    env = dict(os.environ, PIPEPROF_DATA_DIR=str(data))
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        raise SystemExit(
            f"{side}: exit {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    summary = pd.read_csv(out / "summary.csv")
    summary["engine"] = side
    return summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=2, help="runs of each side (default 2)")
    ap.add_argument("--ms", type=float, default=40.0, help="emulated step, ms (default 40)")
    ap.add_argument("--batch", type=int, default=32, help="per-worker batch (default 32)")
    ap.add_argument("--steps", type=int, default=60, help="measured steps (default 60)")
    ap.add_argument("--np", default="1,2", help="compare's worker counts (default 1,2)")
    ap.add_argument("--sides", default=",".join(SIDES), help=f"of {', '.join(SIDES)} (default all)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="horovod and mirrored once at np 1, tiny, then a check of their rows (CI)",
    )
    args = harness.parse_smoke(ap, SMOKE)
    with tempfile.TemporaryDirectory(prefix="pipeprof-engines-") as tmp:
        root = Path(tmp)
        scenario = root / "engines.toml"
        scenario.write_text(SCENARIO.format(batch=args.batch, ms=args.ms, steps=args.steps))
        rows = []
        sides = [s for s in args.sides.split(",") if s.strip()]
        if unknown := set(sides) - set(SIDES):
            ap.error(f"--sides: no side {', '.join(sorted(unknown))}; known: {', '.join(SIDES)}")
        for r in range(args.repeats):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for side in order:
                s = run(side, scenario, root / f"{side}-{r}", root / "data", args.np)
                s["repeat"] = r
                rows.append(s)
        df = pd.concat(rows, ignore_index=True)
    print(
        f"emulated {args.ms:g} ms/step, batch {args.batch} per worker, {args.steps} steps, "
        f"{args.repeats} run(s) per side, alternating; this host: {os.cpu_count()} CPUs"
    )
    cols = ["engine", "np", "variant", "repeat", "samples_per_s", "gap_pct"]
    print(df[cols].sort_values(["np", "engine", "variant", "repeat"]).to_string(index=False))
    print("\nmedians over repeats:")
    for (np_, engine), g in df.groupby(["np", "engine"]):
        synth = statistics.median(g[g["variant"] == "synthetic"]["samples_per_s"])
        real = statistics.median(g[g["variant"] == "real"]["samples_per_s"])
        gap = statistics.median(g[g["variant"] == "real"]["gap_pct"])
        print(f"np={np_} {engine:20s} synthetic {synth:9.1f}  real {real:9.1f}  gap {gap:5.1f}%")
    if args.smoke:
        smoke_check(df, sides, [int(n) for n in args.np.split(",") if n.strip()], args.repeats)
    return 0


def smoke_check(df: pd.DataFrame, sides: list[str], nps: list[int], repeats: int) -> None:
    """The rows the table printed: for every side, worker count and repeat, a synthetic and a
    real row with samples/s finite and > 0, and the real row's gap a number. Not a comparison
    of the engines: that takes the full run."""
    for side in sides:
        for np_ in nps:
            for r in range(repeats):
                mine = df[(df["engine"] == side) & (df["np"] == np_) & (df["repeat"] == r)]
                where = f"{side} np={np_} repeat {r}"
                for variant in ("synthetic", "real"):
                    row = mine[mine["variant"] == variant]
                    harness.smoke_check(len(row) == 1, f"{where}: {len(row)} {variant} row(s)")
                    rate = float(row["samples_per_s"].iloc[0])
                    harness.smoke_check(
                        harness.finite_positive(rate), f"{where}: {variant} samples/s = {rate!r}"
                    )
                gap = float(mine[mine["variant"] == "real"]["gap_pct"].iloc[0])
                harness.smoke_check(gap == gap and abs(gap) < float("inf"), f"{where}: gap {gap!r}")
    print(f"smoke: ok ({len(SIDES)} sides at np {nps}: every row there, samples/s finite and > 0)")


if __name__ == "__main__":
    harness.entry(main)
