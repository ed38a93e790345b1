"""Keras 3's ``fit`` on torch with pipeprof's lines: a DataLoader whose items cost
``--item-ms`` of CPU each (num_workers 0, so the step waits for them) feeds a small CNN.
At its end the script writes the steps fit ran and the backend to ``--out``/fit.json."""

import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import pipeprof.keras as pk  # noqa: E402


class Costly(Dataset):
    def __init__(self, n, item_ms):
        rng = np.random.default_rng(0)
        self.x = rng.random((n, 16, 16, 3), dtype=np.float32)
        self.y = rng.integers(0, 4, n)
        self.item_s = item_ms / 1e3

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        end = time.thread_time() + self.item_s
        while time.thread_time() < end:  # the item's decode: CPU, not a sleep
            pass
        return torch.from_numpy(self.x[i]), int(self.y[i])


class Steps(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--item-ms", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=1000)
    args = p.parse_args()
    loader = DataLoader(Costly(256, args.item_ms), batch_size=16, shuffle=True, drop_last=True)
    loader = pk.instrument(loader)  # pipeprof
    model = keras.Sequential(
        [
            keras.Input((16, 16, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(4),
        ]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    steps = Steps()
    model.fit(loader, epochs=args.epochs, verbose=0, callbacks=[pk.PipeprofCallback(), steps])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "fit.json"), "w") as fh:
        json.dump({"backend": keras.backend.backend(), "steps": steps.steps}, fh)


if __name__ == "__main__":
    main()
