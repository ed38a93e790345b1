"""``pipeprof compare``: synthetic vs real throughput at each worker count."""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape

from pipeprof import scenario as scen
from pipeprof.analysis.ablation import ladder_pipelines
from pipeprof.cli.common import (
    add_common_arguments,
    console_for_output,
    finish,
    make_reporter,
    overrides_from_args,
    with_launcher,
)
from pipeprof.errors import PipeprofError
from pipeprof.workflows.compare import CompareRequest, compare


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "compare",
        help="synthetic vs real throughput, gap and scaling per worker count",
        description="Run the same Horovod data-parallel Keras training at each worker count, on "
        "synthetic noise (the ceiling) and on the real pipeline, and report the gap.",
    )
    p.add_argument(
        "--np",
        dest="np_spec",
        metavar="N|LIST",
        help="worker counts: 32 means 1,2,4,8,16,32; or a list such as 1,3,8 (default: the scenario's)",
    )
    p.add_argument(
        "--ablation",
        action="store_true",
        help="also run the stage ladder (read, +label, +shuffle, +augment, +prefetch, +cache), measure "
        "each stage alone, and say which one bounds throughput",
    )
    p.add_argument(
        "--verdict",
        action="store_true",
        help="after the run, measure each stage alone (pipeline only, no model) and say which one bounds "
        "throughput: --ablation's verdict without its ladder of training runs",
    )
    p.add_argument(
        "--remedies",
        nargs="?",
        const="auto",
        choices=["auto", "all"],
        metavar="all",
        help="after the real variants, run the fixes for the stage that costs most per sample (measured "
        "alone first) in the same launch, and report how much of the gap each closed; --remedies "
        "all: every fix that applies (augmentation on the device, batch augmentation, JPEGs decoded at "
        "a reduced scale, a RAM cache of decoded images, tf.data service workers)",
    )
    p.add_argument(
        "--service-workers",
        type=int,
        metavar="K",
        help="tf.data service worker processes pipeprof starts for a launch whose variants use the "
        "service (the data-service remedy; default: the scenario's service.workers, 2)",
    )
    p.add_argument(
        "--cores-per-rank",
        type=float,
        metavar="N",
        help="CPU cores one rank has, for the verdict (default: this host's cores over its ranks)",
    )
    p.add_argument(
        "--synthetic-only",
        action="store_true",
        help="run only the synthetic ceiling (no data read): the target's synchronisation cost at each "
        "worker count, for pipeprof predict --ceiling",
    )
    add_common_arguments(p)
    p.epilog = (
        "Your own training script instead of a scenario: pipeprof compare --np 1,2 -- python train.py ARGS "
        "(add pipeprof.keras.instrument and PipeprofCallback to it; a SCENARIO, if given, supplies the "
        "train.* measurement and launch settings)"
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    if args.engine and "," in args.engine:
        return run_engines(args, argv)
    if getattr(args, "script_cmd", None):
        return run_script(args, argv)
    console = console_for_output()
    scenario = scen.load(args.scenario, overrides_from_args(args))
    nps = scenario.launch.np
    if args.synthetic_only and args.ablation:
        raise PipeprofError(
            "compare: --synthetic-only and --ablation do not go together (the ablation needs the "
            "real pipeline)"
        )
    if args.synthetic_only and args.verdict:
        raise PipeprofError(
            "compare: --synthetic-only and --verdict do not go together (the verdict needs the real "
            "pipeline's gap)"
        )
    if args.synthetic_only and args.remedies:
        raise PipeprofError(
            "compare: --synthetic-only and --remedies do not go together (a remedy changes the real "
            "pipeline)"
        )
    rungs = (
        len(ladder_pipelines(scenario.variant_pipeline(scenario.variants[0])))
        if args.ablation
        else 0
    )
    reals = 0 if args.synthetic_only else len(scenario.variants)
    steps = scenario.train.measure_steps and (
        scenario.train.warmup_steps + scenario.train.measure_steps
    ) * (reals + 1 + rungs) * len(
        nps
    )  # 0 when adaptive: the dashboard shows the interval narrowing instead
    reporter = make_reporter(
        args, console, command="compare", scenario=scenario.name, steps_total=steps
    )
    scenario, how = with_launcher(scenario)
    console.print(
        f"pipeprof compare: scenario [bold]{scenario.name}[/] ({scenario.source_file}), "
        f"worker counts {', '.join(map(str, nps))}, {how}",
        soft_wrap=True,  # one line, whatever the width: logs are read with grep
    )
    if scenario.train.device != "auto":
        console.print(
            f"[bold magenta]EMULATED device[/]: {scenario.train.device} — the model's compute is emulated; "
            f"the input pipeline and the allreduce are real"
        )
    try:
        result = compare(scenario_request(args, scenario, argv, args.out), reporter=reporter)
    finally:
        reporter.close()
    emulated = " · EMULATED " + scenario.train.device if scenario.train.device != "auto" else ""
    return finish(result, console, f"pipeprof compare · {scenario.name}{emulated}")


def scenario_request(
    args: argparse.Namespace, scenario: scen.Scenario, argv: list[str], out: str | None
) -> CompareRequest:
    """The compare the command line asks for, of ``scenario`` into ``out``."""
    return CompareRequest(
        scenario,
        scenario.launch.np,
        out=out,
        argv=argv,
        stream_host=args.stream_host,
        ablation=args.ablation,
        verdict=args.verdict,
        cores_per_rank=args.cores_per_rank,
        ram_budget_bytes=args.ram_budget,
        real=not args.synthetic_only,
        report=not args.no_report,
        remedies=args.remedies,
    )


def run_engines(args: argparse.Namespace, argv: list[str]) -> int:
    """``--engine horovod,mirrored``: a compare per engine, one after the other, each into a
    run directory of its own inside ``--out``; then the engines' gaps in one table and chart."""
    import copy

    from pipeprof.tui.reporter import PlainReporter
    from pipeprof.workflows import engine_comparison as side

    if getattr(args, "script_cmd", None):
        raise PipeprofError(
            "compare: --engine with several engines takes a scenario; a script is written for one "
            "engine (run it once per engine)"
        )
    names = side.engine_list(args.engine)
    console = console_for_output()
    first = scen.load(args.scenario, overrides_from_args(args, engine=names[0]))
    base = side.folder(args.out, first.name)
    console.print(
        f"pipeprof compare: scenario [bold]{first.name}[/], worker counts "
        f"{', '.join(map(str, first.launch.np))}, engines {', '.join(names)} one after the other, "
        f"into {base}",
        soft_wrap=True,
    )
    summaries = {}
    for engine in names:
        one = copy.copy(args)
        one.engine, one.out = engine, str(base / engine)
        scenario, how = with_launcher(scen.load(args.scenario, overrides_from_args(one)))
        console.print(f"engine {engine}: {how}", soft_wrap=True)
        request = scenario_request(args, scenario, argv, one.out)
        result = compare(request, reporter=PlainReporter(console))
        finish(result, console, f"pipeprof compare · {scenario.name} · {engine}")
        summaries[engine] = result.summary
    table = side.side_by_side(summaries)
    print_engines(table, console)
    for path in side.write(base, table):
        console.print(f"written: {path}")
    return 0


def print_engines(table: Any, console: Any) -> None:
    from rich.table import Table

    out = Table(title="the engines side by side: the gap per worker count")
    for name in ("np", "engine", "variant", "ceiling", "samples/s", "gap", "input-bound"):
        out.add_column(
            name, justify="right" if name in ("np", "ceiling", "samples/s", "gap") else "left"
        )
    for _, r in table.iterrows():
        out.add_row(
            str(r["np"]),
            r["engine"],
            str(r["variant"]),
            f"{r['synthetic_samples_per_s']:,.1f}",
            f"{r['samples_per_s']:,.1f}",
            f"{r['gap_pct']:.1f}% ±{r['gap_pct_ci95']:.1f}",
            str(r["verdict"]),
        )
    console.print(out)


def run_script(args: argparse.Namespace, argv: list[str]) -> int:
    from pipeprof.workflows.script import script_scenario

    if args.synthetic_only:
        raise PipeprofError(
            "compare: --synthetic-only measures a scenario's ceiling; a script measures its own twin"
        )
    if args.verdict:
        raise PipeprofError(
            "compare: --verdict is for a scenario; a script's stages are measured with --ablation"
        )
    if args.remedies:
        raise PipeprofError(
            "compare: --remedies changes a scenario's pipeline; a script's pipeline is the script's "
            "own (try its fixes as variants of a scenario)"
        )
    console = console_for_output()
    cmd = args.script_cmd
    base = scen.load(args.scenario) if args.scenario else None
    scenario = script_scenario(cmd, overrides_from_args(args), base)
    nps = scenario.launch.np
    reporter = make_reporter(
        args, console, command="compare", scenario=scenario.name, steps_total=0
    )
    scenario, how = with_launcher(scenario)
    console.print(
        f"pipeprof compare: [bold]{escape(' '.join(cmd))}[/], worker counts "
        f"{', '.join(map(str, nps))}, {how}",
        soft_wrap=True,
    )
    try:
        request = CompareRequest(
            scenario,
            nps,
            script=cmd,
            out=args.out,
            argv=argv,
            stream_host=args.stream_host,
            ablation=args.ablation,
            cores_per_rank=args.cores_per_rank,
            report=not args.no_report,
        )
        result = compare(request, reporter=reporter)
    finally:
        reporter.close()
    return finish(result, console, f"pipeprof compare · {' '.join(cmd)[:60]}")
