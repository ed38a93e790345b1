"""A Horovod Keras training script as a team writes one: the small CNN of the potato-chips
write-up, trained on a folder of photos (one sub-folder per class) with its own tf.data
pipeline (read and decode, Keras preprocessing layers that flip and rotate, batch, prefetch).

The two lines marked `pipeprof` are all it needs to be profiled:

    pipeprof compare --np 1,2 -- python examples/chips_train.py --data DIR
    pipeprof compare --np 1,2 --ablation -- python examples/chips_train.py --data DIR

and it trains as before without them, or with them outside pipeprof:

    python examples/chips_train.py --data DIR
    horovodrun -np 2 python examples/chips_train.py --data DIR
"""

import argparse
import os

import horovod.tensorflow.keras as hvd
import tensorflow as tf

import pipeprof.keras as pk  # pipeprof


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder with one sub-folder of JPEGs per class")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32, help="per GPU")
    p.add_argument(
        "--lr", type=float, default=0.001, help="for one GPU; scaled by the number of GPUs"
    )
    p.add_argument("--epochs", type=int, default=2)
    return p.parse_args()


def file_list(root):
    classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    files, labels = [], []
    for label, name in enumerate(classes):
        for f in sorted(os.listdir(os.path.join(root, name))):
            if f.lower().endswith((".jpg", ".jpeg")):
                files.append(os.path.join(root, name, f))
                labels.append(label)
    return files, labels, classes


def load_image(path, label, size):
    image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
    image = tf.image.resize(image, [size, size]) / 255.0
    return image, label


def make_dataset(files, labels, size, batch_size):
    ds = tf.data.Dataset.from_tensor_slices((files, labels))
    # shuffle the whole list with one seed on every worker, then shard: each worker a disjoint share
    ds = ds.shuffle(len(files), seed=42, reshuffle_each_iteration=True).shard(
        hvd.size(), hvd.rank()
    )
    ds = ds.map(lambda p, y: load_image(p, y, size), num_parallel_calls=tf.data.AUTOTUNE)
    augment = tf.keras.Sequential(
        [
            tf.keras.layers.RandomFlip("horizontal_and_vertical"),
            tf.keras.layers.RandomRotation(0.25),
        ]
    )  # the write-up's flips and rotations
    ds = ds.batch(batch_size, drop_remainder=True)
    ds = ds.map(lambda x, y: (augment(x, training=True), y), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.repeat().prefetch(tf.data.AUTOTUNE)


def make_model(size, classes):
    return tf.keras.Sequential(
        [
            tf.keras.Input((size, size, 3)),
            tf.keras.layers.Conv2D(16, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(classes),
        ]
    )


def main():
    args = parse_args()
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")

    files, labels, classes = file_list(args.data)
    dataset = make_dataset(files, labels, args.image_size, args.batch_size)
    model = make_model(args.image_size, len(classes))
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.Adam(args.lr * hvd.size()))
    model.compile(
        optimizer=optimizer,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    steps = max(1, len(files) // (args.batch_size * hvd.size()))

    dataset = pk.instrument(dataset)  # pipeprof
    model.fit(
        dataset,
        epochs=args.epochs,
        steps_per_epoch=steps,
        verbose=2 if hvd.rank() == 0 else 0,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), pk.PipeprofCallback()],
    )  # pipeprof
    if hvd.rank() == 0:
        print(f"trained {args.epochs} epoch(s) of {steps} steps on {hvd.size()} worker(s)")


if __name__ == "__main__":
    main()
