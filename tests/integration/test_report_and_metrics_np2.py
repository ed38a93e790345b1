"""The user's story: a compare at np 1 and 2 watched live by a real Prometheus server through
--metrics-port, then its report.html opened in a real headless Chromium with the network off."""

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from tests.integration.conftest import pipeprof_cmd, small_scenario
from tests.unit.test_metrics_exporter import dashboard_metrics

pytestmark = pytest.mark.horovod

PROMETHEUS = shutil.which("prometheus")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NEEDS = "scripts/setup.sh test installs it (Debian's package) when run as root"


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
        f"scrape_configs:\n  - job_name: pipeprof\n    static_configs:\n      - targets: ['127.0.0.1:{target}']\n")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={base / 'prometheus.yml'}", f"--storage.tsdb.path={base / 'data'}",
                             f"--web.listen-address=127.0.0.1:{web}"], stdout=subprocess.DEVNULL,
                            stderr=open(base / "prometheus.log", "w"))
    api = f"http://127.0.0.1:{web}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{api}/-/ready", timeout=2).status == 200:
                break
        except OSError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, (base / "prometheus.log").read_text()[-2000:]
        time.sleep(0.3)
    yield {"api": api, "target_port": target}
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def compared(prometheus, tmp_path_factory, data_cache_dir):
    """One compare at np 1 and 2, serving its metrics where Prometheus scrapes."""
    base = tmp_path_factory.mktemp("compare")
    (base / "s.toml").write_text(small_scenario("served", 150))
    out = base / "run"
    proc = subprocess.run(pipeprof_cmd() + ["compare", "s.toml", "--np", "2", "--out", str(out), "--metrics-port",
                                            str(prometheus["target_port"])],
                          cwd=base, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PIPEPROF_DATA_DIR=str(data_cache_dir)))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc


def query(prometheus, expr: str) -> list[dict]:
    url = f"{prometheus['api']}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = http_json(url)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_pipeprof_series_for_both_ranks(prometheus, compared):
    out, proc = compared
    assert f"metrics: http://127.0.0.1:{prometheus['target_port']}/metrics" in proc.stdout
    time.sleep(1.5)  # the scrape after the last step
    steps = query(prometheus, 'max_over_time(pipeprof_steps_total{np="2", variant="real"}[10m])')
    assert sorted(r["metric"]["rank"] for r in steps) == ["0", "1"]
    assert all(float(r["value"][1]) > 0 for r in steps)
    assert {r["metric"]["host"] for r in steps} == {socket.gethostname()}
    rate = query(prometheus, 'max_over_time(pipeprof_samples_per_second{np="2"}[10m])')
    assert {r["metric"]["rank"] for r in rate} == {"0", "1"} and all(float(r["value"][1]) > 0 for r in rate)
    cpu = query(prometheus, "max_over_time(pipeprof_host_cpu_utilization_ratio[10m])")
    assert cpu and 0 < float(cpu[0]["value"][1]) <= 1
    progress = query(prometheus, "max_over_time(pipeprof_run_progress_ratio[10m])")
    assert progress and 0 < float(progress[0]["value"][1]) <= 1
    names = set(http_json(f"{prometheus['api']}/api/v1/label/__name__/values")["data"])
    # every pipeprof_ metric the Grafana dashboard uses is one this live run served
    histogram_parts = {n.rsplit("_", 1)[0] for n in names if n.endswith(("_bucket", "_count", "_sum"))}
    missing = {m for m in dashboard_metrics() if m not in names and m.rsplit("_", 1)[0] not in histogram_parts}
    missing -= {"pipeprof_gpu_utilization_ratio", "pipeprof_gpu_memory_used_bytes", "pipeprof_bad_files_total"}
    assert not missing, f"dashboard metrics this run did not serve: {sorted(missing)}"


# Chromium's own background traffic (time and component-update checks), not the page's
BROWSER_OWN = ("clients2.google.com", "update.googleapis.com", "redirector.gvt1.com")


def open_offline(page, tmp_path, *extra):
    """Chromium, headless, in a network namespace of its own (no network at all), logging what
    the page prints to its console and every URL it asks for; returns (process, problems)."""
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--enable-logging=stderr", "--v=1",
            f"--user-data-dir={tmp_path / 'profile'}"]
    offline = ["unshare", "--net"] if os.geteuid() == 0 and shutil.which("unshare") else []
    proc = subprocess.run(offline + base + [*extra, page.as_uri()], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HOME=str(tmp_path)))
    problems = [line for line in proc.stderr.splitlines()
                if ":CONSOLE" in line or ("NotifyBeforeURLRequest" in line and not any(h in line for h in BROWSER_OWN))]
    return proc, problems


def test_report_opens_offline_in_a_real_browser_with_its_charts(compared, tmp_path):
    assert CHROMIUM, f"chromium is not installed: {NEEDS}"
    out, _ = compared
    page = out / "report.html"
    assert page.exists() and (out / "trace.json").exists() and (out / "tensorboard" / "by_np").is_dir()
    # the check itself can fail: a page that reaches for the network and logs an error is caught
    bad = tmp_path / "bad.html"
    bad.write_text('<html><body><img src="http://example.com/x.png"><script>console.error("x")</script></body></html>')
    _, caught = open_offline(bad, tmp_path, "--dump-dom")
    assert any("example.com" in p for p in caught) and any(":CONSOLE" in p for p in caught)

    dom, problems = open_offline(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-3000:]
    assert not problems, problems
    for chart in ("gap", "throughput", "ranks", "rank-timeline", "telemetry"):
        block = re.search(rf'<figure class="chart" id="chart-{chart}">(.*?)</figure>', dom.stdout, re.S)
        assert block and "<svg" in block.group(1), chart
    assert 'id="verdicts"' in dom.stdout and "np=2 · real" in dom.stdout
    shot = tmp_path / "report.png"
    snap, _ = open_offline(page, tmp_path, f"--screenshot={shot}", "--window-size=1200,2400")
    assert snap.returncode == 0 and shot.stat().st_size > 50_000, snap.stderr[-2000:]
    if kept := os.environ.get("PIPEPROF_KEEP_SCREENSHOT"):
        shutil.copy(shot, kept)
