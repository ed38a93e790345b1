"""tf.distribute's MultiWorkerMirroredStrategy as a distribution (``train.engine =
"multi_worker_mirrored"``): one process per slot of the hosts, as Horovod's ranks are placed,
each a worker of the strategy's cluster; the workers' collectives go over the hosts' network
(gRPC, ring all-reduce on CPUs).

``TF_CONFIG`` is written for each process from the job (``Job.tf_workers``, the address of
every worker in rank order, made by the workflow from the launch's placement) before the
strategy starts: the launcher only starts the processes (horovodrun, mpirun or srun, whichever
``launch.launcher`` is). Each worker reads its own shard of the data at the batch per
replica, so ``distribute_datasets_from_function`` hands it to the strategy unsplit. What
Horovod does between ranks (averages, barriers, the gather of every rank's step records to
rank 0) goes through the strategy's own collectives.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any, ClassVar

from pipeprof.distributions import PER_REPLICA, labelled, refuse_input
from pipeprof.distributions.mirrored import strategy_runner
from pipeprof.errors import PipeprofError
from pipeprof.rank.identity import identity

# its workers listen from this port up, one port per local rank; a launch moves on by the
# hosts' most ranks, so back-to-back launches never ask for a port just freed
WORKER_PORT = 23456


def tf_config(workers: list[str], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` of a cluster of ``workers`` (host:port each)."""
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


class MultiWorkerMirrored:
    name = "multi_worker_mirrored"
    frameworks: ClassVar[tuple[str, ...]] = ("keras2",)
    # why not another framework: Keras 3's fit reduces each step's scalar logs over the
    # workers along an axis they do not have (keras-team/keras#20585, open)
    refuses: ClassVar[dict[str, str]] = {
        "keras3": (
            "Keras 3 does not train under MultiWorkerMirroredStrategy (keras-team/keras#20585); "
            "use --engine data_parallel (Keras 3 on JAX, one process per host), or Keras 2: "
            "TensorFlow 2.15 with Horovod (bash scripts/setup.sh)"
        )
    }
    input_modes: ClassVar[tuple[str, ...]] = ("auto", PER_REPLICA)
    one_process: ClassVar[bool] = False
    per_host: ClassVar[bool] = False
    # horovodrun, or mpirun where Horovod is not installed: either only starts the workers
    launchers: ClassVar[tuple[str, ...]] = ("horovodrun", "mpirun")
    joins_through_horovod: ClassVar[bool] = False

    @staticmethod
    def rendezvous(np: int, launch: Any, run_dir: str = "") -> dict[str, Any]:
        """Each worker's host:port (TF_CONFIG's cluster, in rank order, as the launch places
        the ranks): made by the launching process, given to every worker with the job."""
        from pipeprof.launch import topology

        placed = topology.assign(np, launch)
        base = WORKER_PORT + 64 * (np % 16)
        return {"workers": [f"{s.host}:{base + s.local_rank}" for s in placed.slots]}

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self._strategy: Any = None
        self._fns: dict[Any, Any] = {}
        self._rank, self._size = 0, 1
        self.device_kind = ""

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
        if rendezvous and rendezvous.get("workers"):  # this rank's place in the cluster
            os.environ["TF_CONFIG"] = tf_config(rendezvous["workers"], identity().rank)
        text = os.environ.get("TF_CONFIG", "")
        if not text:
            raise PipeprofError(
                "train.engine multi_worker_mirrored: TF_CONFIG is not set; pipeprof writes it for "
                "its own ranks (a script of yours sets it, or runs under pipeprof compare)"
            )
        config = json.loads(text)
        self._rank = int(config["task"]["index"])
        self._size = len(config["cluster"]["worker"])
        if self._size != np:
            raise PipeprofError(
                f"TF_CONFIG names {self._size} worker(s) but the launch is for np={np}"
            )
        # each worker pinned to its local rank's GPU (rank.devices), else on its host's CPU
        on = "GPU" if self.tf.config.list_physical_devices("GPU") else "CPU"
        self.device_kind = f"{self._size} worker(s), one {on} replica each"

    @property
    def strategy(self) -> Any:
        if self._strategy is None:  # after the rank set its threads: this starts the runtime
            tf = self.tf
            options = tf.distribute.experimental.CommunicationOptions(
                implementation=tf.distribute.experimental.CommunicationImplementation.RING
            )
            self._strategy = tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=options
            )
        return self._strategy

    def attached(self) -> bool:
        return False

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def local_rank(self) -> int:
        return identity().local_rank

    @property
    def local_size(self) -> int:
        return identity().local_size

    @property
    def replicas(self) -> int:
        return 1  # CPUs: one replica per worker (GPUs would give a worker each of its GPUs)

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self.strategy.scope()

    def wrap_optimizer(self, optimizer: Any) -> Any:
        return optimizer  # the strategy's apply averages the workers' gradients

    def broadcast(self, variables: Any, root: int = 0) -> None:
        """The strategy made every worker's variables alike when it made them."""

    def _collective(self, key: str, body: Callable[[Any], Any], value: Any) -> Any:
        """``body`` on every worker's replica, over ``value``, compiled once per key."""
        tf, strategy = self.tf, self.strategy
        if key not in self._fns:

            def on_every_replica(v: Any) -> Any:
                return strategy.run(body, args=(v,))

            self._fns[key] = tf.function(on_every_replica, autograph=False)
        return strategy.experimental_local_results(self._fns[key](value))[0]

    def _sum(self, value: Any) -> Any:
        tf = self.tf

        def body(v: Any) -> Any:  # the value made the replica's own first (MWMS needs it)
            return tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.identity(v)
            )

        return self._collective(f"{value.dtype}-{tuple(value.shape)}", body, value)

    def barrier(self, name: str) -> None:
        self._sum(self.tf.constant(0.0))

    def average(self, values: list[float], name: str) -> Any:
        total = self._sum(self.tf.constant(values, self.tf.float64)).numpy()
        return total / self._size

    def allreduce(self, tensor: Any, name: str) -> Any:
        return self._sum(tensor)

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        """Every worker's ``objects`` (JSON), in rank order: each worker's bytes padded to the
        longest, then summed into a slot of its own."""
        tf = self.tf
        mine = json.dumps(objects).encode()
        lengths = [0] * self._size
        lengths[self._rank] = len(mine)  # each worker's length in a slot of its own
        longest = int(max(self._sum(tf.constant(lengths, tf.int64)).numpy()))
        slots = tf.zeros([self._size, longest + 1], tf.int32)
        row = list(mine) + [0] * (longest - len(mine)) + [len(mine)]
        slots = tf.tensor_scatter_nd_update(slots, [[self._rank]], [row])
        every = self._sum(slots).numpy()
        return [json.loads(bytes(r[: r[-1]].tolist())) for r in every]

    def set_input(self, how: str) -> None:
        refuse_input(self.name, how, (PER_REPLICA,))  # each worker reads its own shard

    def input_batch(self, per_replica: int) -> int:
        return per_replica  # one replica a worker

    def distribute(self, dataset: Any) -> Any:
        return self.strategy.distribute_datasets_from_function(lambda ctx: dataset)

    def distribute_batch(self, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        values = self.strategy.experimental_distribute_values_from_function
        x, y = batch
        return values(lambda ctx: x), values(lambda ctx: y)

    def replica_runner(self) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
        return strategy_runner(self.tf, self.strategy)

    def describe(self, device: str, how: str) -> str:
        return labelled(device, self.name, how)
