"""The framework axis: what builds the model, compiles its step, puts the synthetic twin's
batch on the device, and says when a step's work is done (``train.framework``). Points:
``keras2`` (Keras 2 on TensorFlow 2.15; ``pipeprof.plugins``).

pipeprof's own ranks (``rank.worker``) use only ``Framework``'s methods, with the model as an
opaque handle, so a rank imports TensorFlow, JAX or PyTorch only through its framework, input
library and distribution.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

import numpy

from pipeprof.scenario import TrainConfig

Step = Callable[[Any, Any], Any]  # (x, y) -> the step's logs: a mapping with "loss"


class Framework(Protocol):
    name: str
    backend: str  # what runs its ops: tensorflow, jax, torch
    version: str  # of its package (Keras's), for the run directory
    # the input libraries it trains from, the first the one ``data.library = "auto"`` takes
    inputs: ClassVar[tuple[str, ...]]

    def setup(self, distribution: Any, intra_op_threads: int = 0) -> str:
        """Pin this rank to its device (a GPU by local rank; else CPU threads sized to the
        rank's share of the cores); the device's words for the outputs."""

    def build(
        self,
        model: str,
        input_shape: tuple[int, int, int],
        num_classes: int,
        train: TrainConfig,
        learning_rate: float,
        distribution: Any,
    ) -> Any:
        """The model (``model.name``: built-in or "module:function") with its optimizer,
        compiled for training under ``distribution``: an opaque handle for the methods below."""

    def train_step(
        self, model: Any, distribution: Any, prepare: Callable[[Any, Any], Any] | None = None
    ) -> Step:
        """One training step on this process's replicas, compiled; ``prepare(x, y)`` makes x
        first, inside the step (augmentation on the device)."""

    def compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` compiled as this framework compiles a step's work."""

    def emulated_step(
        self, distribution: Any, device_ms: float, parameters: int, seed: int = 0
    ) -> Step:
        """A step that keeps the device busy ``device_ms`` without the CPU, then reduces a
        gradient of ``parameters`` floats over the ranks for real (``train.device =
        "emulated:MS"``)."""

    def parameters(self, model: Any) -> int:
        """The model's trainable parameters (its gradient's floats)."""

    def on_device(self, make: Callable[[], Any]) -> Any:
        """What ``make()`` returns, made on this rank's device (the twin's batch)."""

    def variables(self, model: Any) -> Any:
        """The model's variables, as the distribution broadcasts them."""

    def optimizer_variables(self, model: Any) -> Any:
        """The optimizer's (its slots exist after the first update)."""

    def weights_digest(self, model: Any) -> str:
        """A digest of the model's weights as this process holds them (equal on every process
        of a data-parallel run whose replicas agree)."""

    def set_learning_rate(self, model: Any, rate: float) -> None: ...

    def learning_rate(self, model: Any) -> Callable[[], Any]:
        """Reads the optimizer's rate as a step trains with it (the warm-up ramp's record)."""


def digest(values: Iterable[Any]) -> str:
    """The first 16 hex digits of the SHA-256 of ``values`` (arrays) as float32 bytes."""
    h = hashlib.sha256()
    for value in values:
        h.update(numpy.ascontiguousarray(numpy.asarray(value, dtype=numpy.float32)).tobytes())
    return h.hexdigest()[:16]
