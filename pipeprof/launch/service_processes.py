"""The tf.data service processes of one launch: a dispatcher and K workers, started before the
launch and stopped when it ends, however it ends.

Each server is its own process group, logs into the run directory, and exits by itself when
this process is gone. Workers start on this host, or over ssh on the hosts named (as horovodrun
reaches its hosts: the same Python at the same path on each).
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeprof.errors import PipeprofError
from pipeprof.launch import supervise

START_TIMEOUT_S = 120.0  # TensorFlow's import on a busy 2-core host takes seconds per process
STOP_GRACE_S = 5.0
MODULE = "pipeprof.data.tfdata_service"
CPU_EVERY_S = 0.5  # how often a worker prints the CPU it has spent (predict's sizing reads it)


def worker_log(log_dir: Path, k: int) -> Path:
    """Where worker ``k`` logs (its CPU over time among its lines), on this host or another."""
    return log_dir / f"worker-{k}.log"


def port_in_use(port: int) -> bool:
    """True when ``port`` cannot be bound on this host (TensorFlow's servers bind every address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError:
            return True
    return False


def server_argv(
    role: str,
    *,
    host: str,
    address_file: str,
    parent: int,
    dispatcher: str = "",
    port: int = 0,
    ssh_host: str = "",
) -> list[str]:
    """The command that starts one server; over ssh on ``ssh_host`` when given."""
    argv = [
        sys.executable,
        "-m",
        MODULE,
        role,
        "--host",
        host,
        "--port",
        str(port),
        "--address-file",
        address_file,
    ]
    if dispatcher:
        argv += ["--dispatcher", dispatcher]
    if role == "worker":  # in its log, which comes back from another host too
        argv += ["--cpu-every", str(CPU_EVERY_S)]
    if not ssh_host:
        return argv + ["--parent", str(parent)]
    # remote: the ssh session is the parent (-1), and it ends when this process does
    argv += ["--parent", "-1"]
    remote = f"cd {shlex.quote(os.getcwd())} && exec " + " ".join(shlex.quote(a) for a in argv)
    return ["ssh", "-o", "BatchMode=yes", ssh_host, remote]


@dataclass
class ServiceProcesses:
    """``with ServiceProcesses(dir, workers=2) as service:`` → ``service.address`` for the ranks."""

    log_dir: Path
    workers: int
    hosts: list[str] = field(default_factory=list)  # worker hosts, round robin; empty: this host
    port: int = 0  # the dispatcher's; 0: any free one
    dispatcher_host: str = "localhost"  # the name the ranks reach the dispatcher by
    address: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)

    def __enter__(self) -> ServiceProcesses:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.port and port_in_use(self.port):
            raise PipeprofError(f"tf.data service: port {self.port} is in use (service.port)")
        self.address = self._serve("dispatcher", self.dispatcher_host, port=self.port)
        for k in range(self.workers):
            ssh_host = self.hosts[k % len(self.hosts)] if self.hosts else ""
            self._serve(
                f"worker-{k}",
                ssh_host or self.dispatcher_host,
                dispatcher=self.address,
                ssh_host=ssh_host,
            )

    def _serve(
        self, name: str, host: str, *, port: int = 0, dispatcher: str = "", ssh_host: str = ""
    ) -> str:
        address_file = self.log_dir / f"{name}.address"
        address_file.unlink(missing_ok=True)
        role = "dispatcher" if name == "dispatcher" else "worker"
        argv = server_argv(
            role,
            host=host,
            address_file=str(address_file),
            parent=os.getpid(),
            dispatcher=dispatcher,
            port=port,
            ssh_host=ssh_host,
        )
        with open(self.log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1"),
            )
        self.procs.append(proc)
        if ssh_host:  # its address file is written on the remote host; the worker registers itself
            return ""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not address_file.exists():
            if proc.poll() is not None:
                raise PipeprofError(
                    f"tf.data service {name} exited with code {proc.returncode} before serving "
                    f"(log: {self.log_dir / f'{name}.log'})"
                )
            if time.monotonic() > deadline:
                raise PipeprofError(
                    f"tf.data service {name} did not start within {START_TIMEOUT_S:.0f} s "
                    f"(log: {self.log_dir / f'{name}.log'})"
                )
            time.sleep(0.1)
        return address_file.read_text().strip()

    def stop(self) -> None:
        """End every server: SIGTERM to its group, SIGKILL after a grace period (all at once)."""
        supervise.stop_together([supervise.Family(p) for p in self.procs], STOP_GRACE_S)
        self.procs.clear()
