"""Why do real steps stretch Horovod's synchronisation? Measure the allreduce under controlled loads.

Each rank runs the emulated step of the seed-gap scenario by hand: take a batch, sleep the
device time (no CPU), allreduce the small CNN's gradient through Horovod. The load before
the allreduce changes per mode, all at the same worker count and Horovod cycle time:

- ``synthetic``  no input work: the ceiling;
- ``skew:MS``    synthetic, plus a random extra sleep (exponential, mean MS) before the
                 allreduce: ranks arrive apart, as real input waits make them;
- ``burst:MS``   synthetic, plus MS of CPU burned in a thread when the step starts (numpy,
                 GIL released): the pipeline's CPU without the pipeline;
- ``real``       the scenario's real tf.data pipeline.

It prints the mean allreduce time (enqueue to result, averaged over ranks), the step, and
the CPU each rank used per step. Measured in session 3 (np=8, 2 cores): the allreduce
doubles on real steps although the host's CPU is no busier while it runs; a burst of CPU
at the start of the step, long finished before the allreduce, reproduces that; skewed
arrival does not, and the cycle time does not change it.

    .venv/bin/python benchmarks/sync_under_load.py --np 8 --modes synthetic,skew:2,burst:10,real --cycle-ms 1,5,20
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time

import harness

RANK_ENV = "PIPEPROF_SYNC_PROBE"
TAG = "RESULT"


def rank_main(mode: str, steps: int, data_root: str, scenario_name: str) -> None:
    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf

    from pipeprof import scenario as sc
    from pipeprof.data import pipeline
    from pipeprof.models import build_model

    hvd.init()
    scenario = sc.load(scenario_name)
    pipe = scenario.variant_pipeline(scenario.variants[0])
    batch = scenario.train.batch_size
    ds = pipeline.build(
        scenario.data,
        pipe,
        data_root=data_root,
        shard=pipeline.Shard(hvd.rank(), hvd.size()),
        batch_size=batch,
    )
    kind, _, arg = mode.partition(":")
    amount_s = float(arg or 0) / 1e3
    if kind == "real":
        batches = iter(ds)
    else:
        first = next(iter(ds))
        batches = iter(lambda: first, None)
    device_ms = sc.emulated_ms(scenario.train.device)
    if device_ms is None:
        raise SystemExit(f"{scenario_name}: train.device must be emulated:MS for this benchmark")
    device_s = device_ms / 1e3
    size = scenario.data.image_size
    model = build_model(scenario.model.name, (size, size, 3), scenario.data.num_classes)
    gradient = tf.zeros(
        [sum(int(tf.size(v)) for v in model.trainable_variables)], tf.float32
    )  # as the worker does
    block = np.random.rand(200, 200)

    def burn() -> None:
        start = time.thread_time()
        while time.thread_time() - start < amount_s:
            block @ block

    hvd.allreduce(tf.constant(0.0), name="start")
    rows = []
    cpu0 = time.process_time()
    for _ in range(steps):
        t0 = time.perf_counter()
        next(batches)
        if kind == "burst":
            threading.Thread(target=burn, daemon=True).start()
        time.sleep(device_s + (random.expovariate(1 / amount_s) if kind == "skew" else 0.0))
        t1 = time.perf_counter()
        float(hvd.allreduce(gradient, name="gradient")[0])
        t2 = time.perf_counter()
        rows.append((t2 - t1, t2 - t0))
    cpu_ms = 1e3 * (time.process_time() - cpu0) / steps
    kept = rows[steps // 5 :]
    mine = [1e3 * sum(r[k] for r in kept) / len(kept) for k in range(2)] + [cpu_ms]
    every = hvd.allgather(tf.constant([mine], tf.float64)).numpy()
    if hvd.rank() == 0:
        harness.print_tagged(
            TAG, dict(zip(["allreduce_ms", "step_ms", "cpu_ms_per_step"], every.mean(0).tolist()))
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--np", type=int, default=8)
    ap.add_argument("--modes", default="synthetic,skew:2,burst:10,real")
    ap.add_argument("--cycle-ms", default="5", help="HOROVOD_CYCLE_TIME values, comma-separated")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--scenario", default="seed-gap")
    args = ap.parse_args()
    _, data_root = harness.prepared(args.scenario)
    print(
        f"{'cycle ms':>8} {'mode':>12} {'allreduce ms':>13} {'step ms':>8} {'CPU ms/step':>12} {'step − synthetic':>17}"
    )
    for cycle in args.cycle_ms.split(","):
        base = None
        for mode in args.modes.split(","):
            env = dict(os.environ, HOROVOD_CYCLE_TIME=cycle, OMP_NUM_THREADS="1", **{RANK_ENV: "1"})
            proc = harness.run(
                [
                    *harness.horovodrun(args.np),
                    sys.executable,
                    __file__,
                    mode,
                    str(args.steps),
                    data_root,
                    args.scenario,
                ],
                what=f"np={args.np} {mode}: horovodrun",
                env=env,
            )
            r = harness.read_tagged(proc.stdout, TAG)
            if r is None:
                raise harness.failure(
                    f"np={args.np} {mode}: horovodrun (no {TAG} line)",
                    proc.returncode,
                    proc.stdout + proc.stderr,
                )
            base = r["step_ms"] if mode == "synthetic" else base
            extra = f"{r['step_ms'] - base:+.1f}" if base is not None else ""
            print(
                f"{cycle:>8} {mode:>12} {r['allreduce_ms']:13.1f} {r['step_ms']:8.1f} {r['cpu_ms_per_step']:12.1f} "
                f"{extra:>17}",
                flush=True,
            )


if __name__ == "__main__":
    if os.environ.get(RANK_ENV):
        rank_main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        harness.entry(main)
