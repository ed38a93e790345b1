"""The tuning space: which pipeline knobs, which values, and how a point becomes a pipeline."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pipeprof.scenario import CacheConfig, PipelineConfig

Point = dict[str, Any]


@dataclass(frozen=True)
class Dimension:
    # tf.data: prefetch | parallel_calls | private_threadpool_size | max_intra_op_parallelism |
    # cache | shuffle_buffer; a DataLoader: cache | num_workers | prefetch_factor |
    # persistent_workers | pin_memory; Grain: cache | worker_count | worker_buffer_size |
    # read_threads
    name: str
    values: tuple[Any, ...]


# the DataLoader's knobs: the point's key is the [pipeline.loader] key
LOADER_KNOBS = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory")
# PyTorch's own defaults, as a user's DataLoader(dataset, batch_size) has them
PYTORCH_DEFAULTS = {
    "num_workers": 0,
    "prefetch_factor": 2,
    "persistent_workers": False,
    "pin_memory": False,
}


# Grain's knobs: the point's key is the [pipeline.grain] key
GRAIN_KNOBS = ("worker_count", "worker_buffer_size", "read_threads")
# Grain's own defaults, as a user's ``ds.to_iter_dataset()`` has them: no worker process
# (mp_prefetch not called), ReadOptions' 16 read threads (its read buffer of 500 elements is
# pipeprof's read_buffer_size, which tune leaves as the scenario has it)
GRAIN_DEFAULTS = {"worker_count": 0, "worker_buffer_size": 1, "read_threads": 16}


def grain_space(cores: int) -> list[Dimension]:
    """Grain's space on the cores one rank has: the cache first, then the worker processes
    (none: batches made in the rank's read threads, Grain's default), the batches each keeps
    ready, and the read threads of each process."""
    return [
        Dimension("cache", ("off", "before_augment")),
        Dimension("worker_count", tuple(dict.fromkeys([0, max(1, cores // 2), cores, 2 * cores]))),
        Dimension("worker_buffer_size", (1, 2, 4)),
        Dimension("read_threads", tuple(dict.fromkeys([1, cores, 16]))),
    ]


def loader_space(cores: int, gpu: bool = False) -> list[Dimension]:
    """A DataLoader's space on the cores one rank has: the cache first (as for tf.data), then
    the worker processes (none: batches made in the training process, PyTorch's default), the
    batches each keeps ready, and whether they outlive an epoch. ``pin_memory`` only where a
    GPU is (pinned host memory speeds the copy to a device; without one it copies nothing)."""
    dims = [
        Dimension("cache", ("off", "before_augment")),
        Dimension("num_workers", tuple(dict.fromkeys([0, max(1, cores // 2), cores, 2 * cores]))),
        Dimension("prefetch_factor", (1, 2, 4)),
        Dimension("persistent_workers", (True, False)),
    ]
    if gpu:
        dims.append(Dimension("pin_memory", (False, True)))
    return dims


def default_space(cores: int, shuffle: bool = True) -> list[Dimension]:
    """A compact space around the cores one rank has: what tf.data's guide says matters."""
    par = tuple(dict.fromkeys([1, cores, 2 * cores])) + ("autotune",)
    pools = tuple(dict.fromkeys([0, cores, 2 * cores]))
    # The cache first: where it fits it removes reading and decoding from every epoch after the
    # first, the largest change in this space (+74% on quickstart at 1 core, where no threading
    # knob moved the grid's mean by more than 7%), and the threading knobs' best values depend on it.
    # Sweeping them before it spends a pass tuning a regime the search then leaves.
    dims = [
        Dimension("cache", ("off", "before_augment")),
        Dimension("parallel_calls", par),
        Dimension("prefetch", (1, 4, "autotune")),
        Dimension("private_threadpool_size", pools),
        Dimension("max_intra_op_parallelism", (0, 1)),
    ]
    if shuffle:
        dims.append(Dimension("shuffle_buffer", (256, 1024, 4096)))
    return dims


def point_of(pipe: PipelineConfig, space: list[Dimension]) -> Point:
    """The scenario's own settings as a point (values outside the space are kept as they are)."""
    full = {
        "parallel_calls": pipe.parallel_calls,
        "prefetch": pipe.prefetch.depth if pipe.prefetch.enabled else 1,
        "private_threadpool_size": pipe.private_threadpool_size,
        "max_intra_op_parallelism": pipe.max_intra_op_parallelism,
        "cache": "off"
        if not (pipe.cache.enabled and pipe.cache.kind == "memory")
        else pipe.cache.placement,
        "shuffle_buffer": pipe.shuffle.buffer_size,
        **{k: getattr(pipe.loader, k) for k in LOADER_KNOBS},
        **{k: getattr(pipe.grain, k) for k in GRAIN_KNOBS},
    }
    return {d.name: full[d.name] for d in space}


def defaults_point(pipe: PipelineConfig, space: list[Dimension]) -> Point:
    """What a user gets without tuning, as the baseline beside the winner: tf.data left to
    itself (AUTOTUNE, default thread pools), a DataLoader with PyTorch's defaults, or Grain
    with its own; the scenario's cache and shuffle buffer either way."""
    for knobs, defaults in ((LOADER_KNOBS, PYTORCH_DEFAULTS), (GRAIN_KNOBS, GRAIN_DEFAULTS)):
        if any(d.name in knobs for d in space):
            p = point_of(pipe, space)
            p.update({k: v for k, v in defaults.items() if k in p})
            return p
    return autotune_point(pipe, space)


def defaults_label(space: list[Dimension]) -> str:
    """How the output names ``defaults_point``."""
    if any(d.name in LOADER_KNOBS for d in space):
        return "PyTorch defaults"
    return "Grain defaults" if any(d.name in GRAIN_KNOBS for d in space) else "AUTOTUNE"


def autotune_point(pipe: PipelineConfig, space: list[Dimension]) -> Point:
    """tf.data left to itself: AUTOTUNE everywhere, default thread pools, the scenario's cache and buffer."""
    p = point_of(pipe, space)
    p.update(
        {
            k: v
            for k, v in {
                "parallel_calls": "autotune",
                "prefetch": "autotune",
                "private_threadpool_size": 0,
                "max_intra_op_parallelism": 0,
            }.items()
            if k in p
        }
    )
    return p


def apply(pipe: PipelineConfig, point: Point) -> PipelineConfig:
    p = pipe
    if "parallel_calls" in point:
        p = dataclasses.replace(p, parallel_calls=point["parallel_calls"])
    if "prefetch" in point:
        p = dataclasses.replace(
            p, prefetch=dataclasses.replace(p.prefetch, enabled=True, depth=point["prefetch"])
        )
    if "private_threadpool_size" in point:
        p = dataclasses.replace(p, private_threadpool_size=point["private_threadpool_size"])
    if "max_intra_op_parallelism" in point:
        p = dataclasses.replace(p, max_intra_op_parallelism=point["max_intra_op_parallelism"])
    if "cache" in point:
        p = dataclasses.replace(
            p,
            cache=CacheConfig(enabled=False)
            if point["cache"] == "off"
            else CacheConfig(enabled=True, kind="memory", placement=point["cache"]),
        )
    if knobs := {k: point[k] for k in LOADER_KNOBS if k in point}:
        p = dataclasses.replace(p, loader=dataclasses.replace(p.loader, **knobs))
    if knobs := {k: point[k] for k in GRAIN_KNOBS if k in point}:
        p = dataclasses.replace(p, grain=dataclasses.replace(p.grain, **knobs))
    if "shuffle_buffer" in point and p.shuffle.enabled:
        p = dataclasses.replace(
            p, shuffle=dataclasses.replace(p.shuffle, buffer_size=point["shuffle_buffer"])
        )
    return p


def key(point: Point) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in point.items()))


def grid(space: list[Dimension]) -> list[Point]:
    points: list[Point] = [{}]
    for d in space:
        points = [{**p, d.name: v} for p in points for v in d.values]
    return points


def fragment_toml(pipe: PipelineConfig, loader: bool = False, grain: bool = False) -> str:
    """The tuned settings as a scenario fragment (``pipeprof compare --overlay``); ``loader``:
    a DataLoader's, whose [pipeline.loader] knobs it holds in place of tf.data's; ``grain``:
    Grain's [pipeline.grain]."""

    def val(v: Any) -> str:
        return (
            str(v).lower() if isinstance(v, bool) else (f'"{v}"' if isinstance(v, str) else str(v))
        )

    lines = [
        "# written by pipeprof tune: merge with `pipeprof compare SCENARIO --overlay THIS_FILE`"
    ]
    if loader:
        lines.append("[pipeline.loader]")
        lines += [f"{k} = {val(getattr(pipe.loader, k))}" for k in LOADER_KNOBS]
    elif grain:
        lines.append("[pipeline.grain]")
        lines += [f"{k} = {val(getattr(pipe.grain, k))}" for k in GRAIN_KNOBS]
    else:
        lines.append("[pipeline]")
        for k in ("parallel_calls", "private_threadpool_size", "max_intra_op_parallelism"):
            lines.append(f"{k} = {val(getattr(pipe, k))}")
        lines += [
            "",
            "[pipeline.prefetch]",
            f"enabled = {val(pipe.prefetch.enabled)}",
            f"depth = {val(pipe.prefetch.depth)}",
        ]
    lines += [
        "",
        "[pipeline.cache]",
        f"enabled = {val(pipe.cache.enabled)}",
        f"kind = {val(pipe.cache.kind)}",
        f"placement = {val(pipe.cache.placement)}",
        "",
        "[pipeline.shuffle]",
        f"buffer_size = {pipe.shuffle.buffer_size}",
    ]
    return "\n".join(lines) + "\n"


def tfdata_code(pipe: PipelineConfig) -> str:
    """The equivalent tf.data calls, for users who build their own pipeline."""
    par = "tf.data.AUTOTUNE" if pipe.parallel_calls == "autotune" else str(pipe.parallel_calls)
    depth = "tf.data.AUTOTUNE" if pipe.prefetch.depth == "autotune" else str(pipe.prefetch.depth)
    lines = ["options = tf.data.Options()"]
    if pipe.private_threadpool_size:
        lines.append(f"options.threading.private_threadpool_size = {pipe.private_threadpool_size}")
    if pipe.max_intra_op_parallelism:
        lines.append(
            f"options.threading.max_intra_op_parallelism = {pipe.max_intra_op_parallelism}"
        )
    lines.append(f"ds = ds.map(read_decode_and_label, num_parallel_calls={par})")
    if pipe.cache.enabled and pipe.cache.placement == "before_augment":
        lines.append("ds = ds.cache()")
    if pipe.shuffle.enabled:
        lines.append(f"ds = ds.shuffle({pipe.shuffle.buffer_size})")
    lines.append("ds = ds.repeat()")
    if pipe.augment.enabled:
        lines.append(f"ds = ds.map(augment, num_parallel_calls={par})")
    lines += [
        "ds = ds.batch(batch_size, drop_remainder=True)",
        f"ds = ds.prefetch({depth})",
        "ds = ds.with_options(options)",
    ]
    return "\n".join(lines)


def dataloader_code(pipe: PipelineConfig, cores: int) -> str:
    """The equivalent DataLoader call, for users who build their own loader: each "auto" as
    the value it takes on a rank of ``cores`` cores."""
    from pipeprof.inputs.dataloader import prefetch_count, worker_count

    knobs = pipe.loader
    workers = worker_count(pipe, 1, cores)
    lines = [
        "sampler = DistributedSampler(dataset, shuffle=True, drop_last=True)",
        "loader = DataLoader(",
        "    dataset,",
        "    batch_size=batch_size,",
        "    sampler=sampler,",
        "    drop_last=True,",
        f"    num_workers={workers},",
    ]
    if workers != 0:
        lines.append(f"    prefetch_factor={prefetch_count(pipe, workers)},")
        lines.append(f"    persistent_workers={knobs.persistent_workers},")
    pin = "torch.cuda.is_available()" if knobs.pin_memory == "auto" else str(knobs.pin_memory)
    lines.append(f"    pin_memory={pin},")
    lines.append(")")
    if pipe.cache.enabled:
        lines.insert(0, "# the dataset keeps each decoded element it makes (a cache per worker)")
    return "\n".join(lines)


def grain_code(pipe: PipelineConfig, cores: int) -> str:
    """The equivalent Grain calls, for users who build their own dataset: each "auto" as the
    value it takes on a rank of ``cores`` cores."""
    from pipeprof.inputs.grain import read_threads, worker_buffer, worker_count

    workers = worker_count(pipe, 1, cores)
    threads = read_threads(pipe, workers, 1)
    lines = ["ds = grain.MapDataset.source(files_and_labels)[rank::ranks]"]
    if pipe.shuffle.enabled:
        lines.append(f"ds = ds.shuffle(seed={pipe.shuffle.seed} + rank)")
    lines += ["ds = ds.repeat()", "ds = ds.map(read_decode_and_label)"]
    if pipe.augment.enabled and pipe.augment.placement == "element":
        lines.append(f"ds = ds.random_map(augment, seed={pipe.shuffle.seed} + rank)")
    lines += [
        "ds = ds.batch(batch_size, drop_remainder=True)",
        f"ds = ds.to_iter_dataset(grain.ReadOptions(num_threads={threads}))",
    ]
    if workers:
        lines.append(
            "ds = ds.mp_prefetch(grain.MultiprocessingOptions("
            f"num_workers={workers}, per_worker_buffer_size={worker_buffer(pipe)}))"
        )
    if pipe.cache.enabled:
        lines.insert(0, "# read_decode_and_label keeps each element it makes (a cache per process)")
    return "\n".join(lines)
