"""Horovod, pipeprof's first training engine (``train.engine = "horovod"``): the only
module of the rank side that imports Horovod."""

from __future__ import annotations

from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.rank.engine import PerProcess


def check_controller(controller: str, built: bool) -> None:
    """pipeprof launches its ranks without horovodrun's build probe (``launch.hvdrun``): this
    is that check, made where Horovod is imported anyway."""
    if not built:
        flag = (
            "HOROVOD_WITH_GLOO=1"
            if controller == "gloo"
            else "HOROVOD_WITH_MPI=1 (with MPI installed)"
        )
        raise PipeprofError(
            f"this Horovod was built without {controller.upper()}, which launch.controller = "
            f'"{controller}" needs: reinstall it with {flag} (scripts/setup.sh), or pick the other '
            "controller"
        )


class HorovodEngine(PerProcess):
    name = "horovod"

    def __init__(self) -> None:
        try:
            import horovod.tensorflow as hvd_tf
            import horovod.tensorflow.keras as hvd_keras
        except ImportError as exc:
            raise PipeprofError(
                f"train.engine horovod needs Horovod ({exc}): pip install 'pipeprof[horovod]' "
                "(bash scripts/setup.sh builds it), or use --engine mirrored"
            ) from None

        self.hvd, self.keras = hvd_tf, hvd_keras

    def start(self, controller: str = "", np: int = 1) -> None:
        if controller:
            check_controller(
                controller,
                bool(self.hvd.gloo_built() if controller == "gloo" else self.hvd.mpi_built()),
            )
        self.keras.init()

    def attached(self) -> bool:
        return bool(self.hvd.is_initialized())

    @property
    def rank(self) -> int:
        return int(self.hvd.rank())

    @property
    def size(self) -> int:
        return int(self.hvd.size())

    @property
    def local_rank(self) -> int:
        return int(self.hvd.local_rank())

    @property
    def local_size(self) -> int:
        return int(self.hvd.local_size())

    def wrap_optimizer(self, optimizer: Any) -> Any:
        return self.keras.DistributedOptimizer(optimizer)

    def broadcast(self, variables: Any, root: int = 0) -> None:
        self.hvd.broadcast_variables(variables, root_rank=root)

    def barrier(self, name: str) -> None:
        import tensorflow as tf

        self.hvd.allreduce(tf.constant(0.0), name=name)

    def average(self, values: list[float], name: str) -> Any:
        import tensorflow as tf

        return self.hvd.allreduce(
            tf.constant(values, tf.float64), op=self.hvd.Average, name=name
        ).numpy()

    def allreduce(self, tensor: Any, name: str) -> Any:
        return self.hvd.allreduce(tensor, name=name)

    def gather(self, objects: list[Any], name: str) -> list[list[Any]]:
        return list(self.hvd.allgather_object(objects, name=name))
