"""tf.data as the input library (``data.library = "tfdata"``): ``data.pipeline`` builds the
stages, and a variant with ``pipeline.service`` runs them on tf.data service workers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from pipeprof.scenario import AugmentConfig, DataConfig, PipelineConfig


class TfData:
    name = "tfdata"
    frameworks: ClassVar[tuple[str, ...]] = ("keras2",)

    @staticmethod
    def installed() -> bool:
        from importlib.util import find_spec

        return find_spec("tensorflow") is not None

    def __init__(self) -> None:
        import tensorflow as tf

        from pipeprof.data import pipeline

        self.tf, self.build = tf, pipeline

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
        return self.build.build(
            data,
            pipe,
            data_root=data_root,
            shard=self.build.Shard(*shard),
            batch_size=batch_size,
            epochs=epochs,
            cache_prefix=cache_prefix,
            bad_files=bad_files,
            service=pipe.service.address if pipe.service.enabled else "",
        )

    def element_spec(self, pipeline: Any) -> Any:
        return pipeline.element_spec

    def spec_of(self, batch_size: int, input_shape: tuple[int, int, int]) -> Any:
        tf = self.tf
        return (
            tf.TensorSpec([batch_size, *input_shape], tf.float32),
            tf.TensorSpec([batch_size], tf.int32),
        )

    def synthetic_batch(self, spec: Any, num_classes: int, seed: int = 0) -> tuple[Any, Any]:
        return self.build.synthetic_batch(spec, num_classes, seed=seed)

    def restartable(self, pipe: PipelineConfig) -> bool:
        # a file cache dropped while it writes leaves the file to the next iterator; each
        # iterator over a tf.data service is a job on the service's workers
        return not (pipe.service.enabled or (pipe.cache.enabled and pipe.cache.kind == "file"))

    def epoch_elements(
        self, data: DataConfig, pipe: PipelineConfig, data_root: str, shard: tuple[int, int]
    ) -> int | None:
        return self.build.epoch_elements(data, pipe, data_root, self.build.Shard(*shard))

    def batch_augment(self, augment: AugmentConfig, size: int) -> Callable[[Any, Any], Any]:
        return self.build.make_batch_augment(augment, size)
