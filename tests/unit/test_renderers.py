"""report.html, trace.json and TensorBoard events, rendered from a run directory as compare writes it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from pipeprof.errors import PipeprofError
from pipeprof.renderers.tensorboard import read_scalars
from pipeprof.rundir import RUNNING, RunDir
from pipeprof.workflows.report import report
from tests.fakes.rundir import make_run

SCHEMA = json.loads((Path(__file__).parent / "trace_event_schema.json").read_text())
CHARTS = ("gap", "throughput", "ranks", "rank-timeline", "telemetry", "ablation", "predict")


@pytest.fixture
def run_dir(tmp_path):
    return make_run(tmp_path / "run")


def test_report_html_is_one_offline_file_with_every_chart_the_run_supports(run_dir):
    result = report(run_dir)
    page = (run_dir / "report.html").read_text()
    assert {p.name for p in result.paths} >= {"report.html", "trace.json"} and not result.partial
    for chart in CHARTS:
        block = re.search(rf'<figure class="chart" id="chart-{chart}">(.*?)</figure>', page, re.S)
        assert block and "<svg" in block.group(1), chart
    assert "<script" not in page and not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', page)
    assert "url(http" not in page and "@import" not in page
    assert len(page.encode()) < 3 * 2**20
    # the verdict in words first, the manifest folded last
    assert page.index('id="verdicts"') < page.index('id="chart-gap"') < page.index("<details>")
    assert "np=4 · real" in page and "the augment stage bounds throughput" in page
    assert "rank 3 waits most" in page  # the fake run's straggler at np=4


def test_trace_json_follows_the_trace_event_format_with_a_process_per_rank(run_dir):
    report(run_dir, ("trace",))
    doc = json.loads((run_dir / "trace.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    events = doc["traceEvents"]
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert {0, 1, 2, 3} <= set(names) and names[0].startswith("rank 0")
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["name"] for e in spans} == {"input wait", "compute", "np=1", "np=2", "np=4"}
    tracks = {
        (e["pid"], e["args"]["name"])
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name"
    }
    assert {(3, "real"), (3, "synthetic"), (3, "synthetic (paired with real)")} <= tracks
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"process CPU %", "host CPU %"} <= counters and any(
        c.startswith("GPU ") for c in counters
    )
    # a step's two halves tile it: wait, then compute, ending where the step ends
    wait = next(
        e for e in spans if e["name"] == "input wait" and e["pid"] == 1 and e["args"]["step"] == 10
    )
    compute = next(
        e
        for e in spans
        if e["name"] == "compute"
        and e["pid"] == 1
        and e["args"]["step"] == 10
        and e["tid"] == wait["tid"]
    )
    assert compute["ts"] == pytest.approx(wait["ts"] + wait["dur"], abs=0.2)


def test_tensorboard_events_read_back_with_tensorboards_reader(run_dir):
    report(run_dir, ("tensorboard",))
    summary = pd.read_csv(run_dir / "summary.csv")
    by_np = read_scalars(run_dir / "tensorboard" / "by_np" / "real")
    real = summary[summary["variant"] == "real"].sort_values("np")
    assert by_np["samples_per_s"]["step"].tolist() == [1, 2, 4]
    assert by_np["samples_per_s"]["value"].tolist() == pytest.approx(
        real["samples_per_s"].tolist(), rel=1e-5
    )
    assert by_np["gap_pct"]["value"].tolist() == pytest.approx(real["gap_pct"].tolist(), rel=1e-4)
    assert {"input_wait_pct", "gpu_util_pct"} <= set(by_np)
    steps = read_scalars(run_dir / "tensorboard" / "np2" / "real")
    assert len(steps["step_time_ms"]) == 37 and {"input_wait_ms", "samples_per_s"} <= set(steps)
    again = report(run_dir, ("tensorboard",))  # rendering again replaces, never doubles
    assert len(read_scalars(run_dir / "tensorboard" / "np2" / "real")["step_time_ms"]) == 37
    assert len(list((run_dir / "tensorboard" / "np2" / "real").iterdir())) == 1 and again.paths


def test_a_run_still_in_progress_gives_a_clearly_marked_partial_report(tmp_path):
    run_dir = make_run(tmp_path / "run", state=RUNNING, stages=False, prediction=False)
    result = report(run_dir, ("html",))
    page = (run_dir / "report.html").read_text()
    assert (
        result.partial.startswith("running")
        and 'id="partial"' in page
        and "still in progress" in page
    )
    assert 'id="chart-ablation"' not in page and 'id="chart-predict"' not in page


def test_a_run_whose_process_died_reads_as_stopped(tmp_path):
    run_dir = make_run(tmp_path / "run", stages=False, prediction=False)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    status = json.loads((run_dir / "status.json").read_text()) | {
        "state": RUNNING,
        "pid": int(dead.stdout),
    }
    (run_dir / "status.json").write_text(json.dumps(status))
    assert RunDir(run_dir).status()["state"] == "stopped"
    report(run_dir, ("html",))
    page = (run_dir / "report.html").read_text()
    assert "ended before it finished" in page


def test_a_tune_run_shows_its_trials(tmp_path):
    run_dir = make_run(tmp_path / "run", trials=True, stages=False, prediction=False)
    report(run_dir, ("html",))
    page = (run_dir / "report.html").read_text()
    assert 'id="chart-tune"' in page and "winner" in page


@pytest.mark.parametrize(
    "setup, expected",
    [
        (lambda p: None, "is not a directory"),
        (lambda p: p.mkdir(), "no manifest.json"),
    ],
)
def test_bad_run_directories_are_one_line(tmp_path, setup, expected):
    target = tmp_path / "x"
    setup(target)
    with pytest.raises(PipeprofError) as err:
        report(target)
    assert expected in err.value.message and "\n" not in err.value.message


def test_a_run_without_results_is_one_line(tmp_path):
    run = RunDir.create(str(tmp_path / "run"), "x")
    run.write_manifest({"scenario": {"name": "x"}})
    run.write_status(RUNNING)
    with pytest.raises(PipeprofError) as err:
        report(run.path)
    assert "has no results yet" in err.value.message and "\n" not in err.value.message


def test_pipeprof_report_command(run_dir):
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "pipeprof", "report", str(run_dir), "--format", "html,trace"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "report.html" in proc.stdout and "trace.json" in proc.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "pipeprof", "report", str(run_dir), "--format", "pdf"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--format pdf" in bad.stderr


def test_a_table_printed_to_a_file_keeps_every_header_figure_and_verdict_whole():
    import io

    from rich.console import Console

    from pipeprof.renderers.table import print_summary

    summary = pd.DataFrame(
        [
            dict(
                np=1,
                variant="synthetic",
                synthetic=True,
                samples_per_s=1736.0,
                samples_per_s_ci95=28.5,
                samples_per_s_per_worker=1736.0,
                twin_samples_per_s=float("nan"),
                gap_pct=float("nan"),
                gap_pct_ci95=float("nan"),
                scaling_efficiency_pct=100.0,
                step_time_ms_p50=18.2,
                input_wait_pct=0.0,
                cpu_util_pct=93.0,
                cpu_cores_per_rank=1.83,
                verdict="ceiling",
                warning="",
            ),
            dict(
                np=2,
                variant="real",
                synthetic=False,
                samples_per_s=877.9,
                samples_per_s_ci95=26.8,
                samples_per_s_per_worker=438.9,
                twin_samples_per_s=1381.0,
                gap_pct=36.4,
                gap_pct_ci95=5.9,
                scaling_efficiency_pct=42.0,
                step_time_ms_p50=71.9,
                input_wait_pct=4.8,
                cpu_util_pct=94.0,
                cpu_cores_per_rank=0.93,
                verdict="moderately input-bound",
                warning="",
            ),
        ]
    )
    out = io.StringIO()
    console = Console(width=80, file=out)  # a file: not a terminal, as under sbatch
    print_summary(summary, console)
    text = out.getvalue()
    for whole in (
        "samples/s",
        "ceiling",
        "cores/rank",
        "input-bound",
        "1,736.0",
        "1,381.0",
        "36.4% ±5.9",
        "moderately",
    ):
        assert whole in text, whole
    assert "…" not in text and console.width == 80


def test_the_summary_file_reads_back_to_the_figures_the_terminal_printed(tmp_path):
    """CI, 2026-11-26: tune printed "gap before tuning 43.7%" while its summary.csv, written to 4
    significant digits, held 43.65, which prints as 43.6%. The file now holds each float whole."""
    import io

    from rich.console import Console

    from pipeprof.renderers.table import fmt, print_summary

    frame = pd.DataFrame(
        dict(
            np=[1, 1],
            variant=["synthetic", "real"],
            synthetic=[True, False],
            samples_per_s=[12345.678, 6964.3449],
            samples_per_s_ci95=[31.25, 12.05],
            twin_samples_per_s=[float("nan"), 12350.05],
            gap_pct=[float("nan"), 43.6512],
            gap_pct_ci95=[float("nan"), 0.25],
            samples_per_s_per_worker=[12345.678, 6964.3449],
            scaling_efficiency_pct=[100.0, 56.35],
            step_time_ms_p50=[2.595, 4.605],
            input_wait_pct=[0.0, 41.25],
            cpu_util_pct=[93.45, 97.05],
            cpu_cores_per_rank=[1.835, 1.945],
            verdict=["ceiling", "strongly input-bound"],
            warning=["", ""],
        )
    )
    run = RunDir(tmp_path)
    run.write_summary(frame)
    back = run.summary()
    floats = frame.select_dtypes("float").columns
    pd.testing.assert_frame_equal(back[floats], frame[floats])

    def printed(summary: pd.DataFrame) -> str:
        out = io.StringIO()
        print_summary(summary, Console(width=200, file=out))
        return out.getvalue()

    assert printed(back) == printed(frame) and "43.7%" in printed(back)
    assert fmt(back["gap_pct"][1], 1, "%") == "43.7%"
