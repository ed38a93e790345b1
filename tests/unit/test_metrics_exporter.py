"""The Prometheus exporter, scraped over HTTP while records stream in as they do from ranks."""

import json
import re
import socket
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeprof.errors import PipeprofError
from pipeprof.progress import Launch, Plan, VariantDone, VariantStart
from pipeprof.renderers.metrics import MetricsExporter

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


def scrape(url: str) -> dict[str, list]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def feed(exporter: MetricsExporter, ranks: int = 2, steps: int = 30) -> None:
    exporter.progress(Plan(worker_counts=[1, 2], variants=["synthetic", "real"]))
    exporter.progress(Launch(np=ranks, of_variants=2))
    for r in range(ranks):
        exporter.record({"kind": "hello", "rank": r, "local_rank": r, "host": "node1", "np": ranks})
    exporter.progress(VariantStart(np=ranks, variant="real", index=1, of_variants=2))
    for i in range(steps):
        for r in range(ranks):
            exporter.record(
                {
                    "kind": "step",
                    "np": ranks,
                    "variant": "real",
                    "rank": r,
                    "step": i,
                    "warmup": False,
                    "input_wait_ms": 10.0 * (r + 1),
                    "step_time_ms": 100.0,
                    "batch_size": 32,
                    "end_unix_s": 1.0 + i,
                    "paired": "",
                    "round": -1,
                }
            )
    exporter.record(
        {
            "kind": "gpu",
            "t_unix_s": 1.0,
            "host": "node1",
            "gpu": "1",
            "local_ranks": "1",
            "gpu_util_pct": 87.0,
            "mem_used_mb": 1024.0,
        }
    )
    exporter.record(
        {"kind": "host", "t_unix_s": 1.0, "host": "node1", "cpu_pct": 55.0, "mem_used_mb": 2048.0}
    )
    exporter.record(
        {
            "kind": "proc",
            "t_unix_s": 1.0,
            "host": "node1",
            "rank": 1,
            "cpu_pct": 90.0,
            "rss_mb": 512.0,
        }
    )
    exporter.record(
        {
            "kind": "bad_file",
            "rank": 1,
            "np": ranks,
            "variant": "real",
            "path": "/d/x.jpg",
            "reason": "empty",
        }
    )
    exporter.progress(VariantDone(np=ranks, variant="real", index=1, of_variants=2, wall_s=1.0))
    exporter.results(
        pd.DataFrame([{"np": ranks, "variant": "real", "gap_pct": 21.5, "gap_pct_ci95": 1.5}])
    )


@pytest.fixture
def exporter():
    e = MetricsExporter(0, "127.0.0.1", command="compare", scenario="unit")
    yield e
    e.close()


def test_the_exporter_serves_each_ranks_figures_in_base_units_with_their_labels(exporter):
    feed(exporter)
    m = scrape(exporter.url)
    steps = {s.labels["rank"]: s.value for s in m["pipeprof_steps_total"]}
    assert steps == {"0": 30.0, "1": 30.0}
    labels = m["pipeprof_steps_total"][0].labels
    assert (
        set(labels) == {"rank", "host", "np", "variant"}
        and labels["host"] == "node1"
        and labels["np"] == "2"
    )
    rate = {s.labels["rank"]: s.value for s in m["pipeprof_samples_per_second"]}
    assert rate["0"] == pytest.approx(320.0)  # 32 samples per 100 ms step
    wait = {s.labels["rank"]: s.value for s in m["pipeprof_input_wait_ratio"]}
    assert wait == {"0": pytest.approx(0.1), "1": pytest.approx(0.2)}
    assert sum(s.value for s in m["pipeprof_input_wait_seconds_total"]) == pytest.approx(30 * 0.03)
    count = [s for s in m["pipeprof_step_duration_seconds_count"] if s.labels["rank"] == "0"][0]
    assert count.value == 30
    gpu = m["pipeprof_gpu_utilization_ratio"][0]
    assert (
        gpu.value == pytest.approx(0.87) and gpu.labels["rank"] == "1" and gpu.labels["gpu"] == "1"
    )
    assert m["pipeprof_gpu_memory_used_bytes"][0].value == 2**30
    assert m["pipeprof_host_cpu_utilization_ratio"][0].value == pytest.approx(0.55)
    assert m["pipeprof_process_resident_memory_bytes"][0].value == 512 * 2**20
    bad = {s.labels["rank"]: s.value for s in m["pipeprof_bad_files_total"]}
    assert bad == {"0": 0.0, "1": 1.0}  # rank 0's served at 0 since its first step
    assert m["pipeprof_gap_ratio"][0].value == pytest.approx(0.215)
    assert m["pipeprof_run_progress_ratio"][0].value == pytest.approx(
        0.25
    )  # 1 of 2 np x 2 variants
    assert m["pipeprof_worker_count"][0].value == 2
    assert m["pipeprof_run_info"][0].labels["scenario"] == "unit"


def test_a_metrics_port_in_use_is_one_line(exporter):
    with pytest.raises(PipeprofError) as err:
        MetricsExporter(exporter.port, "127.0.0.1")
    assert (
        f"--metrics-port {exporter.port}" in err.value.message
        and "already in use" in err.value.message
    )


def test_the_exporter_stops_serving_when_closed():
    e = MetricsExporter(0, "127.0.0.1")
    port = e.port
    e.close()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def dashboard_metrics() -> set[str]:
    names = set()
    for path in DASHBOARDS.glob("*.json"):
        text = json.dumps(
            [
                t.get("expr", "")
                for p in json.loads(path.read_text())["panels"]
                for t in p["targets"]
            ]
        )
        text += json.dumps(json.loads(path.read_text())["templating"])
        names |= set(re.findall(r"\bpipeprof_[a-z0-9_]+", text))
    return names


def test_every_pipeprof_metric_on_the_dashboards_is_one_the_exporter_serves(exporter):
    feed(exporter)
    served = set(scrape(exporter.url))
    used = dashboard_metrics()
    assert used and used <= served, f"not served: {sorted(used - served)}"


def test_the_bad_files_counter_is_served_at_zero_before_any_bad_file(exporter):
    """Prometheus's convention for a known counter: a series from the start, so rate() and an
    alert on it work before the first bad file (it used to appear only with that file)."""
    exporter.progress(Launch(np=2, of_variants=1))
    for r in range(2):
        exporter.record({"kind": "hello", "rank": r, "local_rank": r, "host": "node1", "np": 2})
        exporter.record(
            {
                "kind": "step",
                "np": 2,
                "variant": "real",
                "rank": r,
                "step": 0,
                "warmup": True,
                "input_wait_ms": 1.0,
                "step_time_ms": 50.0,
                "batch_size": 16,
                "end_unix_s": 1.0,
                "paired": "",
                "round": -1,
            }
        )
    bad = scrape(exporter.url)["pipeprof_bad_files_total"]
    assert {(s.labels["rank"], s.labels["variant"], s.value) for s in bad} == {
        ("0", "real", 0.0),
        ("1", "real", 0.0),
    }
