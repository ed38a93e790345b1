"""A custom training loop, no model.fit: the small CNN of chips_train.py on a folder of photos
(one sub-folder per class), its gradients averaged by Horovod's DistributedGradientTape
inside a tf.function step (as Horovod's TF2 examples write it), or by tf.distribute's
MirroredStrategy through strategy.run (--engine mirrored).

The three lines marked `pipeprof` are all it needs to be profiled:

    pipeprof compare --np 1,2 -- python examples/loop_train.py --data DIR
    pipeprof compare --engine mirrored --np 1,2 -- \\
        python examples/loop_train.py --data DIR --engine mirrored

and it trains as before without them, or with them outside pipeprof:

    horovodrun -np 2 python examples/loop_train.py --data DIR
"""

import argparse
import os

import tensorflow as tf

import pipeprof.keras as pk  # pipeprof


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder with one sub-folder of JPEGs per class")
    p.add_argument("--engine", choices=("horovod", "mirrored"), default="horovod")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="per GPU (per replica)")
    p.add_argument("--lr", type=float, default=0.01, help="for one GPU; scaled by the GPUs")
    p.add_argument("--epochs", type=int, default=2)
    return p.parse_args()


def make_dataset(root, size, batch, shard=(1, 0)):
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
    ds = ds.shard(*shard).map(load, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.map(lambda x, y: (tf.image.random_flip_left_right(x), y))
    return ds.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE), len(classes)


def make_model(size, classes):
    return tf.keras.Sequential(
        [
            tf.keras.Input((size, size, 3)),
            tf.keras.layers.Conv2D(16, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(classes),
        ]
    )


def train_horovod(args):
    import horovod.tensorflow as hvd

    hvd.init()
    dataset, classes = make_dataset(
        args.data, args.image_size, args.batch_size, (hvd.size(), hvd.rank())
    )
    model = make_model(args.image_size, classes)
    optimizer = tf.keras.optimizers.SGD(args.lr * hvd.size())
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x, y, first):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        if first:  # every rank starts from rank 0's weights
            hvd.broadcast_variables(model.variables, root_rank=0)
        return loss

    train_step = pk.step_fn(train_step)  # pipeprof
    dataset = pk.instrument(dataset)  # pipeprof
    steps = 0
    for epoch in range(args.epochs):
        for x, y in dataset:
            loss = train_step(x, y, steps == 0)
            steps += 1
        if hvd.rank() == 0 and epoch < 3:
            print(f"epoch {epoch}: loss {float(loss):.3f}")
    if hvd.rank() == 0:
        print(f"trained {steps} steps on {hvd.size()} rank(s) with DistributedGradientTape")


def train_mirrored(args):
    strategy = tf.distribute.MirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    dataset, classes = make_dataset(args.data, args.image_size, global_batch)
    with strategy.scope():
        model = make_model(args.image_size, classes)
        optimizer = tf.keras.optimizers.SGD(args.lr * replicas)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction=tf.keras.losses.Reduction.NONE
        )

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            per_sample = loss_fn(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        losses = strategy.run(replica_step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    distributed = pk.instrument(strategy.experimental_distribute_dataset(dataset))  # pipeprof
    steps = 0
    for epoch in range(args.epochs):
        for batch in distributed:
            with pk.step() as step:  # pipeprof
                step.loss = train_step(batch)
            steps += 1
        if epoch < 3:
            print(f"epoch {epoch}: loss {float(step.loss):.3f}")
    print(f"trained {steps} steps on {replicas} replica(s) with strategy.run")


def main():
    args = parse_args()
    (train_mirrored if args.engine == "mirrored" else train_horovod)(args)


if __name__ == "__main__":
    main()
