"""A framework with no TensorFlow, JAX or PyTorch (``train.framework = "fake"``): its model is
a name, its step sleeps (``train.device = "emulated:MS"``: that long, then the distribution's
allreduce; else 5 ms) and returns fixed logs. pipeprof's own rank (``rank.worker``) trains with
it through the framework's interface alone, as it trains with Keras."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar

from pipeprof.scenario import TrainConfig

LOGS = {"loss": 1.0, "accuracy": 0.5}
STEP_S = 0.005  # a step on the fake's own device


class FakeModel:
    def __init__(self, name: str, rate: float) -> None:
        self.name, self.rate = name, rate


class FakeFramework:
    name = "fake"
    inputs: ClassVar[tuple[str, ...]] = ("fake",)
    backend = "none"
    version = "0"

    def setup(self, distribution: Any, intra_op_threads: int = 0) -> str:
        return "fake device"

    def build(
        self,
        model: str,
        input_shape: tuple[int, int, int],
        num_classes: int,
        train: TrainConfig,
        learning_rate: float,
        distribution: Any,
    ) -> FakeModel:
        return FakeModel(model, learning_rate)

    def train_step(
        self, model: Any, distribution: Any, prepare: Callable[[Any, Any], Any] | None = None
    ) -> Callable[[Any, Any], Any]:
        def step(x: Any, y: Any) -> Any:
            if prepare is not None:
                prepare(x, y)
            time.sleep(STEP_S)
            return LOGS

        return step

    def compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn

    def emulated_step(
        self, distribution: Any, device_ms: float, parameters: int, seed: int = 0
    ) -> Callable[[Any, Any], Any]:
        def step(x: Any, y: Any) -> Any:
            time.sleep(device_ms / 1e3)
            distribution.allreduce(None, name="fake_gradient")
            return LOGS

        return step

    def parameters(self, model: Any) -> int:
        return 1000

    def on_device(self, make: Callable[[], Any]) -> Any:
        return make()

    def variables(self, model: Any) -> Any:
        return []

    def optimizer_variables(self, model: Any) -> Any:
        return []

    def weights_digest(self, model: Any) -> str:
        return "0" * 16  # no weights

    def set_learning_rate(self, model: Any, rate: float) -> None:
        model.rate = rate

    def learning_rate(self, model: Any) -> Callable[[], Any]:
        return lambda: model.rate
