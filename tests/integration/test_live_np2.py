"""Telemetry around real Horovod ranks: `watch` on a user's script, Ctrl-C."""

import json
import os
import re
import signal
import subprocess
import textwrap
import threading
import time
import urllib.request

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
    # `pipeprof report` on the run as it runs: a partial report that says so, from the steps
    # streamed so far (no variant has ended: nothing is in steps/ yet)
    early = subprocess.run(
        pipeprof_cmd() + ["report", str(out), "--format", "html,trace"],
        capture_output=True, text=True, timeout=120, env=env_with(data_cache_dir),
    )  # fmt: skip
    assert early.returncode == 0, early.stdout[-2000:] + early.stderr[-2000:]
    assert "partial report: the run is running" in " ".join(early.stdout.split())
    html = (out / "report.html").read_text()
    assert 'id="partial"' in html and "the run is still in progress" in html
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert sum(e.get("name") == "compute" for e in trace) > 20  # the steps so far, each one
    assert proc.poll() is None and not list((out / "steps").glob("*.csv"))
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out_text, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 130, out_text[-2000:] + err[-2000:]
    assert "interrupted" in err and err.strip().count("\n") == 0
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["variant"]) == ["synthetic"] and summary["measured_steps"].iloc[0] > 10
    assert summary["samples_per_s"].iloc[0] > 0


LOOP = """
import os, time
import horovod.tensorflow as hvd
import tensorflow as tf
import pipeprof.keras as pk

hvd.init()
x = tf.random.uniform([256, 16, 16, 3])
y = tf.random.uniform([256], maxval=4, dtype=tf.int32)
ds = tf.data.Dataset.from_tensor_slices((x, y)).shard(hvd.size(), hvd.rank()).batch(16)
model = tf.keras.Sequential(
    [tf.keras.Input((16, 16, 3)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(4)]
)
optimizer = tf.keras.optimizers.SGD(0.01)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

for epoch in range(3):
    for x, y in pk.instrument(ds):
        with pk.step() as step:
            step.loss = train_step(x, y)
deadline = time.time() + 120  # linger while the test reads the live metrics
while not os.path.exists("scraped") and time.time() < deadline:
    time.sleep(0.2)
if hvd.rank() == 0:
    print("user loop done")
"""


STEPS_TOTAL = re.compile(r'^pipeprof_steps_total\{[^}]*rank="(\d)"[^}]*\} (\S+)$', re.M)


class Served:
    """A pipeprof command run with --metrics-port 0: its output read as it comes (``said``),
    the address its exporter says it serves on, and each rank's step counter read there."""

    def __init__(self, argv: list[str], **popen) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
        )
        self.said: list[str] = []
        self.reader = threading.Thread(
            target=lambda: self.said.extend(self.proc.stdout), daemon=True
        )
        self.reader.start()
        self.deadline = time.monotonic() + 240
        self.url, self.text = "", ""
        while not self.url and self.running():
            said = (line.split()[-1] for line in self.said if line.startswith("metrics: "))
            self.url = next(said, "")
            time.sleep(0.1)

    def running(self) -> bool:
        return time.monotonic() < self.deadline and self.proc.poll() is None

    def steps(self, enough) -> dict[str, float]:
        """Each rank's steps as served, read until ``enough(counts)`` or the run ends."""
        counted: dict[str, float] = {}
        while self.running():
            self.text = urllib.request.urlopen(self.url, timeout=5).read().decode()
            counted = {rank: float(n) for rank, n in STEPS_TOTAL.findall(self.text)}
            if enough(counted):
                break
            time.sleep(0.5)
        return counted

    def output(self) -> str:
        return "".join(self.said)

    def end(self, timeout: float) -> int:
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return self.proc.returncode


def test_watch_streams_a_custom_loop_and_serves_its_metrics_on_the_address_given(tmp_path):
    """A Horovod custom loop (DistributedGradientTape) under `watch` over horovodrun -np 2,
    with --metrics-addr: its steps reach the live figures as they run, served on that address
    alone, and the run directory holds every rank's steps of the loop."""
    (tmp_path / "loop.py").write_text(LOOP)
    out = tmp_path / "run"
    served = Served(
        pipeprof_cmd() + [
            "watch", "--no-dashboard", "--out", str(out),
            "--metrics-port", "0", "--metrics-addr", "127.0.0.2", "--",
            str(VENV_BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo",
            str(VENV_BIN / "python"), "loop.py",
        ],
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    url = served.url
    assert url.startswith("http://127.0.0.2:"), served.output()[-3000:]
    every = {"0": 24.0, "1": 24.0}  # 3 epochs of 8 batches on each rank
    counted = served.steps(lambda counts: counts == every)
    assert counted == every, counted
    with pytest.raises(OSError):  # served on the address given, not on every one
        urllib.request.urlopen(url.replace("127.0.0.2", "127.0.0.1"), timeout=5)
    (tmp_path / "scraped").touch()
    code = served.end(timeout=120)
    assert code == 0 and "user loop done" in served.output(), served.output()[-3000:]
    steps = pd.read_csv(out / "live" / "steps.csv")
    assert steps.groupby("rank").size().to_dict() == {0: 24, 1: 24}
    assert set(steps["variant"]) == {"loop"} and set(steps["batch_size"]) == {16}
    assert (steps["input_wait_ms"] >= 0).all()
    assert (steps["input_wait_ms"] <= steps["step_time_ms"]).all()
    summary = pd.read_csv(out / "summary.csv")
    assert list(zip(summary["np"], summary["variant"])) == [(2, "loop")]


def test_run_serves_its_live_metrics_while_it_trains(tmp_path, data_cache_dir):
    """`pipeprof run --np 2 --metrics-port 0`: while its ranks train, the exporter says the
    command and serves each rank's steps as they finish; Ctrl-C then keeps what was measured."""
    (tmp_path / "long.toml").write_text(small_scenario("small", 5000))
    out = tmp_path / "run"
    served = Served(
        pipeprof_cmd() + [
            "run", "long.toml", "--np", "2", "--no-dashboard", "--metrics-port", "0",
            "--out", str(out),
        ],
        cwd=tmp_path, env=env_with(data_cache_dir),
    )  # fmt: skip
    assert served.url.startswith("http://127.0.0.1:"), served.output()[-3000:]
    counted = served.steps(lambda counts: len(counts) == 2 and min(counts.values()) >= 30)
    assert set(counted) == {"0", "1"} and min(counted.values()) >= 30, counted
    text = served.text
    assert 'pipeprof_run_info{command="run"' in text and 'scenario="small"' in text
    served.proc.send_signal(signal.SIGINT)
    assert served.end(timeout=60) == 130, served.output()[-3000:]
    summary = pd.read_csv(out / "summary.csv")
    assert list(zip(summary["np"], summary["variant"])) == [(2, "real")], summary
    assert summary["measured_steps"].iloc[0] >= 20
