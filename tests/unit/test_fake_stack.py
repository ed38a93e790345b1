"""A whole ``compare --np 1,2`` of a framework, an input library and a distribution registered
from here (tests/fakes/), through pipeprof's real orchestration, its real local launcher and
its real ranks: a new point on an axis is a module and a registration, and no process of the
run imports TensorFlow, JAX or PyTorch when none of its points does."""

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd

from pipeprof.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("tensorflow", "jax", "torch", "keras", "horovod")

# imported by every Python process that has this folder on its path (the compare's own, the
# local launcher's, every rank's): at its end, it writes which of HEAVY it had imported
SITECUSTOMIZE = """
import atexit, json, os, sys

def _said():
    heavy = sorted(m for m in HEAVY if m in sys.modules)
    with open(os.path.join(WHERE, f"{os.getpid()}.json"), "w") as fh:
        json.dump({"argv": sys.argv, "heavy": heavy}, fh)

atexit.register(_said)
"""

COMPARE = """
import json, sys
from pipeprof import plugins
from pipeprof.scenario import Scenario, validate
from pipeprof.workflows.compare import CompareRequest, compare

plugins.register(plugins.DISTRIBUTION, "files", "tests.fakes.distribution:FileDistribution")
plugins.register(plugins.FRAMEWORK, "fake", "tests.fakes.framework:FakeFramework")
plugins.register(plugins.INPUTS, "fake", "tests.fakes.inputs:FakeInputs")
scenario = Scenario.from_dict(
    {
        "name": "fake-stack",
        "data": {"source": "factory", "factory": "tests.fakes.inputs:no_data", "library": "fake"},
        "train": {
            "engine": "files",
            "framework": "fake",
            "device": "emulated:20",
            "batch_size": 4,
            "warmup_steps": 3,
            "min_measure_s": 1.0,
            "max_measure_s": 3.0,
        },
        "launch": {"oversubscribe": True},
        "telemetry": {"enabled": False},
    },
    "test",
)
validate(scenario)
result = compare(CompareRequest(scenario, [1, 2], out=sys.argv[1], report=False))
print(json.dumps({"failure": result.failure}))
"""


def test_a_registered_framework_and_input_library_run_a_whole_compare_importing_no_framework(
    tmp_path,
):
    seen = tmp_path / "seen"
    seen.mkdir()
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        SITECUSTOMIZE.replace("WHERE", repr(str(seen))).replace("HEAVY", repr(HEAVY))
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": f"{site}:{REPO}",
        "PIPEPROF_FAKE_BATCH_MS": "50",  # batches every 50 ms against a 20 ms step: gap 60%
        "HOME": str(tmp_path),
    }
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(COMPARE), str(run)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == {"failure": None}
    summary = pd.read_csv(run / "summary.csv").set_index(["np", "variant"])
    for n in (1, 2):
        assert summary.loc[(n, "synthetic"), "measured_steps"] > 0
        # batches every 50 ms against a 20 ms step: the true gap is 1 - 20/50 = 60% at every np
        # (a busy 2-core host stretches some sleeps, so the bound is loose), measured by
        # pipeprof's own loop and summary, on sleeps
        assert 30 < float(summary.loc[(n, "real"), "gap_pct"]) < 75
    here = socket.gethostname()
    assert list(summary["hosts"]) == [f"{here}:1", f"{here}:1", f"{here}:2", f"{here}:2"]
    steps = RunDir(run).steps()
    assert set(steps["host"]) == {here}  # every step says where it ran
    assert set(steps[steps["np"] == 2]["rank"]) == {0, 1}  # both ranks' records, gathered
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["launcher"], manifest["engine"]) == ("local", "files")
    assert (manifest["framework"], manifest["inputs"]) == ("fake", "fake")
    processes = [json.loads(p.read_text()) for p in seen.glob("*.json")]
    # the compare's own process, the local launcher's at np=2, and 1 + 2 ranks at least
    assert len(processes) >= 5, processes
    assert all(p["heavy"] == [] for p in processes), processes
