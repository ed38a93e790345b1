"""What pipeprof.keras's two lines cost a user's training, measured side by side.

The example script's pipeline and model (``examples/chips_train.py``) under horovodrun at
np=1, trained for the same fixed number of steps two ways, both at once, taking turns on the
machine a second at a time (``timeslice``: the other side's processes stopped meanwhile, so
the machine's drift hits both alike; a side's rate counts its steps inside its own turns):
  * plain: no pipeprof at all; a minimal timing callback (batch end to batch end) reads the
    samples/s of the same number of steps, at the same point of the fit as the hooked side's
    real steps (after warm-up + measured + warm-up steps);
  * hooked: ``pipeprof compare --np 1 --steps N -- python ...`` with ``instrument`` and
    ``PipeprofCallback`` in the script; the real variant's samples/s from summary.csv (the
    same steps, timed the same way, with the twin beside the dataset, the choice read each
    step, the input-wait timestamp in the train step, telemetry and the record stream on).
The figure is the median of the per-round ratios hooked ÷ plain. Target: >= 0.98.

    .venv/bin/python benchmarks/hook_overhead.py [--rounds 6] [--steps 1000] [--slice-s 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness, timeslice  # noqa: E402

SCRIPT = textwrap.dedent('''
    """The example's pipeline and model, trained for a fixed number of steps, with or without pipeprof."""
    import json, sys, time
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
            self.ends.append(time.time())

    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if plain:
        # measured at the same point of the fit as the hooked side's real steps, which come after
        # the twin's warm-up and measured steps and their own warm-up: an earlier stretch would
        # hold the runtime's and tf.data's autotuning ramp that the hooked side has left behind
        skip = warmup + steps + warmup
        callbacks.append(Timing())
        model.fit(dataset, steps_per_epoch=skip + steps, epochs=1, verbose=0, callbacks=callbacks)
        with open(sys.argv[sys.argv.index("--ends") + 1], "w") as fh:
            json.dump(Timing.ends[skip - 1:], fh)
    else:
        dataset = pk.instrument(dataset)
        model.fit(dataset, steps_per_epoch=10_000, epochs=1, verbose=0, callbacks=callbacks + [pk.PipeprofCallback()])
''')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument(
        "--steps", type=int, default=1000
    )  # about 8 s a side here: 150 steps were 1.5 s, 2 turns
    ap.add_argument("--slice-s", type=float, default=1.0, help="each side's turn on the machine")
    args = ap.parse_args()
    from pipeprof.data.generate import generate
    from pipeprof.scenario import GenerateConfig

    env = dict(os.environ, PYTHONPATH=str(harness.REPO), TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory() as tmp:
        data = generate(GenerateConfig(images=600, size=192, classes=2, seed=3), Path(tmp) / "data")
        script = Path(tmp) / "bench_train.py"
        script.write_text(SCRIPT.format(examples=str(harness.REPO / "examples"), data=str(data)))
        print(
            f"hook overhead · examples/chips_train.py's pipeline and model at 64px, batch 16, np=1, "
            f"{args.steps} measured steps a side, taking turns every {args.slice_s:g} s"
        )
        ratios = []
        for r in range(args.rounds):
            ends, out = Path(tmp) / f"ends{r}.json", Path(tmp) / f"run{r}"
            plain = timeslice.Side(
                "plain",
                [
                    *harness.horovodrun(1),
                    sys.executable,
                    str(script),
                    "--plain",
                    "--steps",
                    str(args.steps),
                    "--ends",
                    str(ends),
                ],
                env=env,
            )
            hooked = timeslice.Side(
                "hooked",
                [
                    *harness.PIPEPROF,
                    "compare",
                    "--np",
                    "1",
                    "--steps",
                    str(args.steps),
                    "--warmup",
                    "20",
                    "--no-dashboard",
                    "--no-report",
                    "--out",
                    str(out),
                    "--",
                    sys.executable,
                    str(script),
                    "--steps",
                    str(args.steps),
                ],
                env=env,
            )
            first, second = harness.turns([plain, hooked], r)
            timeslice.run_sliced(first, second, slice_s=args.slice_s)
            for side in (plain, hooked):
                timeslice.check(side)
            e = numpy.array(json.loads(ends.read_text()))
            rate_plain, n_plain = timeslice.sliced_rate(
                plain.windows, e[1:], numpy.diff(e) * 1e3, 16
            )
            rate_hooked, n_hooked = timeslice.run_rate(out, "real", hooked.windows)
            ratios.append(rate_hooked / rate_plain)
            print(
                f"  round {r + 1} ({first.name} first): plain {rate_plain:7.1f} "
                f"({n_plain} steps)  hooked {rate_hooked:7.1f} ({n_hooked}) samples/s  ratio {ratios[-1]:.3f}",
                flush=True,
            )
    print()
    timeslice.print_medians({"real": ratios}, 0.98, "hooked/plain")


if __name__ == "__main__":
    harness.entry(main)
