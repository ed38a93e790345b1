"""What runs on a Dask worker for ``--launcher dask`` (``launch.dask``): the task of one rank,
which starts the rank's command as a process of its own, passes its output back as events
and stops it when told. Its own module, as ``srun_rank`` is srun's: what a worker imports to
run it, apart from the supervisor's side (its cluster, its client, the workers' choice)."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import threading
import time
from typing import Any

from pipeprof.launch import supervise
from pipeprof.launch.local import STOP_WAIT_S

POLL_S = 0.5  # how often a task looks for the stop, and the supervisor for lost workers
LINES_S = 0.2  # a task sends its process's output at least this often


def nanny_settings() -> dict[str, str]:
    """What a nanny sets in its worker's environment, and a LocalCluster's nannies in the
    process that holds them (``distributed.nanny.pre-spawn-environ``: one OpenMP, MKL and
    OpenBLAS thread, ...; and PYTHONHASHSEED, 6640 where unset)."""
    import dask.config

    pre = dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {}
    settings = {str(k): str(v) for k, v in pre.items()}
    if settings.get("PYTHONHASHSEED") in (None, "0"):
        settings["PYTHONHASHSEED"] = "6640"
    return settings


def without_nanny_settings(env: dict[str, str], keep: Any = ()) -> dict[str, str]:
    """``env`` less each variable a nanny set (its value the nanny's), but those in ``keep``."""
    nanny = nanny_settings()
    return {k: v for k, v in env.items() if k in keep or nanny.get(k) != v}


def rank_task(
    cmd: list[str], cwd: str, env: dict[str, str], rank: int, topic: str, stop: str
) -> dict[str, Any]:
    """One rank, run by a worker's task thread: ``cmd`` as a process of its own, in the
    worker's environment less its nanny's settings, plus ``env``; its output sent as events
    on ``topic`` (``{"rank", "host", "lines"}``). It is stopped (SIGTERM, ``STOP_WAIT_S``,
    SIGKILL to it and what it started) once the Event ``stop`` is set, once this task is
    cancelled (its launch's client gone), or should anything here fail; it gets SIGTERM should
    the worker die. Returns the rank, its host and its exit code."""
    from distributed import Event, get_worker
    from distributed.worker import thread_state

    worker, host, key = get_worker(), socket.gethostname(), thread_state.key
    proc = subprocess.Popen(
        supervise.dies_with_parent_argv(cmd, env.get("PATH")),
        cwd=cwd,
        env={**without_nanny_settings(dict(os.environ), keep=env), **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    family = supervise.Family(proc)
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    def send(batch: list[str]) -> None:
        if batch:
            worker.log_event(topic, {"rank": rank, "host": host, "lines": batch})

    def cancelled() -> bool:
        task = worker.state.tasks.get(key)
        return task is None or task.state in ("cancelled", "released", "forgotten")

    threading.Thread(target=pump, name="pipeprof-rank-output", daemon=True).start()
    batch: list[str] = []
    sent = looked = time.monotonic()
    exited_at = None
    try:
        stopped = Event(stop)
        while True:
            try:
                line = lines.get(timeout=LINES_S)
            except queue.Empty:
                line = ""
            if line is None:
                break
            if line:
                batch.append(line)
            now = time.monotonic()
            if now - sent >= LINES_S or len(batch) >= 200:
                send(batch)
                batch, sent = [], now
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > STOP_WAIT_S:
                break  # exited, and what it started still holds its output open
            if now - looked >= POLL_S:
                looked = now
                family.refresh()
                if proc.poll() is None and (stopped.is_set() or cancelled()):
                    family.stop(grace_s=STOP_WAIT_S)
    finally:
        code = family.stop(grace_s=STOP_WAIT_S)
    send(batch)
    return {"rank": rank, "host": host, "code": code}
