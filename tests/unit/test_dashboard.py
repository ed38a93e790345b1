"""The dashboard rendered from canned state at a fixed width."""

import io
import re
import threading
import time

from rich.console import Console

from pipeprof.progress import VariantStart
from pipeprof.tui.dashboard import MAX_REFRESH_PER_S, LiveDashboard, bar, render
from pipeprof.tui.state import DashboardState, HostView, LiveState, RankView, ResultRow

CANNED = DashboardState(
    command="compare",
    scenario="quickstart",
    np=2,
    variant="real",
    variant_index=2,
    variants_total=2,
    elapsed_s=83.0,
    steps_done=300,
    steps_total=430,
    eta_s=36.0,
    ranks=[
        RankView(
            rank=0,
            host="node1",
            samples_per_s=412.5,
            step_time_ms_p50=77.6,
            step_time_ms_p95=91.0,
            input_wait_pct=3.2,
            gpu_util_pct=88.0,
            gpu_mem_used_mb=12 * 1024,
            gpu_mem_total_mb=80 * 1024,
            cpu_pct=97.0,
            rss_mb=612.0,
        ),
        RankView(
            rank=1,
            host="node1",
            samples_per_s=398.0,
            step_time_ms_p50=80.4,
            step_time_ms_p95=120.0,
            input_wait_pct=41.0,
            gpu_util_pct=None,
            cpu_pct=99.0,
            rss_mb=598.0,
        ),
    ],
    hosts=[
        HostView(
            host="node1",
            cpu_per_core_pct=[97.0, 12.0],
            mem_used_mb=2048,
            mem_total_mb=24 * 1024,
            ranks_rss_mb=1210.0,
            disk_read_mb_per_s=3.5,
            net_mb_per_s=0.2,
        )
    ],
    results=[
        ResultRow(np=1, variant="synthetic", samples_per_s=695.2, gap_pct=None),
        ResultRow(np=1, variant="real", samples_per_s=575.9, gap_pct=17.1),
    ],
    notes=["no NVML on this host (NVML Shared Library Not Found)"],
)


def text_of(renderable, width=130) -> str:
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_canned_state_renders_every_part():
    text = text_of(render(CANNED))
    lines = text.splitlines()
    assert "pipeprof compare · quickstart · np=2 · variant 2/2 real" in lines[0]
    assert "300/430 steps · elapsed 01:23 · ETA 00:36" in text

    def row(rank: int) -> str:
        return next(
            line
            for line in lines
            if line.startswith("│") and line.split("│")[1].strip() == str(rank)
        )

    row0 = row(0)
    assert (
        "412.5" in row0
        and "77.6" in row0
        and "3.2%" in row0
        and " 88%" in row0
        and "12.0/80 GB" in row0
    )
    row1 = row(1)
    assert "41.0%" in row1 and "n/a" in row1
    assert "cpu0" in text and "cpu1" in text and " 97%" in text and " 12%" in text
    assert "ranks RSS 1,210 MB" in text and "disk read 3.5 MB/s" in text
    assert "results so far" in text and "575.9" in text and "17.1%" in text
    assert "no NVML on this host" in text
    assert all(len(line) <= 130 for line in lines)


def test_bar_shows_percent_and_na():
    assert text_of(bar(50.0, 10)).strip() == "█████░░░░░  50%"
    assert text_of(bar(None)).strip() == "n/a"


def test_empty_state_waits_for_ranks():
    assert "waiting for ranks" in text_of(render(DashboardState(scenario="x")))


def test_live_state_builds_rank_rows_from_records_with_an_injected_clock():
    now = [100.0]
    state = LiveState(scenario="s", steps_total=40, clock=lambda: now[0])
    state.apply_event(VariantStart(np=2, variant="real", index=1, of_variants=2))
    state.apply({"kind": "hello", "rank": 1, "local_rank": 1, "host": "h"})
    for i in range(10):
        for r in (0, 1):
            state.apply(
                {
                    "kind": "step",
                    "np": 2,
                    "variant": "real",
                    "rank": r,
                    "step": i,
                    "warmup": False,
                    "input_wait_ms": 10.0 * r,
                    "step_time_ms": 50.0,
                    "batch_size": 32,
                    "end_unix_s": 0,
                }
            )
    now[0] = 110.0
    snap = state.snapshot()
    assert snap.variant_index == 2 and snap.variants_total == 2 and snap.np == 2
    assert snap.steps_done == 10 and snap.elapsed_s == 10.0 and snap.eta_s == 30.0
    r0, r1 = snap.ranks
    assert r0.samples_per_s == 640.0 and r0.input_wait_pct == 0.0 and r1.input_wait_pct == 20.0


def test_live_dashboard_refresh_is_capped_and_its_thread_stops():
    console = Console(record=True, width=120, file=io.StringIO(), force_terminal=True)
    dash = LiveDashboard(lambda: CANNED, console, refresh_per_s=100)  # asks for 100 a second
    t0 = time.monotonic()
    with dash:
        time.sleep(1.0)
    seconds = time.monotonic() - t0
    # at most 4 a second (a slow machine draws fewer, never more), plus the final one
    assert 1 <= dash.frames <= MAX_REFRESH_PER_S * seconds + 2
    assert not any(t.name == "pipeprof-dashboard" for t in threading.enumerate())


def test_a_thousand_ranks_show_the_ones_waiting_longest_and_the_busiest_hosts():
    state = LiveState(scenario="big", clock=lambda: 0.0)
    state.apply_event(VariantStart(np=1024, variant="real", index=0, of_variants=1))
    slow = {77, 777, 1000}
    for rank in range(1024):
        host = f"node{rank // 8:03d}"
        state.apply({"kind": "hello", "rank": rank, "host": host, "local_rank": rank % 8})
        for step in range(25):  # more than the window: the oldest leave its sums
            wait = 30.0 if rank in slow and step >= 5 else 0.5
            state.apply(
                {
                    "kind": "step",
                    "np": 1024,
                    "variant": "real",
                    "rank": rank,
                    "step": step,
                    "step_time_ms": 50.0,
                    "input_wait_ms": wait,
                    "batch_size": 32,
                }
            )
    for h in range(128):
        busy = 95.0 if h in (3, 64) else 20.0
        state.apply(
            {"kind": "host", "host": f"node{h:03d}", "cpu_per_core_pct": ";".join([str(busy)] * 96)}
        )
    snap = state.snapshot()
    assert snap.ranks_total == 1024 and len(snap.ranks) == 16
    shown = {r.rank for r in snap.ranks}
    assert slow <= shown and [r.rank for r in snap.ranks] == sorted(shown)
    assert {r.rank: r.input_wait_pct for r in snap.ranks}[777] == 60.0  # 20 steps: 30 of 50 ms
    assert snap.hosts_total == 128 and len(snap.hosts) == 4
    assert {"node003", "node064"} <= {h.host for h in snap.hosts}
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(render(snap))
    text = out.getvalue()
    assert "the 16 of 1,024 waiting longest on input" in text
    assert "and 124 more hosts" in text and "96 cores: mean" in text and "cpu95" not in text


def test_a_sixteen_core_host_keeps_each_label_beside_its_bar():
    """Regression: on a real 16-core GPU host (benchmarks/nvml_real_gpu.py on an H200) the
    bars wrapped mid-entry, 'cpu6' at the end of one line and its bar on the next, and two-digit
    labels ran into their bars ('cpu10░░░')."""
    state = LiveState(scenario="wide")
    busy = [3.0 if i != 13 else 39.0 for i in range(16)]
    state.apply({"kind": "host", "host": "gpu-node", "cpu_per_core_pct": ";".join(map(str, busy))})
    out = io.StringIO()
    Console(file=out, width=100, color_system=None).print(render(state.snapshot()))
    lines = out.getvalue().splitlines()
    for i in range(16):
        (line,) = [ln for ln in lines if re.search(rf"cpu{i} +[█░]{{8}} +\d+%", ln)]
        assert line.count("cpu") == 4, line  # four whole entries a line
    assert re.search(r"cpu13 +███░░░░░  39%", out.getvalue())
