"""Plain PyTorch as a framework (``train.framework = "torch"``), with no Keras: the model an
``nn.Module``, its step eager forward, backward and optimizer step, as a PyTorch user writes it.

The batch reaches the step on the host (the input library's loader yields CPU tensors); the
step moves it to the device first (``non_blocking`` from pinned memory on a GPU), so the copy
is counted in the step, not in the input wait. The step's logs hold the loss as a tensor:
pipeprof's loop reads it with ``float``, which waits until the step is done on the device
(``.item()``, a CUDA sync on a GPU). Nothing is compiled (``torch.compile`` is the user's
choice, in their own script), so no warm-up compile lands in a step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib import metadata
from typing import Any, ClassVar

from pipeprof.errors import PipeprofError
from pipeprof.frameworks import Step, digest
from pipeprof.launch import topology
from pipeprof.models import resolve_callable
from pipeprof.scenario import TrainConfig

# the models this framework builds itself; others are a "module:function" returning a Module
MODELS = ("small_cnn",)


class Model:
    """The module (wrapped by the distribution, e.g. in DistributedDataParallel) and its
    optimizer."""

    def __init__(self, module: Any, optimizer: Any) -> None:
        self.module, self.optimizer = module, optimizer


def small_cnn(torch: Any, num_classes: int) -> Any:
    """Keras's small_cnn (``pipeprof.models``) in PyTorch: three valid 3x3 convolutions (32,
    64, 64), two 2x2 poolings, a global average pool and a 128-unit head; NCHW input."""
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


class Torch:
    name = "torch"
    backend = "torch"
    inputs: ClassVar[tuple[str, ...]] = ("dataloader",)

    @staticmethod
    def installed() -> bool:
        try:
            metadata.version("torch")
        except metadata.PackageNotFoundError:
            return False
        return True

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.version = torch.__version__
        self.device: Any = torch.device("cpu")

    def setup(self, distribution: Any, intra_op_threads: int = 0) -> str:
        torch = self.torch
        if torch.cuda.is_available():
            index = distribution.local_rank % torch.cuda.device_count()
            torch.cuda.set_device(index)
            self.device = torch.device("cuda", index)
            return f"GPU {index} ({torch.cuda.get_device_name(index)}, PyTorch {self.version})"
        threads = intra_op_threads or topology.cores_per_rank(distribution.local_size)
        torch.set_num_threads(threads)
        return f"CPU ({threads} thread(s), PyTorch {self.version})"

    def build(
        self,
        model: str,
        input_shape: tuple[int, int, int],
        num_classes: int,
        train: TrainConfig,
        learning_rate: float,
        distribution: Any,
    ) -> Model:
        torch = self.torch
        torch.manual_seed(0)  # the same starting weights on every rank, as a broadcast makes them
        if model == "small_cnn":
            module = small_cnn(torch, num_classes)
        elif ":" in model:
            module = resolve_callable(model, "model.name")(input_shape, num_classes)
            if not isinstance(module, torch.nn.Module):
                raise PipeprofError(
                    f"model.name {model}: returned {type(module).__name__}, not a torch.nn.Module"
                )
        else:
            raise PipeprofError(
                f"model.name {model!r}: train.framework torch builds {', '.join(MODELS)}, or a "
                "'module:function' returning a torch.nn.Module"
            )
        module = module.to(self.device)
        wrap = getattr(distribution, "wrap_model", None)
        module = wrap(module) if wrap is not None else module
        params = [p for p in module.parameters() if p.requires_grad]
        optimizer = (
            torch.optim.SGD(params, lr=learning_rate, momentum=train.momentum)
            if train.optimizer == "sgd"
            else torch.optim.Adam(params, lr=learning_rate)
        )
        return Model(module, distribution.wrap_optimizer(optimizer))

    def _to_device(self, t: Any) -> Any:
        return t.to(self.device, non_blocking=True) if t.device != self.device else t

    def train_step(
        self, model: Any, distribution: Any, prepare: Callable[[Any, Any], Any] | None = None
    ) -> Step:
        torch = self.torch
        handle: Model = model
        module, optimizer = handle.module, handle.optimizer
        loss_fn = torch.nn.CrossEntropyLoss()
        module.train()

        def step(x: Any, y: Any) -> Any:
            x, y = self._to_device(x), self._to_device(y)  # counted in the step
            if prepare is not None:
                x = prepare(x, y)
            optimizer.zero_grad(set_to_none=True)
            out = module(x)
            loss = loss_fn(out, y)
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                accuracy = (out.argmax(1) == y).float().mean()
            return {"loss": loss.detach(), "accuracy": accuracy}

        return step

    def compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn  # eager, as a PyTorch user's step runs unless they compile it

    def emulated_step(
        self, distribution: Any, device_ms: float, parameters: int, seed: int = 0
    ) -> Step:
        import random

        gradient = self.torch.zeros([parameters], dtype=self.torch.float32, device=self.device)
        spread = random.Random(seed)

        def step(x: Any, y: Any) -> Any:
            # the device's time (no CPU), a tenth of a ms of spread either way, then the
            # gradient's exchange over the ranks, for real
            time.sleep(max(0.0, device_ms + 0.2 * (spread.random() - 0.5)) / 1e3)
            reduced = distribution.allreduce(gradient, name="pipeprof_emulated_gradient")
            return {"loss": float(reduced[:1].sum()), "accuracy": 0.0}

        return step

    def parameters(self, model: Any) -> int:
        return int(sum(p.numel() for p in model.module.parameters() if p.requires_grad))

    def on_device(self, make: Callable[[], Any]) -> Any:
        made = make()
        if isinstance(made, tuple):
            return tuple(self._to_device(t) for t in made)
        return self._to_device(made)

    def variables(self, model: Any) -> Any:
        return [p.data for p in model.module.parameters()]

    def optimizer_variables(self, model: Any) -> Any:
        state = model.optimizer.state
        return [v for p in state for v in state[p].values() if isinstance(v, self.torch.Tensor)]

    def weights_digest(self, model: Any) -> str:
        return digest(p.detach().cpu().numpy() for p in model.module.parameters())

    def set_learning_rate(self, model: Any, rate: float) -> None:
        for group in model.optimizer.param_groups:
            group["lr"] = rate

    def learning_rate(self, model: Any) -> Callable[[], Any]:
        return lambda: model.optimizer.param_groups[0]["lr"]
