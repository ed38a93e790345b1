"""Plain Horovod + Keras synthetic benchmark: the reference pipeprof's synthetic twin is checked against.

Written in the style of Horovod's ``examples/tensorflow2/tensorflow2_keras_synthetic_benchmark.py``
and deliberately free of pipeprof's training loop: ``hvd.init()``, one GPU per local rank if
there are GPUs (otherwise ``--intra-op-threads`` CPU threads per rank, default usable cores
// local_size as pipeprof's ``launch.topology``), the model from ``pipeprof.models.build_model``
(plain Keras layers, so both sides train the same architecture),
``hvd.DistributedOptimizer(SGD(lr * size, momentum=0.9))``, and ``model.fit`` on
``Dataset.from_tensors(one random batch).repeat()`` with ``BroadcastGlobalVariablesCallback(0)``.

Timing: a callback stamps ``time.perf_counter()`` at the start of training and at the end of
every batch. Keras syncs the step's logs to Python before ``on_train_batch_end`` (the callback
is not a TF-logs callback), so a stamp means the step has finished. The first ``--warmup``
batches are dropped; the measured time is from the end of the last warm-up batch to the end
of the last batch, i.e. wall clock including all of Keras's per-step loop overhead. Rank 0
prints one JSON line tagged ``PLAIN-SYNTHETIC`` with

* ``samples_per_s``: global batch × measured steps / measured seconds (the headline figure);
* ``samples_per_s_in_batch``: the same over the sum of begin→end times of each measured batch
  (excludes the gaps between batches; closer to how pipeprof times its iterations);
* ``step_time_ms_p50`` and ``samples_per_s_p50``: the median end-to-end batch interval and
  global batch / that median, a figure robust to a noisy neighbour slowing part of the run.

Run under horovodrun, e.g.::

    horovodrun -np 1 -H localhost:1 --gloo python benchmarks/plain_keras_synthetic.py --steps 300
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402

TAG = "PLAIN-SYNTHETIC"


def make_timing_callback(keras: Any) -> Any:
    """A Keras callback stamping the start of training and each batch's begin and end."""

    class Timing(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.train_begin = 0.0
            self.batch_begin: list[float] = []
            self.batch_end: list[float] = []

        def on_train_begin(self, logs: dict | None = None) -> None:
            self.train_begin = time.perf_counter()

        def on_train_batch_begin(self, batch: int, logs: dict | None = None) -> None:
            self.batch_begin.append(time.perf_counter())

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.batch_end.append(time.perf_counter())

    return Timing()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="small_cnn",
        help="a pipeprof.models.build_model name (default: small_cnn)",
    )
    p.add_argument(
        "--image-size", type=int, default=64, help="square input side in pixels (default: 64)"
    )
    p.add_argument("--classes", type=int, default=10, help="number of classes (default: 10)")
    p.add_argument("--batch-size", type=int, default=32, help="batch size per worker (default: 32)")
    p.add_argument(
        "--lr",
        type=float,
        default=0.01,
        help="learning rate for one worker, scaled by the number of workers (default: 0.01)",
    )
    p.add_argument(
        "--warmup", type=int, default=10, help="batches dropped before measuring (default: 10)"
    )
    p.add_argument("--steps", type=int, default=120, help="measured batches (default: 120)")
    p.add_argument(
        "--intra-op-threads",
        type=int,
        default=0,
        help="CPU intra-op threads per rank; 0: usable cores // local_size, as pipeprof (default: 0)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random batch (default: 0)")
    args = p.parse_args(argv)
    if args.warmup < 0 or args.steps < 1:
        p.error("--warmup must be >= 0 and --steps >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from pipeprof.frameworks.keras2 import setup_devices
    from pipeprof.models import build_model

    hvd.init()
    # the ranks' own set-up, so the baseline cannot drift from it; it reads the rank's place
    # as pipeprof's engine gives it (attributes, where the hvd module has functions)
    place = SimpleNamespace(local_rank=hvd.local_rank(), local_size=hvd.local_size())
    device = setup_devices(tf, place, args.intra_op_threads)

    model = build_model(args.model, (args.image_size, args.image_size, 3), args.classes)
    opt = hvd.DistributedOptimizer(
        tf.keras.optimizers.SGD(learning_rate=args.lr * hvd.size(), momentum=0.9)
    )
    model.compile(
        optimizer=opt,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

    gen = tf.random.Generator.from_seed(args.seed + hvd.rank())
    images = gen.uniform([args.batch_size, args.image_size, args.image_size, 3], dtype=tf.float32)
    labels = tf.cast(
        gen.uniform([args.batch_size], minval=0, maxval=args.classes, dtype=tf.int64), tf.int32
    )
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()

    timing = make_timing_callback(tf.keras)
    total = args.warmup + args.steps
    model.fit(
        dataset,
        steps_per_epoch=total,
        epochs=1,
        verbose=0,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), timing],
    )

    ends, begins = timing.batch_end, timing.batch_begin
    if len(ends) != total:
        raise RuntimeError(f"expected {total} batches, timed {len(ends)}")
    start = ends[args.warmup - 1] if args.warmup else timing.train_begin
    wall = ends[-1] - start
    in_batch = sum(e - b for b, e in zip(begins[args.warmup :], ends[args.warmup :]))
    marks = [start, *ends[args.warmup :]]
    p50 = statistics.median(b - a for a, b in zip(marks, marks[1:]))
    global_batch = args.batch_size * hvd.size()
    if hvd.rank() == 0:
        harness.print_tagged(
            TAG,
            {
                "np": hvd.size(),
                "device": device,
                "model": args.model,
                "image_size": args.image_size,
                "classes": args.classes,
                "per_worker_batch": args.batch_size,
                "global_batch": global_batch,
                "warmup": args.warmup,
                "steps": args.steps,
                "measured_s": wall,
                "samples_per_s": global_batch * args.steps / wall,
                "samples_per_s_in_batch": global_batch * args.steps / in_batch,
                "step_time_ms_p50": p50 * 1e3,
                "samples_per_s_p50": global_batch / p50,
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
