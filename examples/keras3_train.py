"""A Keras 3 training script, data-parallel where Keras 3 runs it: on JAX with
``keras.distribution.DataParallel`` (one process drives every device of its host; across hosts
one process a host, joined by ``keras.distribution.initialize()``), or on TensorFlow with
``tf.distribute.MirroredStrategy``. A small CNN on a folder of photos (one sub-folder per
class) read by its own tf.data pipeline, trained by ``fit`` or by a custom loop (``--loop``).

The lines marked `pipeprof` are all it needs to be profiled:

    pipeprof compare --engine data_parallel --np 1,2 -- python examples/keras3_train.py --data DIR
    pipeprof compare --engine mirrored --np 1,2 -- python examples/keras3_train.py --data DIR \\
        --backend tensorflow

On a host without GPUs, importing pipeprof.keras first gives the script the np CPU devices the
compare asks for. Without pipeprof it trains on every device the host has.
"""

import argparse
import contextlib
import os


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder with one sub-folder of JPEGs per class")
    p.add_argument("--backend", choices=("jax", "tensorflow"), default="jax")
    p.add_argument("--loop", action="store_true", help="a custom training loop, not fit")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32, help="per replica")
    p.add_argument("--lr", type=float, default=0.01, help="for one replica; scaled by replicas")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-execution", type=int, default=1)
    p.add_argument("--jit-compile", choices=("auto", "true", "false"), default="auto")
    return p.parse_args()


ARGS = parse_args()
os.environ.setdefault("KERAS_BACKEND", ARGS.backend)  # before Keras is imported

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402  (tf.data, and the TensorFlow backend's strategy)

import pipeprof.keras as pk  # noqa: E402  # pipeprof


def make_dataset(root, size, batch):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files, labels = [], []
    for label, name in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, name))):
            if f.lower().endswith((".jpg", ".jpeg")):
                files.append(os.path.join(root, name, f))
                labels.append(label)

    def load(path, label):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.resize(image, [size, size]) / 255.0, label

    ds = tf.data.Dataset.from_tensor_slices((files, labels)).shuffle(len(files), seed=1)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE).repeat()
    ds = ds.map(lambda x, y: (tf.image.random_flip_left_right(x), y))
    return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE), len(files), classes


def build(size, classes):
    return keras.Sequential(
        [
            keras.Input((size, size, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(classes),
        ]
    )


def jax_loop(model, optimizer, loss_fn, dataset, steps):
    """Keras 3's stateless JAX loop: one jitted step over the model's and optimizer's state,
    each batch laid out over the distribution's devices as fit lays it out."""
    import jax

    distribution = keras.distribution.distribution()

    def lay_out(array):
        array = array.numpy()
        if distribution is None:
            return array
        layout = distribution.get_data_layout(array.shape).backend_layout
        return jax.make_array_from_process_local_data(layout, array)

    def compute_loss(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, logits), non_trainable

    grad_fn = jax.value_and_grad(compute_loss, has_aux=True)

    @jax.jit
    def train_step(state, x, y):
        trainable, non_trainable, opt_vars = state
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return loss, (trainable, non_trainable, opt_vars)

    optimizer.build(model.trainable_variables)
    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )
    batches = pk.instrument(dataset.take(steps))  # pipeprof
    for _epoch in range(ARGS.epochs):
        for x, y in batches:
            with pk.step() as s:  # pipeprof
                loss, state = train_step(state, lay_out(x), lay_out(y))
                s.loss = loss
    for variable, value in zip(model.trainable_variables, state[0]):
        variable.assign(value)


def tf_loop(model, optimizer, loss_fn, dataset, steps, strategy, global_batch):
    """A tf.distribute loop: each replica's step under strategy.run, the loss scaled to the
    global batch, the optimizer applying the replicas' gradients together."""

    @tf.function
    def train_step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_sample = loss_fn(y, model(x, training=True))
                loss = tf.reduce_sum(per_sample) / global_batch
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        losses = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    spread = strategy.experimental_distribute_dataset(dataset.take(steps))
    batches = pk.instrument(spread)  # pipeprof
    for _epoch in range(ARGS.epochs):
        for x, y in batches:
            with pk.step() as s:  # pipeprof
                s.loss = train_step(x, y)


def main():
    processes = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1"))
    if ARGS.backend == "jax":
        if processes > 1:  # one process a host: they join at the first host's coordinator
            keras.distribution.initialize()
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        replicas = len(keras.distribution.distribution().device_mesh.devices.ravel())
        strategy, scope = None, contextlib.nullcontext()
    else:
        strategy = tf.distribute.MirroredStrategy()
        replicas, scope = strategy.num_replicas_in_sync, strategy.scope()
    batch = ARGS.batch_size * replicas // processes  # this process's share of the global batch
    dataset, n, classes = make_dataset(ARGS.data, ARGS.image_size, batch)
    jit = {"auto": "auto", "true": True, "false": False}[ARGS.jit_compile]
    with scope:
        model = build(ARGS.image_size, len(classes))
        optimizer = keras.optimizers.SGD(ARGS.lr * replicas)
        steps = max(1, n // (batch * processes))
        if ARGS.loop:
            reduction = "sum_over_batch_size" if ARGS.backend == "jax" else "none"
            loss_fn = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=reduction
            )
            if ARGS.backend == "jax":
                jax_loop(model, optimizer, loss_fn, dataset, steps)
            else:
                tf_loop(model, optimizer, loss_fn, dataset, steps, strategy, batch)
        else:
            model.compile(
                optimizer=optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
                steps_per_execution=ARGS.steps_per_execution,
                jit_compile=jit,
            )
            model.fit(
                pk.instrument(dataset),  # pipeprof
                epochs=ARGS.epochs,
                steps_per_epoch=steps,
                callbacks=[pk.PipeprofCallback()],  # pipeprof
                verbose=0,
            )
    print(f"trained {ARGS.epochs} epoch(s) of {steps} step(s) on {replicas} replica(s)")


if __name__ == "__main__":
    main()
