"""What pipeprof.keras's two lines cost a user's training, measured side by side.

The example script's pipeline and model (``examples/chips_train.py``) under horovodrun at
np=1, trained for the same fixed number of steps two ways, in ABBA rounds:
  * plain: no pipeprof at all; a minimal timing callback (batch end to batch end) reads the
    samples/s of the same number of steps, at the same point of the fit as the hooked side's
    real steps (after warm-up + measured + warm-up steps);
  * hooked: ``pipeprof compare --np 1 --steps N -- python ...`` with ``instrument`` and
    ``PipeprofCallback`` in the script; the real variant's samples/s from summary.csv (the
    same steps, timed the same way, with the twin beside the dataset, the choice read each
    step, the input-wait timestamp in the train step, telemetry and the record stream on).
The figure is the median of the per-round ratios hooked ÷ plain. Target: >= 0.98.

    .venv/bin/python benchmarks/hook_overhead.py [--rounds 6] [--steps 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
BIN = REPO / ".venv" / "bin"

SCRIPT = textwrap.dedent('''
    """The example's pipeline and model, trained for a fixed number of steps, with or without pipeprof."""
    import sys, time
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf
    sys.path.insert(0, {examples!r})
    import chips_train as ct
    import pipeprof.keras as pk

    plain = "--plain" in sys.argv
    steps, warmup = int(sys.argv[sys.argv.index("--steps") + 1]), 20
    hvd.init()
    files, labels, classes = ct.file_list({data!r})
    dataset = ct.make_dataset(files, labels, 64, 16)
    model = ct.make_model(64, len(classes))
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001)),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    class Timing(tf.keras.callbacks.Callback):
        ends = []
        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(time.perf_counter())

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if plain:
        # measured at the same point of the fit as the hooked side's real steps, which come after
        # the twin's warm-up and measured steps and their own warm-up: an earlier stretch would
        # hold the runtime's and tf.data's autotuning ramp that the hooked side has left behind
        skip = warmup + steps + warmup
        callbacks.append(Timing())
        model.fit(dataset, steps_per_epoch=skip + steps, epochs=1, verbose=0, callbacks=callbacks)
        e = Timing.ends[skip - 1:]
        print(f"PLAIN {{16 * (len(e) - 1) / (e[-1] - e[0]):.3f}}")
    else:
        dataset = pk.instrument(dataset)
        model.fit(dataset, steps_per_epoch=10_000, epochs=1, verbose=0, callbacks=callbacks + [pk.PipeprofCallback()])
''')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=150)
    args = ap.parse_args()
    from pipeprof.data.generate import generate
    from pipeprof.scenario import GenerateConfig

    env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory() as tmp:
        data = generate(GenerateConfig(images=600, size=192, classes=2, seed=3), Path(tmp) / "data")
        script = Path(tmp) / "bench_train.py"
        script.write_text(SCRIPT.format(examples=str(REPO / "examples"), data=str(data)))
        print(f"hook overhead · examples/chips_train.py's pipeline and model at 64px, batch 16, np=1, "
              f"{args.steps} measured steps a side")
        ratios = []
        for r in range(args.rounds):
            got = {}
            for side in (("plain", "hooked") if r % 2 == 0 else ("hooked", "plain")):
                if side == "plain":
                    proc = subprocess.run([str(BIN / "horovodrun"), "-np", "1", "-H", "localhost:1", "--gloo",
                                           str(BIN / "python"), str(script), "--plain", "--steps", str(args.steps)],
                                          capture_output=True, text=True, env=env, check=True)
                    # horovodrun prefixes each line with the rank ("[0]<stdout>:PLAIN 123.4")
                    got[side] = float(next(line.split("PLAIN ", 1)[1] for line in proc.stdout.splitlines()
                                           if "PLAIN " in line))
                else:
                    out = Path(tmp) / f"run{r}"
                    subprocess.run([str(BIN / "pipeprof"), "compare", "--np", "1", "--steps", str(args.steps),
                                    "--warmup", "20", "--no-dashboard", "--no-report", "--out", str(out), "--",
                                    str(BIN / "python"), str(script), "--steps", str(args.steps)],
                                   capture_output=True, text=True, env=env, check=True)
                    summary = pd.read_csv(out / "summary.csv").set_index("variant")
                    got[side] = float(summary.loc["real", "samples_per_s"])
            ratios.append(got["hooked"] / got["plain"])
            print(f"  round {r + 1}: plain {got['plain']:7.1f}  hooked {got['hooked']:7.1f} samples/s  "
                  f"ratio {ratios[-1]:.3f}", flush=True)
    m = statistics.median(ratios)
    print(f"\n  hooked / plain samples/s: median {m:.3f} of {len(ratios)} rounds ({min(ratios):.3f}..{max(ratios):.3f})"
          f"  target >= 0.98  {'PASS' if m >= 0.98 else 'FAIL'}")


if __name__ == "__main__":
    main()
