"""What a launch will run, decided before anything is spent: the variants (the synthetic twin,
an ablation ladder, the real variants), whether their caches and buffers fit in RAM, and
where the ranks' record stream goes."""

from __future__ import annotations

import dataclasses

from pipeprof import plugins
from pipeprof.analysis.ablation import RUNG_TIME_SHARE, ladder_pipelines
from pipeprof.analysis.memory import check, default_ram_budget_bytes
from pipeprof.analysis.stages import LADDER
from pipeprof.config import build
from pipeprof.errors import PipeprofError
from pipeprof.inputs.dataloader import worker_count
from pipeprof.inputs.grain import worker_count as grain_workers
from pipeprof.launch import hosts, topology
from pipeprof.launch.job import VariantSpec
from pipeprof.progress import Launch
from pipeprof.scenario import LaunchConfig, PipelineConfig, Scenario


def variant_specs(
    scenario: Scenario,
    only: list[str] | None = None,
    synthetic: bool = True,
    ablation: bool = False,
    real: bool = True,
) -> list[VariantSpec]:
    """The synthetic twin first (the ceiling), then the ablation ladder if asked, then each real
    variant with its resolved pipeline (none when ``real`` is false)."""
    known = [v.name for v in scenario.variants]
    if ablation and (clash := set(known) & set(LADDER)):
        raise PipeprofError(
            f"--ablation: the scenario has variants named like ladder rungs: {sorted(clash)}"
        )
    for name in only or []:
        if name not in known:
            raise PipeprofError(
                f"--variant {name}: the scenario has no such variant (it has: {', '.join(known)})"
            )
    chosen = [v for v in scenario.variants if not only or v.name in only]
    train = scenario.train
    short_s = max(train.min_measure_s, RUNG_TIME_SHARE * train.max_measure_s)
    # Real variants re-measure the twin in alternation with themselves, so their gaps do not
    # rest on the twin's own run; it then only gives the ceiling's row and may be shorter.
    specs = (
        [
            VariantSpec(
                name="synthetic",
                synthetic=True,
                pipeline=dataclasses.asdict(scenario.variant_pipeline(chosen[0])),
                max_measure_s=short_s if real or ablation else 0.0,
            )
        ]
        if synthetic
        else []
    )
    if ablation:
        specs += [
            VariantSpec(
                name=name,
                synthetic=False,
                pipeline=dataclasses.asdict(p),
                max_measure_s=short_s,
                paired=False,
            )
            for name, p in ladder_pipelines(scenario.variant_pipeline(scenario.variants[0]))
        ]
    for v in chosen if real else []:
        specs.append(
            VariantSpec(
                name=v.name,
                synthetic=False,
                pipeline=dataclasses.asdict(scenario.variant_pipeline(v)),
            )
        )
    return specs


def check_memory(
    scenario: Scenario,
    specs: list[VariantSpec],
    data_root: str,
    nps: list[int],
    budget_bytes: int | None,
) -> None:
    """Refuse cache/shuffle settings that cannot fit in RAM, before anything runs."""
    if scenario.data.source not in ("folder", "generated") or not data_root:
        return
    from pipeprof.data.files import count_images

    images = count_images(data_root)
    library = scenario.data.library
    loader = library != plugins.AUTO and plugins.capability(
        plugins.INPUTS, library, "loader_knobs", False
    )
    grain = library != plugins.AUTO and plugins.capability(
        plugins.INPUTS, library, "grain_knobs", False
    )
    for n in nps:
        local = topology.assign(n, scenario.launch).ranks_per_host
        budget = budget_bytes or default_ram_budget_bytes(local)
        for spec in specs:
            if not spec.synthetic:
                pipe = build(PipelineConfig, spec.pipeline, "job", spec.name)
                check(
                    pipe,
                    scenario.data.image_size,
                    -(-images // n),
                    budget,
                    f"{scenario.source_file or 'scenario'}: variant '{spec.name}' at np={n}",
                    worker_count(pipe, local)
                    if loader
                    else grain_workers(pipe, local)
                    if grain
                    else None,
                )


LOOPBACK = ("127.0.0.1", "127.0.0.1")


def stream_endpoint(
    remote: bool, stream_host: str | None, *, interface: str = "", peers: tuple[str, ...] = ()
) -> tuple[str, str]:
    """Where the collector listens, and the address ranks are told: loopback for a local run;
    all interfaces and ``stream_host`` when the user names the address ranks can reach. When
    ranks run on other hosts (``remote``): the address this host has on ``interface`` (the one
    the ranks talk over), else the one it would send from to the first of ``peers`` (the other
    hosts) that resolves, else this host's name. A host name other hosts cannot resolve (a
    container's, a laptop's) is what left remote ranks writing files nobody read."""
    if stream_host:
        return "0.0.0.0", stream_host
    if not remote:
        return LOOPBACK
    return "0.0.0.0", hosts.address_for(interface, peers)


def launch_event(np: int, of_variants: int, launcher: str, launch: LaunchConfig) -> Launch:
    """What the terminal and the dashboard are told as ``np`` ranks start: by which launcher,
    on which hosts."""
    if plugins.places_ranks(launch.launcher):  # Dask's workers, once the launch reaches them
        where = f"the Dask workers of {launch.scheduler}" if launch.scheduler else "a LocalCluster"
    else:
        where = topology.assign(np, launch).hosts_arg
    return Launch(np=np, of_variants=of_variants, launcher=launcher, hosts=where)


def launch_endpoint(launch: LaunchConfig, stream_host: str | None) -> tuple[str, str]:
    """``stream_endpoint`` for a launch on ``launch``'s hosts."""
    named = topology.host_slots(launch)
    peers = tuple(h for h, _ in named[0] if not topology.is_this_host(h)) if named else ()
    remote = named is not None
    if plugins.places_ranks(launch.launcher) and launch.scheduler:
        # ranks on a Dask cluster's workers, wherever they are: told the address this host
        # has towards the scheduler (the loopback for a scheduler on it)
        host = launch.scheduler.split("://")[-1].rsplit(":", 1)[0].strip("[]")
        remote, peers = True, (host,)
    return stream_endpoint(remote, stream_host, interface=launch.network_interface, peers=peers)
