"""torchrun as the launcher (``launch.launcher = "torchrun"``, ``--launcher torchrun``): PyTorch's
own, for the engines that join by ``torch.distributed`` (train.engine ddp).

On this host alone it starts ``np`` processes as one node (``--standalone``). Across the hosts
named (-H, --hostfile) it starts one torchrun a node, as a user does: each given the node's
rank, its processes (the slots of ``topology.assign``) and the first node's address and port
for torchrun's static rendezvous (``--master-addr``/``--master-port``), a remote one over ssh
(``ssh HOST cd CWD && env VARS python -m pipeprof.launch.torchrun --node -- TORCHRUN...``, the
environment exported by name, as the ssh launcher does). A supervisor process (``python -m
pipeprof.launch.torchrun PLAN -- CMD``) starts them and merges their output; a remote node's
wrapper stops its torchrun when its ssh connection closes.

Each process is told who it is by the variables ``rank.identity`` reads (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE), and none is restarted (``--max-restarts=0``): a rank that
fails ends the launch, and the failure is named from torchrun's own report of its first
failure (its rank and exit code), not retried. A user's command runs as given
(``--no-python``). torchrun is run as ``python -m torch.distributed.run``, the module its
``torchrun`` script calls, from the same Python.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from importlib.util import find_spec
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.launch import hosts, supervise, topology
from pipeprof.launch.launcher import check_joins_by_torch, check_slots
from pipeprof.launch.local import ENDED, ended, wait_all
from pipeprof.launch.ssh import ExportsByName
from pipeprof.scenario import LaunchConfig

# torchrun's report of a failed process: "rank      : 1 (local_rank: 1)", then
# "exitcode  : 3 (pid: 6496)" a line later, under "Root Cause (first observed failure):"
_RANK = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: \d+\)")
_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+) \(pid: \d+\)")
_ROOT = "Root Cause (first observed failure):"
PACKAGE = "torch"  # the Python package torchrun comes with (not the framework's plugin name)
# torchrun's static rendezvous on a first node that is another host: a port of its own a worker
# count, as data_parallel's coordinator takes one, clear of torch's defaults (29400, 29500)
# and of the ddp engine's store (29620-29635)
RENDEZVOUS_PORT = 29660
RUN = (sys.executable, "-m", "torch.distributed.run")


class RootCause:
    """torchrun's report of the first failure it saw, read a line at a time: ``read(line)`` is
    (rank, exit code) once its "Root Cause" entry's last line is read, else None (the entries
    above it are the ranks torchrun ended after that one)."""

    def __init__(self) -> None:
        self._rank: int | None = None
        self._root = False

    def read(self, line: str) -> tuple[int, int] | None:
        if line.strip() == _ROOT:
            self._root, self._rank = True, None
        elif self._root and (m := _RANK.match(line)):
            self._rank = int(m.group(1))
        elif self._root and self._rank is not None and (m := _EXIT.match(line)):
            rank, self._root, self._rank = self._rank, False, None
            return rank, int(m.group(1))
        return None


class TorchrunLauncher(ExportsByName):
    name = "torchrun"
    needs = "PyTorch (torch.distributed.run)"

    def __init__(self) -> None:
        self._cause = RootCause()
        self._hosts_checked = hosts.CheckedOnce()
        self._exported = []

    @staticmethod
    def available() -> bool:
        return find_spec(PACKAGE) is not None

    def check(self, np: int, launch: LaunchConfig, gpu_count: int, distribution: Any) -> None:
        check_joins_by_torch(self.name, distribution)
        if not self.available():
            raise PipeprofError(
                "--launcher torchrun needs PyTorch, whose torch.distributed.run is torchrun: "
                "pip install 'pipeprof[torch]'"
            )
        check_slots(np, launch, gpu_count)
        self._hosts_checked(np, launch)

    def ranks_argv(self, np: int, launch: LaunchConfig, rank_cmd: list[str]) -> list[str]:
        return self.script_argv(np, launch, rank_cmd)

    def script_argv(self, np: int, launch: LaunchConfig, cmd: list[str]) -> list[str]:
        nodes = list(topology.assign(np, launch).ranks_by_host.items())
        if len(nodes) == 1 and topology.is_this_host(nodes[0][0]):
            return [
                *RUN, "--standalone", "--nnodes=1", f"--nproc-per-node={np}",
                "--max-restarts=0", "--no-python", *cmd,
            ]  # fmt: skip
        from pipeprof.distributions.ddp import first_host_endpoint

        plan = {
            "nodes": [[host, count] for host, count in nodes],
            "master": list(first_host_endpoint(np, launch, RENDEZVOUS_PORT)),
            "cwd": os.getcwd(),
            "exported": self._exported,
        }
        return [sys.executable, "-m", "pipeprof.launch.torchrun", json.dumps(plan), "--", *cmd]

    def rank_exit(self, line: str) -> tuple[int, int] | None:
        """A rank's failure, as (rank, exit code): across nodes, the supervisor's line for it
        (``main``); on one node, torchrun's own report of its first failure (``RootCause``)."""
        if (said := ended(self.name, line)) is not None:
            return said
        return self._cause.read(line)


def node_argv(plan: dict[str, Any], node: int, cmd: list[str]) -> list[str]:
    """The torchrun of node ``node`` of the plan: its processes, rank among the nodes, and
    the first node's rendezvous."""
    count = plan["nodes"][node][1]
    addr, port = plan["master"]
    return [
        *RUN, f"--nnodes={len(plan['nodes'])}", f"--node-rank={node}",
        f"--nproc-per-node={count}", f"--master-addr={addr}", f"--master-port={port}",
        "--max-restarts=0", "--no-python", *cmd,
    ]  # fmt: skip


def main(argv: list[str]) -> int:
    """Start a torchrun on each node of the plan, a remote one over ssh, and wait for them: the
    first to fail ends the others (its ssh closed, a remote node's wrapper stops its torchrun),
    and the launch's code is the first failure's.

    Each node's output is passed on with its host first (``[HOST] ``), and read here: every
    torchrun reports the first failure it saw among its own processes, so the node that
    failed first is known only here. At the end each failed node's ranks are said as the
    launcher's rank lines (``local.ENDED``), the first node to fail first; a node that
    reported none (its ssh or torchrun killed) is said by its first rank and its exit code."""
    from pipeprof.launch.ssh import exported_env, remote_argv

    if argv[:1] == ["--node"]:
        return node_main(argv[argv.index("--") + 1 :])
    plan, cmd = json.loads(argv[0]), argv[argv.index("--") + 1 :]
    procs: list[subprocess.Popen] = []
    reported: list[list[tuple[int, int]]] = []
    relays = []
    for node, (host, _) in enumerate(plan["nodes"]):
        run = node_argv(plan, node, cmd)
        if not topology.is_this_host(host):
            wrapped = [sys.executable, "-m", "pipeprof.launch.torchrun", "--node", "--", *run]
            env = exported_env(plan["exported"])
            run = remote_argv(host, plan["cwd"], env, wrapped)
        proc = subprocess.Popen(
            run,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        procs.append(proc)
        reported.append([])
        relay = threading.Thread(
            target=_relay, args=(proc, host, reported[-1]), name="pipeprof-relay", daemon=True
        )
        relay.start()
        relays.append(relay)
    order: list[int] = []
    code = wait_all(procs, launcher="torchrun", unit="node", order=order)
    for relay in relays:
        relay.join(timeout=10)
    first_rank = [sum(n for _, n in plan["nodes"][:i]) for i in range(len(plan["nodes"]))]
    for node in order:
        if procs[node].returncode in (0, None):
            continue
        for rank, rank_code in reported[node] or [(first_rank[node], procs[node].returncode)]:
            said = ENDED.format(launcher="torchrun", unit="rank", rank=rank, code=rank_code)
            print(said, flush=True)
    return code


def _relay(proc: subprocess.Popen, host: str, reported: list[tuple[int, int]]) -> None:
    """A node's output, passed on with its host first; its torchrun's failures kept."""
    cause = RootCause()
    assert proc.stdout is not None
    for line in proc.stdout:
        print(f"[{host}] {line}", end="" if line.endswith("\n") else "\n", flush=True)
        if (found := cause.read(line.rstrip("\n"))) is not None:
            reported.append(found)


def node_main(run: list[str]) -> int:
    """A remote node's torchrun, stopped once the ssh connection that started it has closed
    (the launch ended elsewhere): SIGTERM to it, which torchrun passes to its processes, then
    SIGKILL to it and to every process it started that is left (each in a session of its
    own, so not in its group)."""
    proc = subprocess.Popen(run, start_new_session=True)
    family = supervise.Family(proc)

    def watch() -> None:
        if supervise.output_closed((1, 2)):
            family.stop()

    def stop(signum: int, _frame: Any) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    threading.Thread(target=watch, name="pipeprof-output-watch", daemon=True).start()
    while proc.poll() is None:
        family.refresh()  # the processes torchrun started, known before it could lose them
        time.sleep(0.5)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
