"""Two runs side by side that take turns on the machine, so its drift hits both alike.

This VM's speed drifts by ±10% over tens of seconds. Two runs made one after the other (even
in ABBA rounds) differ by that much, ten times the 1-2% effects the overhead benchmarks
look for. Here both sides start together and take turns: while one runs, every process of
the other (its launcher, horovodrun, its ranks) is stopped with SIGSTOP; they swap every
``slice_s`` seconds. Each side keeps its own clock-time windows, and only the steps that lie
wholly inside one of its windows count (a step that spans a pause would carry the other
side's time). Adjacent windows are a second apart, so whatever the machine does over tens of
seconds lands on both sides in equal measure; what differs is what the sides do.

Only while both sides are alive are windows kept: the side that outlives the other runs on
alone, uncounted, to its end.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy
import psutil

from benchmarks import harness


@dataclass
class Side:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    terminal: bool = False  # under a pseudo-terminal (a live dashboard really redraws)
    cwd: str | None = None
    on_resume: Callable[[Side], None] | None = None  # called each time the side starts a window
    on_pause: Callable[[Side], None] | None = None  # and each time its window is about to end
    windows: list[tuple[float, float]] = field(
        default_factory=list
    )  # time.time() of each counted window
    solo: list[tuple[float, float]] = field(
        default_factory=list
    )  # running alone, after the other side ended
    pid: int = 0
    returncode: int | None = None
    output: bytes = b""

    @property
    def running_s(self) -> float:
        """Seconds this side ran (not stopped), counted or not."""
        return sum(b - a for a, b in self.windows + self.solo)


class _Running:
    def __init__(self, side: Side) -> None:
        self.side = side
        self.master = None
        if side.terminal:
            self.master, slave = pty.openpty()
            self.proc = subprocess.Popen(
                side.argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=side.env,
                cwd=side.cwd,
                close_fds=True,
            )
            os.close(slave)
        else:
            self.proc = subprocess.Popen(
                side.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=side.env,
                cwd=side.cwd,
            )
        side.pid = self.proc.pid
        if self.master is not None:
            self.fd = self.master
        else:
            assert self.proc.stdout is not None  # stdout=PIPE
            self.fd = self.proc.stdout.fileno()
        self.out = bytearray()
        self.family: dict[int, psutil.Process] = {}

    def tree(self) -> list[psutil.Process]:
        """The side's processes: those below it now, and every one seen before that is still
        alive (a helper whose parent exits is re-parented to init, out of the tree, and must
        still be stopped and resumed with its side: left stopped, it would hold the side's
        output open for ever)."""
        try:
            top = psutil.Process(self.proc.pid)
            for p in [top, *top.children(recursive=True)]:
                self.family.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass
        return [p for p in self.family.values() if p.is_running()]

    def signal_tree(self, sig: int) -> None:
        # twice: a child born between the listing and its parent's stop is caught the second time
        for _ in range(2):
            for p in self.tree():
                try:
                    p.send_signal(sig)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass

    def drain(self) -> bool:
        """Read what is there; False once the output is closed."""
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            return False
        if not chunk:
            return False
        self.out += chunk
        return True

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def run_sliced(a: Side, b: Side, slice_s: float = 1.0, timeout_s: float = 1800.0) -> None:
    """Run both sides to their ends, taking turns every ``slice_s`` seconds while both live;
    fills each side's ``windows``, ``returncode`` and ``output``."""
    sides = [_Running(a), _Running(b)]
    sides[1].signal_tree(signal.SIGSTOP)
    active, solo = 0, None
    start: float | None = time.time()
    if a.on_resume:
        a.on_resume(a)
    deadline = time.monotonic() + timeout_s
    open_fds = {r.fd: r for r in sides}
    try:
        while any(r.alive for r in sides) or open_fds:
            ready, _, _ = select.select(list(open_fds), [], [], 0.02)
            for fd in ready:
                if not open_fds[fd].drain():
                    del open_fds[fd]
            now = time.time()
            both = all(r.alive for r in sides)
            cur, other = sides[active], sides[1 - active]
            if start is not None and (not both or now - start >= slice_s):
                if both:  # swap: the window just ended counts for the side that had it
                    if cur.side.on_pause:
                        cur.side.on_pause(cur.side)
                    cur.signal_tree(signal.SIGSTOP)
                    cur.side.windows.append((start, time.time()))
                    if other.side.on_resume:
                        other.side.on_resume(other.side)
                    other.signal_tree(signal.SIGCONT)
                    active, start = 1 - active, time.time()
                else:  # one side ended: its window (if it was the active one) ends with it
                    if not cur.alive:
                        cur.side.windows.append((start, now))
                    if cur.side.on_pause:
                        cur.side.on_pause(cur.side)
                    other.signal_tree(signal.SIGCONT)  # the survivor runs on alone, uncounted
                    survivor = other if other.alive else cur
                    solo, start = (survivor, now), None
            if solo is not None and not solo[0].alive:
                solo[0].side.solo.append((solo[1], time.time()))
                solo = None
            if not any(r.alive for r in sides) and not ready:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the sliced runs took over {timeout_s:.0f} s")
    finally:  # nothing of either side is left stopped, and nothing at all after a time-out
        for r in sides:
            r.signal_tree(signal.SIGCONT)
            if time.monotonic() > deadline:
                r.signal_tree(signal.SIGKILL)
    for r in sides:
        r.side.returncode = r.proc.wait()
        r.side.output = bytes(r.out)
        if r.master is not None:
            os.close(r.master)


def inside(
    windows: list[tuple[float, float]], start_s: numpy.ndarray, end_s: numpy.ndarray
) -> numpy.ndarray:
    """Which intervals [start, end] (time.time() seconds) lie wholly inside one window."""
    mask = numpy.zeros(len(start_s), dtype=bool)
    for w0, w1 in windows:
        mask |= (start_s >= w0) & (end_s <= w1)
    return mask


def sliced_rate(
    windows: list[tuple[float, float]],
    end_s: numpy.ndarray,
    step_ms: numpy.ndarray,
    batch: numpy.ndarray | float,
) -> tuple[float, int]:
    """Samples per second of the steps inside the windows, and how many steps that is."""
    end_s, step_ms = numpy.asarray(end_s, float), numpy.asarray(step_ms, float)
    mask = inside(windows, end_s - step_ms / 1e3, end_s)
    batch = numpy.broadcast_to(numpy.asarray(batch, float), end_s.shape)
    seconds = step_ms[mask].sum() / 1e3
    return (float(batch[mask].sum() / seconds) if seconds > 0 else float("nan")), int(mask.sum())


def check(side: Side) -> None:
    """If the side failed, a one-line ``harness.Failed`` (its output kept in a log file)."""
    if side.returncode != 0:
        raise harness.failure(
            side.name,
            side.returncode,
            side.output.decode(errors="replace"),
            shown=" ".join(side.argv),
        )


def run_rate(out, variant: str, windows: list[tuple[float, float]]) -> tuple[float, int]:
    """A pipeprof run directory's samples/s for one variant, over its measured steps inside the
    side's windows, and how many steps that is."""
    steps = harness.measured_steps(out, variant)
    return sliced_rate(windows, steps["end_unix_s"], steps["step_time_ms"], steps["batch_size"])


def print_medians(ratios: dict[str, list[float]], target: float, what: str = "ON/OFF") -> None:
    """The verdict of a sliced benchmark: the median of the per-round ratios, per variant."""
    import statistics

    print(f"  {'variant':<10} {'median ' + what:>16}  range            target >= {target:g}")
    for v, rs in ratios.items():
        m = statistics.median(rs)
        print(
            f"  {v:<10} {m:16.3f}  {min(rs):.3f}..{max(rs):.3f}   {'PASS' if m >= target else 'FAIL'} "
            f"({len(rs)} rounds)"
        )
