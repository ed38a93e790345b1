"""Keras 3's internals that pipeprof's own loop reaches into, in one place (read from Keras
3.15's source): the JAX trainer's stateless train function and the state it takes, the
TensorFlow trainer's build of a model's training variables before a step is traced under a
strategy, and the torch trainer's epoch iterator, which takes each batch outside the train
function."""

from __future__ import annotations

import sys
from importlib.util import find_spec
from types import FrameType
from typing import Any


def _groups(model: Any) -> tuple[Any, ...]:
    """The training state's four parts, in the order Keras's JAX train_step takes them."""
    return (
        model.trainable_variables,
        model.non_trainable_variables,
        model.optimizer.variables,
        model.metrics_variables,
    )


def read_state(model: Any) -> tuple[list[Any], ...]:
    """The values of the variables Keras's JAX ``train_step(state, data)`` takes as its state:
    trainable, non-trainable, optimizer, metrics."""
    return tuple([v.value for v in group] for group in _groups(model))


def write_state(model: Any, state: tuple[list[Any], ...]) -> None:
    """The variables given the values a step returned (what Keras's ``jax_state_sync`` does)."""
    for group, values in zip(_groups(model), state):
        for variable, value in zip(group, values):
            variable.assign(value)


def jax_step(model: Any, state: tuple[Any, ...], batch: tuple[Any, Any]) -> tuple[Any, Any]:
    """One call of the train function Keras's JAX trainer made (``make_train_function``: it
    takes the state and an iterator of batches, and pulls one with ``steps_per_execution``
    1): the step's logs, and the state it leaves."""
    logs, state = model.train_function(state, iter((batch,)))
    return logs, state


def process_local(array: Any) -> Any:
    """This process's rows of a batch laid out over several processes' devices (what Keras's
    ``train_on_batch`` takes, to lay out itself: it cannot take the global array); any other
    array as it is."""
    if getattr(array, "is_fully_addressable", True):
        return array
    import numpy

    rows = {s.index[0].start or 0: s.data for s in array.addressable_shards}
    return numpy.concatenate([numpy.asarray(rows[k]) for k in sorted(rows)])


def build_for_training(model: Any, input_shape: tuple[int, ...]) -> None:
    """Build the model, its optimizer and its compiled metrics and loss now (as ``fit`` does
    before its first step, ``Trainer._symbolic_build``), so that a step traced under a
    tf.distribute strategy makes no variable inside it."""
    import numpy

    x = numpy.zeros((2, *input_shape), numpy.float32)
    y = numpy.zeros((2,), numpy.int32)
    model._symbolic_build(data_batch=(x, y))


def torch_epoch_iterator() -> Any:
    """The epoch iterator of the ``fit`` that is running, on Keras's torch trainer: ``fit``'s
    local ``epoch_iterator``, whose ``_get_iterator()`` gives the iterator each batch is taken
    from before the train function gets it (``for begin, end, data in epoch_iterator:
    train_function(data)``). None where no Keras ``fit`` is on the stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name == "fit" and name.startswith("keras."):
            return frame.f_locals.get("epoch_iterator")
        frame = frame.f_back
    return None


def torch_distribution() -> bool:
    """Whether this Keras distributes a model over processes on torch (a
    ``keras.src.backend.torch.distribution_lib``, as JAX's backend has; 3.15.1 has none, and
    its torch trainer never calls torch.distributed)."""
    return find_spec("keras.src.backend.torch.distribution_lib") is not None
