"""Why the twin measured in rounds differs from the synthetic variant's own run (issue 26).

    .venv/bin/python benchmarks/twin_ceiling.py [SCENARIO] [--cores 0] [--rounds 12] [--alone-s 8]

One process, one rank (no Horovod), the scenario's model and real pipeline, threads sized
as a rank's would be. It measures the synthetic step (one batch of noise, reused) in five
settings, in this order, and prints each one's samples/s and the CPU time that the
process's threads spent in it, split between tf.data's threads and the rest:

1. ``alone``: no real pipeline exists yet (the synthetic variant's own run);
2. ``twin in rounds``: the twin's halves of rounds that alternate with the real pipeline,
   as ``rank.plan`` runs them (2 settle steps dropped), by position in the half;
3. ``twin, buffers full``: after a real half, the pipeline left alone for ``--rest-s``
   seconds (its buffers refill), then twin steps;
4. ``twin, pipeline gone``: the real iterator deleted, then twin steps;
5. ``alone again``: the synthetic run repeated at the end (drift over the benchmark).

If 2 is slower than 1, 3, 4 and 5, and the tf.data threads' CPU in 2 is what is missing, the
real pipeline refilling its buffers during the twin's half is what slows it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

import harness


def thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads, by thread name (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = defaultdict(float)
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        out[name] += (int(fields[11]) + int(fields[12])) / tick
    return out


def split(before: dict[str, float], after: dict[str, float]) -> tuple[float, float]:
    """(tf.data threads' CPU seconds, everything else's) between two readings."""
    data = other = 0.0
    for name in set(before) | set(after):
        d = after.get(name, 0.0) - before.get(name, 0.0)
        if "data" in name.lower():
            data += d
        else:
            other += d
    return data, other


class Timed:
    """A stretch of steps: samples/s, and the CPU its threads spent (cores busy on average)."""

    def __init__(self) -> None:
        self.seconds, self.samples, self.data_cpu, self.other_cpu = 0.0, 0, 0.0, 0.0

    def add(self, seconds: float, samples: int, cpu: tuple[float, float]) -> None:
        self.seconds += seconds
        self.samples += samples
        self.data_cpu += cpu[0]
        self.other_cpu += cpu[1]

    def line(self, label: str) -> str:
        rate = self.samples / self.seconds if self.seconds else float("nan")
        return (
            f"{label:28} {rate:9.1f} samples/s   tf.data threads {self.data_cpu / self.seconds:5.2f} cores   "
            f"other threads {self.other_cpu / self.seconds:5.2f} cores   ({self.seconds:.1f} s)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenario", nargs="?", default="quickstart")
    ap.add_argument("--cores", type=int, default=0, help="pin to the first N cores (0: all)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--alone-s", type=float, default=8.0)
    ap.add_argument("--rest-s", type=float, default=3.0)
    ap.add_argument("--half-s", type=float, default=1.0, help="seconds of each half of a round")
    args = ap.parse_args()
    if args.cores:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: args.cores]))
    cores = len(os.sched_getaffinity(0))

    import tensorflow as tf

    from pipeprof.data import pipeline
    from pipeprof.models import build_model
    from pipeprof.rank.plan import SETTLE_STEPS

    tf.config.threading.set_intra_op_parallelism_threads(cores)
    s, root = harness.prepared(args.scenario)
    data = s.data
    batch = s.train.batch_size
    model = build_model(s.model.name, (data.image_size, data.image_size, 3), data.num_classes)
    model.compile(
        optimizer=tf.keras.optimizers.SGD(s.train.learning_rate, momentum=s.train.momentum),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    step = tf.function(lambda x, y: model.train_step((x, y)))
    pipe = s.variant_pipeline(s.variants[0])

    def real():
        return pipeline.build(
            data, pipe, data_root=root, shard=pipeline.Shard(0, 1), batch_size=batch
        )

    noise = pipeline.synthetic_batch(real().element_spec, data.num_classes)

    def run(batches, n: int) -> list[float]:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            x, y = next(batches)
            float(step(x, y)["loss"])
            times.append(time.perf_counter() - t0)
        return times

    def stretch(batches, seconds: float, into: Timed) -> list[float]:
        c0, t0, times = thread_cpu(), time.perf_counter(), []
        while time.perf_counter() - t0 < seconds:
            times += run(batches, 1)
        into.add(sum(times), batch * len(times), split(c0, thread_cpu()))
        return times

    from itertools import repeat

    twin = repeat(noise)
    run(twin, 20)  # trace and warm up
    typical = statistics.median(run(twin, 10))
    every = max(5, round(args.half_s / typical))
    print(
        f"{s.name}: {cores} cores, batch {batch}, synthetic step {typical * 1e3:.1f} ms, {every} steps a half",
        flush=True,
    )

    alone = Timed()
    stretch(twin, args.alone_s, alone)

    it = iter(real())
    run(it, 30)  # the pipeline's start-up: shuffle buffer filled
    rounds, own = Timed(), Timed()
    by_position: dict[int, list[float]] = defaultdict(list)
    for _ in range(args.rounds):
        c0 = thread_cpu()
        settle = run(twin, SETTLE_STEPS)
        c1 = thread_cpu()
        times = run(twin, every)
        c2 = thread_cpu()
        rounds.add(sum(times), batch * every, split(c1, c2))
        for i, t in enumerate(settle + times):
            by_position[i].append(t)
        run(it, SETTLE_STEPS)
        c3 = thread_cpu()
        times = run(it, every)
        own.add(sum(times), batch * every, split(c3, thread_cpu()))
        del c0

    full = Timed()
    for _ in range(3):
        run(it, every)  # drain the buffers as a real half does
        time.sleep(args.rest_s)
        stretch(twin, args.half_s, full)

    del it
    time.sleep(2.0)
    gone = Timed()
    stretch(twin, args.alone_s, gone)
    again = Timed()
    stretch(twin, args.alone_s, again)

    print()
    print(alone.line("1 alone"))
    print(rounds.line("2 twin in rounds"))
    print(own.line("  real in rounds"))
    print(full.line("3 twin, buffers full"))
    print(gone.line("4 twin, pipeline gone"))
    print(again.line("5 alone again"))
    ref = (alone.samples / alone.seconds + again.samples / again.seconds) / 2
    rr, tr = own.samples / own.seconds, rounds.samples / rounds.seconds
    print(
        f"\ngap against the twin in rounds: {100 * (1 - rr / tr):.1f}%; against the twin alone (mean of 1 and 5): "
        f"{100 * (1 - rr / ref):.1f}%; the twin in rounds ran at {tr / ref:.3f} of alone"
    )
    print(
        "\ntwin step time by position in its half (ms, median over rounds; the first "
        f"{SETTLE_STEPS} are dropped as settle steps):"
    )
    print(
        "  "
        + " ".join(f"{1e3 * statistics.median(by_position[i]):6.1f}" for i in sorted(by_position))
    )


if __name__ == "__main__":
    main()
