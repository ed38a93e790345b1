"""Plain Keras 3 synthetic benchmark: the reference pipeprof's synthetic twin is checked
against on Keras 3 (``synthetic_overhead.py --engine data_parallel`` or ``mirrored``).

One process drives ``--np`` replicas as pipeprof's Keras 3 engines do on one host: on JAX,
``keras.distribution.DataParallel`` over XLA's host devices (``--xla_force_host_platform_
device_count``, set before JAX starts), on TensorFlow a ``MirroredStrategy`` over as many
logical CPU devices (GPUs where there are). The model is ``pipeprof.models.build_model``'s,
compiled as pipeprof compiles it (SGD with momentum 0.9 at ``lr × np``, Keras's own
``jit_compile`` and ``steps_per_execution`` unless given), and ``model.fit`` reads
``Dataset.from_tensors(one random global batch).repeat()``: no input pipeline at all. Thread
pools are TensorFlow's and XLA's defaults, all the host's cores, as pipeprof's one process a
host gets. One difference stays: ``fit`` copies the batch onto the devices each step (JAX) or
splits it over the replicas (tf.distribute), where pipeprof's twin is placed there once, so
the ratio can favour pipeprof by that copy; on a CPU, a copy of 1.6 MB a step
(batch 32 of 64 px).

Timing as ``plain_keras_synthetic.py``: a callback stamps the end of each batch (Keras syncs
the logs before a callback that is not asynchronous-safe sees them); the first ``--warmup``
batches are dropped. One JSON line tagged ``PLAIN-SYNTHETIC`` gives ``samples_per_s`` (global
batch × steps ÷ wall seconds) and ``samples_per_s_p50`` (global batch ÷ the median interval).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402

TAG = "PLAIN-SYNTHETIC"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("jax", "tensorflow"), required=True)
    p.add_argument("--np", type=int, default=1, help="replicas in this process (default: 1)")
    p.add_argument("--model", default="small_cnn")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per replica (default: 32)")
    p.add_argument("--lr", type=float, default=0.01, help="for one replica (default: 0.01)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto")
    p.add_argument("--steps-per-execution", type=int, default=1)
    args = p.parse_args(argv)
    if args.np < 1 or args.warmup < 1 or args.steps < 1:
        p.error("--np, --warmup and --steps must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["KERAS_BACKEND"] = args.backend
    if args.backend == "jax":
        flag = "--xla_force_host_platform_device_count"
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {flag}={args.np}".strip()
    import tensorflow as tf

    from pipeprof.distributions.mirrored import make_replicas
    from pipeprof.models import build_model

    scope = None
    if args.backend == "tensorflow":
        devices, _ = make_replicas(tf, args.np)
        strategy = tf.distribute.MirroredStrategy(devices)
        scope = strategy.scope()
    import keras

    if args.backend == "jax":
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        replicas = len(keras.distribution.distribution().device_mesh.devices.ravel())
        if replicas != args.np:
            raise RuntimeError(f"--np {args.np}: JAX gave {replicas} device(s)")
    shape = (args.image_size, args.image_size, 3)
    jit = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    with scope if scope is not None else contextlib.nullcontext():
        model = build_model(args.model, shape, args.classes, keras=keras)
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=args.lr * args.np, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=jit,
            steps_per_execution=args.steps_per_execution,
        )
    global_batch = args.batch_size * args.np
    gen = tf.random.Generator.from_seed(0)
    images = gen.uniform([global_batch, *shape], dtype=tf.float32)
    labels = gen.uniform([global_batch], maxval=args.classes, dtype=tf.int64)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat()

    ends: list[float] = []

    class Timing(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            ends.append(time.perf_counter())

    per = args.steps_per_execution
    total = args.warmup + args.steps
    model.fit(dataset, steps_per_epoch=total * per, epochs=1, verbose=0, callbacks=[Timing()])
    if len(ends) != total:
        raise RuntimeError(f"expected {total} timed executions, timed {len(ends)}")
    start = ends[args.warmup - 1]
    wall = ends[-1] - start
    marks = ends[args.warmup - 1 :]
    p50 = statistics.median(b - a for a, b in zip(marks, marks[1:]))
    harness.print_tagged(
        TAG,
        {
            "np": args.np,
            "backend": args.backend,
            "keras": keras.__version__,
            "model": args.model,
            "global_batch": global_batch,
            "steps": args.steps * per,
            "measured_s": wall,
            "samples_per_s": global_batch * per * args.steps / wall,
            "step_time_ms_p50": p50 * 1e3 / per,
            "samples_per_s_p50": global_batch * per / p50,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
