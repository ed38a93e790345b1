"""Grain as an input library (``data.library = "grain"``), for Keras 3 on JAX with no TensorFlow: a
``grain.MapDataset`` over an image folder, each element read, decoded (Pillow), labelled from
its folder, cached, through the user's map, augmented (numpy), in that order; the rank's
shard a slice of the file list; the shuffle Grain's, reshuffled each epoch; batches made in Grain's
read threads and, with workers, in its worker processes (``mp_prefetch``).

How the scenario's knobs become Grain's:

- ``pipeline.grain.worker_count``: ``MultiprocessingOptions.num_workers`` ("auto": from
  ``parallel_calls``, whose "autotune" is the rank's share of the cores; 0: no worker process,
  the batches made in the rank's own read threads);
- ``pipeline.grain.worker_buffer_size``: batches each worker keeps ready ("auto": from
  ``prefetch.depth``, whose "autotune" is Grain's default of 1; ``prefetch.enabled = false``: 1);
- ``pipeline.grain.read_threads``: ``ReadOptions.num_threads`` in each process ("auto": 1 with
  workers, the rank's share of the cores without), its buffer ``read_buffer_size`` batches
  ("auto": the threads, at least 2);
- ``pipeline.cache`` (memory): each process keeps the decoded elements it has made;
- ``pipeline.read.throttle_mb_s``: each read sleeps as storage of that rate per rank, shared
  by every read thread of every process;
- ``pipeline.shuffle``: Grain's, a permutation of the rank's shard each epoch (the buffer size
  has no meaning here), each rank its own seed.

Grain starts its workers with ``spawn`` and hands each a copy of the dataset: one iterator is
kept across a run's rounds, as a user's training keeps it across epochs. Grain times each of
its transformations itself (``ExecutionTrackingMode.STAGE_TIMING``); ``grain_stage_ms`` reads
those figures back, a stage's milliseconds an element, to set beside pipeprof's own.

A batch is float32 NHWC images in 0..1 and int32 labels, numpy arrays on the host.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy

from pipeprof.data.files import labelled_folder, read_image
from pipeprof.data.magnitudes import Magnitudes
from pipeprof.errors import PipeprofError
from pipeprof.launch import topology
from pipeprof.models import resolve_callable
from pipeprof.rank.identity import identity
from pipeprof.scenario import AugmentConfig, DataConfig, PipelineConfig

# Grain's names for what pipeprof's stages do, as its execution summary calls the dataset
# nodes (``MapMapDataset(transform=<pipeprof.inputs.grain.Element object at ...>)``): the
# class of each transformation
STAGE_OF_NODE = {"Element": "read", "Shuffle": "shuffle", "Augment": "augment"}
# set in the stage benchmark's process: Grain times its nodes there (a training run's pipeline
# carries no timing a user's would not)
TRACK_STAGES = "PIPEPROF_GRAIN_STAGE_TIMING"


def _sample(x: numpy.ndarray, rows: numpy.ndarray, cols: numpy.ndarray) -> numpy.ndarray:
    """``x`` (HWC) read at fractional ``rows``/``cols`` (same shape), bilinear, the edges
    reflected."""
    h, w = x.shape[:2]

    def reflect(i: numpy.ndarray, n: int) -> numpy.ndarray:
        period = 2 * n
        i = numpy.mod(i, period)
        return numpy.where(i >= n, period - 1 - i, i)

    r0, c0 = numpy.floor(rows), numpy.floor(cols)
    fr, fc = (rows - r0)[..., None], (cols - c0)[..., None]
    r0, c0 = r0.astype(numpy.int64), c0.astype(numpy.int64)
    r1, c1 = reflect(r0 + 1, h), reflect(c0 + 1, w)
    r0, c0 = reflect(r0, h), reflect(c0, w)
    top = x[r0, c0] * (1 - fc) + x[r0, c1] * fc
    bottom = x[r1, c0] * (1 - fc) + x[r1, c1] * fc
    return (top * (1 - fr) + bottom * fr).astype(numpy.float32)


def augment_array(
    x: numpy.ndarray, m: Magnitudes, flip: bool, size: int, rng: numpy.random.Generator
) -> numpy.ndarray:
    """One HWC image augmented as the other libraries do: flip, crop-and-resize, rotation
    (reflected edges), brightness, contrast, clipped to 0..1; numpy only."""
    if flip and rng.random() < 0.5:
        x = x[:, ::-1]
    grid = numpy.arange(size, dtype=numpy.float64) + 0.5
    rows, cols = numpy.meshgrid(grid, grid, indexing="ij")
    if m.min_area < 1.0:  # the crop's window, resized to the whole image
        side = math.sqrt(rng.uniform(m.min_area, 1.0))
        crop = max(1, round(side * size))
        top, left = (int(v) for v in rng.integers(0, size - crop + 1, 2))
        rows, cols = top + rows * crop / size, left + cols * crop / size
    if m.max_angle > 0:  # about the (cropped) image's centre
        angle = rng.uniform(-m.max_angle, m.max_angle)
        cos, sin = math.cos(angle), math.sin(angle)
        r_mid, c_mid = rows.mean(), cols.mean()
        dr, dc = rows - r_mid, cols - c_mid
        rows, cols = r_mid + cos * dr - sin * dc, c_mid + sin * dr + cos * dc
    if m.min_area < 1.0 or m.max_angle > 0:
        x = _sample(numpy.asarray(x), rows - 0.5, cols - 0.5)
    if m.brightness > 0:
        x = x + numpy.float32(rng.uniform(-m.brightness, m.brightness))
    if m.contrast > 0:
        mean = x.mean(axis=(0, 1), keepdims=True)
        x = mean + (x - mean) * numpy.float32(rng.uniform(1 - m.contrast, 1 + m.contrast))
    return numpy.clip(x, 0.0, 1.0).astype(numpy.float32)


class Element:
    """Read, decode and label one (path, label), through the user's map, from the process's
    cache where it holds it: Grain's map, copied into each worker."""

    def __init__(self, data: DataConfig, pipe: PipelineConfig, read_s_per_byte: float) -> None:
        self.size, self.pipe, self.read_s_per_byte = data.image_size, pipe, read_s_per_byte
        self.cache: dict[str, tuple[numpy.ndarray, int]] = {}
        self.user_map: Callable[..., Any] | None = None  # resolved in the process that maps

    def __call__(self, item: tuple[str, int]) -> tuple[numpy.ndarray, int]:
        image, label = self.element(item)
        if self.pipe.map.function:  # after the cache, as tf.data's and the DataLoader's
            if self.user_map is None:
                self.user_map = resolve_callable(self.pipe.map.function, "pipeline.map.function")
            image, label = self.user_map(image, label, **self.pipe.map.kwargs)
            image = numpy.asarray(image, dtype=numpy.float32)
        return image, int(label)

    def element(self, item: tuple[str, int]) -> tuple[numpy.ndarray, int]:
        path, label = item
        if path in self.cache:
            return self.cache[path]
        reduced = self.pipe.read.decode == "reduced"
        image = read_image(path, self.size, reduced, self.read_s_per_byte)
        label = label if self.pipe.label.enabled else 0
        if self.pipe.cache.enabled:
            self.cache[path] = (image, int(label))
        return image, int(label)


class Augment:
    """The scenario's augmentation of one element, from Grain's per-element generator."""

    def __init__(self, augment: AugmentConfig, size: int) -> None:
        self.m, self.flip, self.size = Magnitudes.of(augment), augment.flip, size

    def __call__(self, element: Any, rng: numpy.random.Generator) -> Any:
        image, label = element
        return augment_array(image, self.m, self.flip, self.size, rng), label


def worker_count(pipe: PipelineConfig, local_ranks: int, cores: int | None = None) -> int:
    """Grain's worker processes: ``grain.worker_count``, else ``parallel_calls``, whose
    "autotune" is the cores each of the host's ``local_ranks`` ranks has."""
    if pipe.grain.worker_count != "auto":
        return int(pipe.grain.worker_count)
    if pipe.parallel_calls == "autotune":
        return topology.cores_per_rank(local_ranks, cores)
    return int(pipe.parallel_calls)


def worker_buffer(pipe: PipelineConfig) -> int:
    """Batches each worker keeps ready: ``grain.worker_buffer_size``, else ``prefetch.depth``
    (1 with prefetch off; "autotune": Grain's default, 1)."""
    if pipe.grain.worker_buffer_size != "auto":
        return int(pipe.grain.worker_buffer_size)
    if not pipe.prefetch.enabled or pipe.prefetch.depth == "autotune":
        return 1
    return int(pipe.prefetch.depth)


def read_threads(pipe: PipelineConfig, workers: int, local_ranks: int) -> int:
    """Grain's read threads in each process: ``grain.read_threads``, else 1 beside worker
    processes (each its own), or the rank's share of the cores without."""
    if pipe.grain.read_threads != "auto":
        return int(pipe.grain.read_threads)
    return 1 if workers else topology.cores_per_rank(local_ranks)


class GrainPipeline:
    """A rank's pipeline: an iterable of (x, y) batches over ``epochs`` epochs (None: on and
    on). One Grain iterator serves every ``iter`` (its workers kept), and is the handle
    ``grain_stage_ms`` reads Grain's own timings from."""

    def __init__(self, items: list[tuple[str, int]], data: DataConfig, pipe: PipelineConfig,
                 shard: tuple[int, int], batch_size: int, epochs: int | None) -> None:  # fmt: skip
        import grain
        from absl import flags

        # Grain reads its settings as absl flags, which only a program started by absl.app has
        # parsed: pipeprof's rank takes their defaults, as Grain's own guides do in a notebook
        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
        index, count = shard
        # equal shards, as DistributedSampler(drop_last=True) makes them: every rank the same
        # number of batches an epoch
        mine = items[: len(items) // count * count][index::count]
        if len(mine) < batch_size:
            raise PipeprofError(
                f"data: shard {index} of {count} holds {len(mine)} images, fewer than one "
                f"batch of {batch_size}"
            )
        local = identity().local_size
        self.workers = worker_count(pipe, local)
        threads = read_threads(pipe, self.workers, local)
        throttle = pipe.read.throttle_mb_s
        ds = grain.MapDataset.source(mine)
        if pipe.shuffle.enabled:  # before repeat: each epoch a permutation of its own
            ds = ds.shuffle(seed=pipe.shuffle.seed + index)
        ds = ds.repeat(epochs)
        # the storage rate shared by every read in flight: each process's read threads
        readers = max(1, self.workers) * threads
        ds = ds.map(Element(data, pipe, readers / (throttle * 1e6) if throttle else 0))
        if pipe.augment.enabled and pipe.augment.placement == "element":
            augment = Augment(pipe.augment, data.image_size)
            ds = ds.random_map(augment, seed=pipe.shuffle.seed + index)  # each rank its draws
        ds = ds.batch(batch_size, drop_remainder=True, batch_fn=_stack)
        buffer = pipe.grain.read_buffer_size
        it = ds.to_iter_dataset(
            grain.ReadOptions(
                num_threads=threads,
                prefetch_buffer_size=max(2, threads) if buffer == "auto" else int(buffer),
            )
        )
        if self.workers:
            it = it.mp_prefetch(
                grain.MultiprocessingOptions(
                    num_workers=self.workers, per_worker_buffer_size=worker_buffer(pipe)
                )
            )
        if os.environ.get(TRACK_STAGES):  # the stage benchmark's: Grain times its nodes
            experimental = grain.experimental
            it = experimental.WithOptionsIterDataset(
                it,
                experimental.DatasetOptions(
                    execution_tracking_mode=experimental.ExecutionTrackingMode.STAGE_TIMING
                ),
            )
        self.dataset = it
        self.iterator: Any = None
        self.shape = (batch_size, data.image_size, data.image_size, 3)
        self.batch_augment = (
            batch_augment(pipe.augment, data.image_size)
            if pipe.augment.enabled and pipe.augment.placement == "batch"
            else None
        )

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        if self.iterator is None:
            self.iterator = iter(self.dataset)
        for x, y in self.iterator:
            yield (x, y) if self.batch_augment is None else self.batch_augment(x, y)

    def close(self) -> None:
        """Its worker processes ended (Grain's iterator closed)."""
        close = getattr(self.iterator, "close", None)
        if close is not None:
            close()


def _stack(elements: list[tuple[numpy.ndarray, int]]) -> tuple[numpy.ndarray, numpy.ndarray]:
    return (
        numpy.stack([e[0] for e in elements]),
        numpy.asarray([e[1] for e in elements], dtype=numpy.int32),
    )


def grain_stage_ms(pipeline: Any) -> dict[str, float]:
    """Grain's own time a stage spends on one element (ms), by pipeprof's stage name, from the
    execution summary of ``pipeline``'s iterator; empty where Grain has none to give."""
    iterator = getattr(pipeline, "iterator", None)
    if iterator is None:
        return {}
    try:
        from grain._src.python.dataset import dataset as grain_dataset

        stats = getattr(iterator, "_stats", None)
        if stats is not None:
            stats.report()
        summary = grain_dataset.get_execution_summary(iterator)
    except (ImportError, AttributeError, ValueError):  # no summary, or other internals
        return {}
    out: dict[str, float] = {}
    for node in summary.nodes.values():
        # "MapMapDataset(transform=<pipeprof.inputs.grain.Element object at 0x...>)",
        # "BatchMapDataset(batch_size=32, drop_remainder=True)"
        named = re.search(r"transform=<[\w.]*?(\w+) object", node.name)
        kind = named.group(1) if named else node.name.split("(", 1)[0].replace("MapDataset", "")
        stage = STAGE_OF_NODE.get(kind)
        if stage is None or node.num_produced_elements <= 0:
            continue
        out[stage] = (
            out.get(stage, 0.0) + node.total_processing_time_ns / node.num_produced_elements / 1e6
        )
    return out


def batch_augment(augment: AugmentConfig, size: int) -> Callable[[Any, Any], Any]:
    """The same augmentation on a whole NHWC batch, each image its own draw."""
    m = Magnitudes.of(augment)
    rng = numpy.random.default_rng(0)

    def apply(x: Any, y: Any) -> Any:
        return numpy.stack([augment_array(img, m, augment.flip, size, rng) for img in x]), y

    return apply


class GrainInputs:
    name = "grain"
    # Keras 3 on JAX: its batches laid out over the devices as numpy arrays (tf.distribute
    # distributes tf.data datasets only)
    engines = ("data_parallel",)
    grain_knobs = True  # it reads [pipeline.grain]; other libraries refuse those keys
    own_stage_ms = staticmethod(grain_stage_ms)  # Grain's own timing of its stages
    code_name = "grain.py.txt"  # tune's winner as Grain's own calls
    shuffles_indices = True  # Grain's shuffle permutes indices: no buffer to fill

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
    ) -> GrainPipeline:
        try:
            import grain  # noqa: F401
        except ImportError as exc:
            raise PipeprofError(
                f"data.library grain needs Grain ({exc}): pip install 'pipeprof[grain]'"
            ) from None
        files, labels = labelled_folder(data, pipe, data_root, self.name)
        return GrainPipeline(list(zip(files, labels)), data, pipe, shard, batch_size, epochs)

    def element_spec(self, pipeline: Any) -> Any:
        return (pipeline.shape, (pipeline.shape[0],))

    def spec_of(self, batch_size: int, input_shape: tuple[int, int, int]) -> Any:
        return ((batch_size, *input_shape), (batch_size,))

    def synthetic_batch(self, spec: Any, num_classes: int, seed: int = 0) -> tuple[Any, Any]:
        rng = numpy.random.default_rng(seed)
        x_shape, y_shape = spec
        return (
            rng.random(x_shape, dtype=numpy.float32),
            rng.integers(0, num_classes, y_shape, dtype=numpy.int32),
        )

    def restartable(self, pipe: PipelineConfig) -> bool:
        return False  # one iterator, its workers kept: each new one would spawn them again

    def epoch_elements(
        self, data: DataConfig, pipe: PipelineConfig, data_root: str, shard: tuple[int, int]
    ) -> int | None:
        return None  # asked of a restartable pipeline only, and Grain's is not

    def batch_augment(self, augment: AugmentConfig, size: int) -> Callable[[Any, Any], Any]:
        return batch_augment(augment, size)
