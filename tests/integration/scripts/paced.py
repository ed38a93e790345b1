"""A Horovod Keras script whose input pipeline takes a set time per batch (a sleep in the
pipeline: the wait is known before the run), trained by model.fit compiled with
``--steps-per-execution N``, or by a custom loop (``--loop``): what pipeprof measures per
step must be that wait, whatever N, in fit or in a loop.

    python tests/integration/scripts/paced.py --wait-ms 30 --steps-per-execution 4
    python tests/integration/scripts/paced.py --wait-ms 30 --loop
"""

import argparse
import time

import horovod.tensorflow.keras as hvd
import numpy as np
import tensorflow as tf

import pipeprof.keras as pk

p = argparse.ArgumentParser()
p.add_argument("--wait-ms", type=float, required=True)
p.add_argument("--steps-per-execution", type=int, default=1)
p.add_argument("--loop", action="store_true", help="a custom loop instead of model.fit")
args = p.parse_args()
hvd.init()


def paced(x, y):
    def wait(t):
        time.sleep(args.wait_ms / 1e3)
        return t

    return tf.py_function(wait, [x], tf.float32), y


rng = np.random.default_rng(1)
x = rng.random((64, 8, 8, 3), dtype=np.float32)
y = rng.integers(0, 3, 64)
# no prefetch: each batch's wait is paid when the step asks for it
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat().map(paced)
ds = ds.map(lambda x, y: (tf.ensure_shape(x, [8, 8, 8, 3]), y))
model = tf.keras.Sequential(
    [tf.keras.Input((8, 8, 3)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(3)]
)
if args.loop:
    import horovod.tensorflow as hvd_tf

    optimizer = tf.keras.optimizers.SGD(0.01)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @pk.step_fn
    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd_tf.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    batches = pk.instrument(ds.take(40))  # epochs of 40 batches
    for _ in range(1000):
        for x, y in batches:
            train_step(x, y)
    raise SystemExit(0)
model.compile(
    optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    steps_per_execution=args.steps_per_execution,
)
model.fit(
    pk.instrument(ds),
    steps_per_epoch=40,
    epochs=1000,
    verbose=0,
    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), pk.PipeprofCallback()],
)
