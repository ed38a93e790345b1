"""What the subcommands share: the scenario, launch and pipeline flags of compare and run,
flags turned into scenario overrides, the console, the reporter, and the closing summary."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from rich.console import Console
from rich.markup import escape

from pipeprof import scenario as scen
from pipeprof.errors import PipeprofError
from pipeprof.launch import signals
from pipeprof.launch.launcher import worker_counts
from pipeprof.renderers.diagnosis import print_diagnosis
from pipeprof.renderers.table import print_summary
from pipeprof.reporting import FanOut, Reporter
from pipeprof.rundir import RunDir
from pipeprof.tui.reporter import DashboardReporter, PlainReporter
from pipeprof.workflows.compare import CompareResult

# --flag → (dotted scenario key, value); value None means "the flag's argument"
STAGE_SWITCHES = {
    "no_label": ("pipeline.label.enabled", False),
    "no_shuffle": ("pipeline.shuffle.enabled", False),
    "no_augment": ("pipeline.augment.enabled", False),
    "no_prefetch": ("pipeline.prefetch.enabled", False),
    "no_cache": ("pipeline.cache.enabled", False),
    "deterministic": ("pipeline.deterministic", True),
    "shard_then_shuffle": ("pipeline.shuffle.files_before_shard", False),
    "oversubscribe": ("launch.oversubscribe", True),
    "no_telemetry": ("telemetry.enabled", False),
}
VALUE_FLAGS = {
    "steps": "train.measure_steps",
    "warmup": "train.warmup_steps",
    "batch_size": "train.batch_size",
    "model": "model.name",
    "shuffle_buffer": "pipeline.shuffle.buffer_size",
    "augment_strength": "pipeline.augment.strength",
    "cache_placement": "pipeline.cache.placement",
    "private_threadpool_size": "pipeline.private_threadpool_size",
    "max_intra_op_parallelism": "pipeline.max_intra_op_parallelism",
    "hosts": "launch.hosts",
    "hostfile": "launch.hostfile",
    "network_interface": "launch.network_interface",
    "scheduler": "launch.scheduler",
    "engine": "train.engine",
    "timeout": "launch.timeout_s",
    "device": "train.device",
    "service_workers": "service.workers",
}


def int_or_autotune(text: str) -> int | str:
    if text == "autotune":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an integer or 'autotune', got {text!r}"
        ) from None


def parse_size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    t = text.strip().upper().removesuffix("B")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a size such as 512M or 8G, got {text!r}"
        ) from None


def add_report_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-report",
        action="store_true",
        help="do not render report.html, trace.json and TensorBoard events at the end (pipeprof report "
        "RUN_DIR renders them later)",
    )


def add_metrics_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the live figures to Prometheus on this port while the run goes on (0: any free port)",
    )
    p.add_argument(
        "--metrics-addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address to serve them on (default 127.0.0.1; 0.0.0.0 for a cluster's Prometheus)",
    )


def metrics_exporter(
    args: argparse.Namespace, console: Console, *, command: str, scenario: str
) -> Reporter | None:
    """The Prometheus exporter when --metrics-port is given, serving before anything runs (a
    port in use is one line, before any launch)."""
    if args.metrics_port is None:
        return None
    if not 0 <= args.metrics_port <= 65535:
        raise PipeprofError(f"--metrics-port {args.metrics_port}: not a TCP port (0..65535)")
    from pipeprof.renderers.metrics import MetricsExporter

    exporter = MetricsExporter(
        args.metrics_port, args.metrics_addr, command=command, scenario=scenario
    )
    console.print(f"metrics: {exporter.url}")
    return exporter


def render_report(args: argparse.Namespace, run_dir, console: Console) -> None:
    """After a command that writes into an existing run directory (predict): render it again."""
    if getattr(args, "no_report", False):
        return
    from pipeprof.workflows.report import report_quietly

    done = report_quietly(run_dir, lambda text: console.print(f"[yellow]warning:[/] {text}"))
    if done is not None:
        console.print(f"report: {run_dir / 'report.html'}" + (" (partial)" if done.partial else ""))


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Flags shared by compare and run: the scenario, launch, training and pipeline overrides."""
    p.add_argument(
        "scenario",
        nargs="?",
        default=None,
        help=f"scenario TOML file or built-in name (default: {scen.DEFAULT_SCENARIO})",
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default: runs/<time>-<scenario>)")
    p.add_argument(
        "--no-dashboard",
        action="store_true",
        help="plain progress lines instead of the live dashboard (the default without a terminal)",
    )
    p.add_argument(
        "--no-telemetry", action="store_true", help="no NVML/host sampling and no record stream"
    )
    p.add_argument(
        "--stream-host",
        metavar="ADDR",
        help="the launcher address ranks stream to (default: loopback, or this host's name with -H)",
    )
    p.add_argument(
        "--ram-budget",
        type=parse_size,
        metavar="SIZE",
        help="RAM a rank may use for cache and shuffle buffers, e.g. 8G (default: 80%% of free RAM / ranks)",
    )
    p.add_argument(
        "--overlay",
        action="append",
        default=[],
        metavar="TOML",
        help="a scenario fragment merged over the scenario, e.g. the one pipeprof tune writes (repeatable)",
    )
    p.add_argument(
        "--engine",
        metavar="NAME",
        help="what makes training data-parallel (train.engine): auto (the default: horovod, "
        "data_parallel, mirrored or ddp, the first whose packages are installed), horovod, mirrored "
        "(tf.distribute's MirroredStrategy: one process, one replica per GPU, or per logical "
        "CPU device on a host without one), multi_worker_mirrored (a worker per slot of the "
        "hosts), data_parallel (Keras 3's DataParallel on JAX: one process, one replica per "
        "device), ddp (PyTorch's DistributedDataParallel with DataLoader pipelines: a process "
        "a replica); a list such as horovod,mirrored compares the engines side by side",
    )
    p.add_argument(
        "--launcher",
        metavar="NAME",
        help="what starts the ranks (launch.launcher): auto (the default: srun inside a Slurm "
        "allocation, else the engine's own), horovodrun, local (pipeprof's own, on this host), srun (a job step of the allocation per "
        "worker count), mpirun (Open MPI's, directly; Horovod's MPI controller joins the ranks), "
        "ssh, torchrun and dask (train.engine ddp: each rank a task on a Dask cluster's worker); "
        "external: your launcher starts `pipeprof rank` (see pipeprof rank --help)",
    )
    p.add_argument(
        "-H",
        "--hosts",
        metavar="HOST:SLOTS,...",
        help="hosts and their slots, e.g. node1:8,node2:8",
    )
    p.add_argument("--hostfile", metavar="FILE", help="a hostfile: lines 'node1 slots=8'")
    p.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="--launcher dask: a running Dask cluster's scheduler (e.g. tcp://node1:8786), whose "
        "workers run the ranks (default: a LocalCluster on this host for each worker count)",
    )
    p.add_argument(
        "--network-interface",
        metavar="IFACE",
        help="the network interface the ranks use, named alike on every host (e.g. eth0)",
    )
    ctl = p.add_mutually_exclusive_group()
    ctl.add_argument(
        "--gloo",
        dest="controller",
        action="store_const",
        const="gloo",
        help="Gloo controller (default)",
    )
    ctl.add_argument(
        "--mpi", dest="controller", action="store_const", const="mpi", help="MPI controller"
    )
    p.add_argument(
        "--oversubscribe",
        action="store_true",
        help="allow more ranks than slots (GPUs, else CPU cores)",
    )
    p.add_argument(
        "--timeout",
        type=int,
        metavar="S",
        help="seconds one worker count may take before it is killed",
    )
    p.add_argument(
        "--steps",
        type=int,
        metavar="N",
        help="measured steps per variant (default: measure until the gap's 95%% interval is clear of "
        "the 5%%/20%% thresholds, or within half of train.target_ci_pct points on one)",
    )
    p.add_argument("--warmup", type=int, metavar="N", help="warm-up steps dropped per variant")
    p.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="batch size (per worker, or global: see the scenario)",
    )
    p.add_argument(
        "--model", metavar="NAME", help="small_cnn, resnet50v2, mobilenetv2 or module:function"
    )
    p.add_argument(
        "--device",
        metavar="auto|emulated:MS",
        help="emulated:MS replaces each model step by MS ms of device time that uses no CPU, plus a real "
        "allreduce of the gradient size: rehearse many ranks' input side on one box",
    )
    stages = p.add_argument_group("pipeline stages (apply to every real variant)")
    for flag in ("label", "shuffle", "augment", "cache", "prefetch"):
        stages.add_argument(
            f"--no-{flag}", action="store_true", help=f"switch the {flag} stage off"
        )
    stages.add_argument(
        "--cache", choices=["memory", "file"], help="switch caching on, in memory or in a file"
    )
    stages.add_argument("--cache-placement", choices=["before_augment", "after_augment"])
    stages.add_argument(
        "--prefetch", type=int_or_autotune, metavar="N|autotune", help="prefetch depth"
    )
    stages.add_argument(
        "--parallel-calls",
        type=int_or_autotune,
        metavar="N|autotune",
        help="parallel calls per map",
    )
    stages.add_argument("--shuffle-buffer", type=int, metavar="N")
    stages.add_argument(
        "--shard-then-shuffle",
        action="store_true",
        help="shard the file list first, then shuffle within the shard (default: shuffle, then shard)",
    )
    stages.add_argument("--augment-strength", type=float, metavar="X")
    stages.add_argument("--private-threadpool-size", type=int, metavar="N")
    stages.add_argument("--max-intra-op-parallelism", type=int, metavar="N")
    stages.add_argument(
        "--deterministic", action="store_true", help="keep element order deterministic"
    )
    add_set_argument(p)
    add_metrics_arguments(p)
    add_report_argument(p)


def add_set_argument(
    p: argparse.ArgumentParser,
    help: str = "override any scenario key, e.g. --set pipeline.augment.rotation_deg=30 (repeatable)",
) -> None:
    """``--set KEY=VALUE``, the same on every command that reads a scenario."""
    p.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help
    )


def overrides_from_args(
    args: argparse.Namespace, *, engine: str | None = None
) -> list[tuple[list[str], Any]]:
    """Command-line flags as scenario overrides (they beat the file); ``engine``: the one of
    ``--engine``'s list this run is for."""
    out: list[tuple[list[str], Any]] = []
    for path in getattr(args, "overlay", []):
        out += scen.overlay_overrides(path)
    out += [scen.parse_override(s) for s in args.sets]
    for attr, (key, value) in STAGE_SWITCHES.items():
        if getattr(args, attr, False):
            out.append((key.split("."), value))
    for attr, key in VALUE_FLAGS.items():
        given = engine if attr == "engine" and engine else getattr(args, attr, None)
        if given is not None:
            out.append((key.split("."), given))
    # commands with fewer flags (pipeprof rank: --set and --overlay) leave the others unset
    if cache := getattr(args, "cache", None):
        out += [
            (["pipeline", "cache", "enabled"], True),
            (["pipeline", "cache", "kind"], cache),
        ]
    if (prefetch := getattr(args, "prefetch", None)) is not None:
        out += [
            (["pipeline", "prefetch", "enabled"], True),
            (["pipeline", "prefetch", "depth"], prefetch),
        ]
    if (calls := getattr(args, "parallel_calls", None)) is not None:
        out.append((["pipeline", "parallel_calls"], calls))
    if controller := getattr(args, "controller", None):
        out.append((["launch", "controller"], controller))
    if getattr(args, "launcher", None):
        out.append((["launch", "launcher"], args.launcher))
    if getattr(args, "np_spec", None):
        out.append((["launch", "np"], worker_counts(args.np_spec)))
    return out


def make_reporter(
    args: argparse.Namespace, console: Console, *, command: str, scenario: str, steps_total: int
) -> Reporter:
    """The dashboard (or plain lines), and the metrics exporter beside it when asked for."""
    exporter = metrics_exporter(args, console, command=command, scenario=scenario)
    if console.is_terminal and not args.no_dashboard:
        ui: Reporter = DashboardReporter(
            console, command=command, scenario=scenario, steps_total=steps_total
        )
    else:
        ui = PlainReporter(console)
    return FanOut(ui, exporter) if exporter is not None else ui


def console_for_output() -> Console:
    console = Console()
    if not console.is_terminal:  # logs and pipes: wide enough for the summary table
        console = Console(width=max(console.width, 140))
    return console


def finish(result: CompareResult, console: Console, title: str) -> int:
    if not result.summary.empty:
        print_summary(result.summary, console, title=title)
    if result.verdicts:
        run = RunDir(result.run_dir)
        print_diagnosis(result.summary, result.verdicts, run.stages(), console, run.script_stages())
    console.print(f"run directory: {result.run_dir}")
    if result.failure:
        raise PipeprofError(
            result.failure,
            exit_code=(
                signals.exit_code(result.signum)
                if result.signum is not None
                else 2
                if result.refused
                else 1
            ),
        )
    return 0


def with_launcher(scenario: scen.Scenario) -> tuple[scen.Scenario, str]:
    """The scenario with its launcher chosen (``launch.choose``: auto resolved from the
    engine and the environment), and the words the command's first line says it with."""
    from pipeprof import plugins
    from pipeprof.launch.choose import choose

    said = ""
    if scenario.train.engine == plugins.AUTO:  # the first line says which the stack gave
        engine, said = plugins.choose_engine()
        scenario = dataclasses.replace(
            scenario, train=dataclasses.replace(scenario.train, engine=engine)
        )
    launch, how = choose(scenario.launch, engine=scenario.train.engine)
    how = f"{said}, {how}" if said else how
    return dataclasses.replace(scenario, launch=launch), escape(how)
