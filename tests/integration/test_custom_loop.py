"""A custom training loop (no model.fit) under `compare --np 1,2 -- python train.py`: Horovod's
DistributedGradientTape inside a tf.function step, and tf.distribute's strategy.run, each
measured as fit is (the twin alone, then the pipeline in rounds against it), the loop ended by
pipeprof once the gap is known and the script going on to its end; and a loop that lacks
pipeprof's step marker, or marks steps of batches it did not take from pipeprof, told in one
line which line to add, and where."""

import json
import sys
import textwrap

import pandas as pd
import pytest

from tests.integration.conftest import REPO, run_pipeprof

pytestmark = pytest.mark.horovod  # it trains

EXAMPLE = str(REPO / "examples" / "loop_train.py")
FAST = (
    "--set", "train.warmup_steps=3", "--set", "train.min_measure_s=2",
    "--set", "train.max_measure_s=6",
)  # fmt: skip


@pytest.mark.parametrize(
    "engine,said",
    [
        ("horovod", "rank(s) with DistributedGradientTape"),
        ("mirrored", "replica(s) with strategy.run"),
    ],
)
def test_a_custom_loop_is_compared_at_np_1_and_2(engine, said, small_dataset, tmp_path):
    photos, _ = small_dataset
    out = tmp_path / "run"
    got = run_pipeprof(
        "compare", "--engine", engine, "--np", "1,2", "--out", str(out), "--no-report",
        "--no-dashboard", *FAST,
        "--", sys.executable, EXAMPLE, "--data", str(photos), "--engine", engine,
        "--image-size", "32", "--batch-size", "4", "--epochs", "10000",
    )  # fmt: skip
    summary = pd.read_csv(out / "summary.csv")
    assert sorted(zip(summary["np"], summary["variant"])) == [
        (1, "real"), (1, "synthetic"), (2, "real"), (2, "synthetic"),
    ], got.stdout[-3000:]  # fmt: skip
    real = summary[summary["variant"] == "real"].set_index("np")
    assert summary["samples_per_s"].gt(0).all() and real["gap_pct"].notna().all(), real
    # the step's result read as its loss: a cross-entropy over 3 classes, finite
    variants = [json.loads(line) for line in (out / "variants.jsonl").read_text().splitlines()]
    assert len(variants) == 4 and all(0 < v["loss_mean"] < 20 for v in variants), variants
    for n in (1, 2):
        log = (out / "logs" / f"np{n}.log").read_text()
        # pipeprof ended the loop (not its 10,000 epochs) and the script went on to its end
        assert f"{n} {said}" in log, log[-2000:]
        steps = pd.read_csv(out / "steps" / f"np{n}-real.csv")
        # a step's batch is the process's: 4 per replica, every replica's together
        processes = n if engine == "horovod" else 1
        assert set(steps["rank"]) == set(range(processes))
        assert set(steps["batch_size"]) == {4 * n // processes}
        # input wait timed where the loop waits for its batch, within its step (what it
        # measures is checked against a known wait below, on a paced pipeline)
        assert (steps["input_wait_ms"] <= steps["step_time_ms"] + 0.5).all()


UNMARKED = """
import horovod.tensorflow as hvd
import tensorflow as tf
import pipeprof.keras as pk
hvd.init()
dataset = tf.data.Dataset.range(1000).batch(4)
for batch in pk.instrument(dataset):
    total = tf.reduce_sum(batch)
"""
UNTAKEN = """
import horovod.tensorflow as hvd
import tensorflow as tf
import pipeprof.keras as pk
hvd.init()
dataset = tf.data.Dataset.range(1000).batch(4)
for batch in dataset:
    with pk.step():
        total = tf.reduce_sum(batch)
"""


@pytest.mark.parametrize(
    "source,line,said,fix",
    [
        (
            UNMARKED, 7, "took a second batch before marking a step",
            "add `with pipeprof.keras.step():` around the training step",
        ),
        (
            UNTAKEN, 8, "marks a step whose batch did not come from pipeprof.keras.instrument",
            "read the batches with `for batch in pipeprof.keras.instrument(dataset):`",
        ),
    ],
)  # fmt: skip
def test_a_loop_whose_steps_are_not_marked_is_told_which_line_to_add(
    source, line, said, fix, tmp_path
):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(source))
    got = run_pipeprof(
        "compare", "--np", "1", "--out", str(tmp_path / "run"), "--no-dashboard",
        "--", sys.executable, str(script), ok=False,
    )  # fmt: skip
    # refused as written (exit 2, a usage error), in one line
    assert got.returncode == 2 and got.stderr.count("\n") == 1, got.stderr[-3000:]
    assert f"{script}:{line}: " in got.stderr, got.stderr  # the loop's line, or the step's
    assert said in got.stderr and fix in got.stderr, got.stderr


@pytest.mark.parametrize("how", ["fit", "fit-4", "loop"])
def test_a_known_input_wait_is_measured_in_fit_per_execution_and_in_a_loop(how, tmp_path):
    """A pipeline that takes 30 ms a batch: about 30 ms of input wait a step in fit, in fit
    compiled with steps_per_execution=4 (timed per execution, each figure one step's share:
    not 120 ms, and the output says the resolution), and in a custom loop."""
    out = tmp_path / "run"
    extra = {"fit": [], "fit-4": ["--steps-per-execution", "4"], "loop": ["--loop"]}[how]
    got = run_pipeprof(
        "compare", "--np", "1", "--out", str(out), "--no-report", "--no-dashboard", *FAST,
        "--", sys.executable, str(REPO / "tests" / "integration" / "scripts" / "paced.py"),
        "--wait-ms", "30", *extra,
    )  # fmt: skip
    said = "timed per execution of 4 steps (the script compiles with steps_per_execution=4)"
    assert (said in got.stdout) == (how == "fit-4"), got.stdout[-3000:]
    steps = pd.read_csv(out / "steps" / "np1-real.csv")
    own = steps[(steps["variant"] == "real") & ~steps["warmup"]]
    twin = steps[(steps["variant"] == "synthetic") & ~steps["warmup"]]
    assert 25 <= own["input_wait_ms"].median() <= 40, own["input_wait_ms"].describe()
    assert own["step_time_ms"].median() >= 28, own["step_time_ms"].describe()
    assert twin["input_wait_ms"].median() < 5, twin["input_wait_ms"].describe()
    summary = pd.read_csv(out / "summary.csv").set_index("variant")
    # 8 samples a step of about 30 ms: near 8 / 0.030 = 267 samples/s, not 4 times that
    assert 150 <= summary.loc["real", "samples_per_s"] <= 300, summary


def test_keras_reads_an_instrumented_dataset_as_its_own_and_a_loop_reads_it_measured(
    monkeypatch, tmp_path
):
    """Under pipeprof (here: a run directory to stream to) ``instrument`` gives a new dataset
    over the same pipeline: a ``for`` in the script gets the measured loop's iterator, while
    Keras's fit and tf.data's own methods read it as the dataset it is; the user's dataset is
    left as it was."""
    import tensorflow as tf

    import pipeprof.keras as pk
    from pipeprof.rank import loop

    monkeypatch.setenv("PIPEPROF_RUN_DIR", str(tmp_path))
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.random.uniform((16, 4)), tf.zeros(16, tf.int32))
    ).batch(4)
    ours = pk.instrument(ds)
    assert ours is not ds and type(ds).__iter__ is not type(ours).__iter__
    assert isinstance(ours, tf.data.Dataset) and ours.element_spec == ds.element_spec
    assert isinstance(iter(ours), loop.LoopIterator)  # the script's own loop
    assert not isinstance(iter(ds), loop.LoopIterator)  # the user's dataset: as it was
    assert [b[0].shape[0] for b in ours.take(5)] == [4, 4, 4, 4]  # tf.data's own methods
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    model.compile("sgd", tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(ours, epochs=2, verbose=0)  # Keras iterates it: the native iterator
    assert len(history.history["loss"]) == 2


def test_a_batch_counts_its_samples_and_a_step_result_gives_its_loss():
    import numpy as np
    import tensorflow as tf

    from pipeprof.rank.loop import samples, scalar

    assert samples((tf.zeros((8, 3)), tf.zeros(8))) == 8
    assert samples({"image": tf.zeros((5, 2)), "label": tf.zeros(5)}) == 5
    assert scalar(tf.constant(2.5)) == 2.5
    assert scalar({"loss": np.float32(1.5), "accuracy": 0.5}) == 1.5
    assert scalar((tf.constant(0.25), tf.constant([1.0, 2.0]))) == 0.25
    assert np.isnan(scalar(None)) and np.isnan(scalar(tf.constant([1.0, 2.0])))
