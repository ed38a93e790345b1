"""Does pipeprof's synthetic twin train as fast as a plain Horovod Keras script? One run, side by side.

Method: for each worker count, alternate the two measurements for ``--rounds`` rounds, in
A B B A order (plain then pipeprof in odd rounds, pipeprof then plain in even ones), so that
slow drift of the machine hits both alike:

* plain: ``horovodrun -np N -H localhost:N --gloo python benchmarks/plain_keras_synthetic.py``,
  ``model.fit`` on one repeated random batch (see that script); its ``samples_per_s`` is
  global batch × measured steps / wall seconds between the end of the warm-up and the end of
  the last batch.
* pipeprof: ``pipeprof compare SCENARIO --set launch.np=[N] --out TMP --steps S --warmup W``
  (plus the model, batch, image size, class and optimizer overrides; ``--np 2`` would mean
  the powers of two up to 2, i.e. 1 and 2), and the ``samples_per_s`` of the
  ``synthetic`` row of ``TMP/summary.csv``; ``--synthetic-only``, so no real pipeline runs in
  the launch.

``--engine data_parallel`` (Keras 3 on JAX) or ``--engine mirrored`` (Keras 3 on TensorFlow):
the plain side is ``benchmarks/plain_keras3_synthetic.py``, one process driving the N replicas
as pipeprof's engine does on one host, its ``model.fit`` under Keras's own ``jit_compile`` and
``steps_per_execution`` (pipeprof keeps both); pipeprof's side is the same compare with
``--engine``. Run it with the Keras 3 stack's Python.

``--engine ddp`` (PyTorch DDP): the plain side is ``benchmarks/plain_ddp_synthetic.py`` under
torchrun, one process a rank, training quickstart's small CNN on one random batch made once on
the device (no pipeline, no pipeprof code); pipeprof's side is the same compare with
``--engine ddp``. Run it with the torch stack's Python (``.venv-torch``).

Both sides use the same model, per-worker batch, learning rate (0.01 × N, SGD momentum 0.9),
warm-up and measured steps, and CPU intra-op threads (usable cores // local ranks). Each
round is a pair; the verdict takes the median over rounds of the per-round ratio pipeprof /
plain, which must be >= ``--threshold`` (0.98). The ratio of the two medians is printed too;
it agrees on a steady machine but is thrown off by drift between rounds.
A second ratio, from each run's median step time (pipeprof's ``step_time_ms_p50``, the plain
script's median batch interval), is printed as a cross-check: a neighbour that slows a stretch
of one run moves samples/s but hardly the median.

Other load: on a shared machine, other processes competing for the cores bias whichever side
they happen to overlap. For each launch the script takes the machine's busy CPU time from
/proc/stat minus the CPU time of this script and its (waited-for) descendants, divided by the
wall time: the cores used by everything else. A round in which either launch saw more than
``--max-other-load`` cores is measured again after a pause (up to ``--retries`` times); a
round still loaded after that is marked ``*`` and left out of the medians and the verdict
(unless every round is, and then the verdict carries a warning).

The script always exits 0 once both sides have measured; it exits 1 if a launch fails.

``--smoke``: one tiny round at np=1 (32 px, batch 8, 3 + 20 steps), then a check of its figures.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402

PLAIN_SCRIPT = Path(__file__).resolve().parent / "plain_keras_synthetic.py"
PLAIN_KERAS3 = Path(__file__).resolve().parent / "plain_keras3_synthetic.py"
PLAIN_DDP = Path(__file__).resolve().parent / "plain_ddp_synthetic.py"
BACKENDS = {"data_parallel": "jax", "mirrored": "tensorflow"}  # the Keras 3 engines'
PLAIN_TAG = "PLAIN-SYNTHETIC"
NOISY_SPREAD = (
    0.05  # per-round ratios spread wider than this and straddling the threshold: unresolved
)
# --smoke: the defaults it gives the other flags (one given explicitly still wins)
SMOKE = dict(np="1", rounds=1, image_size=32, batch_size=8, warmup=3, steps=20, retries=0)


@dataclass(frozen=True)
class Config:
    scenario: str
    model: str
    image_size: int
    classes: int
    batch_size: int
    warmup: int
    steps: int
    timeout_s: int
    engine: str = "horovod"


@dataclass(frozen=True)
class Measurement:
    samples_per_s: float  # the headline figure: samples over the measured steps / their time
    samples_per_s_p50: float  # global batch / median step time
    other_load: float = math.nan  # mean cores busy with other processes during the launch


@dataclass(frozen=True)
class Round:
    np: int
    index: int
    plain: Measurement
    pipeprof: Measurement

    @property
    def ratio(self) -> float:
        return self.pipeprof.samples_per_s / self.plain.samples_per_s

    @property
    def ratio_p50(self) -> float:
        return self.pipeprof.samples_per_s_p50 / self.plain.samples_per_s_p50

    @property
    def other_load(self) -> float:
        return max(self.plain.other_load, self.pipeprof.other_load)


def cpu_seconds() -> tuple[float, float] | None:
    """(busy CPU-seconds of the whole machine, CPU-seconds of this process and its waited-for children)."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(v) for v in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    machine = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    ours = sum(
        r.ru_utime + r.ru_stime
        for r in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )
    return machine, ours


def with_other_load(launch: Callable[[], Measurement]) -> Measurement:
    """Run ``launch`` and attach the cores other processes used meanwhile (nan where unknown)."""
    before, t0 = cpu_seconds(), time.monotonic()
    result = launch()
    after, wall = cpu_seconds(), time.monotonic() - t0
    if before is None or after is None or wall <= 0:
        return result
    other = ((after[0] - before[0]) - (after[1] - before[1])) / wall
    return replace(result, other_load=max(0.0, other))


def worker_env() -> dict[str, str]:
    """The environment pipeprof gives its ranks (pipeprof.launch.horovod.worker_env), for both sides."""
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(harness.REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    return env


def run_plain(cfg: Config, np: int) -> Measurement:
    if cfg.engine == "horovod":
        start = [*harness.horovodrun(np), sys.executable, str(PLAIN_SCRIPT)]
    elif cfg.engine == "ddp":  # one process a rank, started by torchrun
        start = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1"]
        start += [f"--nproc-per-node={np}", "--max-restarts=0", str(PLAIN_DDP)]
    else:  # one process drives the np replicas, as pipeprof's Keras 3 engines on one host
        start = [sys.executable, str(PLAIN_KERAS3), "--backend", BACKENDS[cfg.engine]]
        start += ["--np", str(np)]
    model = [] if cfg.engine == "ddp" else ["--model", cfg.model]  # ddp's: small_cnn
    argv = [
        *start,
        *model,
        "--image-size",
        str(cfg.image_size),
        "--classes",
        str(cfg.classes),
        "--batch-size",
        str(cfg.batch_size),
        "--warmup",
        str(cfg.warmup),
        "--steps",
        str(cfg.steps),
    ]
    what = f"plain {'DDP' if cfg.engine == 'ddp' else 'Keras'} at np={np}"
    proc = harness.run(argv, what=what, env=worker_env(), timeout=cfg.timeout_s)
    result = harness.read_tagged(proc.stdout, PLAIN_TAG)
    if result is None:
        raise RuntimeError(f"{what} printed no {PLAIN_TAG} line")
    return Measurement(float(result["samples_per_s"]), float(result["samples_per_s_p50"]))


def run_pipeprof(cfg: Config, np: int, out_dir: Path) -> Measurement:
    # launch.np rather than --np: "--np 2" means the powers of two up to 2, i.e. 1 and 2.
    args = [
        "compare",
        cfg.scenario,
        "--engine",
        cfg.engine,
        "--synthetic-only",
        "--set",
        f"launch.np=[{np}]",
        "--out",
        str(out_dir),
        "--steps",
        str(cfg.steps),
        "--warmup",
        str(cfg.warmup),
        "--batch-size",
        str(cfg.batch_size),
        "--model",
        cfg.model,
        "--set",
        f"data.image_size={cfg.image_size}",
        "--set",
        f"data.num_classes={cfg.classes}",
        "--set",
        f"data.generate.classes={cfg.classes}",
        "--set",
        "train.learning_rate=0.01",
        "--set",
        "train.lr_scaling=linear",
        "--set",
        "train.optimizer=sgd",
        "--set",
        "train.momentum=0.9",
        "--set",
        "train.batch_mode=per_worker",
    ]
    harness.pipeprof(
        args, what=f"pipeprof compare at np={np}", env=worker_env(), timeout=cfg.timeout_s
    )
    summary = harness.summary(out_dir)
    for _, row in summary[summary["variant"] == "synthetic"].iterrows():
        if int(row["np"]) == np:
            global_batch = cfg.batch_size * np  # batch_mode = per_worker
            return Measurement(
                float(row["samples_per_s"]),
                global_batch / (float(row["step_time_ms_p50"]) / 1e3),
            )
    raise RuntimeError(f"{out_dir / 'summary.csv'} has no synthetic row at np={np}")


def spread(values: list[float]) -> float:
    """(max − min) / median: how much the machine moved between runs of the same thing."""
    return (max(values) - min(values)) / statistics.median(values)


def report(cfg: Config, rounds: list[Round], threshold: float, max_other_load: float) -> None:
    print()
    print(
        f"synthetic throughput, engine {cfg.engine}, {cfg.model} {cfg.image_size}x{cfg.image_size}x3, {cfg.classes} classes, "
        f"batch {cfg.batch_size}/worker, {cfg.warmup} warm-up + {cfg.steps} measured steps per run"
    )
    print(
        "samples/s: samples / measured time (the acceptance figure); "
        "p50-step: global batch / median step time (cross-check)"
    )
    print(
        "ratio: pipeprof / plain; its 'median' row is the median of the per-round ratios (paired)"
    )
    print(
        "others: the most CPU cores other processes used during either launch of the round "
        f"(* above {max_other_load:g})"
    )
    header = (
        f"{'np':>3}  {'round':>6}  {'plain samples/s':>15}  {'pipeprof samples/s':>18}  {'ratio':>6}  "
        f"{'plain p50-step':>14}  {'pipeprof p50-step':>17}  {'ratio':>6}  {'others':>7}"
    )
    rule = "-" * len(header)
    print(rule)
    print(header)
    print(rule)
    for np in sorted({r.np for r in rounds}):
        mine = [r for r in rounds if r.np == np]
        for r in mine:
            mark = "*" if r.other_load > max_other_load else " "
            print(
                f"{np:>3}  {r.index:>6}  {r.plain.samples_per_s:>15.1f}  {r.pipeprof.samples_per_s:>18.1f}  "
                f"{r.ratio:>6.3f}  {r.plain.samples_per_s_p50:>14.1f}  {r.pipeprof.samples_per_s_p50:>17.1f}  "
                f"{r.ratio_p50:>6.3f}  {r.other_load:>6.2f}{mark}"
            )

        loaded = [r.index for r in mine if r.other_load > max_other_load]
        basis = [r for r in mine if r.index not in loaded] or mine  # rounds the verdict rests on

        def med(side: str, field: str, basis: list = basis) -> float:
            return statistics.median(getattr(getattr(r, side), field) for r in basis)

        ratio = statistics.median(r.ratio for r in basis)
        print(
            f"{np:>3}  {'median':>6}  {med('plain', 'samples_per_s'):>15.1f}  "
            f"{med('pipeprof', 'samples_per_s'):>18.1f}  {ratio:>6.3f}  "
            f"{med('plain', 'samples_per_s_p50'):>14.1f}  {med('pipeprof', 'samples_per_s_p50'):>17.1f}  "
            f"{statistics.median(r.ratio_p50 for r in basis):>6.3f}"
        )
        ok = ratio >= threshold
        unpaired = med("pipeprof", "samples_per_s") / med("plain", "samples_per_s")
        print(
            f"np={np}: {'PASS' if ok else 'FAIL'}: pipeprof/plain samples/s = {ratio:.3f} "
            f"({'>=' if ok else '<'} {threshold}; median of per-round ratios over rounds "
            f"{', '.join(str(r.index) for r in basis)}; ratio of the medians: {unpaired:.3f})"
        )
        if loaded and basis is not mine:
            print(
                f"np={np}: round(s) {', '.join(map(str, loaded))} left out of the medians: other processes "
                f"used more than {max_other_load:g} cores in every attempt"
            )
        elif loaded:
            print(
                f"np={np}: warning: other processes used more than {max_other_load:g} cores in every round: "
                f"the ratios measure the neighbours as much as pipeprof; rerun when the machine is idle"
            )
        ratios = [r.ratio for r in basis]
        passing = sum(x >= threshold for x in ratios)
        drift = {
            side: spread([getattr(r, side).samples_per_s for r in basis])
            for side in ("plain", "pipeprof")
        }
        print(
            f"np={np}: per-round ratios {min(ratios):.3f} to {max(ratios):.3f}, {passing} of {len(ratios)} "
            f">= {threshold}; run-to-run spread (max-min)/median {drift['plain']:.0%} plain, "
            f"{drift['pipeprof']:.0%} pipeprof"
        )
        if 0 < passing < len(ratios) and spread(ratios) > NOISY_SPREAD:
            print(
                f"np={np}: warning: the per-round ratios straddle {threshold} and spread over "
                f"{spread(ratios):.0%}: the verdict is not resolved; rerun on a quieter machine "
                f"or with more --rounds"
            )
        print(rule)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", default="1", help="comma-separated worker counts (default: 1)")
    p.add_argument("--rounds", type=int, default=5, help="A/B rounds per worker count (default: 5)")
    p.add_argument(
        "--scenario", default="quickstart", help="pipeprof scenario (default: quickstart)"
    )
    p.add_argument(
        "--engine",
        default="horovod",
        choices=("horovod", *BACKENDS, "ddp"),
        help="horovod (Keras 2), a Keras 3 engine: data_parallel (JAX), mirrored "
        "(TensorFlow), whose plain side is plain_keras3_synthetic.py; or ddp (PyTorch), "
        "whose plain side is plain_ddp_synthetic.py under torchrun (default: horovod)",
    )
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per worker (default: 32)")
    p.add_argument(
        "--warmup", type=int, default=20, help="warm-up steps dropped per run (default: 20)"
    )
    p.add_argument("--steps", type=int, default=300, help="measured steps per run (default: 300)")
    p.add_argument(
        "--threshold", type=float, default=0.98, help="minimum pipeprof/plain ratio (default: 0.98)"
    )
    p.add_argument(
        "--timeout", type=int, default=900, help="seconds one launch may take (default: 900)"
    )
    p.add_argument(
        "--max-other-load",
        type=float,
        default=0.25,
        metavar="CORES",
        help="repeat a round when other processes used more cores than this (default: 0.25)",
    )
    p.add_argument("--retries", type=int, default=2, help="repeats of a loaded round (default: 2)")
    p.add_argument(
        "--retry-wait",
        type=float,
        default=20.0,
        metavar="S",
        help="pause before repeating a loaded round (default: 20)",
    )
    p.add_argument("--keep", action="store_true", help="keep pipeprof's run directories")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="one tiny round at np=1, then a check of its figures (CI)",
    )
    args = harness.parse_smoke(p, SMOKE, argv)
    if args.engine == "ddp" and args.model != "small_cnn":
        p.error(f"--model {args.model}: the plain DDP side trains small_cnn only")
    nps = [int(n) for n in args.np.split(",") if n.strip()]
    cfg = Config(
        args.scenario,
        args.model,
        args.image_size,
        args.classes,
        args.batch_size,
        args.warmup,
        args.steps,
        args.timeout,
        args.engine,
    )

    work = Path(tempfile.mkdtemp(prefix="pipeprof-overhead-"))
    if args.smoke and args.scenario == p.get_default("scenario"):  # no 3,000 JPEGs to make
        cfg = replace(cfg, scenario=str(harness.smoke_scenario(work)))
    rounds: list[Round] = []
    try:
        for np in nps:
            for i in range(1, args.rounds + 1):
                for attempt in range(args.retries + 1):
                    got: dict[str, Measurement] = {}
                    # plain first in odd rounds, pipeprof first in even ones (A B B A ...): drift cancels
                    for side in harness.turns(["plain", "pipeprof"], i - 1):
                        out_dir = work / f"np{np}-round{i}-try{attempt + 1}"
                        launch = (
                            partial(run_plain, cfg, np)
                            if side == "plain"
                            else partial(run_pipeprof, cfg, np, out_dir)
                        )
                        got[side] = with_other_load(launch)
                        print(
                            f"np={np} round {i}: {side:<8} {got[side].samples_per_s:9.1f} samples/s "
                            f"(other processes: {got[side].other_load:.2f} cores)",
                            flush=True,
                        )
                    result = Round(np, i, got["plain"], got["pipeprof"])
                    if not result.other_load > args.max_other_load or attempt == args.retries:
                        break
                    print(
                        f"np={np} round {i}: other processes used {result.other_load:.2f} cores; "
                        f"repeating the round in {args.retry_wait:g} s",
                        flush=True,
                    )
                    time.sleep(args.retry_wait)
                rounds.append(result)
    except RuntimeError as exc:  # harness.Failed among them: a launch failed or timed out
        print(f"error: {exc}", file=sys.stderr)
        if rounds:
            report(cfg, rounds, args.threshold, args.max_other_load)
        return 1
    finally:
        if args.keep:
            print(f"pipeprof run directories kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    report(cfg, rounds, args.threshold, args.max_other_load)
    if args.smoke:
        smoke_check(rounds, nps)
    return 0


def smoke_check(rounds: list[Round], nps: list[int]) -> None:
    """The figures the table printed: a round per worker count, each side's samples/s (both
    ways) and both ratios finite and > 0. Not the threshold: that takes a full, quiet run."""
    for np in nps:
        mine = [r for r in rounds if r.np == np]
        harness.smoke_check(bool(mine), f"no round measured at np={np}")
        for r in mine:
            where = f"np={np} round {r.index}"
            for side in ("plain", "pipeprof"):
                m: Measurement = getattr(r, side)
                for field in ("samples_per_s", "samples_per_s_p50"):
                    harness.smoke_check(
                        harness.finite_positive(getattr(m, field)),
                        f"{where}: {side} {field} = {getattr(m, field)!r}",
                    )
            for name in ("ratio", "ratio_p50"):
                harness.smoke_check(
                    harness.finite_positive(getattr(r, name)),
                    f"{where}: {name} = {getattr(r, name)!r}",
                )
    print(f"smoke: ok ({len(rounds)} round(s) of both sides measured, figures finite and > 0)")


if __name__ == "__main__":
    harness.entry(main)
