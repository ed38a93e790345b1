"""Validate `pipeprof predict` across node shapes: a crowded source to a roomy target, and back.

On this machine a "node" is a CPU affinity mask. For each pipeline (light, augmentation-bound,
decode-bound; emulated devices, so the ranks' device time uses no CPU):

1. a compare at np 1 and 2 restricted to one core (``taskset``): the crowded shape, where a
   rank's pipeline and its training loop share that core (np=2: two ranks on it);
2. the same compare on two cores: the roomy shape (np=2: a core per rank).

Each shape's np=1 run is the source for the other shape: predict for 2 ranks on the other
shape's cores (``--gpus-per-node 2 --cores-per-node 1|2``) and compare with what that shape
measured at np 1 and 2. As predict's documentation asks for a node whose synchronisation no
network figure describes, each target shape also gets a synthetic-only compare (its ceiling:
the synthetic step at np 1 and 2, no data read), passed as ``--ceiling``; the real steps are
predicted from the source alone. Crowded → roomy is the case of a workstation predicting a cluster
node; roomy → crowded the reverse. 3 pipelines × 2 directions × 2 worker counts = 12 pairs,
each to land within ±5 points. The same-shape predictions (np=1 → np=2 on its own cores) are
printed too, for reference, and not counted.

    .venv/bin/python benchmarks/validate_predict_shapes.py [--runs 2] [--pipelines light,augment,decode]
                                                           [--keep DIR]

Run it alone on the machine (it needs both cores to itself): about 12 minutes a run.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import harness
import pandas as pd

from pipeprof.rundir import RunDir

TOLERANCE_POINTS = 5.0

COMMON = """
[data]
source = "generated"
num_classes = 10
image_size = {image_size}

[data.generate]
images = {images}
size = {stored}
classes = 10
seed = 7

[pipeline.shuffle]
buffer_size = 256

[pipeline.cache]
enabled = {cache}

[pipeline.augment]
enabled = {augment}
strength = 1.0
rotation_deg = 20.0

[model]
name = "small_cnn"

[train]
batch_size = {batch}
device = "emulated:{step_ms}"
warmup_steps = 10
measure_steps = {steps}

[[variants]]
name = "real"

[launch]
np = [1, 2]
oversubscribe = true
"""

# name: (what it is, the scenario's parameters). Each pipeline's CPU per step is a sizeable
# share of one core, so one core is crowded and two are roomy, at np 1 and 2 alike
PIPELINES = {
    "light": (
        "cached 32px images, no augmentation",
        dict(
            image_size=32,
            images=1000,
            stored=32,
            cache="true",
            augment="false",
            batch=64,
            step_ms=20,
        ),
    ),
    "augment": (
        "cached 64px images, per-image augmentation",
        dict(
            image_size=64,
            images=1000,
            stored=64,
            cache="true",
            augment="true",
            batch=56,
            step_ms=40,
        ),
    ),
    "decode": (
        "256px JPEGs decoded and resized to 64px each step, no cache",
        dict(
            image_size=64,
            images=800,
            stored=256,
            cache="false",
            augment="false",
            batch=32,
            step_ms=40,
        ),
    ),
}
# the photo-crop case: 384px photos decoded, resized to 128px and augmented, a CPU-trained
# source (the model on the host's cores beside the pipeline) predicting an accelerator's step
PHOTO = dict(
    image_size=128, images=600, stored=384, cache="false", augment="true", batch=32, step_ms=100
)
SHAPES = {"crowded": [0], "roomy": [0, 1]}  # CPUs per shape (of this process's affinity)


def pipeprof(args: list[str], cpus: list[int] | None = None) -> None:
    """``pipeprof ARGS``, on the given CPUs only (``taskset``) when ``cpus`` is given."""
    prefix = ["taskset", "-c", ",".join(map(str, cpus))] if cpus is not None else []
    harness.run([*prefix, *harness.PIPEPROF, *args], what=f"pipeprof {' '.join(args)}")


def one_run(base: Path, pipelines: list[str], steps: int) -> pd.DataFrame:
    mine = sorted(os.sched_getaffinity(0))
    if len(mine) < 2:
        sys.exit("this benchmark needs two cores")
    rows = []
    for name in pipelines:
        what, params = PIPELINES[name]
        scenario = base / f"{name}.toml"
        scenario.write_text(
            f'name = "shapes-{name}"\ndescription = "{what}"\n'
            + COMMON.format(steps=steps, **params)
        )
        runs, ceilings = {}, {}
        for shape, cpus in SHAPES.items():
            out, ceiling = base / f"{name}-{shape}", base / f"{name}-{shape}-ceiling"
            t0 = time.monotonic()
            pipeprof(
                ["compare", str(scenario), "--out", str(out), "--no-report", "--no-dashboard"],
                cpus=[mine[c] for c in cpus],
            )
            pipeprof(
                [
                    "compare",
                    str(scenario),
                    "--synthetic-only",
                    "--out",
                    str(ceiling),
                    "--no-report",
                    "--no-dashboard",
                ],
                cpus=[mine[c] for c in cpus],
            )
            print(
                f"  {name}, {shape} ({len(cpus)} core{'s' if len(cpus) > 1 else ''}): "
                f"{time.monotonic() - t0:.0f} s",
                flush=True,
            )
            runs[shape], ceilings[shape] = out, ceiling
        measured = {
            shape: harness.summary(out).query("variant == 'real'").set_index("np")
            for shape, out in runs.items()
        }
        for source, target in (
            ("crowded", "roomy"),
            ("roomy", "crowded"),
            ("crowded", "crowded"),
            ("roomy", "roomy"),
        ):
            pipeprof(
                [
                    "predict",
                    str(runs[source]),
                    "--np",
                    "1,2",
                    "--gpus-per-node",
                    "2",
                    "--cores-per-node",
                    str(len(SHAPES[target])),
                    "--ceiling",
                    str(ceilings[target]),
                    "--no-report",
                ]
            )
            pred = harness.prediction(runs[source]).set_index("np")
            note = crowded_notes(runs[source])
            for n in (1, 2):
                if source == target and n == 1:
                    continue  # the source run itself
                m = measured[target].loc[n]
                rows.append(
                    dict(
                        pipeline=name,
                        source=source,
                        target=target,
                        np=n,
                        predicted=float(pred.loc[n, "gap_pct"]),
                        measured=float(m["gap_pct"]),
                        ci95=float(m["gap_pct_ci95"]),
                        cause=pred.loc[n, "gap_cause"],
                        counted=source != target,
                        note=note,
                    )
                )
    frame = pd.DataFrame(rows)
    frame["difference"] = frame["predicted"] - frame["measured"]
    frame["within"] = frame["difference"].abs() <= TOLERANCE_POINTS
    return frame


def crowded_notes(run_dir: Path) -> str:
    """predict's note on a crowded source, from the prediction it wrote ("" when not crowded)."""
    notes = RunDir(run_dir).prediction_info()["notes"]
    return " ".join(n for n in notes if "busy over its real steps" in n)


def photo_check(base: Path, steps: int) -> dict:
    """A CPU-trained source of the photo-crop pipeline on both cores (its host near saturation),
    predicting np=1 on an accelerator with a roomy share of them; against an emulated run of that
    accelerator on the same cores."""
    scenario = base / "photo.toml"
    scenario.write_text(
        'name = "shapes-photo"\ndescription = "384px photos to 128px, augmented"\n'
        + COMMON.format(steps=steps // 2, **PHOTO)
    )
    source, target = base / "photo-cpu", base / f"photo-emulated-{PHOTO['step_ms']}"
    pipeprof(
        [
            "compare",
            str(scenario),
            "--np",
            "1",
            "--device",
            "auto",
            "--out",
            str(source),
            "--no-report",
            "--no-dashboard",
        ]
    )
    pipeprof(
        [
            "compare",
            str(scenario),
            "--np",
            "1",
            "--out",
            str(target),
            "--no-report",
            "--no-dashboard",
        ]
    )
    measured = harness.summary(target).set_index("variant")
    step_ms = (
        1e3 * PHOTO["batch"] / float(measured.loc["synthetic", "samples_per_s"])
    )  # the accelerator's step
    pipeprof(
        [
            "predict",
            str(source),
            "--np",
            "1",
            "--gpus-per-node",
            "1",
            "--cores-per-node",
            str(len(SHAPES["roomy"])),
            "--step-ms",
            f"{step_ms:.2f}",
            "--no-report",
        ]
    )
    src = harness.summary(source).set_index("variant")
    pred = harness.prediction(source).set_index("np")
    return dict(
        source_gap=float(src.loc["real", "gap_pct"]),
        source_busy=float(src.loc["real", "cpu_util_pct"]),
        step_ms=step_ms,
        predicted=float(pred.loc[1, "gap_pct"]),
        measured=float(measured.loc["real", "gap_pct"]),
        ci95=float(measured.loc["real", "gap_pct_ci95"]),
        notes=crowded_notes(source),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    ap.add_argument("--steps", type=int, default=120, help="measured steps per variant")
    ap.add_argument(
        "--keep", type=Path, help="keep the run directories here (default: a temporary directory)"
    )
    args = ap.parse_args()
    pipelines = [p.strip() for p in args.pipelines.split(",") if p.strip()]
    for p in pipelines:
        if p not in PIPELINES:
            sys.exit(f"--pipelines: unknown pipeline '{p}' (known: {', '.join(PIPELINES)})")
    pd.set_option("display.width", 200)
    landed = []
    with harness.scratch(args.keep) as scratch:
        for k in range(args.runs):
            base = scratch / f"run{k + 1}"
            base.mkdir(parents=True, exist_ok=False)
            print(f"run {k + 1} of {args.runs}", flush=True)
            frame = one_run(base, pipelines, args.steps)
            print(
                frame.drop(columns=["note"]).to_string(
                    index=False, float_format=lambda v: f"{v:.1f}"
                )
            )
            for note in sorted(set(frame["note"]) - {""}):
                print(f"  predict said: {note}")
            photo = photo_check(base, args.steps)
            photo_ok = abs(photo["predicted"] - photo["measured"]) <= TOLERANCE_POINTS
            print(
                f"photo crops: CPU-trained source at {photo['source_busy']:.0f}% host CPU (its own gap "
                f"{photo['source_gap']:.1f}%) → np=1 on an accelerator of {photo['step_ms']:.1f} ms with 2 cores: "
                f"predicted {photo['predicted']:.1f}%, measured (emulated) {photo['measured']:.1f}% "
                f"±{photo['ci95']:.1f}: {'within' if photo_ok else 'NOT within'} ±{TOLERANCE_POINTS:g} points",
                flush=True,
            )
            print(f"  predict said: {photo['notes']}")
            counted = frame[frame["counted"]]
            landed.append((int(counted["within"].sum()), len(counted), photo_ok))
            print(
                f"run {k + 1}: {landed[-1][0]} of {landed[-1][1]} cross-shape pairs within "
                f"±{TOLERANCE_POINTS:g} points",
                flush=True,
            )
    ok = all(hit == total and photo_ok for hit, total, photo_ok in landed)
    print(
        ("PASS" if ok else "FAIL")
        + ": "
        + ", ".join(f"{h}/{t}" for h, t, _ in landed)
        + f" cross-shape pairs within ±{TOLERANCE_POINTS:g} points per run; photo crops within in "
        + f"{sum(o for *_, o in landed)} of {len(landed)}"
    )


if __name__ == "__main__":
    harness.entry(main)
