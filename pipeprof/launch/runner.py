"""Run a launch command to its end under supervision, whatever the launcher.

``run`` starts the command in its own process group, streams its output line by line (to a
log and a callback), collects the ranks' one-line errors, and ends the command and
everything it started on a timeout, a stop signal or pipeprof's own death, without hanging.
Every launcher (``launch.launcher``) runs its command through it, and so do ``pipeprof
watch`` and the script ablation.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pipeprof.launch import signals, supervise
from pipeprof.launch.job import ERROR_TAG


@dataclass
class LaunchResult:
    returncode: int
    errors: list[str] = field(default_factory=list)  # one line per failing rank
    timed_out: bool = False
    signum: int | None = None  # the stop signal (SIGINT, SIGTERM, SIGHUP) that ended the run
    tail: list[str] = field(default_factory=list)  # the last lines of output
    program: str = "the command"  # what ran, as the failure line names it

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
            return self.errors[0] + (
                f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
            )
        last = next((line for line in reversed(self.tail) if line.strip()), "no output")
        return f"{self.program} exited with {self.returncode}: {last.strip()[:300]}"


def _next_or_none(lines: queue.Queue[str | None]) -> str | None:
    try:
        return lines.get_nowait()
    except queue.Empty:
        return None


def run(
    argv: list[str],
    *,
    env: dict[str, str],
    log_path: Path,
    timeout_s: float,
    on_line: Callable[[str], None] | None = None,
    grace_s: float = supervise.GRACE_S,
    program: str | None = None,
) -> LaunchResult:
    """Run ``argv`` to the end, teeing its output to ``log_path`` and each line to ``on_line``.

    The command and everything it starts are stopped (SIGTERM, ``grace_s``, SIGKILL) at the
    timeout, which holds however much it prints, and on SIGINT, SIGTERM or SIGHUP, which
    ``result.signum`` then names; it gets SIGTERM should pipeprof die without a chance to."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    lines: queue.Queue[str | None] = queue.Queue()
    result = LaunchResult(returncode=-1, program=program or Path(argv[0]).name)
    with signals.handled(), log_path.open("w") as log:
        log.write("$ " + " ".join(a if len(a) < 200 else a[:40] + "…" for a in argv) + "\n")
        log.flush()
        proc = subprocess.Popen(
            supervise.dies_with_parent_argv(argv, env.get("PATH")),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
            errors="replace",
        )
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

        reader = threading.Thread(target=pump, name="pipeprof-launch-output", daemon=True)
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
