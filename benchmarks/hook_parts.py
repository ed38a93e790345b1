"""What each part of pipeprof.keras's hook costs a step, side by side in one process.

A small CNN on one repeated batch (steps of about 1.3 ms here, so tens of microseconds show),
trained by ``model.fit`` in rounds, each variant once a round:
  plain         a batch-end timing callback only (the baseline)
  plain-tflogs  the same callback taking TensorFlow's logs (no per-step conversion to numpy)
  timestamp     the input-wait timestamp as PipeprofCallback takes it: tf.timestamp() returned
                with the step's logs, taken out by a wrapper of the train function and read
  switch        the train function handed its iterator through the twin's choice
                (pipeprof.rank.fit.CHOICE, set to the real source)
Prints each variant's median microseconds per step over the rounds; the overhead of a part is
its median minus plain's. Until 2026-11-24 the hook took the timestamp with a tf.py_function
and chose the twin inside the pipeline (choose_from_datasets through a tf.Variable): together
about 6% of the example script's samples/s, measured by benchmarks/hook_overhead.py.

    .venv/bin/python benchmarks/hook_parts.py [ROUNDS]
"""

import statistics
import sys
import time

import harness  # noqa: F401  (puts this checkout's pipeprof first on sys.path)
import tensorflow as tf

tf.get_logger().setLevel("ERROR")


def make():
    m = tf.keras.Sequential(
        [
            tf.keras.layers.Input((32, 32, 3)),
            tf.keras.layers.Conv2D(8, 3, activation="relu"),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(3),
        ]
    )
    m.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


x = tf.random.uniform((16, 32, 32, 3))
y = tf.zeros((16,), tf.int64)
base = tf.data.Dataset.from_tensors((x, y)).repeat().prefetch(2)


class T(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


class TT(T):
    _supports_tf_logs = True


def wrap_ts(model):
    orig = model.train_step

    def step(data):
        flat = tf.nest.flatten(data)
        with tf.control_dependencies(flat):
            t = tf.timestamp()
        out = orig(data)
        return {**out, "_t": t}

    model.train_step = step


def switch(model, read_timestamp=False):
    """Wraps the train function fit has just made, as PipeprofCallback does in on_train_begin."""
    from pipeprof.rank.fit import CHOICE

    orig = model.train_function

    def train_function(iterator):
        logs = orig(CHOICE.iterator(iterator))
        if read_timestamp:
            model._t = logs.pop("_t")
        return logs

    model.train_function = train_function


class Wrapping(T):
    read_timestamp = False

    def on_train_begin(self, logs=None):
        switch(self.model, self.read_timestamp)


class Timestamp(Wrapping):
    read_timestamp = True

    def on_train_batch_end(self, batch, logs=None):
        self.last = float(self.model._t)
        self.ends.append(time.perf_counter())


VARIANTS = {
    "plain": (None, T),
    "plain-tflogs": (None, TT),
    "timestamp": (wrap_ts, Timestamp),
    "switch": (None, Wrapping),
}
N = 400
res = {k: [] for k in VARIANTS}
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    for k, (wrap, cb) in VARIANTS.items():
        m = make()
        if wrap:
            wrap(m)
        c = cb()
        m.fit(base, steps_per_epoch=N, epochs=1, verbose=0, callbacks=[c])
        e = c.ends[100:]
        res[k].append(1e6 * (e[-1] - e[0]) / (len(e) - 1))
for k, v in res.items():
    print(f"{k:14s} median {statistics.median(v):8.1f} us/step  rounds {[round(a) for a in v]}")
