"""A user's script whose decode of large PNGs is its cost (its augmentation is a flip): the
verdict of `pipeprof compare --ablation -- python costly_decode.py --png` must name decode_image."""

import argparse
import glob
import os

import horovod.tensorflow.keras as hvd
import tensorflow as tf

import pipeprof.keras as pk

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--png", action="store_true", help="read PNGs instead of JPEGs")
args = p.parse_args()
hvd.init()
SIZE = 48


def decode_image(path, label):
    raw = tf.io.read_file(path)
    image = tf.io.decode_png(raw, channels=3) if args.png else tf.io.decode_jpeg(raw, channels=3)
    return tf.image.resize(image, [SIZE, SIZE]) / 255.0, label


def augment_image(image, label):
    return tf.image.random_flip_left_right(image), label


files = sorted(glob.glob(os.path.join(args.data, "*", "*.png" if args.png else "*.jpg")))
classes = sorted({os.path.basename(os.path.dirname(f)) for f in files})
labels = [classes.index(os.path.basename(os.path.dirname(f))) for f in files]
ds = tf.data.Dataset.from_tensor_slices((files, labels)).shard(hvd.size(), hvd.rank())
ds = ds.map(decode_image, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.map(augment_image, num_parallel_calls=tf.data.AUTOTUNE)
ds = ds.batch(8, drop_remainder=True).repeat().prefetch(tf.data.AUTOTUNE)
model = tf.keras.Sequential([tf.keras.Input((SIZE, SIZE, 3)), tf.keras.layers.Conv2D(8, 3, activation="relu"),
                             tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(len(classes))])
model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
              loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
ds = pk.instrument(ds)
model.fit(ds, steps_per_epoch=20, epochs=1000, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), pk.PipeprofCallback()])
