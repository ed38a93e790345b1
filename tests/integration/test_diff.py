"""`pipeprof diff` on two real runs of one scenario, before and after a change that matters: a
map stage of the ground-truth suite's (a TensorFlow loop of a set CPU time per element, about
5 ms here: 80 CPU-ms a batch on 2 cores against an emulated 20 ms step, input-bound by far),
then the same pipeline without it. The gap's fall is tens of points against intervals of a
few, so its call cannot flip; `--fail-on` gates on it as a CI job would."""

import pandas as pd
import pytest

from tests.integration.conftest import run_pipeprof

pytestmark = pytest.mark.horovod  # it trains

SCENARIO = """name = "diff"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 96
size = 40
classes = 3
[train]
batch_size = 16
device = "emulated:20"
warmup_steps = 5
measure_steps = 40
"""


def test_diff_calls_the_gap_that_fell_better_and_fail_on_catches_it_rising(tmp_path):
    spin = '[pipeline.map]\nfunction = "benchmarks.truth.inject:spin"\n'
    (tmp_path / "before.toml").write_text(SCENARIO + spin + "kwargs = { iterations = 1200 }\n")
    (tmp_path / "after.toml").write_text(SCENARIO)
    before, after = tmp_path / "before", tmp_path / "after"
    for out in (before, after):
        run_pipeprof(
            "compare", str(tmp_path / f"{out.name}.toml"), "--np", "1", "--out", str(out),
            "--no-report", "--no-dashboard", data=tmp_path / "data",
        )  # fmt: skip
    gaps = [
        pd.read_csv(d / "summary.csv").set_index("variant").loc["real"] for d in (before, after)
    ]
    said = " → ".join(f"{g['gap_pct']:.1f}% ±{g['gap_pct_ci95']:.1f}" for g in gaps)

    got = run_pipeprof(
        "diff", str(before), str(after), "--fail-on", "gap:2", "--csv", str(tmp_path / "d.csv"),
        ok=False, COLUMNS="200",
    )  # fmt: skip
    assert got.returncode == 0, said + got.stdout + got.stderr
    rows = pd.read_csv(tmp_path / "d.csv").set_index("variant")
    real = rows.loc["real"]
    assert real["gap_call"] == "better" and real["gap_change_points"] < -20, said
    assert real["samples_per_s_call"] == "better", said
    assert real["gap_change_points"] == pytest.approx(gaps[1]["gap_pct"] - gaps[0]["gap_pct"])
    assert "nothing got worse beyond --fail-on (gap by 2 points)" in got.stdout
    assert "better" in got.stdout and f"{before} → {after}" in " ".join(got.stdout.split())

    back = run_pipeprof("diff", str(after), str(before), "--fail-on", "gap:2", ok=False)
    assert back.returncode == 1, back.stdout + back.stderr
    line = " ".join(back.stdout.split())
    assert "worse: np=1 real: gap +" in line and "(--fail-on gap:2)" in line, line
    again = run_pipeprof(
        "diff", str(before), str(after), "--csv", str(tmp_path / "d.csv"), ok=False
    )
    assert again.returncode == 2 and "pipeprof writes only new files" in again.stderr

    # the same rows as a section of the later run's report
    run_pipeprof("report", str(after), "--against", str(before), "--format", "html")
    page = (after / "report.html").read_text()
    section = page[page.index('<section id="against">') :]
    section = section[: section.index("</section>")]
    (row,) = [r for r in section.split("<tr>") if '<td class="l">real</td>' in r]
    assert f"Against {before}" in section and row.count("better") == 2, section
    assert f"{real['gap_change_points']:,.1f}" in row, row
