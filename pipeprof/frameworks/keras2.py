"""A rank's device, set up the same way for pipeprof's ranks and for the benchmarks that
compare against them: a GPU pinned by local rank with memory growth, or CPU thread pools
sized to the rank's share of the cores; and the emulated device of ``train.device =
"emulated:MS"``."""

from __future__ import annotations

import os
import time

from pipeprof.launch import topology

HOROVOD_DEFAULT_CYCLE_MS = "1"  # Horovod's own, where HOROVOD_CYCLE_TIME is not set


def setup_devices(tf, engine, intra_op_threads: int = 0) -> str:
    """Pin this rank to its GPU by local rank (memory growth on); size CPU thread pools."""
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        # With CUDA_VISIBLE_DEVICES already narrowed to one GPU per rank, there is only one.
        tf.config.set_visible_devices(gpus[engine.local_rank % len(gpus)], "GPU")
        return f"GPU:{engine.local_rank % len(gpus)}"
    threads = intra_op_threads or topology.cores_per_rank(engine.local_size)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    return f"CPU ({threads} intra-op threads)"


def emulated_step(tf, engine, device_ms: float, gradient_floats: int, seed: int = 0):
    """A model step that keeps the device busy for ``device_ms`` without using the CPU (the
    rank sleeps, as its host thread would while a GPU computes), then allreduces a gradient
    of the model's size through the engine (Horovod) for real.

    The sleep varies by up to half a Horovod cycle (``HOROVOD_CYCLE_TIME``) either way, its
    mean ``device_ms``. A fixed sleep phase-locks the step to Horovod's coordination cycle:
    each allreduce then waits the same part of a cycle for tens of steps, and that part
    depends on the few tenths of a ms the step spends besides the sleep, so two variants
    (twin and real) waited different amounts for reasons that are not theirs. Measured at
    np=1, 30 ms and a 5 ms cycle: rounds of 28 steps at a median of either 30.6 or 35.6 ms,
    and a 5.6% gap on a pipeline that costs nothing (docs/measurement.md). With the spread,
    each step's wait is an independent draw over the cycle, the same for every variant."""
    import random

    gradient = tf.zeros([gradient_floats], tf.float32)
    loss = tf.constant(0.0)
    cycle_ms = float(os.environ.get("HOROVOD_CYCLE_TIME", HOROVOD_DEFAULT_CYCLE_MS))
    spread = random.Random(seed)

    def step(x, y):
        time.sleep(max(0.0, device_ms + cycle_ms * (spread.random() - 0.5)) / 1e3)
        reduced = engine.allreduce(gradient, name="pipeprof_emulated_gradient")
        return {"loss": loss + tf.reduce_sum(reduced[:1]), "accuracy": loss}

    return step
