"""Keras 3's internals that pipeprof's own loop reaches into, in one place (read from Keras
3.15's source): the JAX trainer's stateless train function and the state it takes, and the
TensorFlow trainer's build of a model's training variables before a step is traced under a
strategy."""

from __future__ import annotations

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
