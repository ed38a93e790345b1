"""The user's story: their own Horovod Keras script, unchanged but for pipeprof.keras's two
lines, compared with its synthetic twin at np 1 and 2, and its own tf.data pipeline taken
apart transformation by transformation."""

import json
import os
import subprocess
import textwrap

import pandas as pd
import pytest

from pipeprof.data.generate import generate
from pipeprof.scenario import GenerateConfig
from tests.integration.conftest import REPO, VENV_BIN, pipeprof_cmd

pytestmark = pytest.mark.horovod

EXAMPLE = str(REPO / "examples" / "chips_train.py")
SCRIPTS = REPO / "tests" / "integration" / "scripts"
PY = str(VENV_BIN / "python")
FAST = [
    "--set",
    "train.min_measure_s=2",
    "--set",
    "train.max_measure_s=6",
    "--set",
    "train.warmup_steps=3",
]


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Two classes of 192px JPEGs, as a folder of photos."""
    return generate(
        GenerateConfig(images=96, size=192, classes=2, seed=11),
        tmp_path_factory.mktemp("chips") / "d",
    )


@pytest.fixture(scope="module")
def big_pngs(tmp_path_factory):
    return generate(
        GenerateConfig(images=64, size=512, classes=2, seed=12, format="png"),
        tmp_path_factory.mktemp("pngs") / "d",
    )


def run(args, cwd, timeout=600):
    return subprocess.run(
        pipeprof_cmd() + args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env()
    )


def test_compare_runs_the_users_own_script_at_np_1_and_2(photos, tmp_path):
    proc = run(
        [
            "compare",
            "--np",
            "1,2",
            *FAST,
            "--out",
            "run",
            "--",
            PY,
            EXAMPLE,
            "--data",
            str(photos),
            "--image-size",
            "64",
            "--batch-size",
            "8",
            "--epochs",
            "1000",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "one launch per worker count" in proc.stdout
    summary = pd.read_csv(tmp_path / "run" / "summary.csv")
    assert list(zip(summary["np"], summary["variant"])) == [
        (1, "synthetic"),
        (1, "real"),
        (2, "synthetic"),
        (2, "real"),
    ]
    real = summary[summary["variant"] == "real"]
    assert real["gap_pct"].notna().all() and (real["samples_per_s"] > 0).all()
    assert set(real["stop_reason"]) <= {"target", "clear of thresholds", "max time"}
    steps = pd.read_csv(tmp_path / "run" / "steps" / "np2-real.csv")
    assert sorted(steps["rank"].unique()) == [0, 1]
    assert set(steps["paired"].fillna("")) == {
        "",
        "real",
    }  # the twin's rounds between the real ones
    assert steps.groupby("rank").size().nunique() == 1  # every rank stopped at the same step
    assert (tmp_path / "run" / "report.html").exists()


def test_the_script_trains_unchanged_with_plain_python_and_plain_horovodrun(photos, tmp_path):
    args = [
        EXAMPLE,
        "--data",
        str(photos),
        "--image-size",
        "48",
        "--batch-size",
        "8",
        "--epochs",
        "1",
    ]
    alone = subprocess.run(
        [PY, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env()
    )
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert "trained 1 epoch(s) of 12 steps on 1 worker(s)" in alone.stdout
    two = subprocess.run(
        [str(VENV_BIN / "horovodrun"), "-np", "2", "-H", "localhost:2", "--gloo", PY, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env(),
    )
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    assert "trained 1 epoch(s) of 6 steps on 2 worker(s)" in two.stdout
    assert not (tmp_path / "runs").exists()  # outside pipeprof the two lines leave nothing behind


def test_a_script_without_pipeprofs_lines_gets_one_line_saying_what_to_add(photos, tmp_path):
    source = (SCRIPTS / "costly.py").read_text()
    (tmp_path / "no_instrument.py").write_text(source.replace("ds = pk.instrument(ds)\n", ""))
    proc = run(
        [
            "compare",
            "--np",
            "1",
            *FAST,
            "--",
            PY,
            "no_instrument.py",
            "--data",
            str(photos),
            "--costly",
            "augment",
        ],
        tmp_path,
    )
    # refused as written (each rank's pipeprof line, exit 2): a usage error, as a bad flag
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert (
        "without pipeprof.keras.instrument" in proc.stderr
        and "dataset = pipeprof.keras.instrument" in proc.stderr
    )
    (tmp_path / "neither.py").write_text(
        textwrap.dedent("""
        print("a script that never heard of pipeprof")
    """)
    )
    proc = run(["compare", "--np", "1", "--", PY, "neither.py"], tmp_path)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert "measured no step" in proc.stderr and "PipeprofCallback()" in proc.stderr


@pytest.mark.parametrize("stage", ["augment", "decode"])
def test_ablation_names_the_users_costly_function(stage, photos, big_pngs, tmp_path):
    script, costly = "costly.py", f"{stage}_image"
    data = big_pngs if stage == "decode" else photos
    proc = run(
        [
            "compare",
            "--np",
            "1",
            "--ablation",
            *FAST,
            "--out",
            "run",
            "--",
            PY,
            str(SCRIPTS / script),
            "--data",
            str(data),
            "--costly",
            stage,
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    stages = pd.read_csv(tmp_path / "run" / "script_stages.csv")
    named = stages[stages["function"] == costly]
    assert len(named) == 1 and named["where"].iloc[0].startswith(f"{script}:")
    top = stages.loc[stages["marginal_core_ms"].idxmax()]
    assert top["function"] == costly, stages[["transformation", "marginal_core_ms"]].to_string()
    verdict = json.loads((tmp_path / "run" / "verdict.json").read_text())[0]
    assert costly in verdict["bottleneck"], verdict["text"]
    said = " ".join(proc.stdout.split())
    assert f"map({costly}) at {script}" in said


def test_the_choice_switches_the_very_next_batch_and_leaves_the_dataset_as_it_was():
    # In this process (no launch): each step reads the source set just before it; the real
    # iterator is not read on the twin's steps; the twin has the dataset's own element spec
    # (an unknown batch size stays unknown, so Keras's traced train function serves both)
    import tensorflow as tf

    from pipeprof.rank import fit

    real = (
        tf.data.Dataset.range(1000).map(lambda i: tf.fill([2], i + 1)).batch(3)
    )  # [[1,1],[2,2],[3,3]], [[4,4],...
    before = fit.CHOICE.source
    try:
        assert fit.instrumented(real) is real
        fit.CHOICE.ready()  # what fit's start does: the twin made from the first batch
        keras_iterator = iter(real)
        pattern = [
            fit.REAL,
            fit.SYNTHETIC,
            fit.SYNTHETIC,
            fit.REAL,
            fit.SYNTHETIC,
            fit.REAL,
            fit.REAL,
        ]
        got = []
        for source in pattern:
            fit.CHOICE.source = source
            it = fit.CHOICE.iterator(keras_iterator)
            assert it.element_spec == real.element_spec
            got.append(int(next(it)[0][0]))
        assert got == [1, 1, 1, 4, 1, 7, 10]  # the twin repeats the first real batch
    finally:
        fit.CHOICE.source = before
        fit.CHOICE.instrumented -= 1
