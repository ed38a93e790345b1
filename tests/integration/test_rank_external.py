"""`pipeprof rank SCENARIO --run-dir DIR`, the rank program for a launcher pipeprof does not
drive: the run directory rank 0 keeps (created, added to, never overwritten, never someone
else's), a real rank alone (size 1: no launcher's variables), and `pipeprof report DIR`
assembling its summary. Two hosts under mpirun run by hand: tests/cluster/test_two_hosts.py."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from tests.integration.conftest import REPO, small_scenario

# variables a launcher may have left in this test process's environment: the rank must be alone
LAUNCHER_VARIABLES = ("HOROVOD_", "OMPI_COMM_WORLD_", "PMI_", "PMIX_", "SLURM_")


def rank(tmp_path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(LAUNCHER_VARIABLES)}
    env["PIPEPROF_DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run(
        [sys.executable, "-m", "pipeprof", "rank", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(small_scenario("external", 12, 'device = "emulated:10"'))
    return path


def test_a_folder_that_is_not_a_run_of_pipeprof_rank_is_refused_and_left_as_it_was(
    tmp_path, scenario
):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("a user's file")
    got = rank(tmp_path, str(scenario), "--run-dir", str(mine))
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        f"pipeprof: error: --run-dir {mine}: not empty and not a run of pipeprof rank (pipeprof "
        "never writes into a folder it did not make)"
    ]
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    # a compare's run directory is a run, but not one pipeprof rank adds to
    compared = tmp_path / "compared"
    compared.mkdir()
    (compared / "manifest.json").write_text(
        json.dumps(
            {
                "launcher": "horovodrun",
                "scenario": {"name": "external"},
                "command_line": ["pipeprof"],
            }
        )
    )
    got = rank(tmp_path, str(scenario), "--run-dir", str(compared))
    assert got.returncode == 2 and "give pipeprof rank a run directory of its own" in got.stderr
    # a run of pipeprof rank, but of other settings: its worker counts are not comparable
    from pipeprof import scenario as scen

    other = scen.load(str(scenario), [(["train", "batch_size"], 16)]).to_dict()
    ranked = tmp_path / "ranked"
    ranked.mkdir()
    (ranked / "manifest.json").write_text(
        json.dumps({"launcher": "external", "scenario": other, "command_line": ["pipeprof"]})
    )
    got = rank(tmp_path, str(scenario), "--run-dir", str(ranked))
    assert got.returncode == 2
    assert got.stderr.strip().splitlines() == [
        f"pipeprof: error: --run-dir {ranked}: its worker counts measured another scenario: "
        "train.batch_size (16 there, 8 now); give this one a run directory of its own"
    ]
    afile = tmp_path / "afile"
    afile.write_text("x")
    got = rank(tmp_path, str(scenario), "--run-dir", str(afile))
    assert (
        got.stderr.strip() == f"pipeprof: error: --run-dir {afile}: exists and is not a directory"
    )


@pytest.mark.horovod
def test_a_rank_alone_measures_then_refuses_to_measure_its_worker_count_again(tmp_path, scenario):
    out = tmp_path / "run"
    got = rank(tmp_path, str(scenario), "--run-dir", str(out))
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    first = got.stdout.splitlines()[0]
    assert first == (
        f"pipeprof rank: scenario external, np=1 (no launcher's variables: a single process), "
        f"run directory {out}"
    )
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["variant"]) == ["synthetic", "real"] and set(summary["np"]) == {1}
    assert summary["samples_per_s"].gt(0).all()
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["launcher"], manifest["worker_counts"]) == ("external", [1])
    assert manifest["launches"] == {"1": "finished"}
    assert json.loads((out / "status.json").read_text())["state"] == "finished"
    before = (out / "variants.jsonl").read_text()
    again = rank(tmp_path, str(scenario), "--run-dir", str(out))
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"pipeprof: error: --run-dir {out}: np=1 is measured there already (pipeprof never "
        "overwrites a run); give another --run-dir"
    ]
    assert (out / "variants.jsonl").read_text() == before
    # rank 0 gone before its summary: pipeprof report writes it from the steps
    rows = (out / "summary.csv").read_text()
    (out / "summary.csv").unlink()
    report = subprocess.run(
        [sys.executable, "-m", "pipeprof", "report", str(out), "--format", "html"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert report.returncode == 0, report.stderr
    assert (out / "summary.csv").read_text() == rows and (out / "report.html").exists()
