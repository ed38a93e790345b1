"""PyTorch's DataLoader as an input library (``data.library = "dataloader"``), with the scenario's
stages and no TensorFlow: a map-style dataset over an image folder, each element read, decoded
(Pillow), labelled from its folder, through the user's map, cached, augmented, in that order;
a ``DistributedSampler`` for the rank's shard and the shuffle; batches from the loader's
worker processes.

How the scenario's knobs become the loader's:

- ``pipeline.parallel_calls``: ``num_workers`` ("autotune": the rank's share of the cores);
- ``pipeline.prefetch.depth``: ``prefetch_factor``, batches each worker keeps ready
  ("autotune": PyTorch's default, 2); ``prefetch.enabled = false``: 1;
- ``pin_memory`` on a GPU host; workers are persistent (``persistent_workers``), so a
  round's new iterator does not start them again, as a user's training keeps its loader's
  workers across epochs;
- ``pipeline.shuffle``: the sampler's shuffle (the same order on every rank, each its own
  shard, reshuffled each epoch); the buffer size has no meaning here;
- ``pipeline.cache`` (memory): each worker keeps the decoded elements it has made, so the
  cache fills over the epochs as the sampler hands each worker its share.
- ``pipeline.read.throttle_mb_s``: each read sleeps as storage of that rate per rank, shared by
  the rank's workers.

A batch is float32 NCHW images in 0..1 and int64 labels, on the host: the framework's step
moves it to the device.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy

from pipeprof.data.files import labelled_folder, read_image, scan_image_folder
from pipeprof.data.magnitudes import Magnitudes
from pipeprof.errors import PipeprofError
from pipeprof.launch import topology
from pipeprof.models import resolve_callable
from pipeprof.rank.identity import identity
from pipeprof.scenario import AugmentConfig, DataConfig, PipelineConfig

DEFAULT_PREFETCH_FACTOR = 2  # PyTorch's


def augment_image(torch: Any, x: Any, m: Magnitudes, flip: bool, size: int) -> Any:
    """One CHW image augmented as ``pipeline.make_augment`` does with tf.image: flip,
    crop-and-resize, rotation (reflected edges), brightness, contrast, clipped to 0..1."""
    functional = torch.nn.functional
    if flip and torch.rand(()) < 0.5:
        x = torch.flip(x, [2])
    if m.min_area < 1.0:
        side = math.sqrt(float(torch.empty(()).uniform_(m.min_area, 1.0)))
        crop = max(1, round(side * size))
        top, left = (int(torch.randint(0, size - crop + 1, ())) for _ in range(2))
        x = x[:, top : top + crop, left : left + crop]
        x = functional.interpolate(x[None], size=(size, size), mode="bilinear")[0]
    if m.max_angle > 0:
        angle = float(torch.empty(()).uniform_(-m.max_angle, m.max_angle))
        cos, sin = math.cos(angle), math.sin(angle)
        theta = torch.tensor([[[cos, -sin, 0.0], [sin, cos, 0.0]]], dtype=x.dtype)
        grid = functional.affine_grid(theta, [1, *x.shape], align_corners=False)
        x = functional.grid_sample(
            x[None], grid, mode="bilinear", padding_mode="reflection", align_corners=False
        )[0]
    if m.brightness > 0:
        x = x + float(torch.empty(()).uniform_(-m.brightness, m.brightness))
    if m.contrast > 0:
        mean = x.mean(dim=(1, 2), keepdim=True)
        x = mean + (x - mean) * float(torch.empty(()).uniform_(1 - m.contrast, 1 + m.contrast))
    return x.clamp(0.0, 1.0)


class FolderImages:
    """The map-style dataset: element ``i`` is file ``i`` through the stages before batching.
    Made in the rank and copied into each loader worker (its cache is the worker's own)."""

    def __init__(self, files: list[str], labels: list[int], data: DataConfig, pipe: PipelineConfig):
        self.files, self.labels, self.data, self.pipe = files, labels, data, pipe
        self.cache: dict[int, tuple[numpy.ndarray, int]] = {}
        self.read_s_per_byte = 0.0  # set by the loader: the rank's throttle over its workers
        self.user_map: Callable[..., Any] | None = (
            resolve_callable(pipe.map.function, "pipeline.map.function")
            if pipe.map.function
            else None
        )
        self.magnitudes = Magnitudes.of(pipe.augment)
        self.augment_here = pipe.augment.enabled and pipe.augment.placement == "element"

    def __len__(self) -> int:
        return len(self.files)

    def element(self, i: int) -> tuple[numpy.ndarray, int]:
        """Read, decode and label file ``i`` (from the cache where it holds it)."""
        if i in self.cache:
            return self.cache[i]
        reduced = self.pipe.read.decode == "reduced"
        image = read_image(self.files[i], self.data.image_size, reduced, self.read_s_per_byte)
        label = self.labels[i] if self.pipe.label.enabled else 0
        if self.pipe.cache.enabled:
            self.cache[i] = (image, label)
        return image, label

    def __getitem__(self, i: int) -> tuple[Any, int]:
        import torch

        image, label = self.element(i)
        if self.user_map is not None:
            image, label = self.user_map(image, label, **self.pipe.map.kwargs)
        x = torch.from_numpy(numpy.ascontiguousarray(numpy.asarray(image).transpose(2, 0, 1)))
        if self.augment_here:
            x = augment_image(
                torch, x, self.magnitudes, self.pipe.augment.flip, self.data.image_size
            )
        return x, int(label)


def worker_count(pipe: PipelineConfig, local_ranks: int, cores: int | None = None) -> int:
    """The loader's worker processes: ``loader.num_workers``, else ``parallel_calls``, whose
    "autotune" is the cores each of the host's ``local_ranks`` ranks has (of ``cores``, or
    the cores this process may use)."""
    if pipe.loader.num_workers != "auto":
        return int(pipe.loader.num_workers)
    if pipe.parallel_calls == "autotune":
        return topology.cores_per_rank(local_ranks, cores)
    return int(pipe.parallel_calls)


def prefetch_count(pipe: PipelineConfig, workers: int) -> int | None:
    """The batches each loader worker keeps ready (``prefetch_factor``): ``loader.
    prefetch_factor``, else ``prefetch.depth`` (1 with prefetch off; "autotune": PyTorch's 2);
    None without workers, where PyTorch takes none."""
    if not workers:
        return None
    if pipe.loader.prefetch_factor != "auto":
        return int(pipe.loader.prefetch_factor)
    if not pipe.prefetch.enabled:
        return 1
    if pipe.prefetch.depth == "autotune":
        return DEFAULT_PREFETCH_FACTOR
    return int(pipe.prefetch.depth)


class Loader:
    """A rank's pipeline: an iterable of (x, y) batches over ``epochs`` epochs (None: on and
    on), each ``iter`` an iterator of its own from the same loader and its workers."""

    def __init__(self, dataset: FolderImages, shard: tuple[int, int], batch_size: int,
                 pipe: PipelineConfig, epochs: int | None) -> None:  # fmt: skip
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        self.torch, self.batch_size, self.epochs = torch, batch_size, epochs
        index, count = shard
        self.sampler = DistributedSampler(
            dataset,
            num_replicas=count,
            rank=index,
            shuffle=pipe.shuffle.enabled,
            seed=pipe.shuffle.seed,
            drop_last=True,
        )
        if len(self.sampler) < batch_size:
            raise PipeprofError(
                f"data: shard {index} of {count} holds {len(self.sampler)} images, fewer than "
                f"one batch of {batch_size}"
            )
        knobs = pipe.loader
        workers = worker_count(pipe, identity().local_size)
        self.workers = workers
        if pipe.read.throttle_mb_s:
            dataset.read_s_per_byte = max(1, workers) / (pipe.read.throttle_mb_s * 1e6)
        prefetch = prefetch_count(pipe, workers)
        self.timeout_s = knobs.timeout_s
        self.loader = DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=self.sampler,
            drop_last=True,
            num_workers=workers,
            prefetch_factor=prefetch,
            persistent_workers=workers > 0 and knobs.persistent_workers,
            pin_memory=torch.cuda.is_available()
            if knobs.pin_memory == "auto"
            else bool(knobs.pin_memory),
            timeout=knobs.timeout_s if workers else 0,
        )
        self.batch_augment = (
            batch_augment(pipe.augment, dataset.data.image_size)
            if pipe.augment.enabled and pipe.augment.placement == "batch"
            else None
        )
        self.shape = (batch_size, 3, dataset.data.image_size, dataset.data.image_size)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        epoch = 0
        while self.epochs is None or epoch < self.epochs:
            self.sampler.set_epoch(epoch)
            batches = iter(self.loader)
            try:
                for x, y in batches:
                    yield (x, y) if self.batch_augment is None else self.batch_augment(x, y)
            except RuntimeError as exc:
                line = worker_failure(str(exc), self.timeout_s, exit_codes(batches))
                if line is None:
                    raise
                raise PipeprofError(line) from None
            epoch += 1


# PyTorch's words for a loader worker that is gone (torch/utils/data/dataloader.py and
# _utils/signal_handling.py, 2.4 to 2.13): killed by a signal, exited, or silent past the timeout
_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)\.")
_EXITED = re.compile(r"DataLoader worker \(pid (\d+)\) exited unexpectedly with exit code (-?\d+)")
_GONE = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")
_TIMED_OUT = re.compile(r"DataLoader timed out after ([\d.]+) seconds")


def exit_codes(batches: Any) -> dict[int, int]:
    """The exit codes of a loader iterator's workers that have ended, by pid (negative: the
    signal that ended it). PyTorch's message names the pid only when its SIGCHLD handler
    ran, which it sets in the main thread alone; the iterator's worker processes (a private
    attribute, there since PyTorch 1.2) still hold how each ended."""
    codes = {}
    for worker in getattr(batches, "_workers", ()):
        code = getattr(worker, "exitcode", None)
        if code is not None and worker.pid is not None:
            codes[worker.pid] = code
    return codes


def _signal_cause(number: int) -> str:
    import signal

    if number == signal.SIGKILL:
        return "killed by SIGKILL (a kill -9, or the kernel's out-of-memory killer)"
    if number == signal.SIGBUS:
        return _SHM
    try:
        return f"killed by {signal.Signals(number).name}"
    except ValueError:  # a number Python has no name for
        return f"killed by signal {number}"


_SHM = (
    "killed by SIGBUS: out of shared memory (/dev/shm); give the host or container more "
    "(docker --shm-size), or lower pipeline.loader.num_workers or prefetch_factor"
)


def worker_failure(
    message: str, timeout_s: float, codes: dict[int, int] | None = None, waiting: bool = True
) -> str | None:
    """One line naming the loader worker that failed and why, from PyTorch's error ``message``
    and the workers' exit ``codes`` by pid; None for any other error. ``waiting``: the error
    came from the loader's ``next()`` (else from PyTorch's SIGCHLD handler, anywhere)."""
    codes = codes or {}
    during = "while the rank waited for its batch" if waiting else "during the run"
    if m := _KILLED.search(message):
        pid, signal_name = m.groups()
        if "Bus error" in signal_name or "shared memory" in message:
            cause = _SHM
        elif signal_name.strip() == "Killed":
            cause = "killed by SIGKILL (a kill -9, or the kernel's out-of-memory killer)"
        else:
            cause = f"killed by signal {signal_name.strip()}"
        return f"data.library dataloader: loader worker pid {pid} {cause}"
    if m := _EXITED.search(message):
        return (
            f"data.library dataloader: loader worker pid {m.group(1)} exited with code "
            f"{m.group(2)} {during}"
        )
    if m := _GONE.search(message):
        pids = [int(p) for p in m.group(1).replace(",", " ").split()]
        said = []
        for pid in pids:
            code = codes.get(pid)
            if code is None:
                said.append(f"loader worker pid {pid} exited")
            elif code < 0:
                said.append(f"loader worker pid {pid} {_signal_cause(-code)}")
            else:
                said.append(f"loader worker pid {pid} exited with code {code}")
        return f"data.library dataloader: {'; '.join(said)}, {during}"
    if m := _TIMED_OUT.search(message):
        seconds = float(m.group(1)) if math.isnan(timeout_s) else timeout_s  # nan: as said
        return (
            f"data.library dataloader: no loader worker handed over a batch in {seconds:g} s "
            "(pipeline.loader.timeout_s): a worker is hung"
        )
    return None


def batch_augment(augment: AugmentConfig, size: int) -> Callable[[Any, Any], Any]:
    """The same augmentation on a whole NCHW batch, each image its own draw."""
    import torch

    m = Magnitudes.of(augment)

    def apply(x: Any, y: Any) -> Any:
        return torch.stack([augment_image(torch, img, m, augment.flip, size) for img in x]), y

    return apply


class DataLoaderInputs:
    name = "dataloader"
    loader_knobs = True  # it reads [pipeline.loader]; other libraries refuse those keys
    code_name = "dataloader.py.txt"  # tune's winner as a DataLoader call
    shuffles_indices = True  # its sampler permutes indices: no buffer to fill

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
    ) -> Loader:
        files, labels = labelled_folder(data, pipe, data_root, self.name)
        dataset = FolderImages(files, labels, data, pipe)
        return Loader(dataset, shard, batch_size, pipe, epochs)

    def element_spec(self, pipeline: Any) -> Any:
        return (pipeline.shape, (pipeline.shape[0],))

    def spec_of(self, batch_size: int, input_shape: tuple[int, int, int]) -> Any:
        height, width, channels = input_shape
        return ((batch_size, channels, height, width), (batch_size,))

    def synthetic_batch(self, spec: Any, num_classes: int, seed: int = 0) -> tuple[Any, Any]:
        import torch

        made = torch.Generator().manual_seed(seed)
        x_shape, y_shape = spec
        return (
            torch.rand(x_shape, generator=made),
            torch.randint(0, num_classes, y_shape, generator=made),
        )

    def restartable(self, pipe: PipelineConfig) -> bool:
        return True

    def epoch_elements(
        self, data: DataConfig, pipe: PipelineConfig, data_root: str, shard: tuple[int, int]
    ) -> int | None:
        if pipe.cache.enabled:
            return None  # each worker's cache fills over several epochs: no one epoch fills it
        return len(scan_image_folder(data_root).files) // shard[1]

    def batch_augment(self, augment: AugmentConfig, size: int) -> Callable[[Any, Any], Any]:
        return batch_augment(augment, size)
