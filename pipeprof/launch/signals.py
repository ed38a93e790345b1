"""SIGINT, SIGTERM and SIGHUP end pipeprof the same way: cleanly once, at once the second time.

Ctrl-C, Slurm's scancel and job time limit (SIGTERM), and closing the terminal (SIGHUP) must
all stop every rank and keep what was measured. Inside ``handled()`` the first of these
signals raises ``Interrupted(signum)`` in the main thread; code that owns children catches it
(as ``KeyboardInterrupt``, which it subclasses, so ``except Exception`` never swallows it),
stops them gracefully, and the workflow summarises what it has. The CLI exits 128 + signum.

A second signal does not wait for that: every hard-kill registered with ``on_force`` runs
(children are SIGKILLed) and the process exits 128 + signum on the spot. This is the escape
hatch when a graceful stop hangs; what was written atomically before it stays valid.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = int(signum)

    def __str__(self) -> str:
        return f"interrupted by {signal_name(self.signum)}"

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_code(signum: int) -> int:
    """What a shell reports for a process ended by ``signum`` (130 for Ctrl-C)."""
    return 128 + int(signum)


def signum_of(exc: BaseException) -> int:
    """The signal behind an interruption: a plain KeyboardInterrupt is Ctrl-C."""
    return int(getattr(exc, "signum", signal.SIGINT))


_lock = threading.Lock()
_depth = 0
_previous: dict[int, object] = {}
_received: int | None = None
_force: dict[int, Callable[[], None]] = {}
_next_key = 0


def received() -> int | None:
    """The first stop signal seen inside the current ``handled()``, if any."""
    return _received


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _received
    if _received is None:
        _received = signum
        raise Interrupted(signum)
    force_exit(signum)


def force_exit(signum: int) -> None:
    """Kill every registered child now and leave with 128 + signum (no cleanup, no waiting)."""
    os.write(
        2,
        f"pipeprof: second stop signal ({signal_name(signum)}): killing child processes and exiting now\n".encode(),
    )
    for kill in list(_force.values()):
        try:
            kill()
        except OSError:
            pass  # already gone
    os._exit(exit_code(signum))


@contextmanager
def handled() -> Iterator[None]:
    """Within this block stop signals become ``Interrupted``; nests, and does nothing outside
    the main thread (Python delivers signals there only)."""
    global _depth, _received
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with _lock:
        if _depth == 0:
            _received = None
            for sig in SIGNALS:
                _previous[sig] = signal.signal(sig, _on_signal)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for signum, handler in _previous.items():
                    signal.signal(signum, handler)  # type: ignore[arg-type]
                _previous.clear()
                _received = None


@contextmanager
def on_force(kill: Callable[[], None]) -> Iterator[None]:
    """Register ``kill`` (an immediate SIGKILL of some children) for a forced stop while inside."""
    global _next_key
    with _lock:
        key = _next_key
        _next_key += 1
        _force[key] = kill
    try:
        yield
    finally:
        with _lock:
            _force.pop(key, None)


class Catch:
    """``with caught:`` ends the block on a stop signal instead of passing it on, so the
    caller can keep what was measured; ``signum`` then says which signal it was."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __enter__(self) -> Catch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> bool:
        if isinstance(exc, KeyboardInterrupt):
            self.signum = signum_of(exc)
            return True
        return False

    def outcome(
        self, failure: str | None, signum: int | None, run_dir: object
    ) -> tuple[str | None, int | None]:
        """How a run of launches ended, once the block is left: a caught stop signal ends it
        (keeping a failure already said); else ``failure`` and ``signum`` as they were."""
        if self.signum is None:
            return failure, signum
        return failure or f"{Interrupted(self.signum)} (run directory: {run_dir})", self.signum
