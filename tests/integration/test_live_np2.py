"""Telemetry around real Horovod ranks: `watch` on a user's script, Ctrl-C."""

import os
import re
import signal
import subprocess
import textwrap
import time

import pandas as pd
import pytest

from tests.integration.conftest import REPO, VENV_BIN, pipeprof_cmd, small_scenario

pytestmark = pytest.mark.horovod
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def env_with(data_dir, **extra):
    return dict(os.environ, PIPEPROF_DATA_DIR=str(data_dir), **extra)


def test_watch_runs_a_user_script_with_the_callback_over_horovodrun(tmp_path):
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""
        import horovod.tensorflow.keras as hvd
        import tensorflow as tf
        from pipeprof.keras import PipeprofCallback

        hvd.init()
        x = tf.random.uniform([256, 32, 32, 3])
        y = tf.random.uniform([256], maxval=4, dtype=tf.int32)
        ds = (tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).repeat()
              .map(lambda a, b: (tf.image.random_flip_left_right(a), b)).batch(16).prefetch(2))
        model = tf.keras.Sequential([tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(32, 32, 3)),
                                     tf.keras.layers.GlobalAveragePooling2D(), tf.keras.layers.Dense(4)])
        model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01)),
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(ds, steps_per_epoch=25, epochs=2, verbose=0,
                  callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), PipeprofCallback(warmup_steps=3)])
        if hvd.rank() == 0:
            print("user script done")
    """)
    )
    out = tmp_path / "run"
    cmd = pipeprof_cmd() + [
        "watch",
        "--no-dashboard",
        "--out",
        str(out),
        "--",
        str(VENV_BIN / "horovodrun"),
        "-np",
        "2",
        "-H",
        "localhost:2",
        "--gloo",
        str(VENV_BIN / "python"),
        "train.py",
    ]
    proc = subprocess.run(
        cmd,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "user script done" in proc.stdout
    steps = pd.read_csv(out / "live" / "steps.csv")
    assert sorted(steps["rank"].unique()) == [0, 1] and steps.groupby("rank").size().tolist() == [
        50,
        50,
    ]
    assert steps["input_wait_ms"].notna().all() and (steps["input_wait_ms"] >= 0).all()
    assert (steps["input_wait_ms"] < steps["step_time_ms"]).all()
    assert (steps["batch_size"] == 16).all()
    summary = pd.read_csv(out / "summary.csv")
    assert (
        list(zip(summary["np"], summary["variant"])) == [(2, "fit")]
        and summary["samples_per_s"].iloc[0] > 0
    )
    assert set(pd.read_csv(out / "telemetry" / "proc.csv")["rank"]) == {0, 1}


def test_ctrl_c_stops_cleanly_and_keeps_what_was_measured(tmp_path, data_cache_dir):
    (tmp_path / "long.toml").write_text(small_scenario("small", 5000))
    out = tmp_path / "run"
    proc = subprocess.Popen(
        pipeprof_cmd() + ["compare", "long.toml", "--np", "1", "--out", str(out)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env_with(data_cache_dir),
    )
    deadline = time.monotonic() + 240
    for (
        line
    ) in proc.stdout:  # wait until the synthetic variant is past its midpoint... or running a while
        if "ranks up" in line or time.monotonic() > deadline:
            break
    time.sleep(8)  # a few hundred steps
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out_text, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 130, out_text[-2000:] + err[-2000:]
    assert "interrupted" in err and err.strip().count("\n") == 0
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["variant"]) == ["synthetic"] and summary["measured_steps"].iloc[0] > 10
    assert summary["samples_per_s"].iloc[0] > 0
