"""The ground-truth suite's engine slice (``benchmarks/truth/run.py --smoke --engine E``) on the
Keras 3 engines: an injected CPU cost in a map stage (cal-spin-3100, a true gap of about 60-70%)
and a model-bound control (cal-control-80), each at np=1 on an emulated device, run through
``pipeprof compare --verdict`` as a user runs it, the control's truth measured by a plain loop on
the same engine (``reference.py --engine``). Each row must get its true class and stage.

On 2026-11-28 data_parallel read the control 7.3% ±1.0 at 20 ms a step against its plain loop's
6.2% (laying each batch out over JAX's devices costs 1.6 ms a step), and mirrored 4.2% ±0.9
against 2.1-4.7%: on the 5% line. The slice's control is 80 ms a step (calibration.toml), where
the plain loops measured 2.4% and 1.1%."""

import json
import os
import subprocess
import sys

import pytest

from tests.integration.conftest import REPO

# alone: as test_truth_slice.py, the truth holds for a machine nothing else loads
pytestmark = [pytest.mark.horovod, pytest.mark.keras3, pytest.mark.alone]


@pytest.mark.parametrize("engine", ["data_parallel", "mirrored"])
def test_a_map_stage_and_a_control_get_their_class_and_stage(engine, tmp_path, data_cache_dir):
    out = tmp_path / "truth"
    got = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "truth" / "run.py"), "--smoke",
         "--engine", engine, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PIPEPROF_DATA_DIR": str(data_cache_dir)},
    )  # fmt: skip
    assert got.returncode == 0, (got.stdout + got.stderr)[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["engine"] == engine
    rows = {r["case"]: r for r in results["rows"]}
    assert sorted(rows) == ["cal-control-80", "cal-spin-3100"]
    # the control's truth is its plain loop's, on this engine
    assert "1" in results["machine"]["reference"]["cal-control-80"], results["machine"]
    for row in rows.values():
        said = (
            f"{engine} {row['case']}: true gap {row['expected_gap']:.1f}%, measured "
            f"{row['gap']:.1f}% ±{row['gap_ci95']:.1f}"
        )
        assert row["got_class"] == row["true_class"], f"{said}: class {row['got_class']!r}"
        assert row["got_stage"] == row["true_stage"], f"{said}: stage {row['got_stage']!r}"
    assert rows["cal-spin-3100"]["true_class"] == "highly"
    assert rows["cal-control-80"]["true_class"] == "not"
