"""The input-library axis: what builds a variant's pipeline from the scenario's stages (read,
decode, label, shuffle, augment, cache, prefetch), its iterator, and the synthetic twin's
batch (``data.library``). Points: ``tfdata`` (``pipeprof.plugins``).

pipeprof's own ranks (``rank.worker``) use only ``InputLibrary``'s methods: a pipeline is an
opaque iterable of batches to them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from pipeprof.scenario import AugmentConfig, DataConfig, PipelineConfig


class InputLibrary(Protocol):
    name: str

    def pipeline(
        self,
        data: DataConfig,
        pipe: PipelineConfig,
        *,
        data_root: str,
        shard: tuple[int, int],
        batch_size: int,
        epochs: int | None = None,
        cache_prefix: str = "",
        bad_files: Any = None,
    ) -> Any:
        """One rank's pipeline of ``pipe``'s stages (``shard``: this rank's index and the
        number of shards), batched: an iterable of (x, y) batches. Bad files are skipped and
        handed to ``bad_files`` (``data.badfiles.BadFiles``), or end it, as
        ``data.on_bad_file`` says."""

    def element_spec(self, pipeline: Any) -> Any:
        """What one batch of ``pipeline`` is: its shapes and types, for the twin."""

    def spec_of(self, batch_size: int, input_shape: tuple[int, int, int]) -> Any:
        """The element spec of batches of ``batch_size`` images (float32) and labels (int32),
        where no real pipeline gives one (a synthetic-only launch)."""

    def synthetic_batch(self, spec: Any, num_classes: int, seed: int = 0) -> tuple[Any, Any]:
        """One batch of random noise shaped exactly as ``spec`` says: the twin's, made once."""

    def restartable(self, pipe: PipelineConfig) -> bool:
        """Whether a new iterator over ``pipe`` may be made each round (one that writes a
        file cache or reads from a service would start its work again)."""

    def epoch_elements(
        self, data: DataConfig, pipe: PipelineConfig, data_root: str, shard: tuple[int, int]
    ) -> int | None:
        """At most how many elements one epoch of a shard yields; None where that is not
        known without reading it."""

    def batch_augment(self, augment: AugmentConfig, size: int) -> Callable[[Any, Any], Any]:
        """The augmentation of a whole batch, (x, y) → (x, y), for ``augment.placement =
        "device"``: run inside the training step."""
