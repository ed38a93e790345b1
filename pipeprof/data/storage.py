"""Storage slower than this machine's, emulated for ``pipeline.read.throttle_mb_s``: what the
pipeline would do reading from a slow disk or a network file system shared by many readers."""

from __future__ import annotations

import threading
import time

import numpy
import tensorflow as tf


class Storage:
    """Storage that delivers ``mb_s`` MB/s to this process: each read waits for its turn and
    its bytes' time, as on a disk that serves one read at a time. Waiting uses no CPU."""

    def __init__(self, mb_s: float) -> None:
        self.bytes_per_s = mb_s * 1e6
        self.lock = threading.Lock()
        self.free_at = 0.0

    def read(self, nbytes) -> numpy.int32:
        with self.lock:
            now = time.perf_counter()
            done = max(now, self.free_at) + int(nbytes) / self.bytes_per_s
            self.free_at = done
        time.sleep(max(0.0, done - now))
        return numpy.int32(nbytes)


def throttled(mb_s: float, encoded_of):
    """A map function passing its element through once its bytes have been 'read' from storage
    of ``mb_s`` MB/s (``pipeline.read.throttle_mb_s``)."""
    storage = Storage(mb_s)

    def throttle(*element):
        encoded = encoded_of(*element)
        waited = tf.numpy_function(
            storage.read, [tf.strings.length(encoded)], tf.int32, stateful=True
        )
        with tf.control_dependencies([waited]):
            return tuple(tf.identity(t) for t in element)

    return throttle
