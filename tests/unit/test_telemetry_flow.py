"""Fake NVML (two GPUs) → rank samplers → TCP stream → launcher recorder → summary and dashboard."""

import json
import socket
import time

import pandas as pd
import pytest
from rich.console import Console

from pipeprof.progress import RankWarning, line, parse_line
from pipeprof.records import StepRecord
from pipeprof.reporting import Reporter
from pipeprof.telemetry.agent import RankTelemetry, gpu_targets
from pipeprof.telemetry.gpu import gpu_for_local_rank
from pipeprof.telemetry.nvml import Nvml
from pipeprof.telemetry.recorder import Recorder
from pipeprof.telemetry.stream import Collector, StreamClient
from pipeprof.tui.dashboard import render
from pipeprof.tui.state import LiveState
from pipeprof.workflows.live import progress_lines
from pipeprof.workflows.summary import write_summary
from tests.fakes.nvml import FakeGpu, FakeNvml


@pytest.fixture(autouse=True)
def no_cuda_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def two_gpu_fake() -> FakeNvml:
    return FakeNvml(
        gpus=[
            FakeGpu(uuid="GPU-aaa", util_pct=37, mem_used=3 * 2**30),
            FakeGpu(uuid="GPU-bbb", util_pct=81, mem_used=9 * 2**30),
        ]
    )


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def run_two_ranks(tmp_path, fake: FakeNvml, steps_per_rank=12):
    """Two ranks on one host (local ranks 0 and 1) streaming to one collector."""
    recorder = Recorder(tmp_path, flush_interval_s=0.0)
    state = LiveState(scenario="flow", steps_total=steps_per_rank)

    def on_record(r):
        recorder.write(r)
        state.apply(r)

    with Collector(on_record, token="t0k") as col:
        agents = [
            RankTelemetry(
                StreamClient(col.address, token="t0k", rank=r),
                rank=r,
                local_rank=r,
                local_size=2,
                gpu_interval_s=0.02,
                host_interval_s=0.05,
                nvml_factory=lambda: Nvml(fake),
            ).start()
            for r in (0, 1)
        ]
        for i in range(steps_per_rank):
            for a in agents:
                # the record itself: the stream turns it into JSON at its flush, off the training thread
                a.put(
                    "step",
                    StepRecord(
                        np=2,
                        variant="real",
                        rank=a.rank,
                        step=i,
                        warmup=i < 2,
                        input_wait_ms=5.0,
                        step_time_ms=20.0,
                        batch_size=32,
                        end_unix_s=time.time(),
                    ),
                )
            time.sleep(0.02)
        for a in agents:
            a.stop()
        assert wait_for(lambda: recorder.counts.get("step", 0) == 2 * steps_per_rank)
    recorder.close()
    return recorder, state


def test_two_gpu_values_flow_to_files_summary_and_dashboard(tmp_path):
    recorder, state = run_two_ranks(tmp_path, two_gpu_fake())

    gpu = pd.read_csv(tmp_path / "telemetry" / "gpu.csv")
    assert set(gpu["gpu"].astype(str)) == {"0", "1"}  # sampled once per host, by local rank 0
    assert set(gpu.groupby("gpu")["gpu_util_pct"].mean()) == {37.0, 81.0}
    assert set(pd.read_csv(tmp_path / "telemetry" / "proc.csv")["rank"]) == {0, 1}
    assert len(pd.read_csv(tmp_path / "live" / "steps.csv")) == 24

    summary = write_summary(tmp_path, set())
    row = summary.iloc[0]
    assert (row["np"], row["variant"]) == (2, "real")
    assert row["gpu_util_pct"] == pytest.approx(59.0, abs=0.01)  # mean over both GPUs in the window
    assert row["input_wait_pct"] == pytest.approx(25.0)
    assert row["rss_mb_max"] > 0

    snap = state.snapshot()
    by_rank = {r.rank: r for r in snap.ranks}
    assert by_rank[0].gpu_util_pct == 37 and by_rank[1].gpu_util_pct == 81
    assert by_rank[1].gpu_mem_used_mb == pytest.approx(9 * 1024)
    console = Console(record=True, width=140, color_system=None)
    console.print(render(snap))
    text = console.export_text()
    assert " 37%" in text and " 81%" in text and "9.0/80 GB" in text


def test_nvml_errors_missing_library_and_unsupported_queries_do_not_break_a_run(tmp_path):
    fake = two_gpu_fake()
    fake.unsupported |= {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo"}
    fake.failing.add("nvmlDeviceGetUtilizationRates")
    run_two_ranks(tmp_path / "errors", fake)
    gpu = pd.read_csv(tmp_path / "errors" / "telemetry" / "gpu.csv")
    assert gpu["gpu_util_pct"].isna().all() and gpu["power_w"].isna().all()
    slow = gpu[
        gpu["mem_used_mb"].notna()
    ]  # memory, clock, power, temperature come at the host interval
    assert len(slow) >= 2 and slow["temp_c"].notna().all()  # the rest still measured, on each GPU
    assert fake.calls.count("nvmlDeviceGetPowerUsage") == 1  # unsupported: asked once only

    _, state = run_two_ranks(tmp_path / "missing", FakeNvml(missing_library=True))
    assert not (tmp_path / "missing" / "telemetry" / "gpu.csv").exists()
    assert any("no NVML on this host" in n for n in state.snapshot().notes)
    summary = write_summary(tmp_path / "missing", set())
    assert summary["gpu_util_pct"].isna().all() and summary["samples_per_s"].iloc[0] > 0


def test_nvml_utilisation_disagreeing_with_input_wait_is_flagged(tmp_path):
    busy = FakeNvml(gpus=[FakeGpu(util_pct=100), FakeGpu(util_pct=100)])
    recorder = Recorder(tmp_path, flush_interval_s=0.0)
    with Collector(recorder.write) as col:
        agent = RankTelemetry(
            StreamClient(col.address, rank=0),
            rank=0,
            local_rank=0,
            local_size=1,
            gpu_interval_s=0.02,
            nvml_factory=lambda: Nvml(busy),
        ).start()
        for i in range(10):
            agent.put(
                "step",
                StepRecord(
                    np=1,
                    variant="real",
                    rank=0,
                    step=i,
                    warmup=False,
                    input_wait_ms=40.0,
                    step_time_ms=100.0,
                    batch_size=8,
                    end_unix_s=time.time(),
                ).to_dict(),
            )
            time.sleep(0.03)
        agent.stop()
        wait_for(lambda: recorder.counts.get("step", 0) == 10)
    recorder.close()
    warning = write_summary(tmp_path, set())["warning"].iloc[0]
    assert "NVML reports the GPU 100% utilised while 40% of step time is input wait" in warning


def test_rank_without_a_launcher_writes_to_the_run_directory_and_says_so(tmp_path, capsys):
    with Collector(lambda r: None) as col:
        dead = col.address  # a port that will be closed
    client = StreamClient(dead, rank=3, fallback_dir=tmp_path)
    assert client.mode == "file"
    # and says so, in one line the launcher's terminal shows (not only in the rank's log)
    said = [e for e in map(parse_line, capsys.readouterr().out.splitlines()) if e is not None]
    assert len(said) == 1 and isinstance(said[0], RankWarning), said
    text = said[0].text()
    assert text.startswith(f"rank 3 on {socket.gethostname()}: cannot reach the launcher's record")
    assert dead in text and "--stream-host" in text and "\n" not in text
    shown = []
    reporter = Reporter()
    reporter.warning = shown.append  # type: ignore[method-assign]
    progress_lines(reporter)("[1]<stdout>:" + line(said[0]))
    assert shown == [text]
    client.put(
        "step",
        {
            "np": 1,
            "variant": "v",
            "rank": 3,
            "step": 0,
            "warmup": False,
            "input_wait_ms": 1.0,
            "step_time_ms": 2.0,
            "batch_size": 4,
            "end_unix_s": 0.0,
        },
    )
    client.close()
    lines = (tmp_path / "stream" / "rank3.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "step"
    rec = Recorder(tmp_path)
    assert rec.ingest_fallback_files() == 2  # the step, and the rank's bye at its close
    rec.close()
    assert len(pd.read_csv(tmp_path / "live" / "steps.csv")) == 1


def test_a_client_with_the_wrong_token_is_refused():
    got = []
    with Collector(got.append, token="right") as col:
        bad = StreamClient(col.address, token="wrong", rank=0)
        bad.put("step", {"x": 1})
        bad.close()
        good = StreamClient(col.address, token="right", rank=1)
        good.put("proc", {"rank": 1})
        good.close()
        assert wait_for(lambda: len(got) == 2)
    # the good rank's record, then its bye (it closed its stream itself)
    assert got == [{"kind": "proc", "rank": 1}, {"kind": "bye", "rank": 1}]
    assert col.rejected == 1


@pytest.mark.parametrize(
    "local_rank,cvd,expected",
    [
        (1, None, 1),
        (1, "4,5", 5),
        (0, "GPU-abc,GPU-def", "GPU-abc"),
        (1, "", None),
        (0, "-1", None),
        (3, "2,3", 3),
    ],
)
def test_rank_to_gpu_mapping(local_rank, cvd, expected):
    assert gpu_for_local_rank(local_rank, cvd) == expected


def test_gpus_are_sampled_once_per_host():
    assert gpu_targets(0, 4, None) == {0: [0], 1: [1], 2: [2], 3: [3]}
    assert gpu_targets(2, 4, None) == {}  # local rank 0 samples for everyone
    assert gpu_targets(0, 2, "6,7") == {6: [0], 7: [1]}
    assert gpu_targets(1, 4, "GPU-x") == {
        "GPU-x": [1]
    }  # narrowed per rank (e.g. Slurm): each its own
    assert gpu_targets(0, 2, "") == {}


def test_a_window_shorter_than_the_sampling_interval_takes_the_sample_that_covers_it():
    from pipeprof.analysis.telemetry import _in

    host = pd.DataFrame(
        {"t_unix_s": [10.0, 10.5, 11.0, 11.5], "host": ["a"] * 4, "cpu_pct": [5.0, 20.0, 30.0, 6.0]}
    )
    assert _in(host, 10.1, 10.4)["cpu_pct"].tolist() == [
        20.0
    ]  # 0.3 s of steps between two 0.5 s samples
    assert _in(host, 10.2, 11.2)["cpu_pct"].tolist() == [20.0, 30.0]  # samples inside: those alone
    proc = pd.DataFrame(
        {
            "t_unix_s": [10.0, 10.01, 10.5, 10.51],
            "host": ["a"] * 4,
            "rank": [0, 1, 0, 1],
            "cpu_pct": [1.0, 2.0, 3.0, 4.0],
        }
    )
    assert sorted(_in(proc, 10.005, 10.3)["cpu_pct"]) == [
        2.0,
        3.0,
    ]  # per rank: rank 1 inside, rank 0 covered
    assert _in(host, 12.0, 12.2).empty  # nothing after the window: nothing to attribute
    # a sampler that began after the window (np=2's new rank after np=1) covers nothing of it:
    # its first interval is its process's start, not the window's steps
    later = pd.DataFrame(
        {
            "t_unix_s": [10.0, 10.5, 17.0, 17.5],
            "host": ["a"] * 4,
            "rank": [0, 0, 1, 1],
            "cpu_pct": [30.0, 40.0, 2172.0, 50.0],
        }
    )
    assert _in(later, 10.1, 10.3)["cpu_pct"].tolist() == [40.0]


def test_a_variant_measured_in_rounds_takes_only_the_samples_of_its_own_rounds():
    """A real variant alternating with its twin: the twin's stretch between its rounds is not its CPU."""
    from pipeprof.analysis.telemetry import samples_in, windows

    def step(variant, rnd, end, paired=""):
        return dict(
            np=1,
            variant=variant,
            rank=0,
            step=int(end * 10),
            warmup=False,
            input_wait_ms=0.0,
            step_time_ms=100.0,
            batch_size=8,
            end_unix_s=end,
            paired=paired,
            round=rnd,
        )

    steps = pd.DataFrame(
        [step("real", 0, t) for t in (10.1, 10.5, 11.0)]
        + [step("real", 1, t) for t in (12.1, 12.5, 13.0)]
    )
    host = pd.DataFrame(
        {
            "t_unix_s": [10.5, 11.0, 11.5, 11.9, 12.5, 13.0],
            "host": ["a"] * 6,
            "cpu_pct": [80.0, 80.0, 10.0, 10.0, 90.0, 90.0],
        }
    )  # 11.5, 11.9: the twin's stretch
    win = windows(steps)
    assert win["round"].tolist() == [0, 1]
    assert sorted(samples_in(host, win, 1, "real")["cpu_pct"]) == [80.0, 80.0, 90.0, 90.0]


def test_cpu_cores_per_rank_is_each_ranks_process_cpu_averaged_over_the_measured_steps():
    from pipeprof.analysis.telemetry import add_telemetry

    steps = pd.DataFrame(
        {
            "np": 2,
            "variant": "real",
            "warmup": False,
            "step_time_ms": 1000.0,
            "end_unix_s": [101.0, 102.0, 103.0],
        }
    )
    # rank 0 used 1.5 cores and rank 1 half a core during the steps; a sample outside counts not
    proc = pd.DataFrame(
        {
            "t_unix_s": [100.5, 101.5, 102.5, 100.5, 101.5, 102.5, 200.0],
            "host": "h",
            "rank": [0, 0, 0, 1, 1, 1, 1],
            "cpu_pct": [140.0, 160.0, 150.0, 50.0, 40.0, 60.0, 900.0],
            "rss_mb": 10.0,
        }
    )
    summary = pd.DataFrame(
        {"np": [2], "variant": ["real"], "input_wait_pct": [1.0], "warning": [""]}
    )
    row = add_telemetry(summary, steps, None, None, proc).iloc[0]
    assert row["cpu_cores_per_rank"] == pytest.approx(1.0)  # (1.5 + 0.5) / 2


def test_a_send_that_times_out_halfway_keeps_every_record_once(tmp_path, monkeypatch):
    """A launcher that stops reading: the rank's flush gives up part-way through a batch; the
    lines the launcher got whole are not written again, and the rest (from the line the
    failure cut) go to the rank's file: nothing lost, nothing twice."""
    from pipeprof.telemetry import stream

    monkeypatch.setattr(stream, "SEND_TIMEOUT_S", 0.5)
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = StreamClient(
            f"127.0.0.1:{server.getsockname()[1]}", token="t", rank=0, fallback_dir=tmp_path
        )
        conn, _ = server.accept()
        n = 100_000  # ~9 MB: more than loopback's buffers hold
        for i in range(n):
            client.put("proc", {"rank": 0, "seq": i, "pad": "x" * 50})
        client.flush()  # the launcher reads nothing: it times out part-way
        assert client.mode == "file"
        got = b""
        with conn:
            while chunk := conn.recv(1 << 20):
                got += chunk
    client.close()
    whole = got.split(b"\n")[1:-1]  # the hello first; the last piece is the cut line
    by_tcp = [json.loads(line)["seq"] for line in whole]
    by_file = [
        record["seq"]
        for line in (tmp_path / "stream" / "rank0.jsonl").read_text().splitlines()
        if (record := json.loads(line))["kind"] == "proc"  # the bye at close follows them
    ]
    assert by_tcp and by_file  # it did stop part-way
    assert by_tcp + by_file == list(range(n))
