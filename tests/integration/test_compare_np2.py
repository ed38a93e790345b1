"""The user's story: `pipeprof compare --np 2` on the quickstart scenario, for real, on a
terminal (the live dashboard) with --metrics-port scraped by a real Prometheus server; then
its report.html opened in a real headless Chromium with the network off."""

import json
import os
import pty
import re
import select
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pandas as pd
import pytest

from pipeprof.analysis.stats import SUMMARY_COLUMNS
from tests.integration.conftest import REPO, pipeprof_cmd, small_scenario, verdict_of
from tests.unit.test_metrics_exporter import dashboard_metrics

pytestmark = pytest.mark.horovod
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
PROMETHEUS = shutil.which("prometheus")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS = "scripts/setup.sh test installs it (Debian's package) when run as root"

TINY = """
name = "tiny"
[data]
source = "generated"
image_size = 32
num_classes = 3
[data.generate]
images = 60
size = 40
classes = 3
[model]
name = "{model}"
[train]
batch_size = 8
warmup_steps = 2
measure_steps = 6
"""


def run(args, env_extra=None, cwd=REPO, timeout=600):
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        pipeprof_cmd() + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=10).read().decode())


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """A real Prometheus server on loopback, scraping the port pipeprof will serve on every second."""
    assert PROMETHEUS, f"the prometheus server is not installed: {NEEDS}"
    base = tmp_path_factory.mktemp("prometheus")
    target, web = free_port(), free_port()
    (base / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        f"scrape_configs:\n  - job_name: pipeprof\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n"
    )
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={base / 'prometheus.yml'}",
            f"--storage.tsdb.path={base / 'data'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(base / "prometheus.log", "w"),  # noqa: SIM115 (the server outlives this block)
    )
    api = f"http://127.0.0.1:{web}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{api}/-/ready", timeout=2).status == 200:
                break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (
            base / "prometheus.log"
        ).read_text()[-2000:]
        time.sleep(0.3)
    yield {"api": api, "target_port": target}
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def story(prometheus, tmp_path_factory, data_cache_dir):
    """`pipeprof compare scenarios/quickstart.toml --np 2` under a pseudo-terminal (the live
    dashboard draws), serving its metrics where Prometheus scrapes: what the screen showed,
    the run directory, the exit code and the arguments."""
    base = tmp_path_factory.mktemp("quickstart")
    out = base / "run"
    args = [
        "compare",
        "scenarios/quickstart.toml",
        "--np",
        "2",
        "--set",
        "train.max_measure_s=6",
        "--out",
        str(out),
        "--metrics-port",
        str(prometheus["target_port"]),
    ]
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        pipeprof_cmd() + args,
        cwd=REPO,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
        env=dict(
            os.environ,
            PIPEPROF_DATA_DIR=str(data_cache_dir),
            TERM="xterm-256color",
            COLUMNS="150",
            LINES="60",
        ),
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the terminal closed: the process is gone
                break
            if not data:
                break
            chunks.append(data.decode(errors="replace"))
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    return {
        "screen": ANSI.sub("", "".join(chunks)),
        "out": out,
        "returncode": proc.returncode,
        "args": args,
    }


def test_compare_np2_on_quickstart_writes_the_run_directory(story):
    out, args = story["out"], story["args"]
    assert story["returncode"] == 0, story["screen"][-4000:]
    assert f"run directory: {out}" in story["screen"].replace("\n", "")
    summary = pd.read_csv(out / "summary.csv")
    contract = [
        "np",
        "variant",
        "synthetic",
        "samples_per_s",
        "samples_per_s_ci95",
        "gap_pct",
        "scaling_efficiency_pct",
        "step_time_ms_p50",
        "verdict",
    ]
    assert set(contract) <= set(summary.columns) and set(SUMMARY_COLUMNS) <= set(summary.columns)
    assert (summary["device"] == "real").all()
    assert list(zip(summary["np"], summary["variant"])) == [
        (1, "synthetic"),
        (1, "real"),
        (2, "synthetic"),
        (2, "real"),
    ]
    row = summary.set_index(["np", "variant"])
    for n in (1, 2):  # the contract's formulas, from the table's own figures
        # the real variant alternated with its twin: its gap is to the twin's rate over the same rounds
        twin, real = (
            row.loc[(n, "real"), "twin_samples_per_s"],
            row.loc[(n, "real"), "samples_per_s"],
        )
        assert row.loc[(n, "real"), "gap_pct"] == pytest.approx(
            100 * (1 - real / twin), rel=1e-3, abs=0.05
        )
        assert row.loc[(n, "real"), "stop_reason"] in ("target", "clear of thresholds", "max time")
        g, h = row.loc[(n, "real"), "gap_pct"], row.loc[(n, "real"), "gap_pct_ci95"]
        # neither class supported: the row says which line it is on
        assert row.loc[(n, "real"), "verdict"] == verdict_of(g, h)
        assert (summary["samples_per_s_ci95"] >= 0).all()
    eff = row.loc[(2, "real"), "scaling_efficiency_pct"]
    assert eff == pytest.approx(
        100 * row.loc[(2, "real"), "samples_per_s"] / (2 * row.loc[(1, "real"), "samples_per_s"]),
        rel=1e-3,
    )

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["horovod"] == "0.28.1" and manifest["tensorflow"] == "2.15.1"
    assert manifest["scenario"]["name"] == "quickstart" and manifest["worker_counts"] == [1, 2]
    assert manifest["command_line"][1:] == args
    assert {"python", "host", "cpu_cores", "gpus"} <= set(manifest)

    steps = pd.read_csv(out / "steps" / "np2-real.csv")
    assert sorted(steps["rank"].unique()) == [0, 1]
    per_rank = steps.groupby("rank").size().tolist()
    assert per_rank[0] == per_rank[1]  # in lock-step: every rank stopped at the same step
    measured = steps[(steps["variant"] == "real") & ~steps["warmup"] & (steps["rank"] == 0)]
    assert len(measured) == row.loc[(2, "real"), "measured_steps"] > 0
    assert (out / "logs" / "np2.log").exists()


def test_the_printed_table_agrees_with_itself_each_gap_against_the_ceiling_it_prints(story):
    table = story["screen"].split("pipeprof compare · quickstart")[-1]
    rows = [
        line.split("│") for line in table.splitlines() if re.match(r"│\s+[12]\s+│\s+real\s+│", line)
    ]
    assert len(rows) == 2, table
    for cells in rows:
        samples, ceiling = (float(cells[i].strip().replace(",", "")) for i in (3, 5))
        gap = float(cells[6].strip().rstrip("%"))
        # the printed figures are rounded to 0.1: the gap they imply agrees to within that
        assert gap == pytest.approx(100 * (1 - samples / ceiling), abs=0.15), cells


def test_the_live_dashboard_drew_both_ranks_while_it_ran(story):
    screen = story["screen"]
    frames = screen.split("ranks (last 20 steps)")[1:]
    assert len(frames) >= 4, f"{len(frames)} dashboard frames"
    progress = re.findall(r"(\d+) steps", screen)
    assert len(set(progress)) >= 3, "the step counter never moved"
    # some frame has a row with a samples/s figure for each of the two ranks
    rows = [re.findall(r"│\s+([01])\s+│\s+\S+\s+│\s+([\d,.]+)\s+│", f) for f in frames]
    assert any(
        {r for r, _ in found} == {"0", "1"} for found in rows
    ), "no frame showed both ranks with samples/s"
    assert "hosts" in screen and "cpu0" in screen


def query(prometheus, expr: str) -> list[dict]:
    url = f"{prometheus['api']}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = http_json(url)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scraped_pipeprof_series_for_both_ranks(prometheus, story):
    assert f"metrics: http://127.0.0.1:{prometheus['target_port']}/metrics" in story["screen"]
    time.sleep(1.5)  # the scrape after the last step
    steps = query(prometheus, 'max_over_time(pipeprof_steps_total{np="2", variant="real"}[10m])')
    assert sorted(r["metric"]["rank"] for r in steps) == ["0", "1"]
    assert all(float(r["value"][1]) > 0 for r in steps)
    assert {r["metric"]["host"] for r in steps} == {socket.gethostname()}
    rate = query(prometheus, 'max_over_time(pipeprof_samples_per_second{np="2"}[10m])')
    assert {r["metric"]["rank"] for r in rate} == {"0", "1"} and all(
        float(r["value"][1]) > 0 for r in rate
    )
    cpu = query(prometheus, "max_over_time(pipeprof_host_cpu_utilization_ratio[10m])")
    assert cpu and 0 < float(cpu[0]["value"][1]) <= 1
    progress = query(prometheus, "max_over_time(pipeprof_run_progress_ratio[10m])")
    assert progress and 0 < float(progress[0]["value"][1]) <= 1
    names = set(http_json(f"{prometheus['api']}/api/v1/label/__name__/values")["data"])
    # every pipeprof_ metric the Grafana dashboard uses is one this live run served
    histogram_parts = {
        n.rsplit("_", 1)[0] for n in names if n.endswith(("_bucket", "_count", "_sum"))
    }
    missing = {
        m
        for m in dashboard_metrics()
        if m not in names and m.rsplit("_", 1)[0] not in histogram_parts
    }
    # no GPU here; pipeprof_bad_files_total is served at 0 from each rank's first step
    missing -= {"pipeprof_gpu_utilization_ratio", "pipeprof_gpu_memory_used_bytes"}
    assert not missing, f"dashboard metrics this run did not serve: {sorted(missing)}"


# Chromium's own background traffic (time and component-update checks), not the page's
BROWSER_OWN = ("clients2.google.com", "update.googleapis.com", "redirector.gvt1.com")


def open_offline(page, tmp_path, *extra):
    """Chromium, headless, in a network namespace of its own (no network at all), logging what
    the page prints to its console and every URL it asks for; returns (process, problems)."""
    base = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--enable-logging=stderr",
        "--v=1",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    offline = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    proc = subprocess.run(
        offline + base + [*extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, HOME=str(tmp_path)),
    )
    problems = [
        line
        for line in proc.stderr.splitlines()
        if ":CONSOLE" in line
        or ("NotifyBeforeURLRequest" in line and not any(h in line for h in BROWSER_OWN))
    ]
    return proc, problems


def test_report_opens_offline_in_a_real_browser_with_its_charts(story, tmp_path):
    assert CHROMIUM, f"chromium is not installed: {NEEDS}"
    out = story["out"]
    page = out / "report.html"
    assert (
        page.exists() and (out / "trace.json").exists() and (out / "tensorboard" / "by_np").is_dir()
    )
    # the check itself can fail: a page that reaches for the network and logs an error is caught
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<html><body><img src="http://example.com/x.png"><script>console.error("x")</script></body></html>'
    )
    _, caught = open_offline(bad, tmp_path, "--dump-dom")
    assert any("example.com" in p for p in caught) and any(":CONSOLE" in p for p in caught)

    dom, problems = open_offline(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-3000:]
    assert not problems, problems
    for chart in ("gap", "throughput", "ranks", "rank-timeline", "telemetry"):
        block = re.search(
            rf'<figure class="chart" id="chart-{chart}">(.*?)</figure>', dom.stdout, re.S
        )
        assert block and "<svg" in block.group(1), chart
    assert 'id="verdicts"' in dom.stdout and "np=2 · real" in dom.stdout
    shot = tmp_path / "report.png"
    snap, _ = open_offline(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,2400")
    assert snap.returncode == 0 and shot.stat().st_size > 50_000, snap.stderr[-2000:]
    if kept := os.environ.get("PIPEPROF_KEEP_SCREENSHOT"):
        shutil.copy(shot, kept)


def test_a_dying_rank_ends_the_run_within_seconds_and_keeps_earlier_results(
    tmp_path, data_cache_dir
):
    (tmp_path / "bad_model.py").write_text(
        "import os\n"
        "from pipeprof.models import build_model\n"
        "def build(shape, classes):\n"
        "    if os.environ.get('HOROVOD_RANK') == '1':\n"
        "        raise RuntimeError('boom on rank one')\n"
        "    return build_model('small_cnn', shape, classes)\n"
    )
    (tmp_path / "tiny.toml").write_text(TINY.format(model="bad_model:build"))
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = run(
        ["compare", "tiny.toml", "--np", "1,2", "--out", str(out)],
        {"PIPEPROF_DATA_DIR": str(data_cache_dir)},
        cwd=tmp_path,
        timeout=300,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()
    assert (
        len(err) == 1 and "np=2" in err[0] and "rank 1" in err[0] and "boom on rank one" in err[0]
    ), proc.stderr
    assert elapsed < 120, f"took {elapsed:.0f}s"
    summary = pd.read_csv(out / "summary.csv")  # np=1 was measured before np=2 failed: kept
    assert list(zip(summary["np"], summary["variant"])) == [(1, "synthetic"), (1, "real")]


def test_missing_data_folder_is_one_line_before_any_launch(tmp_path):
    (tmp_path / "s.toml").write_text('[data]\nsource = "folder"\npath = "photos"\n')
    proc = run(["compare", "s.toml"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0
    assert "data.path" in proc.stderr and "photos" in proc.stderr


def test_the_renderers_read_back_from_the_real_run(story):
    """trace.json, TensorBoard and the report's charts, checked against the steps a real
    compare wrote (the unit tests' renderer checks use a seeded run directory)."""
    from pipeprof.renderers.tensorboard import read_scalars
    from pipeprof.rundir import RunDir

    out = story["out"]
    steps, summary = (
        RunDir(out).load().steps,
        pd.read_csv(out / "summary.csv"),
    )  # the twin's rounds included
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    for rank in (
        0,
        1,
    ):  # every rank's every step is a compute span on that rank's row (--np 2: 1 and 2)
        spans = [
            e for e in trace if e.get("ph") == "X" and e["name"] == "compute" and e["pid"] == rank
        ]
        assert len(spans) == len(steps[steps["rank"] == rank]) > 0
        assert {e["args"]["np"] for e in spans} == set(
            steps[steps["rank"] == rank]["np"]
        )  # rank 1: np=2 only
        named = [
            e
            for e in trace
            if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] == rank
        ]
        assert named and named[0]["args"]["name"].startswith(f"rank {rank}")
    for variant in summary["variant"]:  # TensorBoard's own reader gets summary.csv's figures back
        scalars = read_scalars(out / "tensorboard" / "by_np" / variant)
        got = scalars["samples_per_s"].set_index("step")["value"]
        want = summary[summary["variant"] == variant].set_index("np")["samples_per_s"]
        assert list(got.index) == list(want.index) and (abs(got - want) <= 1e-3 * want).all()
    per_step = read_scalars(out / "tensorboard" / "np2" / "real")["step_time_ms"]
    assert len(per_step) > 0 and (per_step["value"] > 0).all()
    page = (out / "report.html").read_text()
    assert page.count("<svg") >= 3  # the charts are drawn inline, not linked


@pytest.mark.parametrize(
    "command",
    [
        ["compare", "s.toml"],
        ["run", "s.toml"],
        ["tune", "s.toml", "--budget", "5s"],
        ["compare", "--np", "1", "--", sys.executable, "-c", "print(1)"],
        ["watch", "--", sys.executable, "-c", "print(1)"],
    ],
    ids=["compare", "run", "tune", "compare-script", "watch"],
)
def test_no_command_writes_into_a_non_empty_out(command, tmp_path):
    """A user's folder given as --out is refused in one line before anything runs, and is
    left exactly as it was."""
    (tmp_path / "s.toml").write_text(small_scenario("mine", 4))
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's own notes\n")
    args = [command[0], "--out", str(out), *command[1:]]
    proc = run(args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0, proc.stderr[-2000:]
    assert f"--out {out}: " in proc.stderr and "is not empty" in proc.stderr, proc.stderr
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_text() == "the user's own notes\n"
