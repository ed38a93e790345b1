"""The ground-truth suite: bottlenecks injected with a known size, and how pipeprof's figures
compare with the answer known before the run.

Each case is a scenario built here from a few numbers (``calibration.toml`` and
``validation.toml``, side by side): the right gap follows from them and from figures of this
machine measured first, before any case runs, none of them from a case's own run: the spin
loop's iterations per µs of CPU, what one stored image costs to decode, the stored files'
sizes, and for each emulated device time the ceiling alone (a synthetic-only run of the
cheap pipeline's scenario at each np: its step S and the CPU u each rank's loop and Horovod
use). Kinds:

* ``control``: a cheap pipeline (small images cached in RAM, no augmentation): the model
  bounds; the fluid truth is 0 (the plain loop's measured loss where larger: below) and no
  stage is to blame.
* ``spin``: the same cheap pipeline plus a map stage (``benchmarks/truth/inject.py``) that
  computes ``spin_us`` µs of CPU per element. On an emulated device (which uses no CPU) a
  rank's pipeline needs P = batch × spin_us / c ms per step on the c cores left to it (the
  host's usable cores over its ranks, less u), and the true gap is max(0, 1 − S / P); the
  stage to blame is ``map``. That fluid truth counts as 0 what a pipeline's CPU costs the
  steps beside it while it fits in that share: a probe (since removed) measured the ceiling
  7-15% slower beside loads running val-spin-160's pipeline at np=4 and val-spin-650's at
  np=2, both fluid 0 here (docs/validation-archive.md, 2026-11-26, fd253b9). So
  for every emulated row whose fluid truth is under 20% (the rows that loss can move to
  another class), the suite measures that loss without pipeprof (``reference.py``: the case's
  training loop fed by its pipeline between phases of the same loop fed one repeated batch,
  timed by a plain loop), and the truth is the larger of the two. It is measured just after
  the case's own run (before eeff803 it was measured for every case before any case ran, up
  to 25 minutes before the run it judged), in two rounds of real and repeated in one launch. A row is
  *settled* when its truth is known before the run (no plain loop) or when the truths its two
  rounds give fall in one class; the report scores the class on every row and on the settled
  rows, and lists the others with their rounds.

  On a CPU-trained model (``device = "cpu"``, np=1) the pipeline's CPU adds to the model's
  own M CPU-ms per step on the same cores: gap = P_cpu / (P_cpu + M), M measured by a
  synthetic-only run of the model first; such a case gives its ``load`` =
  P_cpu / M, and the spin's size follows from M. That is a lower bound: the pipeline's
  threads also break up the model's parallel ops (the first run measured 30% where it said 9%,
  on a 4 ms step), so the CPU-trained cases are only ones whose class holds for a gap up to
  twice the bound: not input-bound (no spin) or highly (load ≥ 0.5); the model's input is
  64 px, a step of about 30 ms.
* ``throttle``: the pipeline without its cache, read from storage of ``throttle_mb_s`` MB/s
  per rank (``pipeline.read.throttle_mb_s``): P = the larger of batch × mean file bytes / rate
  and the batch's decoding on c cores; stage ``read``.
* ``decode``: large stored JPEGs (``stored_px``) decoded and resized for a 32 px model: P =
  batch × the decode cost per image / c; stage ``read``. Its device time is set from that
  cost so that the batch's decode on the host's cores over the device time is the case's
  ``load`` at np=1.

The truth class is the true gap's: not (< 5%), moderately (5–20%), highly (≥ 20%). pipeprof
is run as a user runs it: ``pipeprof compare SCENARIO --np 1,2,4 --verdict`` (its class is
summary.csv's verdict column, its stage verdict.json's bottleneck), then ``pipeprof predict
RUN --np 2,4`` from the np=1 measurements. Predict's error is against the measured gap at np
2 and 4, beside two trivial predictors on the same rows: the np=1 gap carried to every np,
and a constant equal to the rows' mean measured gap.

Calibration cases are the only ones any constant in pipeprof may be fitted on; validation
cases are never used to fit. The targets are judged on validation cases only.

    .venv/bin/python benchmarks/truth/run.py [--set calibration|validation|both] [--only NAME,...]
                                             [--out DIR] [--keep] [--rescore DIR [--same-machine [--add-references]]]
                                             [--report DIR] [--engine NAME] [--smoke]

``--engine data_parallel`` (Keras 3 on JAX) or ``mirrored`` (Keras 3 on TensorFlow 2.21, in
its own venv) runs every case and the ceilings on that engine, each plain loop on the same
engine (``reference.py --engine``). The suite's cases were sized on Horovod's ranks; on the
other engines their truth is still the larger of the fluid figure and the plain loop's.

``--rescore DIR --same-machine`` scores a kept run again with the machine's figures it saved:
only predict runs anew, so a change to predict is judged on the same measurements and truth.
With ``--add-references`` it first measures the plain loop's loss for the rows that should
have it and lack it (a run saved before np=1 rows had it), on this machine, with the saved
figures: use it only on the machine the run measured, as nothing checks that; each such entry
says when and where it was added, and the report's minutes count those launches too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository, for benchmarks.harness
from benchmarks import harness  # noqa: E402
from pipeprof.scenario import TrainConfig  # noqa: E402

SETS = {"calibration": HERE / "calibration.toml", "validation": HERE / "validation.toml"}
BATCH = 32
LINES = (5.0, 20.0)
CLASSES = ("not", "moderately", "highly")
TARGET_CLASS, TARGET_STAGE, TARGET_WITHIN, TARGET_MAE_RATIO = 0.95, 0.95, 0.90, 0.5
# the engine every launch of a run uses (``--engine``); "": pipeprof's own choice (Horovod on
# the legacy stack), and Horovod's plain loop
ENGINE = {"name": ""}


def engine_args() -> list[str]:
    """``--engine NAME`` for a pipeprof command, where the run names one."""
    return ["--engine", ENGINE["name"]] if ENGINE["name"] else []


@dataclass(frozen=True)
class Case:
    name: str
    set: str
    kind: str  # control | spin | throttle | decode
    device: str  # "emulated:MS" or "cpu"
    np: tuple[int, ...]
    spin_us: float = 0.0
    throttle_mb_s: float = 0.0
    stored_px: int = 64
    images: int = 1024
    image_size: int = 32  # the model's input side
    # device = "emulated:auto": the device time is set so P / D = load at np=1; a spin on a
    # CPU-trained model without spin_us: P_cpu = load × the model's CPU per step
    load: float = 0.0
    # how long a variant may measure: a user's default (the stopping rule ends most sooner).
    # It was 16 s before ab644bc, to fit the suite in 30 minutes: rows a point
    # or two from a line then ended "on the line" at 16 s, where a user's run measures on
    max_measure_s: float = TrainConfig().max_measure_s

    @property
    def stage(self) -> str:
        return {"control": "none", "spin": "map", "throttle": "read", "decode": "read"}[self.kind]


def load_cases(which: str) -> list[Case]:
    out = []
    for name in SETS if which == "both" else [which]:
        with open(SETS[name], "rb") as fh:
            doc = tomllib.load(fh)
        for c in doc["case"]:
            out.append(Case(set=name, **{**c, "np": tuple(c["np"])}))
    return out


@dataclass
class Machine:
    """What the truth rests on: measured before any case runs, but for the plain loop's loss
    and the speed checks, measured beside each case (``main``)."""

    cores: int
    spin_iter_per_us: float
    decode_us: dict[int, float] = field(default_factory=dict)  # stored px -> µs of CPU per image
    file_bytes: dict[int, float] = field(default_factory=dict)  # stored px -> mean bytes per file
    model_cpu_ms: float = math.nan  # the CPU-trained model's CPU-ms per step at np=1 (synthetic)
    # emulated device ms -> np -> (the ceiling's step ms, the CPU cores each rank uses on it):
    # the model alone, measured by a synthetic-only run of the cheap pipeline's scenario
    ceilings: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    # spin case -> CPU-ms of its whole pipeline per batch (the spin, and everything tf.data does
    # around it: the cache's reads, the shuffle, batching, its threads), run alone flat out
    pipeline_cpu_ms: dict[str, float] = field(default_factory=dict)
    # case -> np -> what training lost to the case's pipeline, measured by a plain loop
    # (``reference.py``), for the emulated rows whose fluid truth is under 20%: since
    # eeff803 just after the case's own run (``main``), not with the figures above
    reference: dict[str, dict[str, dict]] = field(default_factory=dict)
    # case -> the spin's iterations per µs of CPU measured again just before the case ran: how
    # far the machine's speed moved during the run (spin_iter_per_us is the start's; the
    # spins' sizes and the pipelines' CPU were set from that)
    speed: dict[str, float] = field(default_factory=dict)


def saved_machine(saved: dict) -> Machine:
    """The machine's figures as a finished run saved them in results.json (JSON's string keys
    made the stored sizes again)."""
    m = Machine(**saved)
    m.decode_us = {int(k): v for k, v in m.decode_us.items()}
    m.file_bytes = {int(k): v for k, v in m.file_bytes.items()}
    return m


def klass(gap: float) -> str:
    return CLASSES[0] if gap < LINES[0] else CLASSES[1] if gap < LINES[1] else CLASSES[2]


def device_ms(case: Case, m: Machine) -> float | None:
    """The emulated device's ms per step (None: CPU-trained). "emulated:auto" (the decode
    cases): the decode time of a batch at np=1 over the case's load, from the decode cost
    measured first, so the true gaps sit where the case file says."""
    if not case.device.startswith("emulated:"):
        return None
    if case.device == "emulated:auto":
        return round(BATCH * m.decode_us[case.stored_px] / 1e3 / m.cores / case.load, 1)
    return float(case.device.split(":")[1])


def spin_us(case: Case, m: Machine) -> float:
    """The spin's µs per element: the case's, or on a CPU-trained model with a ``load``, the
    share of the model's own CPU per step it asks for (P_cpu = load × M)."""
    if case.spin_us or case.device != "cpu":
        return case.spin_us
    return case.load * m.model_cpu_ms * 1e3 / BATCH


MIN_CORES = 0.05  # a rank's cores left for its pipeline, at the least


def expected_gap(case: Case, np_: int, m: Machine) -> float:
    """The true gap in %: the fluid truth, or where the plain loop measured the loss
    (``Machine.reference``) and found more, that."""
    fluid = fluid_gap(case, np_, m)
    ref = m.reference.get(case.name, {}).get(str(np_))
    return fluid if ref is None else max(fluid, ref["gap_pct"])


REFERENCE_BELOW = 20.0  # the rows a measured loss can move to another class: fluid truth below


def fluid_gap(case: Case, np_: int, m: Machine) -> float:
    """The fluid truth in %, from the case's numbers and the machine's (see the module's docstring).

    On an emulated device the ceiling's step S and the CPU u each rank's loop uses on it (its
    own thread, Horovod's) are the machine's, measured first for that device time and np: the
    pipeline has the rank's share of the cores less u. The first version of this formula took
    S as the device time and the whole share for the pipeline; at np=4 on 2 cores, where the
    four ranks' loops take much of the host, it called cal-spin-220 not input-bound where every
    run measured 20% (docs/validation.md keeps both versions' scores)."""
    device = device_ms(case, m)
    if case.kind == "control":
        return 0.0
    per_image_us = {
        "spin": spin_us(case, m),
        "decode": m.decode_us[case.stored_px],
        "throttle": m.decode_us[case.stored_px],
    }[case.kind]
    cpu_ms = BATCH * per_image_us / 1e3
    if (
        case.kind == "spin" and case.name in m.pipeline_cpu_ms
    ):  # measured: the spin and all around it
        cpu_ms = m.pipeline_cpu_ms[case.name]
    if device is None:  # CPU-trained: the pipeline's CPU adds to the model's
        return 100.0 * cpu_ms / (cpu_ms + m.model_cpu_ms)
    step, used = m.ceilings[f"{device:g}"][str(np_)]
    if math.isnan(step) or math.isnan(used):
        raise RuntimeError(
            f"no ceiling measured for emulated:{device:g} at np={np_} (host CPU telemetry missing?)"
        )
    pipe_ms = cpu_ms / max(MIN_CORES, m.cores / np_ - used)
    if case.kind == "throttle":  # reads wait on storage while other threads decode
        pipe_ms = max(
            pipe_ms, BATCH * m.file_bytes[case.stored_px] / (case.throttle_mb_s * 1e6) * 1e3
        )
    return 100.0 * max(0.0, 1.0 - step / pipe_ms)


def nominal_gap(case: Case, np_: int, m: Machine) -> float:
    """The first version's true gap: the device time as the ceiling, the rank's whole share of
    the cores for its pipeline, no decode under a throttled read."""
    device = device_ms(case, m)
    if case.kind == "control" or device is None:
        return fluid_gap(case, np_, m)
    if case.kind == "throttle":
        pipe_ms = BATCH * m.file_bytes[case.stored_px] / (case.throttle_mb_s * 1e6) * 1e3
    else:
        per_image_us = spin_us(case, m) if case.kind == "spin" else m.decode_us[case.stored_px]
        pipe_ms = BATCH * per_image_us / 1e3 / (m.cores / np_)
    return 100.0 * max(0.0, 1.0 - device / pipe_ms)


def scenario_toml(case: Case, m: Machine) -> str:
    device = "auto" if case.device == "cpu" else f"emulated:{device_ms(case, m):g}"
    spin = ""
    if case.kind == "spin":
        iterations = max(1, round(spin_us(case, m) * m.spin_iter_per_us))
        spin = f'\n[pipeline.map]\nfunction = "benchmarks.truth.inject:spin"\nkwargs = {{ iterations = {iterations} }}\n'
    cached = case.kind in ("control", "spin")
    return f"""name = "truth-{case.name}"
description = "ground-truth case {case.name} ({case.kind})"

[data]
source = "generated"
image_size = {case.image_size}
num_classes = 10

[data.generate]
images = {case.images}
size = {case.stored_px}
classes = 10
seed = 11
format = "jpeg"

[pipeline]
parallel_calls = "autotune"

[pipeline.read]
throttle_mb_s = {case.throttle_mb_s}

[pipeline.shuffle]
buffer_size = 256

[pipeline.augment]
enabled = false

[pipeline.cache]
enabled = {str(cached).lower()}
{spin}
[model]
name = "small_cnn"

[train]
batch_size = {BATCH}
device = "{device}"
warmup_steps = 10
min_measure_s = {min(4.0, case.max_measure_s):g}
max_measure_s = {case.max_measure_s:g}

[[variants]]
name = "real"
"""


def pipeprof(args: list[str], log: Path, timeout: int = 900) -> None:
    """``pipeprof ARGS``, its output appended to ``log`` (printed 200 columns wide)."""
    harness.pipeprof(args, log=log, timeout=timeout, env={**os.environ, "COLUMNS": "200"})


def pipeline_cpu_alone(root: Path, image_size: int, iterations: int) -> float:
    """``inject.pipeline_cpu`` in a process of its own (a pipeline's threads outlive their
    iterator for a while: measured in one process after another case, the same pipeline cost
    36 CPU-ms a batch where it cost 23 alone)."""
    out = harness.run(
        [
            sys.executable,
            "-m",
            "benchmarks.truth.inject",
            "pipeline",
            str(root),
            str(image_size),
            str(iterations),
        ],
        what="benchmarks.truth.inject pipeline",
        timeout=600,
    )
    return float(out.stdout.split()[-1])


def measure_machine(cases: list[Case], work: Path, log: Path) -> Machine:
    """The spin rate, each stored size's decode cost and file size (on the generated files the
    cases will read), and the CPU model's CPU per step: everything the truth needs, measured
    before any case runs."""
    import tensorflow as tf

    from benchmarks.truth.inject import calibrate
    from pipeprof.launch import topology

    m = Machine(cores=topology.usable_cores(), spin_iter_per_us=calibrate())

    def decode(e):
        return tf.image.resize(tf.io.decode_image(e, channels=3, expand_animations=False), [32, 32])

    for case in {c.stored_px: c for c in cases}.values():
        path = work / f"data-{case.stored_px}.toml"
        path.write_text(scenario_toml(dataclasses.replace(case, device="cpu", kind="control"), m))
        root = Path(harness.prepared(str(path))[1])
        files = sorted(root.rglob("*.jpg"))
        m.file_bytes[case.stored_px] = sum(f.stat().st_size for f in files) / len(files)
        # decoded as the pipeline decodes them: a one-thread tf.data map, in batches (so the
        # Python loop's cost per element is small beside the decode)
        sample = [f.read_bytes() for f in files[:: max(1, len(files) // 64)]]
        options = tf.data.Options()
        options.threading.private_threadpool_size = 1
        options.threading.max_intra_op_parallelism = 1
        ds = (
            tf.data.Dataset.from_tensor_slices(sample)
            .repeat(4)
            .map(decode)
            .batch(64)
            .with_options(options)
        )
        for _ in ds:  # trace and warm
            pass
        runs = []
        for _ in range(3):
            c0 = time.process_time()
            for _ in ds:
                pass
            runs.append((time.process_time() - c0) / (4 * len(sample)) * 1e6)
        m.decode_us[case.stored_px] = sorted(runs)[1]
        for spun in cases:
            if spun.kind == "spin" and spun.device != "cpu" and spun.stored_px == case.stored_px:
                iterations = max(1, round(spin_us(spun, m) * m.spin_iter_per_us))
                m.pipeline_cpu_ms[spun.name] = pipeline_cpu_alone(root, spun.image_size, iterations)
    emulated: dict[str, set[int]] = {}
    for c in cases:  # a control's truth needs no ceiling (``fluid_gap``: 0, or its plain loop)
        if c.kind != "control" and (d := device_ms(c, m)) is not None:
            emulated.setdefault(f"{d:g}", set()).update(c.np)
    for device, nps in sorted(emulated.items()):
        control = Case(
            f"ceiling-{device}",
            "",
            "control",
            f"emulated:{device}",
            tuple(sorted(nps)),
            max_measure_s=min(c.max_measure_s for c in cases),  # a smoke run's few seconds
        )
        (work / f"{control.name}.toml").write_text(scenario_toml(control, m))
        pipeprof(
            [
                "compare",
                str(work / f"{control.name}.toml"),
                "--np",
                ",".join(map(str, control.np)),
                "--synthetic-only",
                "--out",
                str(work / control.name),
                "--no-report",
                *engine_args(),
            ]
            + (["--oversubscribe"] if max(nps) > m.cores else []),
            log,
        )
        rows = harness.summary(work / control.name)
        m.ceilings[device] = {
            str(int(r["np"])): (
                1e3 * BATCH / float(r["samples_per_s_per_worker"]),
                float(r["cpu_cores_per_rank"]),
            )
            for _, r in rows.iterrows()
        }
    if any(c.device == "cpu" for c in cases):
        size = next(c.image_size for c in cases if c.device == "cpu")  # one size for the CPU cases
        (work / "model.toml").write_text(
            scenario_toml(Case("model", "", "control", "cpu", (1,), image_size=size), m)
        )
        pipeprof(
            [
                "compare",
                str(work / "model.toml"),
                "--np",
                "1",
                "--synthetic-only",
                "--out",
                str(work / "model"),
                "--no-report",
                *engine_args(),
            ],
            log,
        )
        m.model_cpu_ms = float(harness.measured_steps(work / "model")["cpu_ms"].mean())
    return m


# a smoke run's plain loop: one round of a few steps a phase (``--smoke``)
SMOKE_REFERENCE = {"rounds": 1, "steps": 20}
# ``inject.calibrate``'s sizes for the speed check before each case, which no truth rests on:
# its own (3 s a repeat here), or a smoke run's tenth of them
SPEED_CHECK: dict[str, int] = {}


def measure_references(
    cases: list[Case],
    m: Machine,
    work: Path,
    log: Path,
    added: bool = False,
    sizes: dict[str, int] | None = None,
) -> int:
    """The plain loop's loss (``reference.py``) for each emulated row whose fluid truth is under
    ``REFERENCE_BELOW`` and that ``m`` has none for yet; returns how many it measured. At np=1
    too: the lone rank's hand-off from tf.data's iterator (0.6 ms of a 24 ms step on a cached
    pipeline, 2026-11-27) and a pipeline's CPU beside the loop's are lost there as well; the
    fluid truth counts neither (runs saved before 2026-11-27 have np >= 2 only: ``--rescore
    --same-machine --add-references`` adds np=1's). ``added``: to a saved run, so each entry
    records when and on which host, and a row whose launch fails is left without one (its
    truth the fluid one) while the others go on. ``sizes``: ``reference.measure``'s rounds and
    steps, where not its own (a smoke run's)."""
    import socket

    from benchmarks.truth import reference

    measured = 0
    for case in cases:
        if device_ms(case, m) is None:  # CPU-trained: no emulated loop to feed
            continue
        for n in case.np:
            if str(n) in m.reference.get(case.name, {}):
                continue
            if fluid_gap(case, n, m) < REFERENCE_BELOW:
                path = work / f"{case.name}.toml"
                path.write_text(scenario_toml(case, m))
                try:
                    got = reference.measure(
                        path, n, log=log, engine=ENGINE["name"], **(sizes or {})
                    )
                except harness.Failed as exc:
                    if not added:
                        raise
                    print(f"reference: {case.name} np={n}: FAILED, none added: {exc}", flush=True)
                    continue
                if added:
                    got["added"] = f"{time.strftime('%Y-%m-%d %H:%M:%S')} on {socket.gethostname()}"
                m.reference.setdefault(case.name, {})[str(n)] = got
                measured += 1
                print(
                    f"reference: {case.name} np={n}: {got['gap_pct']:.1f}% (rounds "
                    + ", ".join(f"{g:.1f}" for g in got["round_gaps"])
                    + ")",
                    flush=True,
                )
    return measured


@dataclass
class Row:
    case: str
    set: str
    kind: str
    device: str
    np: int
    expected_gap: float
    true_class: str
    true_stage: str
    gap: float = math.nan
    gap_ci95: float = math.nan
    got_class: str = ""
    got_stage: str = ""
    predicted_gap: float = math.nan
    np1_gap: float = math.nan
    nominal_gap: float = math.nan  # the truth's first version (``nominal_gap``)
    fluid_gap: float = math.nan  # the truth before the plain loop's measured loss (``fluid_gap``)
    # the truth is known before the run, or its plain loop's rounds all give one class (True);
    # they give two (False); one round, as runs before eeff803 measured (None)
    truth_settled: bool | None = True

    @property
    def class_right(self) -> bool:
        return self.got_class == self.true_class

    @property
    def stage_right(self) -> bool:
        return self.got_stage == self.true_stage

    @property
    def on_a_line(self) -> bool:
        """pipeprof's verdict is "on the 5% / 20% line": its interval spans a line."""
        return "line" in self.got_class

    @property
    def truth_inside(self) -> bool:
        """The truth lies inside pipeprof's 95% interval."""
        return abs(self.gap - self.expected_gap) <= self.gap_ci95


def run_case(case: Case, m: Machine, work: Path, log: Path) -> list[Row]:
    """One case run as a user runs it, scored against the truth ``m`` holds now (the suite's
    ``main`` measures the plain loop between the two: ``compare_case``, then the references,
    then ``score_case``)."""
    return score_case(case, m, compare_case(case, m, work, log), log)


def compare_case(case: Case, m: Machine, work: Path, log: Path) -> Path:
    """``pipeprof compare --verdict`` on the case's scenario; its run directory."""
    scen = work / f"{case.name}.toml"
    scen.write_text(scenario_toml(case, m))
    out = work / case.name
    pipeprof(
        [
            "compare",
            str(scen),
            "--np",
            ",".join(map(str, case.np)),
            "--verdict",
            "--out",
            str(out),
            "--no-report",
            *engine_args(),
        ]
        + (["--oversubscribe"] if max(case.np) > m.cores else []),
        log,
    )
    return out


def truth_settled(case: str, np_: int, fluid: float, m: Machine) -> bool | None:
    """Whether the row's truth is one class however its plain loop's rounds read: True where it
    has no plain loop (the case's numbers give it) or all rounds give one class, None where the
    plain loop measured one round (nothing to compare)."""
    ref = m.reference.get(case, {}).get(str(np_))
    if ref is None:
        return True
    if len(ref["round_gaps"]) < 2:
        return None
    return len({klass(max(fluid, g)) for g in ref["round_gaps"]}) == 1


def score_case(case: Case, m: Machine, out: Path, log: Path) -> list[Row]:
    """The rows of one case's run directory: its truth, what compare said, and predict's
    figures (predict is run now, from the run's np=1 measurements)."""
    summary = harness.summary(out)
    verdicts = {v["np"]: v for v in harness.verdicts(out)}
    real = summary[summary["variant"] == "real"].set_index("np")
    predicted = {}
    targets = [n for n in case.np if n > 1]
    if targets and 1 in case.np:
        pipeprof(
            [
                "predict",
                str(out),
                "--np",
                ",".join(map(str, targets)),
                "--gpus-per-node",
                str(max(case.np)),
                "--cores-per-node",
                str(m.cores),
                "--no-report",
            ],
            log,
        )
        pred = harness.prediction(out)
        predicted = dict(zip(pred["np"].astype(int), pred["gap_pct"].astype(float)))
    rows = []
    for n in case.np:
        exp, fluid = expected_gap(case, n, m), fluid_gap(case, n, m)
        true_class = klass(exp)
        r = Row(
            case.name,
            case.set,
            case.kind,
            "cpu" if device_ms(case, m) is None else f"emulated:{device_ms(case, m):g}",
            n,
            exp,
            true_class,
            case.stage if true_class != "not" else "none",
            nominal_gap=nominal_gap(case, n, m),
            fluid_gap=fluid,
            truth_settled=truth_settled(case.name, n, fluid, m),
        )
        if n in real.index:
            r.gap, r.gap_ci95 = float(real.loc[n, "gap_pct"]), float(real.loc[n, "gap_pct_ci95"])
            said = real.loc[n, "verdict"]  # "not input-bound", ..., or "on the 20% line"
            r.got_class = said.removesuffix(" input-bound") if isinstance(said, str) else ""
        r.got_stage = verdicts.get(n, {}).get("bottleneck", "")
        r.predicted_gap = predicted.get(n, math.nan)
        r.np1_gap = float(real.loc[1, "gap_pct"]) if 1 in real.index else math.nan
        rows.append(r)
    return rows


def matrix(rows: list[Row], truth: str, got: str, labels: list[str]) -> str:
    seen = labels + sorted({getattr(r, got) for r in rows} - set(labels))
    corner = "truth \\ pipeprof"
    head = f"{corner:>18} " + " ".join(f"{g or '(none)':>16}" for g in seen)
    lines = [head]
    for t in labels:
        counts = [
            sum(1 for r in rows if getattr(r, truth) == t and getattr(r, got) == g) for g in seen
        ]
        if sum(counts):
            lines.append(f"{t:>18} " + " ".join(f"{c:>16}" for c in counts))
    return "\n".join(lines)


def predict_within(predicted: float, measured: float) -> bool:
    """predict's tolerance: within max(5 points, 20% of the measured gap)."""
    return abs(predicted - measured) <= max(5.0, 0.2 * abs(measured))


def predict_scores(rows: list[Row]) -> dict | None:
    scored = [
        r for r in rows if r.np > 1 and not math.isnan(r.gap) and not math.isnan(r.predicted_gap)
    ]
    if not scored:
        return None
    mean_gap = sum(r.gap for r in scored) / len(scored)
    out: dict[str, Any] = {"rows": len(scored), "constant_gap": mean_gap}
    for name, guess in (
        ("predict", lambda r: r.predicted_gap),
        ("np1_carried", lambda r: r.np1_gap),
        ("constant_mean", lambda r: mean_gap),
    ):
        errors = [abs(guess(r) - r.gap) for r in scored]
        within = [predict_within(guess(r), r.gap) for r in scored]
        out[name] = {"mae": sum(errors) / len(errors), "within": sum(within) / len(within)}
    return out


def report(rows: list[Row], m: Machine, minutes: float) -> tuple[str, dict]:
    fluid = {(r.case, str(r.np)): r.fluid_gap for r in rows}
    lines = [
        f"machine: {m.cores} cores; spin {m.spin_iter_per_us:.3f} iterations/µs of CPU; decode "
        + ", ".join(f"{px} px {us:.0f} µs" for px, us in m.decode_us.items())
        + (
            f"; CPU model {m.model_cpu_ms:.1f} CPU-ms/step"
            if not math.isnan(m.model_cpu_ms)
            else ""
        )
        + f"; {minutes:.1f} min"
        + (f"; engine {ENGINE['name']}" if ENGINE["name"] else ""),
        "spin cases' whole pipeline, CPU-ms per batch run alone (the spin's own is 32 x its µs): "
        + ", ".join(f"{name} {ms:.1f}" for name, ms in m.pipeline_cpu_ms.items()),
        *(
            [
                "the machine's speed, the spin's iterations per µs of CPU just before each case "
                f"(the figures above: {m.spin_iter_per_us:.3f}): "
                + ", ".join(f"{name} {v:.3f}" for name, v in m.speed.items())
            ]
            if m.speed
            else []
        ),
        "the loss a plain loop measured (reference.py; the truth is the larger of it and the fluid "
        "truth): "
        + (
            ", ".join(
                f"{name} np={n} {got['gap_pct']:.1f}% (rounds "
                + ", ".join(f"{g:.1f}" for g in got["round_gaps"])
                + f"; fluid {fluid.get((name, n), math.nan):.1f}%)"
                for name, by_np in m.reference.items()
                for n, got in by_np.items()
            )
            or "none"
        ),
        "",
    ]
    head = (
        f"{'set':<11} {'case':<22} {'device':<12} {'np':>2} {'true gap':>8} {'measured':>14} "
        f"{'true class':<10} {'pipeprof':<18} {'true stage':<10} {'stage':<8} {'predict':>7} {'np1':>6}"
    )
    lines.append(head)
    for r in rows:
        lines.append(
            f"{r.set:<11} {r.case:<22} {r.device:<12} {r.np:>2} {r.expected_gap:>7.1f}% "
            f"{r.gap:>7.1f}% ±{r.gap_ci95:<4.1f} {r.true_class:<10} "
            f"{(r.got_class or '-') + ('' if r.class_right else ' ✗'):<18} {r.true_stage:<10} "
            f"{(r.got_stage or '-') + ('' if r.stage_right else ' ✗'):<8} "
            f"{r.predicted_gap:>6.1f}% {r.np1_gap:>5.1f}%"
        )
    results: dict = {
        "machine": asdict(m),
        "minutes": minutes,
        "engine": ENGINE["name"] or "pipeprof's choice",
        "rows": [asdict(r) for r in rows],
        "sets": {},
    }
    for name in ("calibration", "validation"):
        sub = [r for r in rows if r.set == name]
        if not sub:
            continue
        bound = [r for r in sub if r.true_class != "not"]
        cls = sum(r.class_right for r in sub) / len(sub)
        stg = sum(r.stage_right for r in bound) / len(bound) if bound else math.nan
        scores = predict_scores(sub)
        results["sets"][name] = {
            "class_right": cls,
            "stage_right": stg,
            "rows": len(sub),
            "bound_rows": len(bound),
            "predict": scores,
        }
        nominal = sum(r.got_class == klass(r.nominal_gap) for r in sub)
        results["sets"][name]["class_right_nominal_truth"] = nominal / len(sub)
        settled = [r for r in sub if r.truth_settled]
        unsettled = [r for r in sub if r.truth_settled is False]
        unknown = [r for r in sub if r.truth_settled is None]  # one round: saved before eeff803
        cls_settled = sum(r.class_right for r in settled) / len(settled) if settled else math.nan
        results["sets"][name].update(
            class_right_settled=cls_settled,
            settled_rows=len(settled),
            unsettled_rows=len(unsettled),
        )
        ref_rounds = {
            (r.case, r.np): m.reference.get(r.case, {}).get(str(r.np), {}).get("round_gaps", [])
            for r in unsettled
        }
        measured = [r for r in sub if not math.isnan(r.gap)]
        lined = [r for r in measured if r.on_a_line]
        honesty = {
            "gap_mae": sum(abs(r.gap - r.expected_gap) for r in measured) / len(measured)
            if measured
            else math.nan,
            "wrong_clear_of_lines": sum(not r.class_right and not r.on_a_line for r in measured),
            "on_a_line": len(lined),
            "on_a_line_truth_inside": sum(r.truth_inside for r in lined),
        }
        results["sets"][name].update(honesty)
        lines += [
            "",
            f"== {name} cases"
            + (
                " (constants may be fitted on these)"
                if name == "calibration"
                else " (never fitted on: the targets are judged here)"
            ),
            f"verdict class right on {sum(r.class_right for r in sub)} of {len(sub)} rows ({100 * cls:.0f}%); "
            f"against the truth's first version (nominal cores and device time): {nominal} of {len(sub)}",
            f"on the {len(settled)} rows whose truth is settled (known before the run, or its plain "
            f"loop's rounds in one class): {sum(r.class_right for r in settled)} right"
            + (f" ({100 * cls_settled:.0f}%)" if settled else "")
            + (
                "; not settled: "
                + ", ".join(
                    f"{r.case} np={r.np} (rounds {', '.join(f'{g:.1f}' for g in ref_rounds[(r.case, r.np)])}%: "
                    f"pipeprof {r.gap:.1f}% ±{r.gap_ci95:.1f}{'' if r.class_right else ' ✗'})"
                    for r in unsettled
                )
                if unsettled
                else ""
            )
            + (
                f"; {len(unknown)} rows' plain loop measured one round (not known)"
                if unknown
                else ""
            ),
            matrix(sub, "true_class", "got_class", list(CLASSES)),
            f"the measured gap against the truth: mean absolute error {honesty['gap_mae']:.1f} "
            f"points; a wrong class with the interval clear of both lines on "
            f"{honesty['wrong_clear_of_lines']} rows; \"on a line\" on {honesty['on_a_line']} "
            f"rows, the truth inside the interval on {honesty['on_a_line_truth_inside']} of them",
            "",
            f"stage right on {sum(r.stage_right for r in bound)} of {len(bound)} input-bound rows"
            + (f" ({100 * stg:.0f}%)" if bound else ""),
            matrix(bound, "true_stage", "got_stage", ["map", "read"]) if bound else "",
        ]
        if scores:
            lines.append("")
            lines.append(
                f"predict np=1 -> 2, 4 on {scores['rows']} rows (within max(5 pts, 20% of the measured gap); "
                "mean absolute error in points):"
            )
            for k, label in (
                ("predict", "pipeprof predict"),
                ("np1_carried", "np=1 gap carried"),
                ("constant_mean", f"constant {scores['constant_gap']:.1f}% (the rows' mean)"),
            ):
                lines.append(
                    f"  {label:<34} within {100 * scores[k]['within']:5.1f}%   MAE {scores[k]['mae']:5.1f}"
                )
        if name == "validation":
            best = (
                min(scores[k]["mae"] for k in ("np1_carried", "constant_mean"))
                if scores
                else math.nan
            )
            checks = [
                ("verdict class >= 95%", cls >= TARGET_CLASS),
                *(
                    []  # a run whose plain loop measured one round: which rows are settled is unknown
                    if unknown
                    else [
                        (
                            "verdict class >= 95% of the settled rows",
                            bool(settled) and cls_settled >= TARGET_CLASS,
                        )
                    ]
                ),
                ("stage >= 95% of input-bound rows", not bound or stg >= TARGET_STAGE),
            ]
            if scores:
                checks += [
                    (
                        "predict within tolerance on >= 90%",
                        scores["predict"]["within"] >= TARGET_WITHIN,
                    ),
                    (
                        "predict MAE <= half the better trivial predictor's",
                        scores["predict"]["mae"] <= TARGET_MAE_RATIO * best,
                    ),
                ]
            results["targets"] = {k: bool(v) for k, v in checks}
            lines += [
                "",
                "targets (validation): "
                + "; ".join(f"{k}: {'MET' if v else 'NOT MET'}" for k, v in checks),
            ]
    return "\n".join(lines), results


def rereport(out: Path) -> int:
    """The report of a finished run, rendered again from its results.json by today's code."""
    saved = json.loads((out / "results.json").read_text())
    machine = saved_machine(saved["machine"])
    rows = [
        Row(**r)
        if "truth_settled" in r  # saved before eeff803: known from its rounds
        else Row(**r, truth_settled=truth_settled(r["case"], r["np"], r["fluid_gap"], machine))
        for r in saved["rows"]
    ]
    text, results = report(rows, machine, saved["minutes"])
    print(text)
    (out / "report.txt").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


# a map stage of 3.1 ms an element (true gap about 60%) and storage of 4.9 MB/s (about 35%):
# each far from a line, so 16 s of measuring at np=1 settles them
SMOKE_CASES = ("cal-spin-3100", "cal-throttle-4.9")
# on another engine than Horovod (``--engine``): the same map stage, and a model-bound
# control whose truth a plain loop on that engine measures: cal-control-80, since the hand-off
# of each batch to the replicas (calibration.toml) put cal-control's on the 5% line there
ENGINE_SMOKE_CASES = ("cal-control-80", "cal-spin-3100")


def smoke_names() -> tuple[str, ...]:
    return ENGINE_SMOKE_CASES if ENGINE["name"] not in ("", "horovod") else SMOKE_CASES


def smoke_cases(cases: list[Case]) -> list[Case]:
    """``--smoke``'s cases, the suite's CI slice, at np=1, 16 s a variant (the control 64 s,
    as test_truth_control gives it: a reading near the 5% line measures on), through the
    suite's whole path but predict (np=1 alone). On Horovod: two input-bound calibration
    cases, whose fluid truths are over 20%, so no plain loop runs (the control runs alone in
    test_truth_control.py); on another engine, the map stage and the control with its plain
    loop. tests/integration/test_truth_slice.py and test_keras3.py run it and ask each row its
    class and stage; the fits' smoke runs read a kept run of np 1 and 2 instead
    (``fixtures/``)."""
    return [
        dataclasses.replace(c, np=(1,), max_measure_s=64.0 if c.kind == "control" else 16.0)
        for c in cases
        if c.name in smoke_names()
    ]


def smoke_checks(rows: list[Row], m: Machine, results: dict[str, Any]) -> None:
    """What ``--smoke`` asks of the figures it reported: the machine measured, each row with a
    gap, a class and a stage, the plain loop's loss where the truth asks for it, and the set
    scored. Never whether a row is right: test_truth_slice asks that."""
    check, positive = harness.smoke_check, harness.finite_positive
    check(positive(m.spin_iter_per_us), f"the spin's rate {m.spin_iter_per_us}")
    check(
        bool(m.ceilings) and all(positive(s) for d in m.ceilings.values() for s, _ in d.values()),
        f"the ceilings {m.ceilings}",
    )
    got = sorted((r.case, r.np) for r in rows)
    names = smoke_names()
    check(got == [(c, 1) for c in sorted(names)], f"rows {got}, not {names} at np=1")
    for r in rows:
        said = f"{r.case} np={r.np}"
        check(r.got_class not in ("", "failed"), f"{said}: no class ({r.got_class!r})")
        check(not math.isnan(r.gap) and positive(r.gap_ci95), f"{said}: gap {r.gap} ±{r.gap_ci95}")
        check(r.got_stage in ("map", "read", "none"), f"{said}: stage {r.got_stage!r}")
        check(not math.isnan(r.expected_gap), f"{said}: no truth")
        if r.fluid_gap < REFERENCE_BELOW:
            check(str(r.np) in m.reference.get(r.case, {}), f"{said}: no plain loop measured")
    check(bool(results["sets"].get("calibration")), "no score of the calibration set")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", default="both", choices=["calibration", "validation", "both"])
    p.add_argument("--only", default="", help="comma-separated case names")
    p.add_argument(
        "--out", default="", help="where to write results.json and report.txt (default: a temp dir)"
    )
    p.add_argument("--keep", action="store_true", help="keep the run directories")
    p.add_argument(
        "--rescore",
        metavar="DIR",
        help="score the run directories a --keep run left in DIR/runs again (the machine measured "
        "anew, predict run anew) without running the cases",
    )
    p.add_argument(
        "--same-machine",
        action="store_true",
        help="with --rescore: take the machine's figures from DIR/results.json, not measured anew "
        "(predict run anew on the same truth: for a change to predict)",
    )
    p.add_argument(
        "--add-references",
        action="store_true",
        help="with --same-machine: first measure, on this machine, the plain loop's loss for the "
        "rows that should have it and have none (use it only on the machine the run measured: "
        "nothing checks that)",
    )
    p.add_argument(
        "--report",
        metavar="DIR",
        help="write DIR/report.txt again from DIR/results.json (nothing run or measured)",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"the suite's CI slice: {' and '.join(SMOKE_CASES)} at np=1 (with --engine "
        f"data_parallel or mirrored: {' and '.join(ENGINE_SMOKE_CASES)}), then a check of the "
        "figures it reports (none of its targets)",
    )
    p.add_argument(
        "--engine",
        default="",
        choices=["", "horovod", "data_parallel", "mirrored"],
        help="the engine of every launch, plain loops included (default: pipeprof's choice, "
        "with Horovod's plain loop)",
    )
    args = p.parse_args(argv)
    if args.report:
        if not (Path(args.report) / "results.json").is_file():
            p.error(f"--report: no results.json in {args.report} (a finished run.py --out DIR)")
        return rereport(Path(args.report))
    if args.same_machine and not (args.rescore and (Path(args.rescore) / "results.json").is_file()):
        p.error(
            "--same-machine: needs --rescore DIR of a finished run.py --keep (its results.json)"
        )
    if args.add_references and not args.same_machine:
        p.error("--add-references: only with --rescore DIR --same-machine")
    ENGINE["name"] = args.engine
    cases = load_cases(args.set)
    if args.smoke:
        if args.only or args.rescore:
            p.error("--smoke runs its own case: no --only or --rescore with it")
        cases = smoke_cases(cases)
        SPEED_CHECK.update(iterations=20_000, repeats=3)
    if args.only:
        wanted = set(args.only.split(","))
        if unknown := wanted - {c.name for c in cases}:
            p.error(f"--only: no such case(s): {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c.name in wanted]
    out = harness.out_dir(args.rescore or args.out, "pipeprof-truth-")
    work = out / "runs"
    work.mkdir(exist_ok=True)
    log = out / "pipeprof.log"
    t0 = time.monotonic()
    minutes_before = 0.0  # with --same-machine: the run's own time, which the report keeps
    machine_work = work  # where the machine's figures and the plain loops write (a rescore: anew)
    if args.same_machine:
        saved = json.loads((out / "results.json").read_text())
        m, minutes_before = saved_machine(saved["machine"]), saved["minutes"]
        started = time.monotonic()
        if args.add_references and measure_references(cases, m, work, log, added=True):
            minutes_before += (time.monotonic() - started) / 60  # the run's minutes, and these
    else:
        # a rescore measures the machine anew beside the kept runs, not over their ceilings
        machine_work = out / time.strftime("rescore-%Y%m%d-%H%M%S") if args.rescore else work
        machine_work.mkdir(exist_ok=True)
        m = measure_machine(cases, machine_work, log)
    print(f"machine measured: {m}", flush=True)
    rows: list[Row] = []
    for case in cases:
        started = time.monotonic()
        try:
            if args.rescore:
                if not (work / case.name / "summary.csv").is_file():
                    print(
                        f"{case.set}/{case.name}: no run directory in {work}; skipped", flush=True
                    )
                    continue
                run_dir = work / case.name
            else:
                from benchmarks.truth.inject import calibrate

                m.speed[case.name] = calibrate(**SPEED_CHECK)
                run_dir = compare_case(case, m, work, log)
            if not args.same_machine:  # the plain loop just after the case's own run
                try:
                    sizes = SMOKE_REFERENCE if args.smoke else None
                    measure_references([case], m, machine_work, log, sizes=sizes)
                except harness.Failed as exc:  # the case's own run is kept and scored
                    print(
                        f"{case.set}/{case.name}: the plain loop FAILED ({exc}); its rows' truth "
                        "is the fluid one",
                        flush=True,
                    )
            case_rows = score_case(case, m, run_dir, log)
        except (RuntimeError, OSError, KeyError, ValueError) as exc:  # harness.Failed among them
            print(
                f"{case.set}/{case.name}: FAILED: {exc}", flush=True
            )  # the others still run; it is scored wrong
            case_rows = [
                Row(
                    case.name,
                    case.set,
                    case.kind,
                    case.device,
                    n,
                    expected_gap(case, n, m),
                    klass(expected_gap(case, n, m)),
                    case.stage,
                    got_class="failed",
                    got_stage="failed",
                )
                for n in case.np
            ]
        rows += case_rows
        print(
            f"{case.set}/{case.name}: "
            + ", ".join(
                f"np={r.np} true {r.expected_gap:.0f}% got {r.gap:.1f}% {r.got_class}/{r.got_stage}"
                for r in case_rows
            )
            + f" ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
    text, results = report(rows, m, minutes_before or (time.monotonic() - t0) / 60)
    print()
    print(text)
    (out / "report.txt").write_text(text + "\n")
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten: {out / 'report.txt'}, {out / 'results.json'}")
    if args.smoke:
        smoke_checks(rows, m, results)
    if not args.keep and not args.rescore:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    harness.entry(main)
