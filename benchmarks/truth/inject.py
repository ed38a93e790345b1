"""Bottlenecks of a known size for the ground-truth suite, as a scenario's own map stage.

``spin(iterations=N)`` is a ``pipeline.map.function``: each element runs a TensorFlow loop of
N dependent floating-point updates on the CPU (not a sleep: it holds a tf.data thread and a
core for as long as it computes). ``calibrate()`` measures how many iterations one
microsecond of one core's CPU time buys on this machine, so a case can ask for a set CPU
time per element: iterations = µs × that rate.
"""

from __future__ import annotations

import time

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


if __name__ == "__main__":
    print(f"{calibrate():.3f} iterations per µs of CPU")
