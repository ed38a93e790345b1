"""What training loses to a case's input pipeline, measured without pipeprof's instrument.

The ground-truth suite's fluid truth (``run.expected_gap``) gives a rank's pipeline its share
of the host's cores and calls the gap 0 while the pipeline's CPU fits in it. On this 2-core
host a pipeline that fits still slows the steps beside it (``contention_probe.py``: 7-15% on
two rows the fluid truth calls 0). This script measures that loss directly, as a user with a
stopwatch would: the case's emulated-device training loop under ``horovodrun -np N``, fed by
one repeated batch, then by the case's own pipeline, then by the repeated batch again, R rounds
of real and repeated in one launch (the same step, ``pipeprof.frameworks.keras2.emulated_step``,
the same pipeline, ``pipeprof.data.pipeline.build``, and the environment pipeprof's launcher
gives emulated ranks: the workload, not pipeprof's timing, rounds, twin or statistics). A plain loop times
its steps with ``time.perf_counter``; a round's gap is 1 − real samples/s ÷ the mean of the
synthetic phases on both sides of it, so that drift hits both alike, and the launch's gap is the
mean of its rounds', with a 95% interval over them (Student's t). One launch for all the phases,
not one each, saves the start-ups of TensorFlow and Horovod.

Run by ``run.py`` for each emulated-device row whose fluid truth is under 20%
(the rows whose class the loss can change), one launch just after the case's own run; by
hand::

    .venv/bin/python benchmarks/truth/reference.py SCENARIO.toml --np N [--rounds R] [--launches L]

Under horovodrun (``--rank``) it is one launch: rank 0 prints ``TRUTH-REFERENCE {json}``.

``--engine data_parallel`` (Keras 3 on JAX) or ``--engine mirrored`` (Keras 3 or Keras 2 on
TensorFlow) runs the same phases in the one process that drives every replica, as pipeprof's
local launcher starts it: the engine's own emulated step and gradient exchange
(``Framework.emulated_step``), and the pipeline as the engine's replicas take it
(``Distribution.distribute``: on JAX, each batch laid out over the devices, a cost a user's
``fit`` pays too).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from benchmarks import harness  # noqa: E402
from pipeprof.launch.horovod import worker_env  # noqa: E402
from pipeprof.launch.launcher import base_env  # noqa: E402

TAG = "TRUTH-REFERENCE"
WARMUP_STEPS = 40  # past the first epoch's cache fill at np=1 (1,024 images, 32 a batch)
WARMUP_SYNTHETIC = 10  # one repeated batch has no cache to fill: past Horovod's first allreduces
MEASURE_S = 6.0  # of device time: the steps a phase measures are MEASURE_S / the device's step
ROUNDS = 2  # real phases a launch measures, each between two synthetic ones


def rank_main(scenario_path: str, data_root: str, rounds: int, steps: int = 0) -> None:
    """One rank of the launch: a synthetic phase, then ``rounds`` times a real phase and a
    synthetic one, each a warm-up and then MEASURE_S of device time in steps (``steps``, where
    given: a smoke run's few; the same count on every rank: the steps allreduce, so the ranks
    go in lockstep). Each real phase makes the pipeline's iterator anew and is warmed as the
    first (its cache filled anew): ``phases``."""
    import horovod.tensorflow as hvd
    import tensorflow as tf

    from pipeprof import scenario as scen
    from pipeprof.data import pipeline
    from pipeprof.frameworks.keras2 import emulated_step
    from pipeprof.launch import topology
    from pipeprof.models import build_model

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(topology.cores_per_rank(hvd.local_size()))
    s = scen.load(scenario_path)
    device_ms = scen.emulated_ms(s.train.device)
    if device_ms is None:
        raise SystemExit(f"{scenario_path}: train.device is not emulated: nothing to measure here")
    shape = (s.data.image_size, s.data.image_size, 3)
    floats = build_model(s.model.name, shape, s.data.num_classes).count_params()

    class Allreduce:  # what emulated_step asks of an engine
        @staticmethod
        def allreduce(t, name):
            return hvd.allreduce(t, name=name)

    step = emulated_step(tf, Allreduce, device_ms, floats, seed=hvd.rank())
    batch = s.train.batch_size
    steps = steps or max(60, round(MEASURE_S * 1e3 / device_ms))
    one = (tf.zeros([batch, *shape], tf.float32), tf.zeros([batch], tf.int32))

    figures = phases(
        step,
        one,
        lambda: iter(
            pipeline.build(
                s.data,
                s.variant_pipeline(s.variants[0]),
                data_root=data_root,
                shard=pipeline.Shard(hvd.rank(), hvd.size()),
                batch_size=batch,
            )
        ),
        rounds,
        steps,
        hvd.size() * batch,
    )
    if hvd.rank() == 0:
        harness.print_tagged(TAG, figures)


def phases(
    step: Callable[..., Any],
    one: tuple[Any, Any],
    make_real: Callable[[], Iterator[Any]],
    rounds: int,
    steps: int,
    samples: int,
) -> dict[str, Any]:
    """The launch's phases on ``step``: a synthetic phase of ``one`` batch handed again, then
    ``rounds`` times a real phase from a new ``make_real()`` iterator and a synthetic one, each
    a warm-up and ``steps`` measured steps of ``samples`` samples (every rank's). Each real
    iterator is deleted when its phase ends, so no thread of it runs beside a synthetic phase.
    Each phase's samples/s, and the CPU cores this process kept busy over it (all its threads:
    the loop, the engine's, the pipeline's)."""
    import gc

    cores: dict[str, list[float]] = {"synthetic": [], "real": []}

    def phase(batches: Iterator[Any], warmup: int, kind: str) -> float:
        for _ in range(warmup):
            step(*next(batches))
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(steps):
            step(*next(batches))
        wall = time.perf_counter() - t0
        cores[kind].append((time.process_time() - c0) / wall)
        return samples * steps / wall

    synthetic = [phase(iter(lambda: one, None), WARMUP_SYNTHETIC, "synthetic")]
    real_phases = []
    for _ in range(rounds):
        real = make_real()
        real_phases.append(phase(real, WARMUP_STEPS, "real"))
        del real  # its threads stop with it
        gc.collect()
        synthetic.append(phase(iter(lambda: one, None), WARMUP_SYNTHETIC, "synthetic"))
    return {
        "synthetic": synthetic,
        "real": real_phases,
        "steps": steps,
        "synthetic_cores": cores["synthetic"],
        "real_cores": cores["real"],
    }


def one_process_main(
    scenario_path: str, data_root: str, rounds: int, steps: int, engine: str, np_: int
) -> None:
    """``rank_main``'s phases on an engine whose one process drives all ``np_`` replicas
    (``one_process`` or ``per_host`` on one host: data_parallel, mirrored), through pipeprof's
    axes as its rank makes them: the distribution started for ``np_`` replicas, the framework's
    emulated step, the input library's pipeline as the replicas take it. Prints the same line."""

    import numpy

    from pipeprof import plugins
    from pipeprof import scenario as scen

    s = plugins.resolve(scen.load(scenario_path, [scen.parse_override(f"train.engine={engine}")]))
    device_ms = scen.emulated_ms(s.train.device)
    if device_ms is None:
        raise SystemExit(f"{scenario_path}: train.device is not emulated: nothing to measure here")
    dist = plugins.make(plugins.DISTRIBUTION, s.train.engine)
    dist.start(np=np_)
    framework = plugins.make(plugins.FRAMEWORK, s.train.framework)
    inputs = plugins.make(plugins.INPUTS, s.data.library)
    framework.setup(dist, s.train.intra_op_threads)
    if dist.size * dist.replicas != np_:
        raise SystemExit(f"--engine {engine}: {dist.size * dist.replicas} replicas, not {np_}")
    shape = (s.data.image_size, s.data.image_size, 3)
    batch = s.train.batch_size  # per replica, as pipeprof's default batch_mode scales it
    model = framework.build(s.model.name, shape, s.data.num_classes, s.train, 0.01, dist)
    step = framework.emulated_step(dist, device_ms, framework.parameters(model), seed=dist.rank)
    steps = steps or max(60, round(MEASURE_S * 1e3 / device_ms))
    input_batch = dist.input_batch(batch)
    one = dist.distribute_batch(
        framework.on_device(
            lambda: (
                numpy.zeros([input_batch, *shape], numpy.float32),
                numpy.zeros([input_batch], numpy.int32),
            )
        )
    )
    figures = phases(
        step,
        one,
        lambda: iter(
            dist.distribute(
                inputs.pipeline(
                    s.data,
                    s.variant_pipeline(s.variants[0]),
                    data_root=data_root,
                    shard=(dist.rank, dist.size),
                    batch_size=input_batch,
                )
            )
        ),
        rounds,
        steps,
        np_ * batch,
    )
    if dist.rank == 0:
        figures["engine"] = dist.name
        figures["framework"] = f"{framework.name} {framework.version} ({framework.backend})"
        harness.print_tagged(TAG, figures)


def launch(
    scenario_path: Path,
    data_root: str,
    np_: int,
    rounds: int,
    log: Path | None,
    steps: int = 0,
    engine: str = "",
) -> dict:
    """One launch of this script's phases, rank 0's figures: ``horovodrun -np N`` (``engine``
    horovod or unsaid), or the one process of an engine that drives every replica."""
    rank_args = [
        str(scenario_path.resolve()),  # the ranks start in another folder
        "--rank",
        "--rounds",
        str(rounds),
        "--data-root",
        data_root,
        "--steps",
        str(steps),
    ]
    here = [sys.executable, str(Path(__file__).resolve())]
    if engine and engine != "horovod":
        argv = [*here, *rank_args, "--engine", engine, "--np", str(np_)]
        # what pipeprof's local launcher gives the process it starts
        env = base_env(dict(os.environ), str(harness.REPO))
    else:
        argv = [*harness.horovodrun(np_), *here, *rank_args]
        # the environment pipeprof's launcher gives emulated ranks (Horovod's cycle time among
        # it: 5 ms, where Horovod's own 1 ms would poll a core's worth more at np=4 on 2 cores)
        env = worker_env(dict(os.environ), str(harness.REPO), emulated=True, local_ranks=np_)
    proc = harness.run(argv, what=f"the reference's launch at np={np_}", env=env, timeout=300)
    if log is not None:
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(argv)}\n{proc.stdout}{proc.stderr}")
    got = harness.read_tagged(proc.stdout, TAG)
    if got is None:
        raise harness.Failed(f"the reference's launch at np={np_} printed no {TAG} line")
    return got


def measure(
    scenario_path: Path,
    np_: int,
    rounds: int = ROUNDS,
    launches: int = 1,
    log: Path | None = None,
    steps: int = 0,
    engine: str = "",
) -> dict:
    """The reference gap for one case and worker count: ``launches`` launches of ``rounds``
    rounds each, every real phase against the mean of the synthetic phases on both sides of it;
    the gap is the mean of all rounds', ``ci95_pct`` the half-width of its 95% interval over
    them (nan for one round). ``steps``: each phase's measured steps (0: MEASURE_S's worth);
    ``engine``: ``launch``'s."""
    _, root = harness.prepared(str(scenario_path))
    gaps, real, synth, real_cores, synth_cores = [], [], [], [], []
    for _ in range(launches):
        got = launch(scenario_path, root, np_, rounds, log, steps, engine)
        s = got["synthetic"]
        gaps += [100.0 * (1.0 - r / ((s[i] + s[i + 1]) / 2)) for i, r in enumerate(got["real"])]
        real += got["real"]
        synth += s
        real_cores += got["real_cores"]
        synth_cores += got["synthetic_cores"]
    return {
        "gap_pct": statistics.fmean(gaps),
        "ci95_pct": ci95(gaps),
        "round_gaps": gaps,
        "real_samples_per_s": real,
        "synthetic_samples_per_s": synth,
        # rank 0's CPU cores over each phase (its process: loop, Horovod, pipeline threads)
        "real_cores_per_rank": real_cores,
        "synthetic_cores_per_rank": synth_cores,
    }


def ci95(values: list[float]) -> float:
    """Half-width of the 95% interval of the mean of ``values`` (Student's t; nan for one)."""
    from pipeprof.analysis.stats import t975

    if len(values) < 2:
        return math.nan
    return t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario")
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--rounds", type=int, default=ROUNDS, help="real phases a launch measures")
    p.add_argument("--launches", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="each phase's steps (0: 6 s of device)")
    p.add_argument(
        "--engine",
        default="",
        choices=["", "horovod", "data_parallel", "mirrored"],
        help="the engine whose training loop is measured (default: Horovod's, under horovodrun)",
    )
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data-root", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rounds < 1 or args.launches < 1:
        p.error(f"--rounds {args.rounds}, --launches {args.launches}: each must be at least 1")
    if args.rank and args.engine not in ("", "horovod"):
        one_process_main(
            args.scenario, args.data_root, args.rounds, args.steps, args.engine, args.np
        )
        return 0
    if args.rank:
        rank_main(args.scenario, args.data_root, args.rounds, args.steps)
        return 0
    got = measure(
        Path(args.scenario),
        args.np,
        args.rounds,
        args.launches,
        steps=args.steps,
        engine=args.engine,
    )
    print(
        f"{args.scenario} np={args.np}: gap {got['gap_pct']:.1f}% ±{got['ci95_pct']:.1f} "
        f"(rounds {', '.join(f'{g:.1f}' for g in got['round_gaps'])}; real "
        f"{', '.join(f'{v:.0f}' for v in got['real_samples_per_s'])}, synthetic "
        f"{', '.join(f'{v:.0f}' for v in got['synthetic_samples_per_s'])} samples/s; rank 0's "
        f"cores: real {', '.join(f'{v:.3f}' for v in got['real_cores_per_rank'])}, synthetic "
        f"{', '.join(f'{v:.3f}' for v in got['synthetic_cores_per_rank'])})"
    )
    return 0


if __name__ == "__main__":
    harness.entry(main)
