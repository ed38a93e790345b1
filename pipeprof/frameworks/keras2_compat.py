"""Keras 2's internals that pipeprof reaches into, in one place, with the Keras version read
once: the model's ``train_step`` and ``train_function`` (wrapped to time a step's input wait
and to hand ``fit`` the twin's batches), its ``_jit_compile`` and ``_steps_per_execution``, and
what Keras 2's adapter makes of a Sequence's or a generator's batch. A Keras whose fit
pipeprof cannot measure this way (Keras 3) is refused in one line (``require``), never run to
measure nothing."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pipeprof.errors import PipeprofError

WRAPPED = "_pipeprof_wrapped"  # on a model whose train_step pipeprof wrapped
ORIGINAL = "_pipeprof_original"  # on the train function pipeprof put in place of Keras's


@functools.cache
def version() -> str:
    """The Keras that ``tf.keras`` is."""
    import tensorflow as tf

    return str(getattr(tf.keras, "__version__", "") or tf.__version__)


def major() -> int:
    return int(version().split(".")[0])


def require(what: str) -> None:
    """Refuse, in one line naming ``what`` needs it, a Keras other than 2."""
    if major() != 2:
        raise PipeprofError(
            f"{what} needs Keras 2 (tf.keras of TensorFlow 2.15 and earlier, whose fit pipeprof "
            f"instruments); this is Keras {version()}"
        )


def jit_compiled(model: Any) -> bool:
    """Whether ``model.compile(jit_compile=True)`` asked XLA to compile its train step (no host
    timestamp can then be taken inside it)."""
    return bool(getattr(model, "_jit_compile", False))


def steps_per_execution(model: Any) -> int:
    """The steps ``model.compile(steps_per_execution=N)`` runs per call of its train function."""
    variable = getattr(model, "_steps_per_execution", None)
    return int(variable.numpy()) if variable is not None else 1


def train_step_wrapped(model: Any) -> bool:
    return bool(getattr(model, WRAPPED, False))


def wrap_train_step(
    model: Any, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> bool:
    """``model.train_step`` replaced by ``wrapper(the original)``, once; False where it is not
    (wrapped already, or compiled by XLA)."""
    if getattr(model, WRAPPED, False) or jit_compiled(model):
        return False
    model.train_step = wrapper(model.train_step)
    setattr(model, WRAPPED, True)
    return True


def wrap_train_function(
    model: Any, wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    """``model.train_function`` (which ``fit`` calls with its iterator once an execution, and
    has just made) replaced by ``wrapper(Keras's own)``; a second wrap wraps Keras's, not the
    first wrapper."""
    original = getattr(model.train_function, ORIGINAL, model.train_function)
    wrapped = wrapper(original)
    setattr(wrapped, ORIGINAL, original)
    model.train_function = wrapped


def adapter_batch(batch: Any) -> tuple[Any, Any]:
    """A Sequence's or a generator's batch as Keras 2's adapter hands it to the train function
    (``data_adapter.GeneratorDataAdapter``): lists made tuples, ``None`` entries dropped,
    float arrays in Keras's float type; and its type as the adapter's, every dimension open,
    so the function traced for the real batches serves the twin's."""
    import numpy
    import tensorflow as tf

    x, y, w = tf.keras.utils.unpack_x_y_sample_weight(batch)
    batch = tf.__internal__.nest.list_to_tuple(tf.keras.utils.pack_x_y_sample_weight(x, y, w))

    def tensor(t: Any) -> Any:
        if isinstance(t, numpy.ndarray) and issubclass(t.dtype.type, numpy.floating):
            t = t.astype(tf.keras.backend.floatx())
        return tf.convert_to_tensor(t)

    batch = tf.nest.map_structure(tensor, batch)
    return batch, tf.nest.map_structure(
        lambda t: tf.TensorSpec([None] * t.shape.rank, t.dtype), batch
    )
