"""``pipeprof run``: one worker count, one configuration, with the live dashboard."""

from __future__ import annotations

import argparse
from typing import Any

from pipeprof import scenario as scen
from pipeprof.cli.common import (
    add_common_arguments,
    console_for_output,
    finish,
    make_reporter,
    overrides_from_args,
    with_launcher,
)
from pipeprof.workflows.compare import CompareRequest, compare


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="train one configuration at one worker count, with the live dashboard",
        description="Train the scenario's real pipeline at one worker count (no synthetic run) "
        "and report throughput, input wait and telemetry.",
    )
    p.add_argument(
        "--np", dest="np_one", type=int, default=1, metavar="N", help="worker count (default 1)"
    )
    p.add_argument(
        "--variant",
        action="append",
        metavar="NAME",
        help="which real variant(s) of the scenario to run (default: all)",
    )
    p.add_argument(
        "--with-synthetic", action="store_true", help="also run the synthetic twin, for the gap"
    )
    add_common_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    console = console_for_output()
    overrides = overrides_from_args(args) + [(["launch", "np"], [args.np_one])]
    scenario = scen.load(args.scenario, overrides)
    n_variants = len(args.variant or scenario.variants) + (1 if args.with_synthetic else 0)
    steps = (
        scenario.train.measure_steps
        and (scenario.train.warmup_steps + scenario.train.measure_steps) * n_variants
    )
    reporter = make_reporter(
        args, console, command="run", scenario=scenario.name, steps_total=steps
    )
    scenario, how = with_launcher(scenario)
    console.print(
        f"pipeprof run: scenario [bold]{scenario.name}[/], np={args.np_one}, {how}", soft_wrap=True
    )
    try:
        request = CompareRequest(
            scenario,
            [args.np_one],
            out=args.out,
            argv=argv,
            only_variants=args.variant,
            synthetic=args.with_synthetic,
            stream_host=args.stream_host,
            report=not args.no_report,
        )
        result = compare(request, reporter=reporter)
    finally:
        reporter.close()
    return finish(result, console, f"pipeprof run · {scenario.name} · np={args.np_one}")
