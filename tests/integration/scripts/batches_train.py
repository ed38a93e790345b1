"""A Horovod Keras script whose input is not tf.data: Keras's ImageDataGenerator reading a
folder of photos (flow_from_directory gives a Sequence, as Horovod's Keras ImageNet example
uses), passed to fit as that Sequence or as a Python generator over it (--input).

    python tests/integration/scripts/batches_train.py --data DIR --input sequence|generator
"""

import argparse

import horovod.tensorflow.keras as hvd
import tensorflow as tf

import pipeprof.keras as pk


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True)
    p.add_argument("--input", choices=("sequence", "generator"), required=True)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--epochs", type=int, default=1000)
    args = p.parse_args()
    hvd.init()
    images = tf.keras.preprocessing.image.ImageDataGenerator(
        rescale=1 / 255.0, horizontal_flip=True, rotation_range=20
    )  # its transforms need scipy, as every ImageDataGenerator does (the test extra has it)
    sequence = images.flow_from_directory(
        args.data,
        target_size=(args.image_size, args.image_size),
        batch_size=args.batch_size,
        class_mode="sparse",
        seed=hvd.rank(),
    )

    def batches():
        while True:
            for i in range(len(sequence)):
                yield sequence[i]
            sequence.on_epoch_end()

    data = pk.instrument(sequence if args.input == "sequence" else batches())
    model = tf.keras.Sequential(
        [
            tf.keras.Input((args.image_size, args.image_size, 3)),
            tf.keras.layers.Conv2D(8, 3, activation="relu"),
            tf.keras.layers.GlobalAveragePooling2D(),
            tf.keras.layers.Dense(sequence.num_classes),
        ]
    )
    model.compile(
        optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01 * hvd.size())),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(
        data,
        steps_per_epoch=len(sequence),
        epochs=args.epochs,
        verbose=0,
        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), pk.PipeprofCallback()],
    )
    if hvd.rank() == 0:
        print(f"trained on a {args.input} of {len(sequence)} batches an epoch")


if __name__ == "__main__":
    main()
