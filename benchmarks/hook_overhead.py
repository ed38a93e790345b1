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
``--smoke``: one small round (32 px, batch 32, 3 + 80 steps, 0.5 s turns), then checks its figures.

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
    steps, warmup = int(sys.argv[sys.argv.index("--steps") + 1]), {warmup}
    hvd.init()
    files, labels, classes = ct.file_list({data!r})
    dataset = ct.make_dataset(files, labels, {size}, {batch})
    model = ct.make_model({size}, len(classes))
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

# --smoke: the defaults it gives the other flags (one given explicitly still wins). The hooked
# side's real steps count only while the plain side still runs, and the plain side outlives them
# only by training real steps where the hooked side trains its twin: so a batch whose decoding
# costs more than its 32 px model step, and enough steps to make up the launcher's start-up
SMOKE = dict(rounds=1, steps=80, warmup=3, slice_s=0.5, images=64, image_size=32, batch_size=32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument(
        "--steps", type=int, default=1000
    )  # about 8 s a side here: 150 steps were 1.5 s, 2 turns
    ap.add_argument("--slice-s", type=float, default=1.0, help="each side's turn on the machine")
    ap.add_argument("--warmup", type=int, default=20, help="warm-up steps of each variant")
    ap.add_argument("--images", type=int, default=600, help="images generated (192 px files)")
    ap.add_argument("--image-size", type=int, default=64, help="the model's input side")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument(
        "--smoke", action="store_true", help="one small round, then a check of its figures (CI)"
    )
    args = harness.parse_smoke(ap, SMOKE)
    from pipeprof.data.generate import generate
    from pipeprof.scenario import GenerateConfig

    env = dict(os.environ, PYTHONPATH=str(harness.REPO), TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory() as tmp:
        data = generate(
            GenerateConfig(images=args.images, size=192, classes=2, seed=3), Path(tmp) / "data"
        )
        script = Path(tmp) / "bench_train.py"
        script.write_text(
            SCRIPT.format(
                examples=str(harness.REPO / "examples"),
                data=str(data),
                size=args.image_size,
                batch=args.batch_size,
                warmup=args.warmup,
            )
        )
        print(
            f"hook overhead · examples/chips_train.py's pipeline and model at {args.image_size}px, "
            f"batch {args.batch_size}, np=1, "
            f"{args.steps} measured steps a side, taking turns every {args.slice_s:g} s"
        )
        ratios = []
        measured: list[tuple[float, int, float, int]] = []  # each round's rates and step counts
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
                    str(args.warmup),
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
                plain.windows, e[1:], numpy.diff(e) * 1e3, args.batch_size
            )
            rate_hooked, n_hooked = timeslice.run_rate(out, "real", hooked.windows)
            ratios.append(rate_hooked / rate_plain)
            measured.append((rate_plain, n_plain, rate_hooked, n_hooked))
            print(
                f"  round {r + 1} ({first.name} first): plain {rate_plain:7.1f} "
                f"({n_plain} steps)  hooked {rate_hooked:7.1f} ({n_hooked}) samples/s  ratio {ratios[-1]:.3f}",
                flush=True,
            )
    print()
    timeslice.print_medians({"real": ratios}, 0.98, "hooked/plain")
    if args.smoke:
        smoke_check(measured, ratios)


def smoke_check(measured: list[tuple[float, int, float, int]], ratios: list[float]) -> None:
    """The figures the rounds printed: each side's samples/s over steps inside its turns, and
    the ratio, finite and > 0. Not the target: that takes a full, quiet run."""
    harness.smoke_check(bool(measured), "no round measured")
    for r, ((rate_plain, n_plain, rate_hooked, n_hooked), ratio) in enumerate(
        zip(measured, ratios), 1
    ):
        for side, n, rate in (("plain", n_plain, rate_plain), ("hooked", n_hooked, rate_hooked)):
            harness.smoke_check(n > 0, f"round {r}: no {side} step inside its turns")
            harness.smoke_check(
                harness.finite_positive(rate), f"round {r}: {side} samples/s = {rate!r}"
            )
        harness.smoke_check(harness.finite_positive(ratio), f"round {r}: ratio = {ratio!r}")
    print(f"smoke: ok ({len(measured)} round(s), both sides measured, figures finite and > 0)")


if __name__ == "__main__":
    harness.entry(main)
