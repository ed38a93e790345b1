"""pipeprof on a GPU host with no TensorFlow: ``compare`` at np 1 under PyTorch DDP with a
DataLoader and under Keras 3 on JAX (``data_parallel``) with Grain, NVML sampling the GPU, each
on two cases of the same generated photos:

- ``augment``: a CPU-heavy augmentation (rotations of up to 90 degrees, deep crops, twice the
  default strength) made in the loader's workers, of photos stored at the model's size: the
  gap is known to be large, and the verdict (``--verdict``) must name augment;
- ``control``: no augmentation, the decoded images cached in memory: the step, not the
  pipeline, must bound it.

It prints one row a run (samples/s, the gap and its interval, the verdict, the stage it names,
GPU utilisation) and checks the verdicts. The run directories are kept under ``--out``.

    python benchmarks/gpu_check.py --out DIR              # on a GPU host (scripts/gpu_check.sh)
    python benchmarks/gpu_check.py --smoke --out DIR      # CI: the CPU, an emulated device

``--smoke`` runs the same four compares on the CPU at tiny sizes, the step an emulated device
of 30 ms, and checks that each printed its row, never the verdicts (a smoke run's sizes decide
nothing). It asks for the stage (``--verdict``, an ablation of the pipeline's stages) on the
Grain augment run alone: the other is the same reading of the same files, and each library's
verdict is tested on its own (tests/integration/test_ddp_verdict.py, test_grain_verdict.py).
With no GPU, the GPU column says why it is blank.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import harness  # noqa: E402

RUNS = (  # (name, engine, input library)
    ("ddp-dataloader", "ddp", "dataloader"),
    ("data_parallel-grain", "data_parallel", "grain"),
)
CASES = {
    "augment": """
[pipeline.augment]
strength = 2.0
rotation_deg = 45.0
crop_scale_min = 0.3
[pipeline.cache]
enabled = false
""",
    "control": """
[pipeline.augment]
enabled = false
[pipeline.cache]
enabled = true
kind = "memory"
""",
}
# on a GPU: 2,000 photos stored at the model's 64 px (reading them costs little, so the
# augmentation is the cost), batches of 256 for the small CNN; the adaptive measurement
FULL = {"images": 2000, "size": 64, "image_size": 64, "batch": 256, "train": ""}
# a smoke run: 96 photos of 32 px, batches of 8, 30 ms of emulated device a step
SMOKE = {
    "images": 96,
    "size": 32,
    "image_size": 32,
    "batch": 8,
    "train": 'device = "emulated:30"\nwarmup_steps = 3\nmin_measure_s = 2\nmax_measure_s = 4\n',
}


def scenario(case: str, sizes: dict) -> str:
    return f"""name = "gpu-check-{case}"
description = "benchmarks/gpu_check.py's {case} case"
[data]
source = "generated"
image_size = {sizes["image_size"]}
num_classes = 10
[data.generate]
images = {sizes["images"]}
size = {sizes["size"]}
classes = 10
format = "jpeg"
[model]
name = "small_cnn"
[train]
batch_size = {sizes["batch"]}
{sizes["train"]}{CASES[case]}"""


def row(run_dir: Path) -> dict:
    summary = harness.summary(run_dir)
    real = summary[summary["variant"] == "real"].iloc[0]
    verdicts = harness.verdicts(run_dir) if (run_dir / "verdict.json").is_file() else []
    util = real.get("gpu_util_pct", math.nan)
    return {
        "samples_per_s": float(real["samples_per_s"]),
        "gap_pct": float(real["gap_pct"]),
        "gap_ci95": float(real["gap_pct_ci95"]),
        "verdict": str(real["verdict"]),
        "stage": verdicts[0].get("bottleneck", "") if verdicts else "",
        "gpu_util_pct": float(util) if util == util else math.nan,
        "device": str(real.get("device", "")),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="a new folder for the run directories")
    parser.add_argument("--smoke", action="store_true", help="the CPU at tiny sizes (CI)")
    args = parser.parse_args()
    out = harness.out_dir(args.out, "gpu-check")
    sizes = SMOKE if args.smoke else FULL
    rows = []
    for case in CASES:
        path = out / f"{case}.toml"
        path.write_text(scenario(case, sizes))
        # the stage the gap comes from, named where there is one to name: the control's
        # verdict is its gap's own (summary.csv)
        for name, engine, library in RUNS:
            named = (
                ["--verdict"]
                if case == "augment" and (library == "grain" or not args.smoke)
                else []
            )
            run_dir = out / f"{name}-{case}"
            harness.pipeprof(
                ["compare", str(path), "--np", "1", "--engine", engine,
                 "--set", f"data.library={library}", *named, "--no-report",
                 "--no-dashboard", "--out", str(run_dir)],
                log=out / "gpu_check.log",
                timeout=1800,
            )  # fmt: skip
            rows.append({"run": name, "case": case, **row(run_dir)})
    print(
        f"{'run':<22}{'case':<9}{'samples/s':>11}{'gap':>15}  {'verdict':<24}{'stage':<9}GPU util"
    )
    for r in rows:
        gpu = (
            f"{r['gpu_util_pct']:.0f}%"
            if r["gpu_util_pct"] == r["gpu_util_pct"]
            else "- (NVML found no GPU)"
        )
        gap = f"{r['gap_pct']:.1f}% ±{r['gap_ci95']:.1f}"
        print(
            f"{r['run']:<22}{r['case']:<9}{r['samples_per_s']:>11,.0f}{gap:>15}  "
            f"{r['verdict']:<24}{r['stage'] or '-':<9}{gpu}"
        )
    if args.smoke:
        for r in rows:
            what = f"{r['run']} {r['case']}"
            harness.smoke_check(harness.finite_positive(r["samples_per_s"]), f"{what}: samples/s")
            harness.smoke_check(not math.isnan(r["gap_pct"]), f"{what}: no gap")
            harness.smoke_check(bool(r["verdict"]), f"{what}: no verdict")
        print("smoke: ok")
        return 0
    failed = []
    for r in rows:
        what = f"{r['run']} {r['case']}: gap {r['gap_pct']:.1f}% ±{r['gap_ci95']:.1f}"
        if r["case"] == "augment" and (r["verdict"].startswith("not") or r["stage"] != "augment"):
            failed.append(f"{what}, verdict {r['verdict']!r} naming {r['stage']!r}, not augment")
        if r["case"] == "control" and not r["verdict"].startswith("not"):
            failed.append(f"{what}, verdict {r['verdict']!r}: the control is input-bound")
        if math.isnan(r["gpu_util_pct"]):
            failed.append(f"{r['run']} {r['case']}: no GPU utilisation from NVML")
    for line in failed:
        print(f"FAIL {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    harness.entry(main)
