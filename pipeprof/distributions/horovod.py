"""Horovod, pipeprof's first distribution (``train.engine = "horovod"``), with Keras 2 on
TensorFlow: the only module of the rank side that imports Horovod. Its rendezvous is the
launcher's (horovodrun's, mpirun's, or the one ``launch.srun`` serves)."""

from __future__ import annotations

from typing import Any, ClassVar

from pipeprof.distributions import PerProcess
from pipeprof.errors import PipeprofError


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


class Horovod(PerProcess):
    name = "horovod"
    launchers: ClassVar[tuple[str, ...]] = ("horovodrun",)
    joins_through_horovod: ClassVar[bool] = True
    started_by: ClassVar[str] = "Horovod (hvd.init())"  # what a user's script calls to join
    stack: ClassVar[str] = "Horovod with Keras 2"
    predict_calibrated: ClassVar[bool] = True  # predict's constants were fitted on its ranks
    horovod_build: ClassVar[bool] = True  # its ranks need Horovod's build (doctor checks it)

    @staticmethod
    def installed() -> bool:
        from importlib.util import find_spec

        from pipeprof.frameworks.keras2 import Keras2

        return find_spec("horovod") is not None and Keras2.installed()

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

    def start(
        self, controller: str = "", np: int = 1, rendezvous: dict[str, Any] | None = None
    ) -> None:
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
