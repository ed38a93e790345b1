"""The four axes a run is made of, and the one place their points are named.

- **framework** (``train.framework``): builds the model, compiles its step, puts the twin's
  batch on the device and says when a step's work is done (``pipeprof.frameworks``);
- **distribution** (``train.engine``): makes the training data-parallel and owns its
  rendezvous and collectives (``pipeprof.distributions``);
- **inputs** (``data.library``): builds the pipeline's stages, its iterator and the twin's
  batch (``pipeprof.inputs``);
- **launcher** (``launch.launcher``): starts the processes and tells each who it is
  (``pipeprof.launch.launcher``).

Each point is one module and one line below: its name and ``"module:Class"``, imported only
when a run chooses it (so a backend's packages are needed only by the runs that use it). A
point's capabilities are attributes of its class, read without making it (``kind``); nothing
outside a point's module asks its name. ``register`` adds a point at run time (a test's fake,
a user's own), and a registration given as ``"module:Class"`` travels to the ranks with the
job (``added``, ``adopt``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from pipeprof.errors import PipeprofError
from pipeprof.models import resolve_callable

FRAMEWORK, DISTRIBUTION, INPUTS, LAUNCHER = "framework", "distribution", "inputs", "launcher"
AUTO = "auto"  # a key left for pipeprof to choose: the engine's framework, the framework's
# input library, the launcher the engine and the host ask for (launch.choose)
EXTERNAL = "external"  # launch.launcher: a launcher of the user's starts `pipeprof rank`

POINTS: dict[str, dict[str, str | Callable[[], Any]]] = {
    FRAMEWORK: {
        "keras2": "pipeprof.frameworks.keras2:Keras2",
        "keras3": "pipeprof.frameworks.keras3:Keras3",
        "torch": "pipeprof.frameworks.torch:Torch",
    },
    DISTRIBUTION: {
        "horovod": "pipeprof.distributions.horovod:Horovod",
        "mirrored": "pipeprof.distributions.mirrored:Mirrored",
        "multi_worker_mirrored": "pipeprof.distributions.multi_worker_mirrored:MultiWorkerMirrored",
        "data_parallel": "pipeprof.distributions.data_parallel:DataParallel",
        "ddp": "pipeprof.distributions.ddp:DDP",
    },
    INPUTS: {
        "tfdata": "pipeprof.inputs.tfdata:TfData",
        "dataloader": "pipeprof.inputs.dataloader:DataLoaderInputs",
        "grain": "pipeprof.inputs.grain:GrainInputs",
    },
    LAUNCHER: {
        "horovodrun": "pipeprof.launch.horovod:HorovodLauncher",
        "mpirun": "pipeprof.launch.mpirun:MpirunLauncher",
        "srun": "pipeprof.launch.srun:SrunLauncher",
        "local": "pipeprof.launch.local:LocalLauncher",
        "ssh": "pipeprof.launch.ssh:SshLauncher",
        "torchrun": "pipeprof.launch.torchrun:TorchrunLauncher",
        "dask": "pipeprof.launch.dask:DaskLauncher",
    },
}
# the scenario key that names each axis's point, for the one-line errors
KEYS = {
    FRAMEWORK: "train.framework",
    DISTRIBUTION: "train.engine",
    INPUTS: "data.library",
    LAUNCHER: "launch.launcher",
}
WORDS = {
    FRAMEWORK: "framework",
    DISTRIBUTION: "engine",
    INPUTS: "input library",
    LAUNCHER: "launcher",
}
BUILT_IN = {axis: dict(points) for axis, points in POINTS.items()}


def register(axis: str, name: str, factory: str | Callable[[], Any]) -> None:
    """Make ``name`` a point of ``axis``: ``factory()`` (a class or callable, or its
    ``"module:Class"``, which the ranks import too) makes it."""
    POINTS[axis][name] = factory


def names(axis: str) -> list[str]:
    return sorted(POINTS[axis])


def _resolve(axis: str, name: str) -> Callable[[], Any]:
    factory = POINTS[axis].get(name)
    if factory is None:
        raise PipeprofError(
            f"{KEYS[axis]}: unknown {WORDS[axis]} {name!r}; known: {', '.join(names(axis))}"
        )
    return resolve_callable(factory, KEYS[axis]) if isinstance(factory, str) else factory


def kind(axis: str, name: str) -> Any:
    """The class (or factory) of ``axis``'s point ``name``, imported but not made: its
    capabilities, read before anything runs. An unknown name is a one-line error naming the
    scenario key and the known points."""
    return _resolve(axis, name)


def make(axis: str, name: str) -> Any:
    """``axis``'s point ``name``, made."""
    return _resolve(axis, name)()


def capability(axis: str, name: str, attribute: str, default: Any = None) -> Any:
    """A capability of a point, read from its class."""
    return getattr(kind(axis, name), attribute, default)


def places_ranks(launcher: str) -> bool:
    """Whether ``launcher`` places the ranks itself, on the workers of its own cluster
    (``launch.scheduler``: Dask's), not on ``launch.hosts``: the launching side knows neither
    their hosts nor their meeting point before they start."""
    return launcher in names(LAUNCHER) and bool(
        capability(LAUNCHER, launcher, "places_ranks", False)
    )


def added() -> dict[str, dict[str, str]]:
    """The points registered at run time by ``"module:Class"``, by axis: what a job carries to
    ranks in other processes, which import the same modules (a factory given as an object
    cannot travel: it serves this process alone)."""
    out: dict[str, dict[str, str]] = {}
    for axis, points in POINTS.items():
        for name, factory in points.items():
            if isinstance(factory, str) and BUILT_IN[axis].get(name) != factory:
                out.setdefault(axis, {})[name] = factory
    return out


def adopt(registered: Mapping[str, Mapping[str, str]]) -> None:
    """In a rank: the points the launching process registered (``added``), registered here."""
    for axis, points in registered.items():
        for name, factory in points.items():
            register(axis, name, factory)


def installed(axis: str, name: str) -> bool:
    """Whether a point's packages are installed, where its class can say (``installed()``,
    read from package metadata: nothing imported); True where it cannot."""
    check = getattr(kind(axis, name), "installed", None)
    return bool(check()) if check is not None else True


# train.engine = "auto": the first of these whose packages are installed (``choose_engine``)
ENGINE_PREFERENCE = ("horovod", "data_parallel", "mirrored", "ddp")


def _default_pipeline_installed(engine: str) -> bool:
    """Whether the input library an engine's first installed framework reads by default is
    installed too: Keras 3 on JAX beside PyTorch with no TensorFlow (Grain's stack) would
    otherwise take ``data_parallel``, whose default tf.data cannot run there."""
    served = [f for f in getattr(kind(DISTRIBUTION, engine), "frameworks", ()) if f != "*"]
    framework = next((f for f in served if installed(FRAMEWORK, f)), None)
    libraries = getattr(kind(FRAMEWORK, framework), "inputs", ()) if framework else ()
    return not libraries or installed(INPUTS, libraries[0])


def choose_engine() -> tuple[str, str]:
    """The engine ``train.engine = "auto"`` is on this host, and the words that say why: the
    first of ``ENGINE_PREFERENCE`` whose packages are installed (its class's ``installed``
    and ``stack``), else the first, whose start will say what it lacks."""
    for name in ENGINE_PREFERENCE:
        if installed(DISTRIBUTION, name) and _default_pipeline_installed(name):
            stack = getattr(kind(DISTRIBUTION, name), "stack", name)
            return name, f"engine {name} ({stack} installed)"
    first = ENGINE_PREFERENCE[0]
    return first, f"engine {first} (none of {', '.join(ENGINE_PREFERENCE)} is installed)"


def resolve(scenario: Any) -> Any:
    """``train.engine``, ``train.framework`` and ``data.library`` as they will run: "auto" is
    the engine the installed packages give (``choose_engine``), that engine's first framework
    that is installed, and that framework's first input library; a pair that does not go
    together is a one-line error naming both keys."""
    engine = scenario.train.engine
    if engine == AUTO:
        engine = choose_engine()[0]
    dist = kind(DISTRIBUTION, engine)
    served = tuple(getattr(dist, "frameworks", ()))
    refused: dict[str, str] = getattr(dist, "refuses", {})
    framework = scenario.train.framework
    if framework == AUTO:
        if not served or served == ("*",):
            raise PipeprofError(
                f"train.framework: train.engine {engine} serves any framework: "
                f"name one ({', '.join(names(FRAMEWORK))})"
            )
        here = [f for f in served if installed(FRAMEWORK, f)]
        if not here:
            other = next((f for f in refused if installed(FRAMEWORK, f)), None)
            if other is not None:
                raise PipeprofError(f"train.engine {engine}: {refused[other]}")
        framework = here[0] if here else served[0]
    elif framework in refused:
        raise PipeprofError(f"train.engine {engine}: {refused[framework]}")
    elif "*" not in served and framework not in served:
        raise PipeprofError(
            f"train.framework {framework!r}: train.engine {engine} trains {' or '.join(served)}"
        )
    libraries = tuple(getattr(kind(FRAMEWORK, framework), "inputs", ()))
    library = scenario.data.library
    if library == AUTO:
        library = libraries[0]
    elif library not in libraries:
        raise PipeprofError(
            f"data.library {library!r}: train.framework {framework} reads {' or '.join(libraries)}"
        )
    if not capability(INPUTS, library, "loader_knobs", False):  # they would go unread
        for variant in scenario.variants:
            if knobs := scenario.variant_pipeline(variant).loader.set_keys():
                raise PipeprofError(
                    f"pipeline.loader.{knobs[0]}: a PyTorch DataLoader knob, and data.library "
                    f"{library} builds no DataLoader (variant {variant.name!r})"
                )
    feeds = capability(INPUTS, library, "engines", None)
    if feeds is not None and engine not in feeds:
        raise PipeprofError(
            f"data.library {library}: it feeds train.engine {' or '.join(feeds)}, not {engine}"
        )
    if not capability(INPUTS, library, "grain_knobs", False):
        for variant in scenario.variants:
            if knobs := scenario.variant_pipeline(variant).grain.set_keys():
                raise PipeprofError(
                    f"pipeline.grain.{knobs[0]}: a Grain knob, and data.library {library} "
                    f"builds no Grain dataset (variant {variant.name!r})"
                )
    return dataclasses.replace(
        scenario,
        train=dataclasses.replace(scenario.train, engine=engine, framework=framework),
        data=dataclasses.replace(scenario.data, library=library),
    )
