"""tf.distribute's MirroredStrategy as a distribution (``train.engine = "mirrored"``): one
process on one host drives every replica, one per GPU; on a host without GPUs, one per
logical CPU device (TensorFlow splits the CPU into that many devices, which share its cores:
said as such wherever the device is named). Its launcher starts that one process
(``launch.local``).

The worker count is the replica count. The process reads one stream of global batches
(per-replica batch × replicas) and ``experimental_distribute_dataset`` splits each among the
replicas, or, with ``train.distribute_input = "distribute_datasets_from_function"``, one
stream of a replica's batches that the replicas take in turn; ``strategy.run`` runs Keras's own ``train_step`` on each, and the optimizer's
apply averages the gradients across them. There is one process, so what Horovod does between
processes (broadcast, barriers, gathers) has nothing to do here; the emulated device's
gradient exchange is a sum across the replicas, as the strategy's own would be.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, ClassVar

from pipeprof.distributions import PER_REPLICA, SPLIT, labelled, refuse_input
from pipeprof.errors import PipeprofError


def strategy_runner(tf: Any, strategy: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A replica's step (x, y → logs) run on every replica of a tf.distribute ``strategy``,
    compiled, the logs averaged over the replicas."""

    def runner(replica_step: Callable[..., Any]) -> Callable[..., Any]:
        @tf.function
        def step(x: Any, y: Any) -> Any:
            logs = strategy.run(replica_step, args=(x, y))
            return {
                k: strategy.reduce(tf.distribute.ReduceOp.MEAN, v, axis=None)
                for k, v in logs.items()
            }

        return step

    return runner


def make_replicas(tf: Any, np: int) -> tuple[list[str], str]:
    """The devices of ``np`` replicas on this host, and their description: its first ``np``
    GPUs, or ``np`` logical devices of its CPU (set now, before TensorFlow's runtime starts:
    a one-line error once it has)."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if np > len(gpus):
            raise PipeprofError(
                f"np={np}: train.engine mirrored drives one replica per GPU and this host has "
                f"{len(gpus)}; for more, multi_worker_mirrored across hosts"
            )
        return [f"/gpu:{i}" for i in range(np)], f"{np} GPU(s)"
    cpu = tf.config.list_physical_devices("CPU")[0]
    if len(tf.config.get_logical_device_configuration(cpu) or [None]) != np:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(np)]
            )
        except RuntimeError:
            raise PipeprofError(
                f"np={np}: TensorFlow started before pipeprof could split the CPU into {np} "
                "logical devices: import pipeprof.keras before anything else runs TensorFlow"
            ) from None
    return [f"/cpu:{i}" for i in range(np)], f"{np} logical CPU device(s) sharing this host's CPU"


class Mirrored:
    name = "mirrored"
    frameworks: ClassVar[tuple[str, ...]] = ("keras2", "keras3")
    input_modes: ClassVar[tuple[str, ...]] = ("auto", SPLIT, PER_REPLICA)
    one_process: ClassVar[bool] = True
    per_host: ClassVar[bool] = False
    launchers: ClassVar[tuple[str, ...]] = ("local",)
    joins_through_horovod: ClassVar[bool] = False
    stack: ClassVar[str] = "TensorFlow"

    @staticmethod
    def installed() -> bool:
        from importlib.util import find_spec

        return find_spec("tensorflow") is not None

    def __init__(self) -> None:
        import tensorflow as tf

        self.tf = tf
        self._replicas = 1
        self._devices: list[str] = []
        self._strategy: Any = None
        self._reducers: dict[Any, Any] = {}  # one compiled cross-replica sum per tensor kind
        self.device_kind = ""
        self.input = SPLIT

    @classmethod
    def prepare_script(cls, np: int, rendezvous: dict[str, Any] | None = None) -> None:
        """Before a user's script makes its strategy: ``np`` logical CPU devices on a host
        without GPUs (importing pipeprof.keras is the script's first use of TensorFlow)."""
        import tensorflow as tf

        make_replicas(tf, np)

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
        """Make ``np`` replicas: the first ``np`` GPUs, else ``np`` logical CPU devices (which
        must be set before TensorFlow starts its runtime: the strategy is made later)."""
        self._devices, self.device_kind = make_replicas(self.tf, np)
        self._replicas = np

    @classmethod
    def attach_script(cls, strategy: Any, np: int, where: str) -> Mirrored:
        """The distribution of a user's script under ``compare --engine mirrored``: the
        MirroredStrategy it made, checked to drive the ``np`` replicas compare asked for;
        ``where``: what the script must build under it (its model, or the loop's dataset)."""
        import tensorflow as tf

        if not isinstance(strategy, tf.distribute.MirroredStrategy):
            raise PipeprofError(
                f"--engine {cls.name}: {where} tf.distribute.MirroredStrategy, and it did not"
            )
        if strategy.num_replicas_in_sync != np:
            raise PipeprofError(
                f"--engine {cls.name}: np={np} but the script's MirroredStrategy has "
                f"{strategy.num_replicas_in_sync} replica(s): make it with the devices pipeprof "
                "gives the script (all it sees: MirroredStrategy() with no devices named)"
            )
        return cls.attach(strategy)

    @classmethod
    def attach(cls, strategy: Any) -> Mirrored:
        """The distribution of a user's script that made its own MirroredStrategy."""
        engine = cls()
        engine._strategy = strategy
        engine._replicas = int(strategy.num_replicas_in_sync)
        engine.device_kind = f"{engine._replicas} replica(s)"
        return engine

    @property
    def strategy(self) -> Any:
        if self._strategy is None:
            self._strategy = self.tf.distribute.MirroredStrategy(devices=self._devices)
        return self._strategy

    def attached(self) -> bool:
        return False

    @property
    def rank(self) -> int:
        return 0

    @property
    def size(self) -> int:
        return 1

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def local_size(self) -> int:
        return 1

    @property
    def replicas(self) -> int:
        return self._replicas

    def scope(self) -> contextlib.AbstractContextManager[Any]:
        return self.strategy.scope()

    def wrap_optimizer(self, optimizer: Any) -> Any:
        return optimizer  # the strategy's apply averages the replicas' gradients

    def broadcast(self, variables: Any, root: int = 0) -> None:
        """Mirrored variables start alike on every replica."""

    def barrier(self, name: str) -> None:
        """One process: nothing to wait for."""

    def average(self, values: list[float], name: str) -> Any:
        import numpy

        return numpy.asarray(values, dtype=numpy.float64)

    def allreduce(self, tensor: Any, name: str) -> Any:
        """``tensor`` summed across the replicas, each replica giving it on its device (the
        emulated step's gradient exchange); replica 0's result."""
        if self._replicas == 1:
            return tensor
        key = (name, tuple(tensor.shape), tensor.dtype)
        if key not in self._reducers:
            tf, strategy = self.tf, self.strategy

            def on_replica(t: Any) -> Any:
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(t))

            self._reducers[key] = tf.function(lambda t: strategy.run(on_replica, args=(t,)))
        return self.strategy.experimental_local_results(self._reducers[key](tensor))[0]

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        return [list(objects)]

    def set_input(self, how: str) -> None:
        """``experimental_distribute_dataset`` (auto): one pipeline of global batches, each split
        among the replicas; ``distribute_datasets_from_function``: one pipeline of a replica's
        batches, which the replicas take in turn (one process: the function is called once)."""
        refuse_input(self.name, how, (SPLIT, PER_REPLICA))
        self.input = SPLIT if how == "auto" else how

    def input_batch(self, per_replica: int) -> int:
        return per_replica * self._replicas if self.input == SPLIT else per_replica

    def distribute(self, dataset: Any) -> Any:
        if self.input == PER_REPLICA:
            return self.strategy.distribute_datasets_from_function(lambda ctx: dataset)
        return self.strategy.experimental_distribute_dataset(dataset)

    def distribute_batch(self, batch: tuple[Any, Any]) -> tuple[Any, Any]:
        """The twin's batch as the real one reaches the replicas: a global batch split among
        them, or (per replica) the same replica's batch on each."""
        x, y = batch
        values = self.strategy.experimental_distribute_values_from_function
        if self.input == PER_REPLICA:
            return values(lambda ctx: x), values(lambda ctx: y)
        per = int(x.shape[0]) // self._replicas

        def part(t: Any) -> Callable[[Any], Any]:
            return lambda ctx: t[
                ctx.replica_id_in_sync_group * per : (ctx.replica_id_in_sync_group + 1) * per
            ]

        return values(part(x)), values(part(y))

    def replica_runner(self) -> Callable[[Callable[..., Any]], Callable[..., Any]] | None:
        return strategy_runner(self.tf, self.strategy)

    def describe(self, device: str, how: str) -> str:
        return labelled(device, self.name, how)
