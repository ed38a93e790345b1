"""PyTorch's DistributedDataParallel (``train.engine = "ddp"``), with plain PyTorch: one process
a replica, joined by ``torch.distributed`` (Gloo on the CPU, NCCL on GPUs), the model wrapped
in ``DistributedDataParallel``, so its gradients are averaged during ``backward``. The only
module of the rank side that starts ``torch.distributed``.

Its rendezvous is a TCP store on the first host (``MASTER_ADDR``/``MASTER_PORT``, as torchrun
and dask_pytorch_ddp give it): on this host, a port the launching process finds free for each
launch (on the loopback where every rank is here); on another host, a port of its own a worker
count, as data_parallel's coordinator takes one. A script started by the user's own launcher
brings its own (``env://``)."""

from __future__ import annotations

import datetime
import os
import socket
import sys
from typing import Any, ClassVar

from pipeprof.distributions import PerProcess
from pipeprof.errors import PipeprofError
from pipeprof.rank.identity import identity

JOIN_TIMEOUT_S = 300  # the ranks' wait for each other at the store and in a collective
STORE_PORT = 29620  # the store's on a first host that is not this one: + np % 16 (clear of
# torch's own defaults, 29400 and 29500)


def first_host_endpoint(np: int, launch: Any, base_port: int) -> tuple[str, int]:
    """Where a launch's processes meet, on its first host (``topology.assign``): the loopback
    and a free port where every process is on this host; this host's name (its hostname where
    the list says it by a loopback name) and a port free on every interface where it is the
    first of several; else the first host and ``base_port`` + np % 16, a port a worker count."""
    from pipeprof.launch import topology

    used = list(topology.assign(np, launch).ranks_by_host)
    first = used[0]
    if not topology.is_this_host(first):
        return first, base_port + np % 16
    if len(used) == 1:
        return "127.0.0.1", free_port()
    if first in ("localhost", "::1") or first.startswith("127."):
        first = socket.gethostname()
    return first, free_port("0.0.0.0")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now, on ``host`` (the store's: taken again at once)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def script_threads(local_ranks: int) -> None:
    """A script's PyTorch on the CPU: each rank its share of the host's cores for its ops, as
    pipeprof's own ranks get it, unless the user set ``OMP_NUM_THREADS``. Left alone, each
    rank's ops take every core: 2 ranks on 2 cores ran 4 threads, and examples/petnames_ddp.py's
    step took 2.3 to 4.4 times as long at half the batch (2026-11-29). torchrun sets one
    thread a rank for the same reason."""
    if "OMP_NUM_THREADS" in os.environ:
        return
    from pipeprof.launch import topology

    threads = topology.cores_per_rank(local_ranks)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for the processes the script starts
    torch = sys.modules.get("torch")
    if torch is not None:  # imported before pipeprof.torch: its pool is sized already
        torch.set_num_threads(threads)


class DDP(PerProcess):
    name = "ddp"
    frameworks: ClassVar[tuple[str, ...]] = ("torch",)
    launchers: ClassVar[tuple[str, ...]] = ("local", "ssh", "torchrun", "dask")
    started_by: ClassVar[str] = "torch.distributed.init_process_group()"
    stack: ClassVar[str] = "PyTorch"
    # the Keras backend whose fit it measures, in one process (frameworks.keras3_script)
    keras_backend: ClassVar[str] = "torch"

    @staticmethod
    def installed() -> bool:
        from pipeprof.frameworks.torch import Torch

        return Torch.installed()

    @staticmethod
    def rendezvous(np: int, launch: Any, run_dir: str) -> dict[str, Any]:
        """The store's address for one launch, on its first host (``first_host_endpoint``);
        none under Dask, which places the ranks itself and gives each MASTER_ADDR and
        MASTER_PORT (``launch.dask``)."""
        from pipeprof import plugins

        if plugins.places_ranks(launch.launcher):
            return {}
        addr, port = first_host_endpoint(np, launch, STORE_PORT)
        return {"addr": addr, "port": port}

    @staticmethod
    def prepare_script(np: int, rendezvous: dict[str, Any]) -> None:
        """A user's script under ``compare --engine ddp -- CMD``: the variables its own
        ``init_process_group()`` reads (``env://``, torchrun's), where its launch gave them."""
        if rendezvous.get("addr"):
            os.environ.setdefault("MASTER_ADDR", str(rendezvous["addr"]))
            os.environ.setdefault("MASTER_PORT", str(rendezvous["port"]))
        me = identity()
        os.environ.setdefault("RANK", str(me.rank))
        os.environ.setdefault("WORLD_SIZE", str(me.size))
        os.environ.setdefault("LOCAL_RANK", str(me.local_rank))
        script_threads(me.local_size)

    def __init__(self) -> None:
        try:
            import torch
            import torch.distributed as torch_dist
        except ImportError as exc:
            raise PipeprofError(
                f"train.engine ddp needs PyTorch ({exc}): pip install 'pipeprof[torch]'"
            ) from None
        self.torch, self.dist = torch, torch_dist
        self.me = identity()

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
        if self.dist.is_initialized():
            return
        meet = rendezvous or {}
        addr = meet.get("addr") or os.environ.get("MASTER_ADDR", "")
        port = meet.get("port") or os.environ.get("MASTER_PORT", "")
        if not addr or not port:
            raise PipeprofError(
                "train.engine ddp: no rendezvous: MASTER_ADDR and MASTER_PORT are unset and the "
                "launch gave none"
            )
        gpu = self.torch.cuda.is_available()
        self.dist.init_process_group(
            backend="nccl" if gpu else "gloo",
            init_method=f"tcp://{addr}:{port}",
            rank=self.me.rank,
            world_size=self.me.size,
            timeout=datetime.timedelta(seconds=JOIN_TIMEOUT_S),
        )
        if self.dist.get_world_size() != np:
            raise PipeprofError(
                f"train.engine ddp: {self.dist.get_world_size()} ranks joined, not np={np}"
            )

    def attached(self) -> bool:
        return bool(self.dist.is_initialized())

    def alone(self) -> bool:
        """One process that started no process group (Keras's ``fit`` on torch, which trains
        in one process): its collectives have no other rank to meet, and are its own values."""
        return not self.dist.is_initialized() and self.me.size == 1

    @property
    def rank(self) -> int:
        return int(self.dist.get_rank()) if self.dist.is_initialized() else self.me.rank

    @property
    def size(self) -> int:
        return int(self.dist.get_world_size()) if self.dist.is_initialized() else self.me.size

    @property
    def local_rank(self) -> int:
        return self.me.local_rank

    @property
    def local_size(self) -> int:
        return self.me.local_size

    def wrap_model(self, module: Any) -> Any:
        """``module`` in DistributedDataParallel: its gradients averaged over the ranks in
        buckets during ``backward`` (rank 0's weights broadcast when it is made)."""
        from torch.nn.parallel import DistributedDataParallel

        if self.torch.cuda.is_available():
            index = self.torch.cuda.current_device()
            return DistributedDataParallel(module, device_ids=[index], output_device=index)
        return DistributedDataParallel(module)

    def wrap_optimizer(self, optimizer: Any) -> Any:
        return optimizer  # the module's backward reduces the gradients

    def broadcast(self, variables: Any, root: int = 0) -> None:
        if self.alone():
            return
        for tensor in variables:
            self.dist.broadcast(tensor, src=root)

    def barrier(self, name: str) -> None:
        if not self.alone():
            self.dist.barrier()

    def average(self, values: list[float], name: str) -> Any:
        t = self.torch.tensor(values, dtype=self.torch.float64)
        if self.alone():
            return t.numpy()
        if self.torch.cuda.is_available():  # NCCL reduces on the device
            t = t.cuda()
        self.dist.all_reduce(t)
        return (t / self.size).cpu().numpy()

    def allreduce(self, tensor: Any, name: str) -> Any:
        if not self.alone():
            self.dist.all_reduce(tensor)
        return tensor

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        if self.alone():
            return [objects]
        out: list[Any] = [None] * self.size
        self.dist.all_gather_object(out, objects)
        return out
