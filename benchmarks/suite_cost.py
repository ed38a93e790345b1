"""Where the test suite's time goes: the CPU it spends, by kind of process, beside its wall time.

    python benchmarks/suite_cost.py [--interval 1] [--out FILE.json] -- bash .ci/run

Runs the command and samples every process on the machine each ``--interval`` seconds (the
suite's ranks on the two-host tests' hosts are sshd's children, not the command's): each
one's CPU time, kind and whether it has loaded TensorFlow. Prints the wall time, the machine's
CPU use over it (from /proc/stat, so processes too short to be sampled are counted), the CPU
each kind of process spent, how many processes imported TensorFlow, and what importing it
costs one process here (measured at the end, three times). From those, the wall time no
scheduling of the same work can beat on this machine's cores. Run it on an otherwise idle
machine: everything the machine does is counted.

``--smoke`` (CI) measures a command of its own instead, a second of CPU in a child process,
samples it every 0.2 s without the import's cost, and checks that the CPU it spent was seen.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402

KINDS = ("pytest", "pipeprof command", "launcher", "training process", "setup", "other")
LAUNCHERS: tuple[str, ...] = ("pipeprof.launch.hvdrun", "horovodrun", "mpirun", "orted", "srun")
LAUNCHERS += (
    "slurmstepd",
    "ssh",
    "sshd",
    "multiprocessing.spawn",
    "multiprocessing.resource_tracker",
)


@dataclass
class Seen:
    kind: str
    cpu_s: float = 0.0  # since the command started
    base_s: float = 0.0  # what a process that ran before the command had spent by then
    tensorflow: bool = False
    first_s: float = 0.0
    last_s: float = 0.0


@dataclass
class Cost:
    wall_s: float
    returncode: int
    cores: int
    machine_cpu_s: float  # every process's, from /proc/stat
    by_kind: dict[str, float] = field(default_factory=dict)
    tensorflow_processes: int = 0
    tensorflow_processes_cpu_s: list[float] = field(default_factory=list)
    import_tensorflow_cpu_s: float = 0.0
    pytest_wall_s: float | None = None
    pytest_machine_cpu_s: float | None = None  # every process's, while pytest ran


def machine_cpu_s() -> float:
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + getattr(t, "steal", 0.0)


def has_tensorflow(pid: int) -> bool:
    try:
        return "_pywrap_tensorflow_internal" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def kind_of(cmd: list[str]) -> str:
    line = " ".join(cmd)
    name = os.path.basename(cmd[0]) if cmd else ""
    # pytest itself and its xdist workers (execnet's bootstrap): not a path under pytest's tmp
    if cmd[1:3] == ["-m", "pytest"] or "exec(eval(sys.stdin.readline()))" in line:
        return "pytest"
    if len(cmd) > 3 and cmd[1:3] == ["-m", "pipeprof"]:
        return "pipeprof command"
    if any(word in line for word in LAUNCHERS):
        return "launcher"
    setup = (" pip ", "setup.sh", "ruff", "mypy", "without_horovod")
    if name.startswith("pip") or any(word in line for word in setup):
        return "setup"
    return "other"


def sample(seen: dict[int, Seen], t: float, me: int, before: bool = False) -> None:
    """Each process's CPU since the command started (``before``: the sample taken just
    before it, whose figures are the processes' bases)."""
    for p in psutil.process_iter(["pid", "cmdline", "cpu_times", "name"]):
        info = p.info
        pid, times = info["pid"], info["cpu_times"]
        if pid == me or times is None:
            continue
        cpu = times.user + times.system
        s = seen.get(pid)
        if s is None:
            cmd = info["cmdline"] or [info["name"] or "?"]
            s = seen[pid] = Seen(kind_of(cmd), first_s=t)
            s.base_s = cpu if before else 0.0
        s.cpu_s, s.last_s = max(s.cpu_s, cpu - s.base_s), t
        if not s.tensorflow and "python" in (info["name"] or "") and t - s.first_s >= 1.0:
            s.tensorflow = has_tensorflow(pid)


def import_cost(python: str, times: int = 3) -> float:
    """CPU seconds one process spends on ``import tensorflow`` here (the median of ``times``)."""
    got = []
    for _ in range(times):  # none: not measured (nan)
        r = subprocess.run(
            [python, "-c", "import os, tensorflow; t = os.times(); print(t.user + t.system)"],
            capture_output=True,
            text=True,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        )
        if r.returncode == 0:
            got.append(float(r.stdout.split()[-1]))
    return statistics.median(got) if got else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--python", default=str(Path(".venv/bin/python").absolute()))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--import-times", type=int, default=3, help="times to import TensorFlow")
    ap.add_argument("--smoke", action="store_true", help="a command of its own, then checks (CI)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.smoke:
        cmd, args.interval, args.import_times = [sys.executable, "-c", SPIN], 0.2, 0
    if not cmd:
        ap.error("give the command to measure after --")
    me = os.getpid()
    seen: dict[int, Seen] = {}
    sample(seen, 0.0, me, before=True)
    cpu0, t0 = machine_cpu_s(), time.monotonic()
    proc = subprocess.Popen(cmd)
    machine: list[tuple[float, float]] = []  # (s since the start, the machine's CPU-s since)
    while proc.poll() is None:
        sample(seen, time.monotonic() - t0, me)
        machine.append((time.monotonic() - t0, machine_cpu_s() - cpu0))
        time.sleep(args.interval)
    wall, cpu = time.monotonic() - t0, machine_cpu_s() - cpu0
    # a training process: one that imported TensorFlow and is neither pytest nor the CLI
    for s in seen.values():
        if s.tensorflow and s.kind in ("other", "launcher"):
            s.kind = "training process"
    pytest = [s for s in seen.values() if s.kind == "pytest"]
    start = min((s.first_s for s in pytest), default=0.0)
    end = max((s.last_s for s in pytest), default=0.0)
    during = [c for t, c in machine if pytest and start <= t <= end]
    cost = Cost(
        wall_s=round(wall, 1),
        returncode=proc.returncode,
        cores=psutil.cpu_count() or 1,
        machine_cpu_s=round(cpu, 1),
        by_kind={k: round(sum(s.cpu_s for s in seen.values() if s.kind == k), 1) for k in KINDS},
        tensorflow_processes=sum(s.tensorflow for s in seen.values()),
        tensorflow_processes_cpu_s=sorted(
            round(s.cpu_s, 2) for s in seen.values() if s.kind == "training process"
        ),
        import_tensorflow_cpu_s=round(import_cost(args.python, args.import_times), 2),
        pytest_wall_s=round(end - start, 1) if pytest else None,
        pytest_machine_cpu_s=round(during[-1] - during[0], 1) if len(during) > 1 else None,
    )
    report(cost)
    if args.out:
        args.out.write_text(json.dumps(asdict(cost), indent=1) + "\n")
    if args.smoke:
        counted = sum(cost.by_kind.values())
        harness.smoke_check(cost.returncode == 0, f"the smoke command exited {cost.returncode}")
        harness.smoke_check(
            cost.machine_cpu_s >= 0.5 and counted >= 0.5,
            f"a second of CPU measured as {cost.machine_cpu_s} s (machine), {counted} s "
            "(processes)",
        )
    return proc.returncode


SPIN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass"


def report(c: Cost) -> None:
    attributed = sum(c.by_kind.values())
    print(f"\nwall {c.wall_s:.0f} s; exit {c.returncode}")
    print(
        f"machine CPU {c.machine_cpu_s:.0f} s on {c.cores} cores: "
        f"{100 * c.machine_cpu_s / (c.cores * c.wall_s):.0f}% of what they could give"
    )
    if c.pytest_wall_s and c.pytest_machine_cpu_s:
        print(
            f"while pytest ran: {c.pytest_wall_s:.0f} s, machine CPU {c.pytest_machine_cpu_s:.0f} "
            f"s ({100 * c.pytest_machine_cpu_s / (c.cores * c.pytest_wall_s):.0f}%); that "
            f"work on {c.cores} cores takes at least {c.pytest_machine_cpu_s / c.cores:.0f} s"
        )
    for kind, s in sorted(c.by_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:17s} {s:7.0f} s")
    print(f"  {'not sampled':17s} {c.machine_cpu_s - attributed:7.0f} s (short-lived processes)")
    ranks = c.tensorflow_processes_cpu_s
    if ranks:
        print(
            f"training processes: {len(ranks)}, median {statistics.median(ranks):.1f} CPU-s each; "
            f"'import tensorflow' costs {c.import_tensorflow_cpu_s:.2f} CPU-s here, "
            f"{len(ranks) * c.import_tensorflow_cpu_s:.0f} s in all"
        )
    print(
        f"the same work on {c.cores} cores takes at least {c.machine_cpu_s / c.cores:.0f} s "
        "of wall time however it is scheduled"
    )


if __name__ == "__main__":
    harness.entry(main)
