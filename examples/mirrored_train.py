"""A tf.distribute Keras training script as the MirroredStrategy write-up teaches it: one
process, the model built and compiled under ``strategy.scope()``, the global batch the batch
per replica times the replicas, the learning rate scaled the same way; here a small CNN on a
folder of photos (one sub-folder per class) with its own tf.data pipeline.

The two lines marked `pipeprof` are all it needs to be profiled:

    pipeprof compare --engine mirrored --np 1,2 -- python examples/mirrored_train.py --data DIR

On a host without GPUs, pipeprof splits the CPU into np logical devices before the script
makes its strategy (importing pipeprof.keras does it), so MirroredStrategy() finds np.
Without pipeprof it trains on every GPU the host has (or on its CPU).
"""

import argparse
import os

import tensorflow as tf

import pipeprof.keras as pk  # pipeprof


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder with one sub-folder of JPEGs per class")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32, help="per replica")
    p.add_argument("--lr", type=float, default=0.01, help="for one replica; scaled by replicas")
    p.add_argument("--epochs", type=int, default=2)
    return p.parse_args()


def make_dataset(root, size, global_batch):
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
    return (
        ds.batch(global_batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE),
        len(files),
        classes,
    )


def main():
    args = parse_args()
    strategy = tf.distribute.MirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    global_batch = args.batch_size * replicas
    dataset, n, classes = make_dataset(args.data, args.image_size, global_batch)
    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input((args.image_size, args.image_size, 3)),
                tf.keras.layers.Conv2D(16, 3, activation="relu"),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Conv2D(32, 3, activation="relu"),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(len(classes)),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.SGD(args.lr * replicas),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    steps = max(1, n // global_batch)
    dataset = pk.instrument(dataset)  # pipeprof
    model.fit(
        dataset,
        epochs=args.epochs,
        steps_per_epoch=steps,
        verbose=2,
        callbacks=[pk.PipeprofCallback()],
    )  # pipeprof
    print(f"trained {args.epochs} epoch(s) of {steps} steps on {replicas} replica(s)")


if __name__ == "__main__":
    main()
