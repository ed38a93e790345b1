"""Start Horovod ranks with horovodrun and supervise them.

``horovodrun_argv`` and ``worker_env`` are pure (tested by the command they build); ``run``
starts the command in its own process group, streams its output line by line, and ends it
on a rank's death, a timeout or Ctrl-C without hanging.
"""

from __future__ import annotations

import math
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeprof.errors import PipeprofError
from pipeprof.launch.job import ERROR_TAG
from pipeprof.launch import signals, supervise, topology
from pipeprof.scenario import LaunchConfig



def worker_counts(spec: str | int | list[int]) -> list[int]:
    """``32`` → 1, 2, 4, 8, 16, 32 (powers of two up to it, and it); ``1,3,8`` → that list."""
    if isinstance(spec, list):
        counts = spec
    else:
        text = str(spec).strip()
        try:
            if "," in text:
                counts = [int(p) for p in text.split(",") if p.strip()]
            else:
                top = int(text)
                counts = [n for n in (2 ** i for i in range(0, 31)) if n < top] + [top] if top >= 1 else [top]
        except ValueError:
            raise PipeprofError(f"--np {spec!r}: expected a worker count (e.g. 32) or a list (e.g. 1,3,8)") from None
    if not counts or any(n < 1 for n in counts):
        raise PipeprofError(f"--np {spec!r}: worker counts must be positive")
    return sorted(set(counts))


def local_slots(gpu_count: int) -> tuple[int, str]:
    """Slots on this host when no hosts are given: one per GPU, else one per CPU core."""
    if gpu_count > 0:
        return gpu_count, f"{gpu_count} GPU(s)"
    cores = topology.usable_cores()
    return cores, f"{cores} CPU cores, no GPU"


def check_slots(np: int, launch: LaunchConfig, gpu_count: int) -> None:
    if (named := topology.host_slots(launch)) is not None:
        slots, what = sum(s for _, s in named[0]), named[1]
        if np > slots:  # horovodrun starts one rank per slot of a host list, never more
            raise PipeprofError(f"np={np} needs {np} slots but {what} offers {slots}; add hosts or slots")
    else:
        slots, what = local_slots(gpu_count)
        what = f"localhost ({what})"
    if np > slots and not launch.oversubscribe:
        raise PipeprofError(f"np={np} needs {np} slots but {what} offers {slots}; "
                            f"add hosts with -H/--hostfile, or pass --oversubscribe to run anyway")


def find_horovodrun() -> str:
    beside = Path(sys.executable).parent / "horovodrun"
    found = str(beside) if beside.exists() else shutil.which("horovodrun")
    if not found:
        raise PipeprofError("horovodrun not found: install Horovod (see README, scripts/setup.sh)")
    return found


def horovodrun_argv(np: int, launch: LaunchConfig, worker: list[str], horovodrun: str = "horovodrun") -> list[str]:
    """The horovodrun command line that starts ``np`` copies of ``worker``, placed as
    ``topology.assign`` says (a hostfile is read by pipeprof's parser and passed as ``-H``)."""
    argv = [horovodrun, "-np", str(np), "-H", topology.assign(np, launch).hosts_arg]
    argv.append("--gloo" if launch.controller == "gloo" else "--mpi")
    return argv + worker


def own_ranks_argv(np: int, launch: LaunchConfig, worker: list[str]) -> list[str]:
    """``horovodrun_argv`` for pipeprof's own ranks, run by ``launch.hvdrun``: the same launch
    without horovodrun's build probe, which the ranks make themselves."""
    return [sys.executable, "-m", "pipeprof.launch.hvdrun", *horovodrun_argv(np, launch, worker)[1:]]


# In emulation many ranks share a few cores; Horovod's default 1 ms negotiation cycle then
# costs each rank ~12% of a core at np=8 (measured), which a real node's spare cores absorb.
EMULATION_CYCLE_TIME_MS = "5"


# Every rank must reach Gloo's rendezvous within HOROVOD_GLOO_TIMEOUT_SECONDS (30 s by
# default). Importing TensorFlow takes a few CPU-seconds per rank, so 32 ranks on 2 cores
# miss it (measured: rank 0 aborted at np=32 here). Allow this much per rank per local core.
RENDEZVOUS_S_PER_RANK_PER_CORE = 8.0


def rendezvous_timeout_s(local_ranks: int, cores: int) -> int:
    return max(30, math.ceil(RENDEZVOUS_S_PER_RANK_PER_CORE * local_ranks / max(1, cores)))


def worker_env(base: dict[str, str], cwd: str, emulated: bool = False, local_ranks: int = 1) -> dict[str, str]:
    """The one place configuration becomes the workers' environment. ``local_ranks``: the
    most ranks this host will start at once (sets the rendezvous timeout unless given)."""
    env = dict(base)
    if emulated:
        env.setdefault("HOROVOD_CYCLE_TIME", EMULATION_CYCLE_TIME_MS)
    env.setdefault("HOROVOD_GLOO_TIMEOUT_SECONDS",
                   str(rendezvous_timeout_s(local_ranks, topology.usable_cores())))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up chatter out of the log
    env["PYTHONUNBUFFERED"] = "1"  # progress lines arrive as they happen
    # user factories ("module:function") are found from the launch directory, on every rank
    env["PYTHONPATH"] = os.pathsep.join(p for p in (cwd, base.get("PYTHONPATH", "")) if p)
    return env


@dataclass
class LaunchResult:
    returncode: int
    errors: list[str] = field(default_factory=list)  # one line per failing rank
    timed_out: bool = False
    signum: int | None = None  # the stop signal (SIGINT, SIGTERM, SIGHUP) that ended the run
    tail: list[str] = field(default_factory=list)  # the last lines of output

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.interrupted

    def reason(self) -> str:
        if self.signum is not None:
            return f"interrupted by {signals.signal_name(self.signum)}"
        if self.timed_out:
            return "timed out"
        if self.errors:
            return self.errors[0] + (f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else "")
        last = next((line for line in reversed(self.tail) if line.strip()), "no output")
        return f"horovodrun exited with {self.returncode}: {last.strip()[:300]}"


def _next_or_none(lines: queue.Queue[str | None]) -> str | None:
    try:
        return lines.get_nowait()
    except queue.Empty:
        return None


def run(argv: list[str], *, env: dict[str, str], log_path: Path, timeout_s: float,
        on_line: Callable[[str], None] | None = None, grace_s: float = supervise.GRACE_S) -> LaunchResult:
    """Run ``argv`` to the end, teeing its output to ``log_path`` and each line to ``on_line``.

    The command and everything it starts are stopped (SIGTERM, ``grace_s``, SIGKILL) at the
    timeout, which holds however much it prints, and on SIGINT, SIGTERM or SIGHUP, which
    ``result.signum`` then names; it gets SIGTERM should pipeprof die without a chance to."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: queue.Queue[str | None] = queue.Queue()
    result = LaunchResult(returncode=-1)
    with signals.handled(), log_path.open("w") as log:
        log.write("$ " + " ".join(a if len(a) < 200 else a[:40] + "…" for a in argv) + "\n")
        log.flush()
        proc = subprocess.Popen(supervise.dies_with_parent_argv(argv, env.get("PATH")), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                start_new_session=True, errors="replace")
        family = supervise.Family(proc)

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        def take(line: str) -> None:
            log.write(line)
            result.tail = (result.tail + [line.rstrip("\n")])[-40:]
            if ERROR_TAG in line:
                result.errors.append(line.split(ERROR_TAG, 1)[1].strip())
            if on_line is not None:
                on_line(line.rstrip("\n"))

        reader = threading.Thread(target=pump, name="pipeprof-horovodrun-output", daemon=True)
        with signals.on_force(family.kill_now):
            try:
                reader.start()
                deadline = time.monotonic() + timeout_s
                while True:
                    left_s = deadline - time.monotonic()
                    if left_s <= 0:  # checked on every line: a chatty hung run times out too
                        result.timed_out = True
                        break
                    family.refresh()
                    try:
                        line = lines.get(timeout=min(0.25, left_s))
                    except queue.Empty:
                        continue
                    if line is None:
                        break
                    take(line)
            except KeyboardInterrupt as exc:  # signals.Interrupted, or Ctrl-C outside handled()
                result.signum = signals.signum_of(exc)
            finally:
                try:
                    result.returncode = family.stop(grace_s)
                except KeyboardInterrupt as exc:  # the first signal landed while stopping: go on
                    result.signum = signals.signum_of(exc)
                    result.returncode = family.stop(grace_s)
                reader.join(timeout=5)
                while (rest := _next_or_none(lines)) is not None:  # what it said while stopping
                    take(rest)
                log.flush()
    return result
