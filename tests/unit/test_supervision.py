"""Never orphan, never lose: stop signals, timeouts that hold, children that die with pipeprof,
a record stream that survives bad records. Real processes, real signals, real sockets."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from pipeprof.data.stagebench import StageBench
from pipeprof.errors import PipeprofError
from pipeprof.launch import runner, signals
from pipeprof.records import StepRecord
from pipeprof.scenario import DataConfig, PipelineConfig
from pipeprof.telemetry.recorder import Recorder
from pipeprof.telemetry.stream import Collector, record_problem

REPO_ENV = dict(
    os.environ,
    PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
)


def gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_a_chatty_hung_launch_is_killed_at_its_timeout(tmp_path):
    t0 = time.monotonic()
    res = runner.run(
        ["bash", "-c", "while true; do echo x; sleep 0.05; done"],
        env=dict(os.environ),
        log_path=tmp_path / "l.log",
        timeout_s=2,
    )
    assert res.timed_out and not res.ok and res.reason() == "timed out after 2 s"
    assert time.monotonic() - t0 < 30  # the command loops for ever: only the timeout ends it
    assert (tmp_path / "l.log").read_text().count("x\n") > 10


def test_sigterm_stops_the_launch_gracefully_and_no_descendant_survives(tmp_path):
    # the child traps SIGTERM (a graceful stop is seen) and starts a grandchild in a session of
    # its own, as horovod's per-rank supervisors do: killing the child's group does not reach it
    script = textwrap.dedent("""
        setsid sleep 300 &
        echo "grandchild $!"
        trap 'echo "got TERM"; exit 0' TERM
        while true; do sleep 0.1; done
    """)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    t0 = time.monotonic()
    try:
        res = runner.run(
            ["bash", "-c", script], env=dict(os.environ), log_path=tmp_path / "l.log", timeout_s=60
        )
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 10
    assert res.signum == signal.SIGTERM and res.interrupted and not res.ok
    assert res.reason() == "interrupted by SIGTERM"
    assert "got TERM" in res.tail
    grandchild = int(next(line for line in res.tail if line.startswith("grandchild")).split()[1])
    assert gone(grandchild), "the grandchild in its own session outlived the launch"


SECOND_SIGNAL = """
import os, signal, subprocess, sys, time
from pipeprof.launch import signals

child = subprocess.Popen(["sleep", "300"])
with signals.handled(), signals.on_force(lambda: os.kill(child.pid, signal.SIGKILL)):
    try:  # the ready line inside the try: the test's first signal may land while it is printed
        print("child", child.pid, flush=True)
        time.sleep(60)
    except signals.Interrupted as exc:
        print("first", exc.signum, flush=True)
        time.sleep(60)  # a graceful stop that hangs
print("not reached", flush=True)
"""


def test_a_second_signal_kills_the_children_and_exits_at_once():
    proc = subprocess.Popen(
        [sys.executable, "-c", SECOND_SIGNAL], stdout=subprocess.PIPE, text=True, env=REPO_ENV
    )
    child = int(proc.stdout.readline().split()[1])
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout.readline().split() == ["first", str(int(signal.SIGTERM))]
    t0 = time.monotonic()
    proc.send_signal(signal.SIGHUP)
    # at once: the graceful stop it cut short would have slept 60 s
    assert proc.wait(timeout=30) == 128 + signal.SIGHUP
    assert time.monotonic() - t0 < 30
    assert "not reached" not in proc.stdout.read()
    assert gone(child)


def test_handlers_are_restored_and_do_nothing_outside_the_main_thread():
    before = signal.getsignal(signal.SIGTERM)
    with signals.handled():
        assert signal.getsignal(signal.SIGTERM) is not before
        with signals.handled():  # nesting keeps one installation
            pass
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
    seen = []

    def elsewhere():
        with signals.handled():
            seen.append(signal.getsignal(signal.SIGTERM) is before)

    t = threading.Thread(target=elsewhere)
    t.start()
    t.join()
    assert seen == [True]


@pytest.mark.parametrize(
    "signum,code,name",
    [
        (signal.SIGINT, 130, "SIGINT"),
        (signal.SIGTERM, 143, "SIGTERM"),
        (signal.SIGHUP, 129, "SIGHUP"),
    ],
)
def test_an_interruption_names_its_signal_and_exit_code(signum, code, name):
    exc = signals.Interrupted(signum)
    assert isinstance(exc, KeyboardInterrupt) and not isinstance(exc, Exception)
    assert exc.exit_code == code and str(exc) == f"interrupted by {name}"
    assert signals.signum_of(KeyboardInterrupt()) == signal.SIGINT


ORPHAN = """
import subprocess, sys, time
from pipeprof.launch import supervise
if sys.argv[1] == "argv":
    child = subprocess.Popen(supervise.dies_with_parent_argv(["sleep", "300"]))
else:
    child = subprocess.Popen([sys.executable, "-c",
                              "import os, sys, time; from pipeprof.launch import supervise; "
                              "supervise.die_with_parent(int(sys.argv[1])); print('ready', flush=True); time.sleep(300)",
                              str(__import__("os").getpid())], stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
print(child.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("how", ["argv", "in-child"])
def test_a_child_dies_when_pipeprof_is_sigkilled(how):
    parent = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, how], stdout=subprocess.PIPE, text=True, env=REPO_ENV
    )
    child = int(parent.stdout.readline())
    time.sleep(0.3)  # the guard has exec'd the command
    assert psutil.Process(child).is_running()
    parent.kill()
    parent.wait()
    assert gone(child), f"the child ({how}) outlived a SIGKILLed parent"


# A rank over ssh: blocked in C (as a tf.distribute worker in a gRPC collective is), its
# stdout a pipe or socket whose reader is sshd; the launcher's stop only closes that reader.
BLOCKED_RANK = """
import os, sys, threading
from pipeprof.launch import supervise
supervise.end_when_output_closes()
print("ready", flush=True)
threading.Event().wait()  # uninterruptible by Python code: only a signal ends it
"""


@pytest.mark.parametrize("channel", ["pipe", "socket"])
def test_a_rank_whose_output_reader_goes_is_terminated(channel):
    if channel == "pipe":
        proc = subprocess.Popen(
            [sys.executable, "-c", BLOCKED_RANK], stdout=subprocess.PIPE, env=REPO_ENV
        )
        reader = proc.stdout
    else:  # sshd hands a session socketpairs where it is built without pipes
        ours, theirs = socket.socketpair()
        proc = subprocess.Popen([sys.executable, "-c", BLOCKED_RANK], stdout=theirs, env=REPO_ENV)
        theirs.close()
        reader = ours.makefile("rb")
    assert reader.readline() == b"ready\n"
    time.sleep(0.3)
    assert proc.poll() is None
    reader.close()
    if channel == "socket":
        ours.close()
    assert proc.wait(timeout=10) == -signal.SIGTERM


# The same rank with a SIGTERM handler that records the signal and goes on, as TensorFlow's
# preemption notifier does under MultiWorkerMirroredStrategy (tests/integration/
# test_signals_np2.py runs the real one): the launcher's stop still ends it, by SIGKILL
CAUGHT_RANK = """
import os, signal, sys, threading
signal.signal(signal.SIGTERM, lambda *_: os.write(2, b"SIGTERM caught\\n"))
from pipeprof.launch import supervise
supervise.end_when_output_closes(grace_s=0.5)
print("ready", flush=True)
threading.Event().wait()
"""


def test_a_rank_that_catches_sigterm_is_killed_once_its_output_reader_goes():
    proc = subprocess.Popen(
        [sys.executable, "-c", CAUGHT_RANK],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=REPO_ENV,
    )
    try:
        assert proc.stdout.readline() == b"ready\n"
        t0 = time.monotonic()
        proc.stdout.close()
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert time.monotonic() - t0 >= 0.5  # the grace, after the SIGTERM:
        assert proc.stderr.read() == b"SIGTERM caught\n"  # which came first, and was caught
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("where", ["file", "devnull", "closed"])
def test_output_to_a_file_or_nowhere_never_counts_as_closed(tmp_path, where):
    from pipeprof.launch import supervise

    if where == "closed":
        r, w = os.pipe()
        os.close(r)
        os.close(w)
        assert not supervise.output_closed((w,), timeout_ms=200)
        return
    path = tmp_path / "out" if where == "file" else os.devnull
    with open(path, "w") as f:
        assert not supervise.output_closed((f.fileno(),), timeout_ms=200)
        r, w = os.pipe()
        os.close(r)
        assert supervise.output_closed((f.fileno(), w), timeout_ms=200)
        os.close(w)


def test_a_missing_command_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        runner.run(
            ["no-such-command-pipeprof"],
            env=dict(os.environ),
            log_path=tmp_path / "l.log",
            timeout_s=5,
        )


# --- the record stream ---------------------------------------------------------------------------


def step(rank=0, i=0) -> dict:
    return {
        "kind": "step",
        **StepRecord(
            np=1,
            variant="v",
            rank=rank,
            step=i,
            warmup=False,
            input_wait_ms=1.0,
            step_time_ms=10.0,
            batch_size=8,
            end_unix_s=time.time(),
        ).to_dict(),
    }


@pytest.mark.parametrize(
    "record,problem",
    [
        ([1, 2], "not a JSON object"),
        ({"rank": 0}, "without a 'kind'"),
        ({"kind": "step"}, "integer 'rank'"),
        ({"kind": "proc", "rank": "0"}, "integer 'rank'"),
        ({"kind": "hello", "rank": True}, "integer 'rank'"),
        ({**step(), "step_time_ms": None}, "numbers in step_time_ms"),
        ({"kind": "gpu", "local_ranks": "0;x"}, "local_ranks"),
    ],
)
def test_record_problems_are_named(record, problem):
    assert problem in record_problem(record)


@pytest.mark.parametrize(
    "record",
    [
        step(),
        {"kind": "host", "host": "a"},
        {"kind": "gpu", "local_ranks": "0;1"},
        {"kind": "variant_start", "np": 2},
    ],
)
def test_good_records_pass(record):
    assert record_problem(record) is None


def test_malformed_records_do_not_stop_the_collector(tmp_path):
    recorder = Recorder(tmp_path, flush_interval_s=0.0)
    got = []

    def on_record(r):
        recorder.write(r)
        got.append(r)

    with Collector(on_record, token="t0k", on_malformed=recorder.malformed) as col:
        host, port = col.address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b'{"hello": "t0k", "rank": 0}\n')
            s.sendall(b"[1,2]\n")
            s.sendall(b'{"kind": "step"}\n')
            s.sendall(b"\xff\xfe\x00garbage\x80\n")
            s.sendall((json.dumps(step(rank=1, i=7)) + "\n").encode())
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.02)
    recorder.close()
    assert [(r["rank"], r["step"]) for r in got] == [(1, 7)]
    assert col.malformed == 3 and recorder.malformed_count == 3
    first = (tmp_path / "live" / "malformed.txt").read_text()
    assert (
        first.startswith("the first malformed stream record: not a JSON object")
        and "[1,2]" in first
    )
    assert "3 malformed records in all" in first
    assert "1,v,1,7" in (tmp_path / "live" / "steps.csv").read_text()


def test_a_record_a_consumer_cannot_handle_is_counted_not_fatal(tmp_path):
    got = []

    def picky(r):
        if r["step"] == 0:
            raise KeyError("x")
        got.append(r)

    with Collector(picky, token="t") as col:
        host, port = col.address.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as s:
            s.sendall(
                b'{"hello": "t"}\n'
                + "".join(json.dumps(step(i=i)) + "\n" for i in range(3)).encode()
            )
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert [r["step"] for r in got] == [1, 2] and col.malformed == 1


def test_malformed_fallback_lines_are_counted_and_the_rest_ingested(tmp_path):
    (tmp_path / "stream").mkdir()
    (tmp_path / "stream" / "rank0.jsonl").write_bytes(
        b'{"kind":"step"}\n'
        + json.dumps(step()).encode()
        + b'\n\xff\xfe\n{"kind":"step","np":1,"var'
    )
    recorder = Recorder(tmp_path)
    assert recorder.ingest_fallback_files() == 1
    recorder.close()
    assert recorder.malformed_count == 3
    assert "in rank0.jsonl" in (tmp_path / "live" / "malformed.txt").read_text()


# --- the stage benchmark's worker ----------------------------------------------------------------


def test_the_stage_benchmarks_stderr_lands_in_the_run_directory(tmp_path):
    log = tmp_path / "run" / "logs" / "stagebench.log"
    with pytest.raises(PipeprofError, match="its log: .*stagebench.log"):
        with StageBench(DataConfig(), "", 8, log_path=log) as bench:
            worker = bench._proc.pid
            bench._proc.stdin.write("this is not a request\n")  # the worker dies with a traceback
            bench._proc.stdin.flush()
            bench._proc.wait(timeout=30)
            bench.run(PipelineConfig())
    text = log.read_text()
    assert text.startswith("$ ") and "pipeprof.data.stagebench" in text
    assert "Traceback" in text and "JSONDecodeError" in text
    assert gone(worker)


def test_the_stage_benchmark_worker_is_stopped_on_a_stop_signal(tmp_path):
    with pytest.raises(signals.Interrupted):
        with StageBench(DataConfig(), "", 8, log_path=tmp_path / "sb.log") as bench:
            worker = bench._proc.pid
            raise signals.Interrupted(signal.SIGTERM)
    assert gone(worker, within_s=1.0)


def test_the_cli_exits_128_plus_a_signal_that_lands_before_anything_was_measured(
    monkeypatch, capsys
):
    from pipeprof.cli import compare as cli_compare
    from pipeprof.cli import main

    def hung_up(args, argv):
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(5)

    monkeypatch.setattr(cli_compare, "run", hung_up)
    assert main.main(["compare"]) == 129
    assert capsys.readouterr().err == "pipeprof: interrupted by SIGHUP\n"


def test_the_failure_line_blames_the_rank_that_ended_first_not_the_one_that_saw_it_go():
    # rank 1 (second host) killed -9: it prints nothing; rank 0 then fails on the shutdown
    killed = runner.LaunchResult(
        returncode=1,
        errors=["rank 0 on node-a: HorovodInternalError: Horovod has been shut down."],
        exits=[(1, 137), (0, 1)],
        hosts={0: "node-a", 1: "node-b"},
        program="horovodrun",
    )
    assert killed.reason() == (
        "rank 1 on node-b was killed by SIGKILL (exit 137) and printed no error; "
        "then rank 0 on node-a: HorovodInternalError: Horovod has been shut down."
    )
    # the first rank to end badly said why: its own line leads
    said = dataclasses.replace(
        killed,
        errors=[
            "rank 0 on node-a: UnknownError: Horovod has been shut down.",
            "rank 1 on node-b: bad file x.jpg",
        ],
        exits=[(0, 1), (1, 1)],  # rank 0's exit came first: rank 1's went through ssh
    )
    assert said.reason() == (
        "rank 1 on node-b: bad file x.jpg; then rank 0 on node-a: UnknownError: Horovod has "
        "been shut down."
    )
    # a rank its launcher killed after another's own failure (its SIGTERM caught, as
    # MultiWorkerMirroredStrategy's preemption handler does) is not blamed for it
    escalated = dataclasses.replace(
        killed,
        errors=["rank 0 on node-a: ValueError: bad file x.jpg"],
        exits=[(0, 1), (1, -9)],
    )
    assert escalated.reason() == "rank 0 on node-a: ValueError: bad file x.jpg"
    # killed first, it is: the others' own lines came after it (the OOM killer, say)
    assert dataclasses.replace(escalated, exits=[(1, -9), (0, 1)]).reason() == (
        "rank 1 on node-b was killed by SIGKILL (exit -9) and printed no error; then rank 0 on "
        "node-a: ValueError: bad file x.jpg"
    )
    # a remote rank its launcher killed after another's own failure ends its ssh with 255:
    # not blamed either
    assert dataclasses.replace(escalated, exits=[(0, 1), (1, 255)]).reason() == (
        "rank 0 on node-a: ValueError: bad file x.jpg"
    )
    # a MultiWorkerMirroredStrategy worker that lost its peer (the line its rank printed on
    # this VM, 2026-11-27, with the peer killed -9) comes after the peer's own error
    peer_lost = dataclasses.replace(
        killed,
        errors=[
            "rank 0 on node-a: UnavailableError: Graph execution error at node "
            "CollectiveReduceV2: Collective ops is aborted by: Connection reset by peer "
            "Additional GRPC error information from remote target /job:worker/replica:0/task:1",
            "rank 1 on node-b: ValueError: bad file x.jpg",
        ],
        exits=[(0, 1), (1, 1)],
    )
    assert peer_lost.reason().startswith(
        "rank 1 on node-b: ValueError: bad file x.jpg; then rank 0 on node-a: UnavailableError"
    )
    # on one host the host is not named; ssh's 255: a remote rank killed, or its link lost
    alone = runner.LaunchResult(returncode=1, exits=[(3, 255)], hosts={3: "localhost"})
    assert alone.reason() == (
        "rank 3 ended without an error line; ssh exited 255 (the rank killed, or its host or "
        "link lost)"
    )
    # ranks its launcher stopped with SIGTERM after its own failure are not blamed for it
    stopped = runner.LaunchResult(
        returncode=1, exits=[(0, 143), (1, -15)], tail=["RuntimeError: rendezvous failed"]
    )
    assert stopped.reason() == "the command exited with 1: RuntimeError: rendezvous failed"
    # a launcher that reports no exits: the ranks' own lines, the first two named
    plain = runner.LaunchResult(returncode=1, errors=["rank 2: x", "rank 0: y", "rank 1: z"])
    assert plain.reason() == "rank 2: x; then rank 0: y (and 1 more)"


def test_ranks_that_say_the_same_are_named_in_one_line_and_a_refusal_exits_2():
    same = "Keras's fit on torch trains in one process"
    both = runner.LaunchResult(
        returncode=2,
        errors=[f"rank 1 on vm: {same}", f"rank 0 on vm: {same}"],
        exits=[(1, 2), (0, -15)],
    )
    assert both.reason() == f"ranks 0 and 1 on vm: {same}"
    assert both.refused  # a rank the launcher stopped after the other's refusal: still one
    apart = runner.LaunchResult(
        returncode=1, errors=[f"rank 0 on a: {same}", f"rank 2 on b: {same}", "rank 1 on a: x"]
    )
    assert apart.reason() == f"rank 0 on a and rank 2 on b: {same}; then rank 1 on a: x"
    # a rank that crashed (exit 1) beside one that refused: a failure, not a refusal
    crashed = runner.LaunchResult(
        returncode=1, errors=[f"rank 0 on vm: {same}"], exits=[(0, 2), (1, 1)]
    )
    assert not crashed.refused


def test_horovodrun_s_lines_for_a_rank_s_end_are_read_under_gloo_and_mpi():
    from pipeprof.launch.horovod import ExitLines

    rank_exit = ExitLines()
    assert rank_exit("Process 1 exit with status code 137.") == (1, 137)
    assert rank_exit("Process 0 exit with status code -15.") == (0, -15)
    assert rank_exit(
        "mpirun noticed that process rank 1 with PID 4242 on node pp-h1 exited on signal 9 (Killed)."
    ) == (1, 137)
    # a rank's own output (prefixed by horovodrun) is never taken for the launcher's
    assert rank_exit("[0]<stdout>:Process 1 exit with status code 137.") is None
    assert rank_exit("Terminating remaining workers after failure of Process 1.") is None
    # mpirun's two lines for the first rank to exit non-zero
    assert rank_exit("  Process name: [[40297,1],1]") is None
    assert rank_exit("  Exit code:    3") == (1, 3)
    assert rank_exit("  Exit code:    3") is None  # no rank named before it


def test_a_rank_that_went_silent_leads_the_failure_line(monkeypatch, tmp_path):
    # the link to node-b went down: rank 0 waits on it, its collective times out, and it is the
    # first to exit; rank 1's records had stopped 31 s before
    from pipeprof.reporting import Reporter
    from pipeprof.workflows import live

    now = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: now[0])
    stream = live.RecordStream(tmp_path, Reporter())
    stream.begin_launch()
    for t, rank in ((100.0, 0), (100.2, 1), (110.0, 0), (110.4, 1), (141.0, 0), (141.5, 0)):
        now[0] = t
        stream._on_record({"kind": "proc", "rank": rank})
    stream.recorder.close()
    assert stream.silent() == [(1, pytest.approx(31.1))]
    lost = runner.LaunchResult(
        returncode=1,
        errors=["rank 0 on node-a: Gloo: Timed out waiting for recv"],
        exits=[(0, 1), (1, 255)],
        hosts={0: "node-a", 1: "node-b"},
        silent=stream.silent(),
    )
    assert lost.reason() == (
        "rank 1 on node-b went silent 31 s before the launch ended (its process, its host or its "
        "link lost?); then rank 0 on node-a: Gloo: Timed out waiting for recv"
    )
    hung = dataclasses.replace(lost, timed_out=True, timeout_s=60.0, errors=[], exits=[])
    assert hung.reason().endswith("; then timed out after 60 s")
    # a rank that closed its stream itself (its training over) is not lost, however long ago
    now[0] = 100.3
    stream._on_record({"kind": "bye", "rank": 1})
    now[0] = 141.6
    stream._on_record({"kind": "proc", "rank": 0})
    assert stream.silent() == []
    stream.begin_launch()  # the next launch starts with nobody heard from
    assert stream.silent() == []


def test_a_graph_execution_error_keeps_what_went_wrong_not_the_frames_that_built_the_node():
    # a real TensorFlow error from a function defined in this file (so its node has frames);
    # the line a rank prints for it keeps the cause, where 500 characters of frames hid it
    import tensorflow as tf

    from pipeprof.rank.worker import one_line

    @tf.function
    def gather(x):
        return tf.gather(x, tf.constant([5]))

    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        gather(tf.constant([1.0, 2.0, 3.0]))
    assert "Detected at node" in str(caught.value) and 'File "' in str(caught.value)
    assert one_line(caught.value, limit=120).startswith(
        "InvalidArgumentError: Graph execution error at node GatherV2: indices[0] = 5 is not in "
        "[0, 3)"
    ), one_line(caught.value)
