"""Background work yields the CPU to training.

On Linux, ``setpriority(PRIO_PROCESS, tid)`` sets the nice value of one thread only, so the
samplers, the collector and the dashboard can run at a low priority without touching the
training threads, or the processes the launcher starts.
"""

from __future__ import annotations

import logging
import os
import threading

log = logging.getLogger("pipeprof.priority")
BACKGROUND_NICE = 10


def lower_this_thread(nice: int = BACKGROUND_NICE) -> None:
    """Call from inside a background thread: make it yield to the training threads."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, max(os.getpriority(os.PRIO_PROCESS, tid), nice))
    except (AttributeError, OSError) as exc:  # not Linux, or not permitted: run at normal priority
        log.debug("cannot lower thread priority: %s", exc)
