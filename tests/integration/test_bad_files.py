"""A user's class-folder dataset with a truncated JPEG, a zero-byte PNG and a text file named
.jpg ended `pipeprof compare` with `jpeg::Uncompress failed`. Now they are skipped, counted
and named (data.on_bad_file = "skip"), or end the run with one line naming one ("fail").
`pipeprof doctor` finds them before the run."""

import os
import subprocess

import pandas as pd
import pytest
import tensorflow as tf

from tests.integration.conftest import pipeprof_cmd

pytestmark = pytest.mark.horovod

SCENARIO = """
name = "with-bad-files"
[data]
source = "folder"
path = "images"
image_size = 32
num_classes = 2
[train]
batch_size = 16
"""


def run(args, cwd, data_dir, timeout=600):
    return subprocess.run(
        pipeprof_cmd() + args,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PIPEPROF_DATA_DIR=str(data_dir)),
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """2 classes × 30 good 32px JPEGs made by TensorFlow, and three bad files among them."""
    base = tmp_path_factory.mktemp("bad-files")
    root = base / "images"
    for k, name in enumerate(("cats", "dogs")):
        (root / name).mkdir(parents=True)
        for i in range(30):
            pixels = tf.cast(
                tf.random.stateless_uniform([32, 32, 3], [k, i], 0, 255, tf.int32), tf.uint8
            )
            (root / name / f"{i:03d}.jpg").write_bytes(tf.io.encode_jpeg(pixels).numpy())
    good = (root / "cats" / "000.jpg").read_bytes()
    bad = {
        root / "cats" / "truncated.jpg": good[: len(good) // 2],
        root / "dogs" / "empty.png": b"",
        root / "dogs" / "notes.jpg": b"not an image, a text file named .jpg\n",
    }
    for path, data in bad.items():
        path.write_bytes(data)
    (base / "s.toml").write_text(SCENARIO)
    return base, sorted(str(p) for p in bad)


def test_compare_skips_counts_and_names_bad_files(dataset, tmp_path, data_cache_dir):
    base, bad = dataset
    out = tmp_path / "run"
    proc = run(
        ["compare", "s.toml", "--np", "1", "--steps", "6", "--warmup", "2", "--out", str(out)],
        base,
        data_cache_dir,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = pd.read_csv(out / "summary.csv").set_index("variant")
    assert summary.loc["real", "bad_files"] == 3
    assert pd.isna(summary.loc["synthetic", "bad_files"])
    listed = pd.read_csv(out / "bad_files.csv")
    assert (
        sorted(listed["path"]) == bad
        and set(listed["variant"]) == {"real"}
        and set(listed["np"]) == {1}
    )
    assert set(listed["reason"].str.split(":").str[0]) == {
        "truncated JPEG",
        "empty file (0 bytes)",
        "not an image",
    }
    said = " ".join((proc.stdout + proc.stderr).split())  # the terminal wraps long lines
    assert "3 bad file(s) skipped" in said
    for path in bad:
        assert path in said.replace(" ", "") or path in said
    steps = pd.read_csv(out / "steps" / "np1-real.csv")
    assert (steps["batch_size"] == 16).all()  # batches are formed after bad files are dropped


def test_on_bad_file_fail_ends_the_run_naming_the_file(dataset, tmp_path, data_cache_dir):
    base, bad = dataset
    proc = run(
        [
            "compare",
            "s.toml",
            "--np",
            "1",
            "--steps",
            "6",
            "--warmup",
            "2",
            "--out",
            str(tmp_path / "run"),
            "--set",
            'data.on_bad_file="fail"',
        ],
        base,
        data_cache_dir,
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("pipeprof: error: np=1: rank 0: variant real: bad file "), last
    assert any(path in last for path in bad), last
    assert "on_bad_file" in last and "Traceback" not in proc.stderr


def test_doctor_lists_the_bad_files_before_the_run(dataset, data_cache_dir):
    base, bad = dataset
    proc = run(["doctor", "s.toml"], base, data_cache_dir)
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 0, (
        proc.stdout[-3000:] + proc.stderr[-3000:]
    )  # skipped by default: not a failure
    assert "63 image files" in said and "3 of 63" in said
    for path in bad:
        assert path in proc.stdout.replace("\n", "")
    # with data.on_bad_file = "fail" the same files fail doctor: tests/unit/test_bad_files.py
    # the rest of the success path: every check passed, the default worker counts fit here
    assert "ready: nothing the checks need is missing" in said and "problem(s)" not in said
    assert "│ slots │ worker counts 1, 2 fit" in said, said


def test_doctor_names_a_worker_count_beyond_this_hosts_slots(dataset, data_cache_dir):
    base, _ = dataset
    cores = len(os.sched_getaffinity(0))
    many = f"launch.np=[1, {cores + 1}]"
    proc = run(["doctor", "s.toml", "--set", many], base, data_cache_dir)
    said = " ".join(proc.stdout.split())
    assert proc.returncode == 1, said
    refusal = (
        f"np={cores + 1} needs {cores + 1} slots but localhost ({cores} CPU cores, no GPU) "
        f"offers {cores}; add hosts with -H/--hostfile, or pass --oversubscribe to run anyway"
    )
    assert f"1 problem(s): slots: {refusal}" in said, said
    allowed = run(
        ["doctor", "s.toml", "--set", many, "--set", "launch.oversubscribe=true"],
        base,
        data_cache_dir,
    )
    assert allowed.returncode == 0 and f"worker counts 1, {cores + 1} fit" in " ".join(
        allowed.stdout.split()
    ), allowed.stdout[-3000:]


def test_doctor_names_a_missing_data_path_fails_and_still_checks_the_rest(tmp_path, data_cache_dir):
    (tmp_path / "s.toml").write_text(SCENARIO.replace('path = "images"', 'path = "no-such-folder"'))
    proc = run(["doctor", "s.toml"], tmp_path, data_cache_dir)
    assert proc.returncode == 1
    said = " ".join(proc.stdout.split())
    assert "no-such-folder" in said and "does not exist" in said
    # the rest of the environment is still checked: the versions, Horovod's build
    assert f"{tf.__version__} (CPU-only build)" in said or tf.__version__ in said
    import horovod

    assert horovod.__version__ in said and "Gloo" in said
