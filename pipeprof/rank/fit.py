"""pipeprof's twin inside a user's own Keras 2 ``model.fit``, under ``pipeprof compare -- CMD``.

``instrumented(dataset)`` registers the dataset, and its synthetic twin is made when ``fit``
starts (``Choice.ready``): one real batch, taken once and repeated, with exactly the dataset's
element spec and no input work per step. The user's dataset itself is left untouched.
``PipeprofCallback`` hands Keras's train function the twin's iterator instead of the dataset's
for the steps the plan gives the twin (``CHOICE.iterator``), so the choice costs nothing inside
the pipeline or the step.
``rank.script_measure.FitMeasurement``, driven by the callback, sets the choice before every
step (``SOURCE``) from the same measurement plan pipeprof's own ranks follow; then it ends
``fit``.

The twin's batch lives where Keras puts its input: it is copied to the device each step, as
a real batch is, so the gap measures the pipeline, not the copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from pipeprof.frameworks import keras2_compat as compat
from pipeprof.rank.script_measure import REAL, SOURCE, SYNTHETIC

__all__ = ["CHOICE", "REAL", "SYNTHETIC", "Choice", "instrumented", "instrumented_batches"]


class Choice:
    """Which dataset the coming step reads, set by the callback before each step, and the twin.

    The switch is made outside TensorFlow: the train function is handed the twin's iterator
    or Keras's own. An earlier design chose inside the pipeline (choose_from_datasets, read
    through a tf.Variable, with tf.data's read-ahead optimisations turned off for the whole
    pipeline): that cost the example script 2-3% of its samples/s and changed the user's
    pipeline. The twin's element spec is the dataset's own, so one traced train function
    serves both."""

    def __init__(self) -> None:
        self.instrumented = 0  # datasets instrument() was given in this process
        self._twin: tf.data.Dataset | None = None
        self._dataset: tf.data.Dataset | None = None  # registered, its twin not yet made
        self._iterator = None
        # how Keras hands the train function its batches under a tf.distribute strategy
        # (split among the replicas); the twin's are handed the same way
        self.distribute: Callable[[tf.data.Dataset], object] | None = None

    @property
    def source(self) -> int:
        """``REAL`` or ``SYNTHETIC``: the measurement's ``SOURCE``."""
        return SOURCE.source

    @source.setter
    def source(self, value: int) -> None:
        SOURCE.source = value

    def register(self, dataset: tf.data.Dataset) -> None:
        """The twin of a tf.data pipeline, made from its first batch once ``fit`` needs it
        (``ready``): a custom loop over the same dataset makes its own from the loop's."""
        self._dataset = dataset
        self.instrumented += 1

    def ready(self) -> None:
        """Make the registered pipeline's twin now (``fit`` is starting)."""
        if self._twin is None and self._dataset is not None:
            dataset, self._dataset = self._dataset, None
            self._make_twin(next(iter(dataset.take(1))), dataset.element_spec)

    def register_batch(self, first: Any) -> None:
        """The twin of a Keras Sequence or a generator, from its first batch, made what
        Keras's adapter for them makes of a batch."""
        self._make_twin(*compat.adapter_batch(first))
        self.instrumented += 1

    def _make_twin(self, first: Any, spec: Any) -> None:
        # one batch, cached: each twin step reads it from memory; relaxed to the dataset's own
        # (maybe partial) shapes, so the train function traced for the dataset serves the twin
        self._twin = tf.data.Dataset.from_tensors(first).map(_as_spec(spec)).cache().repeat()
        self._iterator = None

    def iterator(self, keras_iterator):
        """The iterator the coming step reads: the twin's while the source is the twin."""
        if self.source == REAL or self._twin is None:
            return keras_iterator
        if self._iterator is None:
            twin = self._twin if self.distribute is None else self.distribute(self._twin)
            self._iterator = iter(twin)  # type: ignore[arg-type]
        return self._iterator


def _as_spec(spec):
    """A map function giving an element exactly ``spec``'s static shapes (a twin batch has
    full shapes where the dataset's may have unknown ones, e.g. the batch size)."""

    def relax(*parts):
        element = parts if isinstance(spec, tuple) else parts[0]
        return tf.nest.map_structure(
            lambda t, s: tf.compat.v1.placeholder_with_default(t, s.shape)
            if isinstance(s, tf.TensorSpec)
            else t,
            element,
            spec,
        )

    return relax


CHOICE = Choice()  # one process, one fit at a time


def instrumented(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """The user's dataset, untouched, registered for ``CHOICE`` (its twin is made when
    ``fit`` starts)."""
    CHOICE.register(dataset)
    return dataset


def instrumented_batches(batches: Any) -> Any:
    """A Keras ``Sequence`` (``ImageDataGenerator.flow_from_directory`` gives one) or a Python
    generator of batches, with its twin made from its first batch. The Sequence is returned
    untouched (``fit`` reads it with its own workers, as without pipeprof); a generator's first
    batch, read here, is put back in front of the rest."""
    if isinstance(batches, tf.keras.utils.Sequence):
        CHOICE.register_batch(batches[0])
        return batches
    first = next(batches)
    CHOICE.register_batch(first)

    def again():
        yield first
        yield from batches

    return again()
