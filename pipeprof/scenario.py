"""What to run: scenario dataclasses, TOML loading and validation.

A scenario is plain, frozen data. Precedence is defaults < scenario file < command-line
overrides; overrides arrive as dotted keys (``pipeline.augment.enabled=false``) and go
through the same validation as the file, so an error always names the key at fault.
This module imports neither TensorFlow nor Horovod.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipeprof.config import apply_overrides, build, deep_merge

# re-exported: the CLI loads scenarios and their overrides through here
from pipeprof.config import overlay_overrides as overlay_overrides
from pipeprof.config import parse_override as parse_override
from pipeprof.errors import PipeprofError
from pipeprof.models import MIN_INPUT_SIDE

Autotune = Literal["autotune"]
# Shipped inside the package, so any install has them; the repository's scenarios/ links here.
BUILTIN_SCENARIOS = Path(__file__).resolve().parent / "scenarios"
DEFAULT_SCENARIO = "quickstart"


@dataclass(frozen=True)
class GenerateConfig:
    """The built-in dataset generator (used when ``data.source = "generated"``)."""

    images: int = 2000  # how many images, split evenly over the classes
    size: int = 96  # side of the square images written to disk, in pixels
    classes: int = 10  # must equal data.num_classes
    seed: int = 0  # the same seed writes the same files
    format: Literal["jpeg", "png"] = "jpeg"
    quality: int = 90  # JPEG quality, 1..100


@dataclass(frozen=True)
class DataConfig:
    source: Literal["generated", "folder", "tfrecord", "factory"] = "generated"
    # folder: a directory with one sub-folder per class; tfrecord: a directory or glob of
    # ImageNet-layout TFRecord files; generated: where to write (empty: the data cache).
    path: str = ""
    factory: str = ""  # "module:function" when source = "factory"
    image_size: int = 64  # the model's input side, in pixels (small_cnn: 18 at least; resnet50v2, mobilenetv2: 32)
    num_classes: int = 10  # the model's outputs; labels run 0..num_classes-1
    label_offset: int = 0  # subtracted from TFRecord labels (ImageNet TFRecords count from 1)
    # a truncated, empty, unreadable or non-image file (or a corrupt TFRecord record): "skip"
    # it, counted and listed in the run directory; or "fail" the run, naming it
    on_bad_file: Literal["skip", "fail"] = "skip"
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    # what builds the pipeline (pipeprof.plugins: tfdata, dataloader, grain); "auto": the
    # framework's first
    library: str = "auto"


@dataclass(frozen=True)
class StageSwitch:
    enabled: bool = True


@dataclass(frozen=True)
class ReadConfig:
    enabled: bool = True
    # full: decode each image whole, then resize to the model's size. reduced: decode a JPEG at
    # 1/2, 1/4 or 1/8 of its size (libjpeg's DCT scaling, the largest that keeps it at least
    # data.image_size), then resize: far less work when the stored photos are much larger
    decode: Literal["full", "reduced"] = "full"
    # > 0: each rank reads its files at this many MB/s at most, as from a slow disk or a
    # network file system shared by many readers (emulated: the read waits, it uses no CPU);
    # what the pipeline would do on storage slower than this machine's. 0: as fast as it reads
    throttle_mb_s: float = 0.0


@dataclass(frozen=True)
class ShuffleConfig:
    enabled: bool = True
    buffer_size: int = 1024  # elements in tf.data's shuffle buffer
    # True: shuffle the whole file list with a seed shared by all ranks, then shard (each
    # rank gets a random disjoint subset, reshuffled every epoch). False: shard first,
    # then shuffle within the shard (a sorted list then gives class-clustered batches).
    files_before_shard: bool = True
    seed: int = 1234  # the file-list and buffer shuffles' seed (buffers: + rank)


@dataclass(frozen=True)
class MapConfig:
    """A transformation of your own, element by element after shuffle and before augment (a
    stage of the ladder and the stage benchmark, named "map")."""

    # "module:function" called once as function(**kwargs); it returns the map function,
    # (image, label) -> (image, label). Empty: no map stage
    function: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)  # the keyword arguments of that call


@dataclass(frozen=True)
class AugmentConfig:
    enabled: bool = True
    strength: float = 1.0  # multiplies every magnitude below
    flip: bool = True  # random left-right flip
    rotation_deg: float = 15.0  # random rotation up to this angle either way
    crop_scale_min: float = 0.6  # smallest crop, as a fraction of the image area
    brightness: float = 0.2  # random brightness shift up to this (images in 0..1)
    contrast: float = 0.2  # random contrast factor in 1 ± this
    # element: each image in its own map call before batching; batch: the whole batch in one
    # vectorised map after batching, each image with its own random draws as before; device:
    # the same batch augmentation inside the training step, on the rank's device (the pipeline
    # does none; on an emulated or CPU-trained device its cost lands in the step, on the CPU)
    placement: Literal["element", "batch", "device"] = "element"


@dataclass(frozen=True)
class CacheConfig:
    enabled: bool = False
    kind: Literal["memory", "file"] = "memory"
    path: str = ""  # file cache prefix (kind = "file"); empty: inside the run directory
    placement: Literal["before_augment", "after_augment"] = "before_augment"


@dataclass(frozen=True)
class PrefetchConfig:
    enabled: bool = True
    depth: int | Autotune = "autotune"  # batches prefetched


@dataclass(frozen=True)
class ServiceUse:
    """Run the pipeline on tf.data service workers instead of in the rank (the rank only
    takes the batches they send): the workers pipeprof starts for each launch (``[service]``),
    or those of a dispatcher already running at ``address``."""

    enabled: bool = False
    address: str = ""  # "host:port" of a running dispatcher; empty: the one pipeprof starts
    # how the workers send elements: "auto" as TensorFlow chooses (Snappy in 2.15: CPU on the
    # workers and the ranks to save network), "none" as they are (a fast network, short CPU)
    compression: Literal["auto", "none"] = "auto"


@dataclass(frozen=True)
class LoaderConfig:
    """PyTorch DataLoader's own knobs (``data.library = "dataloader"`` reads them; tf.data
    refuses them). "auto": what pipeprof derives from the stages, as its module says:
    ``num_workers`` from ``parallel_calls``, ``prefetch_factor`` from ``prefetch.depth``,
    ``pin_memory`` on a CUDA host."""

    num_workers: int | Literal["auto"] = "auto"
    prefetch_factor: int | Literal["auto"] = "auto"  # batches each worker keeps ready
    pin_memory: bool | Literal["auto"] = "auto"  # true, false, or auto: on a CUDA host
    # workers kept across a round's iterators and epochs; false: started anew with each
    # iterator, whose start is then counted in the input wait, as a user's epochs would pay it
    persistent_workers: bool = True
    # a worker that hands over no batch for this long is named as hung (DataLoader's timeout)
    timeout_s: float = 300.0

    def set_keys(self) -> list[str]:
        """The knobs set away from their defaults."""
        default = LoaderConfig()
        return [
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        ]


@dataclass(frozen=True)
class GrainConfig:
    """Grain's own knobs (``data.library = "grain"`` reads them; the other libraries refuse
    them). "auto": what pipeprof derives from the stages (``pipeprof.inputs.grain``):
    ``worker_count`` from ``parallel_calls``, ``worker_buffer_size`` from ``prefetch.depth``."""

    worker_count: int | Literal["auto"] = "auto"  # processes of mp_prefetch; 0: none
    worker_buffer_size: int | Literal["auto"] = "auto"  # batches each worker keeps ready
    read_threads: int | Literal["auto"] = "auto"  # ReadOptions.num_threads in each process
    read_buffer_size: int | Literal["auto"] = "auto"  # ReadOptions.prefetch_buffer_size

    def set_keys(self) -> list[str]:
        """The knobs set away from their defaults."""
        default = GrainConfig()
        return [
            f.name
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        ]


@dataclass(frozen=True)
class PipelineConfig:
    read: ReadConfig = field(default_factory=ReadConfig)
    label: StageSwitch = field(default_factory=StageSwitch)
    shuffle: ShuffleConfig = field(default_factory=ShuffleConfig)
    map: MapConfig = field(default_factory=MapConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    prefetch: PrefetchConfig = field(default_factory=PrefetchConfig)
    parallel_calls: int | Autotune = "autotune"
    private_threadpool_size: int = 0  # 0: tf.data's shared pool
    max_intra_op_parallelism: int = 0  # 0: tf.data's default
    deterministic: bool = False  # keep element order under parallel maps (slower)
    service: ServiceUse = field(default_factory=ServiceUse)
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    grain: GrainConfig = field(default_factory=GrainConfig)


@dataclass(frozen=True)
class ModelConfig:
    # small_cnn | resnet50v2 | mobilenetv2 | "module:function" (called as f(input_shape, num_classes))
    name: str = "small_cnn"


@dataclass(frozen=True)
class TrainConfig:
    # what makes training data-parallel: a distribution (pipeprof.plugins: horovod, mirrored,
    # multi_worker_mirrored, data_parallel); "auto": the first of horovod, data_parallel and
    # mirrored whose packages are installed
    engine: str = "auto"
    # what builds and trains the model (pipeprof.plugins: keras2); "auto": the engine's first
    framework: str = "auto"
    # how a tf.distribute engine feeds its replicas: "auto" (mirrored: global batches split by
    # experimental_distribute_dataset; multi_worker_mirrored: each worker's own shard through
    # distribute_datasets_from_function), or either function by name (mirrored takes both)
    distribute_input: str = "auto"
    batch_size: int = 32  # per worker when batch_mode = "per_worker", else global
    batch_mode: Literal["per_worker", "global"] = "per_worker"
    optimizer: Literal["sgd", "adam"] = "sgd"
    learning_rate: float = 0.01  # for one worker; scaled by lr_scaling
    lr_scaling: Literal["linear", "sqrt", "none"] = "linear"
    momentum: float = 0.9  # SGD momentum
    lr_warmup_steps: int = 0  # ramp from learning_rate to the scaled rate (Goyal et al.)
    warmup_steps: int = 5  # timed steps dropped from every variant
    # 0: measure each variant until its interval is narrow enough (analysis.stopping);
    # N: exactly N measured steps
    measure_steps: int = 0
    target_ci_pct: float = 2.0  # the gap's 95% half-width to reach, in points
    min_measure_s: float = 5.0  # adaptive measurement: at least this long per variant
    max_measure_s: float = 45.0  # and at most this long
    # CPU threads TensorFlow may use per rank for the model's ops; 0: cores / local ranks
    intra_op_threads: int = 0
    # "auto": the rank's GPU (or CPU); "emulated:MS": each model step is MS milliseconds of
    # device time that uses no CPU, plus a real allreduce of the model's gradient size
    device: str = "auto"


@dataclass(frozen=True)
class VariantConfig:
    """A real-data variant: a name and overrides of ``pipeline`` (same keys, any subset)."""

    name: str = "real"
    pipeline: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class LaunchConfig:
    np: list[int] = field(default_factory=lambda: [1, 2])  # worker counts, in order (--np)
    # what starts the ranks (pipeprof.plugins: horovodrun, mpirun, srun, local; --launcher);
    # "auto": srun inside a Slurm allocation, else the engine's own (launch.choose);
    # "external": a launcher of yours starts `pipeprof rank`
    launcher: str = "auto"
    hosts: str = ""  # the hosts and their slots, e.g. "node1:8,node2:8" (-H)
    hostfile: str = ""  # lines "node1 slots=8" (--hostfile)
    controller: Literal["gloo", "mpi"] = "gloo"
    oversubscribe: bool = False  # more ranks than this host's slots (--oversubscribe)
    network_interface: str = ""  # the ranks' interface, alike on all hosts (--network-interface)
    # launcher dask: the scheduler of a running Dask cluster whose workers run the ranks
    # (--scheduler, e.g. tcp://node1:8786); empty: a LocalCluster on this host for each launch
    scheduler: str = ""
    timeout_s: int = 3600  # per worker count; a hung launch is killed after this


@dataclass(frozen=True)
class TelemetryConfig:
    enabled: bool = True
    gpu_interval_ms: int = 100  # NVML sampling, 10 Hz
    host_interval_ms: int = 500  # psutil host and process sampling


@dataclass(frozen=True)
class ServiceConfig:
    """The tf.data service pipeprof starts around each launch for the variants that use it
    (``pipeline.service.enabled``, and the data-service remedy): a dispatcher on this host and
    ``workers`` worker processes, stopped when the launch ends."""

    workers: int = 2  # worker processes (each runs every rank's pipeline; --service-workers)
    # CPU hosts for the workers, over ssh; empty: this host
    hosts: list[str] = field(default_factory=list)
    port: int = 0  # the dispatcher's port; 0: any free port


@dataclass(frozen=True)
class Scenario:
    name: str = "unnamed"  # names the run directory
    description: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    variants: list[VariantConfig] = field(default_factory=lambda: [VariantConfig()])
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    service: ServiceConfig = field(default_factory=ServiceConfig)
    source_file: str = ""  # where it was loaded from (not a TOML key)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "scenario") -> Scenario:
        return build(cls, data, where, "")

    def variant_pipeline(self, variant: VariantConfig) -> PipelineConfig:
        """The pipeline of a real variant: the scenario's pipeline with its overrides."""
        merged = deep_merge(dataclasses.asdict(self.pipeline), variant.pipeline)
        return build(
            PipelineConfig,
            merged,
            self.source_file or "scenario",
            f"variants.{variant.name}.pipeline",
        )


def resolve_path(name_or_path: str | None) -> Path:
    """A scenario argument: a path to a TOML file, or the name of a built-in scenario."""
    if not name_or_path:
        name_or_path = DEFAULT_SCENARIO
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise PipeprofError(f"scenario file {name_or_path} does not exist")
        return path
    builtin = BUILTIN_SCENARIOS / f"{name_or_path}.toml"
    if builtin.is_file():
        return builtin
    known = sorted(p.stem for p in BUILTIN_SCENARIOS.glob("*.toml"))
    raise PipeprofError(
        f"unknown scenario '{name_or_path}': not a file, nor a built-in ({', '.join(known)})"
    )


def load(
    name_or_path: str | None = None, overrides: list[tuple[list[str], Any]] | None = None
) -> Scenario:
    """Load, override and validate a scenario. Every problem is a one-line PipeprofError."""
    path = resolve_path(name_or_path)
    where = str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PipeprofError(f"{where}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise PipeprofError(f"{where}: cannot read: {exc.strerror}") from None
    raw = apply_overrides(raw, overrides or [])
    scenario = dataclasses.replace(Scenario.from_dict(raw, where), source_file=where)
    validate(scenario, base_dir=path.parent)
    return scenario


def validate(s: Scenario, base_dir: Path | None = None) -> None:
    """Checks of meaning (types were checked while building)."""
    where = s.source_file or "scenario"

    def need(ok: bool, key: str, msg: str) -> None:
        if not ok:
            raise PipeprofError(f"{where}: {key} {msg}")

    d = s.data
    need(d.image_size >= 8, "data.image_size", f"must be at least 8, got {d.image_size}")
    if s.model.name in MIN_INPUT_SIDE:  # a user's model factory knows its own limit
        smallest = MIN_INPUT_SIDE[s.model.name]
        need(
            d.image_size >= smallest,
            "data.image_size",
            f"must be at least {smallest} for model.name = '{s.model.name}' (its convolutions leave nothing "
            f"of a smaller input), got {d.image_size}",
        )
    need(d.num_classes >= 2, "data.num_classes", f"must be at least 2, got {d.num_classes}")
    if d.source in ("folder", "tfrecord"):
        need(bool(d.path), "data.path", f"is required when data.source = '{d.source}'")
        p = Path(d.path).expanduser()
        if base_dir is not None and not p.is_absolute() and not p.exists():
            p = base_dir / p
        if d.source == "folder" or not any(c in d.path for c in "*?["):
            need(p.exists(), "data.path", f"'{d.path}' does not exist")
    if d.source == "factory":
        need(":" in d.factory, "data.factory", f"must be 'module:function', got {d.factory!r}")
    if d.source == "generated":
        g = d.generate
        need(
            g.images >= g.classes,
            "data.generate.images",
            f"must be at least data.generate.classes ({g.classes})",
        )
        need(
            g.classes == d.num_classes,
            "data.generate.classes",
            f"({g.classes}) must equal data.num_classes ({d.num_classes})",
        )
        need(g.size >= 8, "data.generate.size", f"must be at least 8, got {g.size}")
        need(1 <= g.quality <= 100, "data.generate.quality", f"must be 1..100, got {g.quality}")
    for v in s.variants:
        _check_pipeline(s.variant_pipeline(v), where, f"variants.{v.name}.pipeline", s.data.source)
    _check_pipeline(s.pipeline, where, "pipeline", s.data.source)
    names = [v.name for v in s.variants]
    need(len(names) == len(set(names)), "variants", f"names must be unique, got {names}")
    need(
        "synthetic" not in names,
        "variants",
        "must not be named 'synthetic' (that one is always run)",
    )
    from pipeprof import plugins
    from pipeprof.distributions import DISTRIBUTE_INPUTS

    launchers = plugins.names(plugins.LAUNCHER)
    need(
        s.launch.launcher in launchers or s.launch.launcher in (plugins.AUTO, plugins.EXTERNAL),
        "launch.launcher",
        f"must be {plugins.AUTO}, {plugins.EXTERNAL} or one of {', '.join(launchers)}, "
        f"got {s.launch.launcher!r}",
    )
    t = s.train
    for axis, value in ((plugins.DISTRIBUTION, t.engine), (plugins.FRAMEWORK, t.framework)):
        known = plugins.names(axis)
        need(
            value in known or value == plugins.AUTO,
            plugins.KEYS[axis],
            f"must be auto or one of {', '.join(known)}, got {value!r}",
        )
    known = plugins.names(plugins.INPUTS)
    need(
        s.data.library == plugins.AUTO or s.data.library in known,
        "data.library",
        f"must be auto or one of {', '.join(known)}, got {s.data.library!r}",
    )
    need(
        t.distribute_input in DISTRIBUTE_INPUTS,
        "train.distribute_input",
        f"must be one of {', '.join(DISTRIBUTE_INPUTS)}, got {t.distribute_input!r}",
    )
    takes = (
        DISTRIBUTE_INPUTS
        if t.engine == plugins.AUTO
        else plugins.capability(plugins.DISTRIBUTION, t.engine, "input_modes", DISTRIBUTE_INPUTS)
    )
    need(
        t.distribute_input in takes,
        "train.distribute_input",
        f"{t.distribute_input!r} is not for train.engine {t.engine}, which takes "
        f"{' or '.join(takes)}",
    )
    need(t.batch_size >= 1, "train.batch_size", f"must be at least 1, got {t.batch_size}")
    need(t.learning_rate > 0, "train.learning_rate", f"must be positive, got {t.learning_rate}")
    need(t.warmup_steps >= 0, "train.warmup_steps", f"must be >= 0, got {t.warmup_steps}")
    need(
        t.measure_steps == 0 or t.measure_steps >= 4,
        "train.measure_steps",
        f"must be 0 (adaptive) or at least 4 (for an interval), got {t.measure_steps}",
    )
    need(t.target_ci_pct > 0, "train.target_ci_pct", f"must be positive, got {t.target_ci_pct}")
    need(t.min_measure_s >= 0, "train.min_measure_s", f"must be >= 0, got {t.min_measure_s}")
    need(
        t.max_measure_s > 0 and t.max_measure_s >= t.min_measure_s,
        "train.max_measure_s",
        f"must be positive and at least train.min_measure_s ({t.min_measure_s:g}), got {t.max_measure_s:g}",
    )
    need(
        t.intra_op_threads >= 0, "train.intra_op_threads", f"must be >= 0, got {t.intra_op_threads}"
    )
    try:
        emulated_ms(t.device)
    except ValueError as exc:
        need(False, "train.device", str(exc))
    if t.batch_mode == "global":
        for n in s.launch.np:
            need(
                t.batch_size % n == 0,
                "train.batch_size",
                f"({t.batch_size}, global) must divide evenly by every worker count; {n} does not",
            )
    need(
        bool(s.launch.np) and all(n >= 1 for n in s.launch.np),
        "launch.np",
        f"must be positive worker counts, got {s.launch.np}",
    )
    need(s.launch.timeout_s > 0, "launch.timeout_s", f"must be positive, got {s.launch.timeout_s}")
    need(
        not (s.launch.hosts and s.launch.hostfile),
        "launch.hosts",
        "and launch.hostfile are exclusive: give one",
    )

    need(
        not s.launch.scheduler or plugins.places_ranks(s.launch.launcher),
        "launch.scheduler",
        f"({s.launch.scheduler!r}) is where --launcher dask runs its ranks; launch.launcher is "
        f"{s.launch.launcher!r}: add --launcher dask, or drop --scheduler",
    )
    need(
        s.telemetry.gpu_interval_ms >= 10,
        "telemetry.gpu_interval_ms",
        f"must be at least 10, got {s.telemetry.gpu_interval_ms}",
    )
    need(s.service.workers >= 1, "service.workers", f"must be at least 1, got {s.service.workers}")
    need(
        0 <= s.service.port <= 65535,
        "service.port",
        f"must be 0 (any free port) or a port number, got {s.service.port}",
    )
    need(
        s.telemetry.host_interval_ms >= 10,
        "telemetry.host_interval_ms",
        f"must be at least 10, got {s.telemetry.host_interval_ms}",
    )


def _check_pipeline(p: PipelineConfig, where: str, key: str, source: str = "") -> None:
    def need(ok: bool, sub: str, msg: str) -> None:
        if not ok:
            raise PipeprofError(f"{where}: {key}.{sub} {msg}")

    need(
        p.read.enabled,
        "read.enabled",
        "cannot be false for a real variant (the synthetic variant is the run without reading)",
    )
    need(
        p.shuffle.buffer_size >= 1,
        "shuffle.buffer_size",
        f"must be at least 1, got {p.shuffle.buffer_size}",
    )
    need(
        0.0 <= p.augment.strength <= 4.0,
        "augment.strength",
        f"must be within 0..4, got {p.augment.strength}",
    )
    need(
        0.05 <= p.augment.crop_scale_min <= 1.0,
        "augment.crop_scale_min",
        f"must be within 0.05..1, got {p.augment.crop_scale_min}",
    )
    need(
        p.augment.rotation_deg >= 0,
        "augment.rotation_deg",
        f"must be >= 0, got {p.augment.rotation_deg}",
    )
    need(
        not (
            p.augment.enabled
            and p.augment.placement != "element"
            and p.cache.enabled
            and p.cache.placement == "after_augment"
        ),
        "augment.placement",
        f'= "{p.augment.placement}" augments after batching, so it cannot go before a cache placed after_augment',
    )
    if isinstance(p.parallel_calls, int):
        need(
            p.parallel_calls >= 1,
            "parallel_calls",
            f"must be >= 1 or 'autotune', got {p.parallel_calls}",
        )
    if isinstance(p.prefetch.depth, int):
        need(
            p.prefetch.depth >= 1,
            "prefetch.depth",
            f"must be >= 1 or 'autotune', got {p.prefetch.depth}",
        )
    loader = p.loader
    if isinstance(loader.num_workers, int):
        need(
            loader.num_workers >= 0,
            "loader.num_workers",
            f"must be >= 0 (0: batches made in the rank) or 'auto', got {loader.num_workers}",
        )
    if isinstance(loader.prefetch_factor, int):
        need(
            loader.prefetch_factor >= 1,
            "loader.prefetch_factor",
            f"must be >= 1 or 'auto', got {loader.prefetch_factor}",
        )
    need(loader.timeout_s > 0, "loader.timeout_s", f"must be > 0, got {loader.timeout_s}")
    for knob, least, zero in (
        ("worker_count", 0, " (0: batches made in the rank's read threads)"),
        ("worker_buffer_size", 1, ""),
        ("read_threads", 1, ""),
        ("read_buffer_size", 1, ""),
    ):
        value = getattr(p.grain, knob)
        if isinstance(value, int):
            need(
                value >= least, f"grain.{knob}", f"must be >= {least}{zero} or 'auto', got {value}"
            )
    address = p.service.address
    need(
        not address or (":" in address and address.rsplit(":", 1)[1].isdigit()),
        "service.address",
        f"must be 'host:port' of a tf.data service dispatcher, got {address!r}",
    )
    need(
        not (p.service.enabled and p.cache.enabled and p.cache.kind == "file"),
        "service.enabled",
        "cannot go with a file cache (the service's workers would each write it)",
    )
    need(
        p.read.throttle_mb_s >= 0,
        "read.throttle_mb_s",
        f"must be >= 0 (0: no limit), got {p.read.throttle_mb_s}",
    )
    need(
        not (p.read.throttle_mb_s and source == "factory"),
        "read.throttle_mb_s",
        'limits reading files, and data.source = "factory" reads none (put the limit in the factory)',
    )
    need(
        not (p.read.throttle_mb_s and p.service.enabled),
        "read.throttle_mb_s",
        "cannot go with the tf.data service (the limit is a Python function, which the service's workers cannot run)",
    )
    need(
        not p.map.function or ":" in p.map.function,
        "map.function",
        f"must be 'module:function', got {p.map.function!r}",
    )
    need(not p.map.kwargs or bool(p.map.function), "map.kwargs", "needs map.function")
    need(
        p.private_threadpool_size >= 0,
        "private_threadpool_size",
        f"must be >= 0, got {p.private_threadpool_size}",
    )
    need(
        p.max_intra_op_parallelism >= 0,
        "max_intra_op_parallelism",
        f"must be >= 0, got {p.max_intra_op_parallelism}",
    )


def emulated_ms(device: str) -> float | None:
    """``"emulated:5"`` or ``"emulated:5ms"`` → 5.0; ``"auto"`` → None; anything else raises ValueError."""
    if device == "auto":
        return None
    head, _, value = device.partition(":")
    if head == "emulated":
        try:
            ms = float(value.removesuffix("ms"))
        except ValueError:
            ms = -1.0
        if ms > 0:
            return ms
    raise ValueError(
        f"must be 'auto' or 'emulated:MS' (device milliseconds per step, e.g. emulated:40), got {device!r}"
    )


def cache_warning(p: PipelineConfig) -> str | None:
    if p.cache.enabled and p.augment.enabled and p.cache.placement == "after_augment":
        return (
            "cache placed after augment: every epoch replays the first epoch's augmented images, "
            "so augmentation is frozen (and its cost disappears from the measurement)"
        )
    return None
