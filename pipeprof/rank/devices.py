"""A rank's device, set up the same way for pipeprof's ranks and for the benchmarks that
compare against them: a GPU pinned by local rank with memory growth, or CPU thread pools
sized to the rank's share of the cores; and the emulated device of ``train.device =
"emulated:MS"``."""

from __future__ import annotations

import time

from pipeprof.launch import topology


def setup_devices(tf, hvd, intra_op_threads: int = 0) -> str:
    """Pin this rank to its GPU by local rank (memory growth on); size CPU thread pools."""
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        # With CUDA_VISIBLE_DEVICES already narrowed to one GPU per rank, there is only one.
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
        return f"GPU:{hvd.local_rank() % len(gpus)}"
    threads = intra_op_threads or topology.cores_per_rank(hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    return f"CPU ({threads} intra-op threads)"


def emulated_step(tf, hvd_tf, device_ms: float, gradient_floats: int):
    """A model step that keeps the device busy for ``device_ms`` without using the CPU (the
    rank sleeps, as its host thread would while a GPU computes), then allreduces a gradient
    of the model's size through Horovod for real."""
    gradient = tf.zeros([gradient_floats], tf.float32)
    loss = tf.constant(0.0)

    def step(x, y):
        time.sleep(device_ms / 1e3)
        reduced = hvd_tf.allreduce(gradient, name="pipeprof_emulated_gradient")
        return {"loss": loss + tf.reduce_sum(reduced[:1]), "accuracy": loss}

    return step
