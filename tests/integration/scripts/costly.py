"""A user's script with one costly function of its own: `--costly augment` makes its
augmentation far costlier than its decode of small JPEGs; `--costly decode` reads large PNGs
and only flips them. The verdict of `pipeprof compare --ablation -- python costly.py ...` must
name augment_image or decode_image."""

import argparse
import glob
import os

import horovod.tensorflow.keras as hvd
import tensorflow as tf

import pipeprof.keras as pk

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--costly", choices=["augment", "decode"], required=True)
args = p.parse_args()
args.png = args.costly == "decode"  # large PNGs: the decode is the cost
hvd.init()
SIZE = 48


def decode_image(path, label):
    raw = tf.io.read_file(path)
    image = tf.io.decode_png(raw, channels=3) if args.png else tf.io.decode_jpeg(raw, channels=3)
    return tf.image.resize(image, [SIZE, SIZE]) / 255.0, label


def augment_image(image, label):
    if args.costly == "decode":
        return tf.image.random_flip_left_right(image), label
    # deliberately costly: upsample, blur over and over, then back to the model's size
    big = tf.image.resize(image, [4 * SIZE, 4 * SIZE])
    for _ in range(6):
        big = tf.nn.avg_pool2d(big[None], 3, 1, "SAME")[0]
        big = tf.image.adjust_contrast(big, 1.05)
    return tf.image.resize(big, [SIZE, SIZE]), label


files = sorted(glob.glob(os.path.join(args.data, "*", "*.png" if args.png else "*.jpg")))
classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
labels = [classes.index(os.path.basename(os.path.dirname(f))) for f in files]
ds = tf.data.Dataset.from_tensor_slices((files, labels)).shard(hvd.size(), hvd.rank())
ds = ds.map(decode_image, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.map(augment_image, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.batch(8, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
model = tf.keras.Sequential(
    [
        tf.keras.Input((SIZE, SIZE, 3)),
        tf.keras.layers.Conv2D(8, 3, activation="relu"),
        tf.keras.layers.GlobalAveragePooling2D(),
        tf.keras.layers.Dense(len(classes)),
    ]
)
model.compile(
    optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
)
ds = pk.instrument(ds)
model.fit(
    ds,
    steps_per_epoch=20,
    epochs=1000,
    verbose=0,
    callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), pk.PipeprofCallback()],
)
