"""Dask as the launcher (``launch.launcher = "dask"``, ``--launcher dask``): each rank a task on
a worker of a Dask cluster, as dask_pytorch_ddp's ``dispatch.run`` starts them, built on
``dask.distributed`` itself (dask_pytorch_ddp has had no release since 2021, and its results
module imports what distributed 2025.4 removed). For the engines that join by
``torch.distributed`` (train.engine ddp).

By default each launch gets a ``LocalCluster`` on this host, one worker process of one thread a
rank, closed when the launch ends. With ``--scheduler ADDR`` (``launch.scheduler``) the ranks
run on the workers of a cluster that is already running, which is left as it was found: its
workers are taken in the order of their host names (a host's ranks together, as
dask_pytorch_ddp groups them), and where any worker offers a ``GPU`` resource only those are
taken, a rank each, the task asking for one.

A supervisor process (``python -m pipeprof.launch.dask PLAN -- CMD``, what the runner
starts) joins the cluster, picks the workers, and submits one task a rank
(``dask_rank.rank_task``). The task starts the rank's command as a process of its own on its worker's host, told who it is by the
variables ``init_process_group`` and ``rank.identity`` read: MASTER_ADDR (rank 0's worker's
address), MASTER_PORT (a port that worker found free, not dask_pytorch_ddp's fixed 23456),
RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE; the variables a nanny sets for its worker
(``distributed.nanny.pre-spawn-environ``: one OpenMP thread, ...) are not passed on unless
the launch sets them. The process's output comes back as Dask events, each line led by its
host, and is passed on. The process gets SIGTERM should its worker die (``supervise``).

The first rank to fail ends the others (a Dask ``Event`` each task polls), and what ended it is
said as the other launchers say it: its exit code (``local.ENDED``), or, for a worker lost
mid-run, one line with the rank, its host, the worker and why (killed, over its memory limit,
closed by its nanny), from the scheduler's events and this host's nanny log. A retried task
never runs: the LocalCluster allows no failures, and a task stays on the worker it was given.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sys
import threading
import time
import uuid
from importlib.util import find_spec
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.launch import signals
from pipeprof.launch.dask_rank import LINES_S, POLL_S, rank_task
from pipeprof.launch.job import ERROR_TAG
from pipeprof.launch.launcher import check_joins_by_torch, check_slots
from pipeprof.launch.local import ENDED, IDENTITY, STOP_WAIT_S, ended
from pipeprof.launch.ssh import ExportsByName, exported_env
from pipeprof.scenario import LaunchConfig

PACKAGE = "distributed"  # dask.distributed, the package that has Client and LocalCluster
CONNECT_S = 30  # the wait to reach a --scheduler, and for a LocalCluster's workers
GPU = "GPU"  # the resource a worker's GPU is (dask worker --resources "GPU=1")


class DaskLauncher(ExportsByName):
    name = "dask"
    needs = "Dask (dask.distributed)"
    places_ranks = True  # on its cluster's workers (plugins.places_ranks)

    def __init__(self) -> None:
        self._exported = []
        self._gpus = 0

    @staticmethod
    def available() -> bool:
        return find_spec(PACKAGE) is not None

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        check_joins_by_torch(self.name, distribution)
        if not self.available():
            raise PipeprofError(
                "--launcher dask needs dask.distributed: pip install 'pipeprof[dask]'"
            )
        if launch.hosts or launch.hostfile:
            raise PipeprofError(
                "--launcher dask runs its ranks on a Dask cluster's workers: drop -H/--hostfile "
                "and start `dask worker` on those hosts, then pass --scheduler ADDR"
            )
        if not launch.scheduler:  # a LocalCluster here: a worker a rank, on this host's slots
            check_slots(np, launch, gpu_count)
        self._gpus = gpu_count

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        return self.script_argv(np, launch, rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        plan = {
            "np": np,
            "scheduler": launch.scheduler,
            "cwd": os.getcwd(),
            "exported": self._exported,
            "gpus": self._gpus,
        }
        return [sys.executable, "-m", "pipeprof.launch.dask", json.dumps(plan), "--", *cmd]

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        return ended(self.name, line)


# -- the supervisor -------------------------------------------------------------------------


class NannyLog(logging.Handler):
    """What this process's nannies (a LocalCluster's) log about their worker processes' ends:
    pid -> "killed by SIGKILL" or "its process exited with 1"."""

    _END = re.compile(
        r"Worker process (\d+) (?:was killed by signal (\d+)|was killed by (unknown) signal|"
        r"exited with status (-?\d+))"
    )

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.ends: dict[int, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        m = self._END.search(record.getMessage())
        if m is None:
            return
        pid, signum, unknown, status = m.groups()
        if signum:
            self.ends[int(pid)] = f"killed by {signals.signal_name(int(signum))}"
        elif unknown:
            self.ends[int(pid)] = "killed by a signal its nanny could not tell"
        else:
            self.ends[int(pid)] = f"its process exited with {status}"


class Output:
    """The launch's lines, each written whole under one lock: the ranks' (from the client's
    event thread, until ``close``) and the supervisor's own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = True

    def line(self, text: str) -> None:
        with self._lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def event(self, event: tuple[float, dict[str, Any]]) -> None:
        _, msg = event
        with self._lock:
            if not self._open:
                return
            for text in msg.get("lines", ()):
                sys.stdout.write(f"[{msg.get('host')}] {text}\n")
            sys.stdout.flush()

    def close(self) -> None:
        with self._lock:
            self._open = False


def why_lost(client: Any, address: str, pid: int | None, since: float, nanny_log: NannyLog) -> str:
    """Why a worker left, from what the scheduler recorded since ``since`` (its clock, a Unix
    time) and this host's nannies logged."""
    for at, msg in client.get_events("worker-restart-memory"):
        if at >= since and isinstance(msg, dict) and msg.get("worker") == address:
            rss = msg.get("rss")
            used = f" ({rss / 2**20:.0f} MiB)" if isinstance(rss, (int, float)) else ""
            return f"over its memory limit{used}: its nanny restarted it"
    for at, msg in client.get_events(address):
        if at >= since and isinstance(msg, dict) and msg.get("action") == "closing-worker":
            return f"closed: {msg.get('reason', 'no reason given')}"
    time.sleep(POLL_S)  # the nanny logs its worker's end as it sees it
    if pid is not None and pid in nanny_log.ends:
        return nanny_log.ends[pid]
    return "its connection to the scheduler broke: killed, or its host or link lost"


def pick_workers(
    client: Any, np: int, where: str, local_gpus: bool
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """``np`` workers, in the order of their hosts' names (a host's together), each with its
    host name, pid, local rank and whether it gives its rank a GPU: on a running cluster, only
    those offering a GPU resource where any does; on this host's LocalCluster, where this host
    has GPUs (each worker then offers one)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    names = client.run(socket.gethostname)
    pids = client.run(os.getpid)
    offering = [a for a, w in workers.items() if (w.get("resources") or {}).get(GPU)]
    usable = offering or list(workers)
    if len(usable) < np:
        what = f"offers {len(usable)} with a GPU resource" if offering else f"has {len(usable)}"
        raise PipeprofError(f"np={np} needs {np} Dask workers, a rank each; {where} {what}")
    chosen = sorted(usable, key=lambda a: (names.get(a, ""), a))[:np]
    info: dict[str, dict[str, Any]] = {}
    for a in chosen:
        same = [b for b in chosen if names.get(b) == names.get(a)]
        info[a] = {
            "host": names.get(a, workers[a].get("host", a)),
            "address_host": workers[a].get("host", ""),
            "pid": pids.get(a),
            "local_rank": same.index(a),
            "local_size": len(same),
            "gpu": bool(offering) or local_gpus,
        }
    return chosen, info


def main(argv: list[str]) -> int:
    """Run the plan's ranks as tasks of a Dask cluster and wait for them: a LocalCluster of
    ``np`` workers started here and closed after, or the cluster at ``scheduler``, left as it
    was. The first rank to fail, or to lose its worker, ends the others; the launch's code is
    the first failure's (1 for a lost worker). A stop signal here stops every rank first."""
    plan, cmd = json.loads(argv[0]), argv[argv.index("--") + 1 :]
    env = exported_env(plan["exported"])  # before a LocalCluster's nannies set theirs here
    with signals.handled():
        try:
            return launch(plan, cmd, env)
        except KeyboardInterrupt as exc:  # the runner's stop: every rank was told to stop
            return signals.exit_code(signals.signum_of(exc))


def launch(plan: dict[str, Any], cmd: list[str], env: dict[str, str]) -> int:
    from distributed import Client, LocalCluster

    np, scheduler = int(plan["np"]), plan["scheduler"]
    where = f"the scheduler at {scheduler}" if scheduler else "this host's LocalCluster"
    out = Output()
    nanny_log = NannyLog()
    nanny = logging.getLogger("distributed.nanny")
    nanny.addHandler(nanny_log)
    nanny.setLevel(logging.INFO)  # its INFO lines reach the handler, not the log
    nanny.propagate = False
    with contextlib.ExitStack() as stack:
        try:
            if scheduler:
                client = stack.enter_context(Client(scheduler, timeout=CONNECT_S))
            else:
                gpu = {"resources": {GPU: 1}} if plan.get("gpus") else {}
                cluster = stack.enter_context(
                    LocalCluster(
                        n_workers=np,
                        threads_per_worker=1,
                        processes=True,
                        dashboard_address=None,
                        silence_logs=logging.CRITICAL,
                        scheduler_kwargs={"allowed_failures": 0},  # a lost rank never runs again
                        **gpu,
                    )
                )
                client = stack.enter_context(Client(cluster, timeout=CONNECT_S))
            client.wait_for_workers(1 if scheduler else np, timeout=CONNECT_S)
            chosen, info = pick_workers(client, np, where, bool(plan.get("gpus")) and not scheduler)
        except PipeprofError as exc:
            out.line(f"{ERROR_TAG} {exc}")
            return 2
        except (OSError, TimeoutError, RuntimeError) as exc:
            out.line(f"{ERROR_TAG} {where}: {type(exc).__name__}: {str(exc)[:300]}")
            return 1
        code = run_ranks(client, cmd, plan["cwd"], env, chosen, info, nanny_log, out)
    return code


def run_ranks(
    client: Any,
    cmd: list[str],
    cwd: str,
    env: dict[str, str],
    chosen: list[str],
    info: dict[str, dict[str, Any]],
    nanny_log: NannyLog,
    out: Output,
) -> int:
    """A rank on each of the ``chosen`` workers, their output passed on, until each has ended
    or one failed (the others then stopped); returns the launch's exit code. However it ends,
    a rank still running is told to stop."""
    from distributed import Event
    from distributed.scheduler import KilledWorker

    np, launch_id, since = len(chosen), uuid.uuid4().hex[:12], time.time()
    topic, stop_name = f"pipeprof-output-{launch_id}", f"pipeprof-stop-{launch_id}"
    first = info[chosen[0]]
    from pipeprof.distributions.ddp import free_port

    port = client.run(free_port, "0.0.0.0", workers=[chosen[0]])[chosen[0]]
    client.subscribe_topic(topic, out.event)
    stop = Event(stop_name, client=client)
    futures = []
    failed: list[tuple[int, int | None]] = []  # (rank, exit code; None: its worker lost)
    running = set(range(np))
    try:
        for rank, address in enumerate(chosen):
            me = info[address]
            who = dict(zip(IDENTITY, map(str, (rank, np, me["local_rank"], me["local_size"]))))
            given = {**env, **who, "MASTER_ADDR": first["address_host"], "MASTER_PORT": str(port)}
            futures.append(
                client.submit(
                    rank_task,
                    cmd,
                    cwd,
                    given,
                    rank,
                    topic,
                    stop_name,
                    key=f"pipeprof-rank{rank}-{launch_id}",
                    workers=[address],
                    allow_other_workers=False,
                    pure=False,
                    resources={GPU: 1} if me["gpu"] else None,
                )  # fmt: skip
            )
        stopping_since = None
        while running:
            present = client.scheduler_info(n_workers=-1)["workers"]
            for rank in sorted(running):
                end = _ended(futures[rank], chosen[rank] in present, KilledWorker)
                if end is None:
                    continue
                running.discard(rank)
                rank_code, said = end
                if said:  # the task itself failed: said now
                    out.line(f"{ERROR_TAG} rank {rank} on {info[chosen[rank]]['host']}: its "
                             f"Dask task ended: {said}"[:400])  # fmt: skip
                if rank_code != 0:
                    failed.append((rank, rank_code))
            if failed and stopping_since is None:
                stopping_since = time.monotonic()
                stop.set()
            if stopping_since is not None and time.monotonic() - stopping_since > STOP_WAIT_S + 10:
                break  # what did not end by now is stopped by its worker or the cluster's close
            if running:
                time.sleep(POLL_S)
    finally:
        if running:
            stop.set()
        time.sleep(2 * LINES_S)  # the output's last events
        out.close()
    code = 0
    for rank, rank_code in failed:
        address = chosen[rank]
        if rank_code is None:
            why = why_lost(client, address, info[address]["pid"], since, nanny_log)
            out.line(f"{ERROR_TAG} rank {rank} on {info[address]['host']}: its Dask worker "
                     f"{address} was lost mid-run ({why})")  # fmt: skip
        else:
            out.line(ENDED.format(launcher="dask", unit="rank", rank=rank, code=rank_code))
        code = code or (rank_code if rank_code is not None and 0 < rank_code < 256 else 1)
    if not running:
        stop.clear()  # every rank has ended: the scheduler forgets the Event
    return code


def _ended(future: Any, worker_present: bool, killed: type) -> tuple[int | None, str] | None:
    """None while a rank's task runs; else its exit code (None: its worker lost) and, for a
    task that itself failed, what to say of it."""
    if future.status == "finished":
        return int(future.result()["code"]), ""
    if future.status == "error":
        exc = future.exception()
        return (None, "") if isinstance(exc, killed) else (1, f"{type(exc).__name__}: {exc}")
    if not worker_present:  # its worker gone: the task waits for none other
        future.cancel()
        return None, ""
    if future.status in ("cancelled", "lost"):
        return 1, f"its future was {future.status}"
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
