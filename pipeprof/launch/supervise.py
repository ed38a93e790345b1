"""Every process pipeprof starts dies with it: graceful stops, and no orphans.

``Family`` follows one child and everything it starts. The child runs in its own process
group; stopping it sends SIGTERM to that group first (horovodrun then stops the ranks it
started, on every host), waits, then SIGKILLs the group. Horovod's own per-rank supervisors
(safe_shell_exec) call ``setsid``, so ranks are outside that group: the family remembers
every descendant it has seen, and any still alive after the child has gone gets SIGTERM, a
short wait, then SIGKILL. Like horovod's ``safe_shell_exec``, but also covering processes
whose parent died before we looked again.

If pipeprof itself is SIGKILLed no handler runs; ``dies_with_parent_argv`` makes the child
receive SIGTERM then (Linux ``PR_SET_PDEATHSIG``), and ``die_with_parent`` does the same from
inside a Python child.

A rank on another host was started over ssh, whose session sends it no signal when the
launcher stops it: only its output pipes close. ``end_when_output_closes`` makes that the
rank's SIGTERM, whatever the rank is blocked in (a tf.distribute worker waits in a gRPC
collective for a peer that is gone), and its SIGKILL when the SIGTERM is caught and the rank
goes on: MultiWorkerMirroredStrategy installs TensorFlow's preemption notifier, a C handler
that only records a SIGTERM (its ranks then ended only once a collective failed, 13.7 s
after the launcher in one CI run).
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time

import psutil

GRACE_S = 5.0  # horovodrun's own per-rank grace is 5 s (safe_shell_exec)
ORPHAN_GRACE_S = 2.0  # a rank whose launcher has gone: from its SIGTERM to its SIGKILL
STRAGGLER_GRACE_S = 2.0
REFRESH_S = 2.0  # ranks start early; the stop itself looks again first
_PR_SET_PDEATHSIG = 1

# Runs before the real command: ask the kernel for SIGTERM when pipeprof dies, make sure it
# has not died already (the race the man page warns of), then become the command.
_GUARD = (
    "import ctypes,os,signal,sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"
    "os.getppid() == int(sys.argv[1]) or sys.exit(143)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def dies_with_parent_argv(argv: list[str], path: str | None = None) -> list[str]:
    """``argv`` wrapped so the command gets SIGTERM when this process dies, even by SIGKILL.

    Raises FileNotFoundError, as Popen would, when the command cannot be found. The kernel
    signals when the thread that started the child exits: start it from a thread that
    outlives it (``horovod.run`` waits for its child in the calling thread)."""
    if shutil.which(argv[0], path=path) is None:
        raise FileNotFoundError(2, "No such file or directory", argv[0])
    if not sys.platform.startswith("linux"):
        return list(argv)
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *argv]


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Called in a child: receive ``sig`` when the parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


_CLOSED = select.POLLERR | select.POLLHUP


def output_closed(fds: tuple[int, ...] = (1, 2), timeout_ms: int | None = None) -> bool:
    """Whether the reader of any of ``fds`` has gone (a pipe's or socket's far end closed);
    waits up to ``timeout_ms`` for it (None: until it happens). A file, a terminal or a
    closed fd never counts."""
    poller = select.poll()
    for fd in fds:
        try:
            os.fstat(fd)
        except OSError:
            continue  # closed: nothing reads it, nothing to wait for
        poller.register(fd, _CLOSED)
    return any(mask & _CLOSED for _, mask in poller.poll(timeout_ms))  # EINTR: retried


def end_when_output_closes(
    fds: tuple[int, ...] = (1, 2), grace_s: float = ORPHAN_GRACE_S
) -> threading.Thread:
    """Send this process SIGTERM once the reader of its stdout or stderr has gone: the launcher
    that started it over ssh has stopped (a daemon thread, blocked in ``poll`` meanwhile); and
    SIGKILL ``grace_s`` later should it still run (a handler caught the SIGTERM)."""

    def watch() -> None:
        if output_closed(fds):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(grace_s)  # a process that ended takes this thread with it
            os.kill(os.getpid(), signal.SIGKILL)

    thread = threading.Thread(target=watch, name="pipeprof-output-watch", daemon=True)
    thread.start()
    return thread


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(p: psutil.Process, sig: int) -> None:
    try:
        p.send_signal(sig)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


class Family:
    """A child started with ``start_new_session=True`` and every descendant seen so far."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.seen: dict[int, psutil.Process] = {}
        self._next_refresh = 0.0
        self.refresh(force=True)

    def refresh(self, force: bool = False) -> None:
        """Remember the child's current descendants (cheap enough every second, not every line)."""
        now = time.monotonic()
        if not force and now < self._next_refresh:
            return
        self._next_refresh = now + REFRESH_S
        try:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(p.pid, p)
        except psutil.NoSuchProcess:
            pass  # the child is gone; what we saw before stays

    def alive(self) -> list[psutil.Process]:
        return [p for p in self.seen.values() if _alive(p)]

    def _killpg(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is empty

    def stop(self, grace_s: float = GRACE_S, straggler_grace_s: float = STRAGGLER_GRACE_S) -> int:
        """SIGTERM to the child's group, wait ``grace_s``, SIGKILL it; then SIGTERM, wait and
        SIGKILL any descendant left. Returns the child's exit code."""
        if self.proc.poll() is None:
            self.refresh(force=True)
            self._killpg(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.refresh(force=True)
                self._killpg(signal.SIGKILL)
        code = self.proc.wait()
        left = self.alive()
        if left:  # e.g. ranks whose supervisor died with the child: terminate, wait, kill
            self._killpg(signal.SIGTERM)
            for p in left:
                _signal(p, signal.SIGTERM)
            deadline = time.monotonic() + straggler_grace_s
            while left and time.monotonic() < deadline:
                time.sleep(0.05)
                left = [p for p in left if _alive(p)]
            self._killpg(signal.SIGKILL)
            for p in left:
                _signal(p, signal.SIGKILL)
        return code

    def kill_now(self) -> None:
        """SIGKILL the child's group and every descendant seen, without waiting (a forced stop)."""
        self._killpg(signal.SIGKILL)
        for p in list(self.seen.values()):
            _signal(p, signal.SIGKILL)


def stop_together(families: list[Family], grace_s: float = GRACE_S) -> list[int]:
    """Stop several children as ``Family.stop`` does, their grace periods side by side: every
    group gets SIGTERM first, then each is waited for until one shared deadline. Returns their
    exit codes."""
    for family in families:
        if family.proc.poll() is None:
            family.refresh(force=True)
            family._killpg(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    return [family.stop(grace_s=max(0.0, deadline - time.monotonic())) for family in families]
