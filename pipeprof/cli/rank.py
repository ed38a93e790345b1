"""``pipeprof rank SCENARIO --run-dir DIR``: pipeprof's rank program for a launcher pipeprof
does not drive (mpirun by hand, a Kubeflow MPIJob, srun in a script): ``workflows.rank``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console

from pipeprof import scenario as scen
from pipeprof.cli.common import add_set_argument, overrides_from_args


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "rank",
        help="one rank of a compare started by your own launcher (mpirun, MPIJob, srun)",
        description="Run as every rank of a launch started by another program: the rank, size "
        "and local rank come from its variables (Horovod's, Open MPI's, PMI/PMIx's, Slurm's). "
        "Rank 0 writes the run directory; a launch at another worker count adds to it; "
        "pipeprof report DIR renders it.",
    )
    p.add_argument("scenario", nargs="?", default=None, help="a built-in name or a TOML file")
    p.add_argument(
        "--run-dir",
        required=True,
        metavar="DIR",
        help="the run directory rank 0 creates, or adds this worker count to",
    )
    p.add_argument(
        "--overlay", action="append", default=[], metavar="TOML", help="a scenario fragment"
    )
    add_set_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    import os

    from pipeprof.rank.identity import identity

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up chatter, per rank
    from pipeprof.reporting import Reporter
    from pipeprof.tui.reporter import PlainReporter
    from pipeprof.workflows.external_rank import run_rank

    scenario = scen.load(args.scenario, overrides_from_args(args))
    me = identity()
    # a rank's output goes to its launcher (mpirun gives ranks a pty, kubectl logs and srun do
    # not): printed as for a log, whole and without colour, whatever the launcher pretends
    console = Console(force_terminal=False, no_color=True, width=140, soft_wrap=True)
    reporter: Reporter = PlainReporter(console) if me.rank == 0 else Reporter()
    if me.rank == 0:
        source = me.source or "no launcher's variables: a single process"
        console.print(
            f"pipeprof rank: scenario {scenario.name}, np={me.size} ({source}), "
            f"run directory {args.run_dir}"
        )
    code = run_rank(scenario, Path(args.run_dir), argv, reporter)
    if me.rank == 0 and code == 0:
        from pipeprof.renderers.table import print_summary
        from pipeprof.rundir import RunDir

        print_summary(
            RunDir(Path(args.run_dir)).summary(), console, title=f"pipeprof rank · {scenario.name}"
        )
        console.print(f"run directory: {args.run_dir} (pipeprof report {args.run_dir} renders it)")
    return code
