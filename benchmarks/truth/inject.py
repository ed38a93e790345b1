"""Bottlenecks of a known size for the ground-truth suite, as a scenario's own map stage.

``spin(iterations=N)`` is a ``pipeline.map.function``: each element runs a TensorFlow loop of
N dependent floating-point updates on the CPU (not a sleep: it holds a tf.data thread and a
core for as long as it computes). ``calibrate()`` measures how many iterations one
microsecond of one core's CPU time buys on this machine, so a case can ask for a set CPU
time per element: iterations = µs × that rate. ``pipeline_cpu`` measures what a spin case's
whole pipeline costs per batch, run alone (``python -m benchmarks.truth.inject pipeline DIR
IMAGE_SIZE ITERATIONS``). ``load`` runs that pipeline at a training step's pace, its
batches thrown away (``python -m benchmarks.truth.inject load DIR IMAGE_SIZE ITERATIONS STEP_MS
SECONDS``): the CPU a rank's pipeline takes, without a rank to feed
(``benchmarks/truth/contention_probe.py``).
"""

from __future__ import annotations

import time
from pathlib import Path

import tensorflow as tf


def _loop(n: tf.Tensor) -> tf.Tensor:
    def body(i, x):
        return i + 1, x * 0.999999 + 1e-6

    _, x = tf.while_loop(
        lambda i, x: i < n,
        body,
        [tf.constant(0, tf.int32), tf.constant(1.0)],
        parallel_iterations=1,
    )
    return x


def spin(iterations: int):
    """The map function: (image, label) → the same, after ``iterations`` loop iterations whose
    result the image depends on (so nothing prunes the loop)."""
    n = tf.constant(int(iterations), tf.int32)

    def fn(image, label):
        x = _loop(n)
        return image + 0.0 * x, label

    return fn


def calibrate(iterations: int = 200_000, repeats: int = 5) -> float:
    """Iterations per µs of CPU time, measured in this (otherwise idle) process: the median of
    ``repeats`` runs of ``iterations`` iterations, timed by the process's CPU clock, through a
    one-thread tf.data map as the pipeline runs them."""
    ds = tf.data.Dataset.from_tensors((tf.zeros([4]), 0)).map(spin(iterations))
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    ds = ds.with_options(options)
    next(iter(ds))  # trace and warm
    rates = []
    for _ in range(repeats):
        c0 = time.process_time()
        next(iter(ds))
        rates.append(iterations / ((time.process_time() - c0) * 1e6))
    return sorted(rates)[len(rates) // 2]


def _batches(files: list[Path], image_size: int, iterations: int, batch: int):
    """A spin case's pipeline as the suite's ``scenario_toml`` builds it (decode and resize,
    cache, shuffle 256, the spin, batch, prefetch; parallel calls autotuned), its cache filled
    and warmed: an iterator of batches."""

    def decode(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return tf.image.resize(image, [image_size, image_size]) / 255.0, label

    auto = tf.data.AUTOTUNE
    ds = (
        tf.data.Dataset.from_tensor_slices(
            ([str(f) for f in files], [i % 10 for i in range(len(files))])
        )
        .map(decode, num_parallel_calls=auto)
        .cache()
        .shuffle(256)
        .repeat()
    )
    if iterations:
        ds = ds.map(spin(iterations), num_parallel_calls=auto)
    batches = iter(ds.batch(batch).prefetch(auto))
    for _ in range(len(files) // batch + 10):  # fills the cache, then warms
        next(batches)
    return batches


def pipeline_cpu(
    files: list[Path], image_size: int, iterations: int, seconds: float = 3.0, batch: int = 32
) -> float:
    """CPU-ms per batch of a spin case's pipeline (``_batches``), iterated flat out in this
    process for ``seconds`` after a warm-up: the process's CPU over the batches taken.
    Measured with tf.data alone, not by pipeprof."""
    batches = _batches(files, image_size, iterations, batch)
    c0, t0, n = time.process_time(), time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        next(batches)
        n += 1
    return (time.process_time() - c0) * 1e3 / n


def load(
    files: list[Path], image_size: int, iterations: int, step_ms: float, seconds: float
) -> str:
    """A spin case's pipeline taken one batch per ``step_ms`` (a rank's pace) for ``seconds``
    or until SIGTERM, its batches thrown away; says "ready" on stdout once warm. Returns what
    it did: the batches, the share of the pace it kept, its CPU-ms per batch."""
    import signal

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))  # ends the loop, then it says
    batches = _batches(files, image_size, iterations, 32)
    print("ready", flush=True)
    c0, t0, n = time.process_time(), time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds and not stop:
        next(batches)
        n += 1
        if (late := t0 + n * step_ms / 1e3 - time.perf_counter()) > 0:
            time.sleep(late)
    wall = time.perf_counter() - t0
    cpu = (time.process_time() - c0) * 1e3 / max(1, n)
    return f"{n} batches in {wall:.1f} s, {n * step_ms / 1e3 / wall:.2f} of the pace, {cpu:.1f} CPU-ms a batch"


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["load"]:  # load DIR IMAGE_SIZE ITERATIONS STEP_MS SECONDS
        _, _, root, size, n, step, secs = sys.argv
        files = sorted(Path(root).rglob("*.jpg"))
        print(load(files, int(size), int(n), float(step), float(secs)), flush=True)
    elif sys.argv[1:2] == ["pipeline"]:  # pipeline DIR IMAGE_SIZE ITERATIONS: CPU-ms per batch
        _, _, root, size, n = sys.argv
        print(f"{pipeline_cpu(sorted(Path(root).rglob('*.jpg')), int(size), int(n)):.3f}")
    else:
        print(f"{calibrate():.3f} iterations per µs of CPU")
