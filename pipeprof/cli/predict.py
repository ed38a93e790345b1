"""``pipeprof predict RUN_DIR --np 32 --gpus-per-node 8 --cores-per-node 64``: the gap to
expect on a cluster, from a run on one machine."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from rich.table import Table

from pipeprof.analysis.predict import HOP_MS, TERMS_ADVICE, Target
from pipeprof.cli.common import add_report_argument, console_for_output, render_report
from pipeprof.errors import PipeprofError
from pipeprof.launch.launcher import worker_counts
from pipeprof.renderers.table import fmt
from pipeprof.workflows.predict import advice, run_predict


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "predict",
        help="predict throughput and the gap at N workers on a target cluster",
        description="Model each term (device, input CPU, storage, stragglers, allreduce) from what "
        "an np=1 run measured, for a cluster of the given shape.",
    )
    p.add_argument(
        "run_dir", help="a compare run directory with an np=1 run (best with --ablation)"
    )
    p.add_argument(
        "--np",
        dest="np_spec",
        default="32",
        metavar="N|LIST",
        help="worker counts (default 32: 1..32)",
    )
    p.add_argument("--gpus-per-node", type=int, required=True, metavar="N")
    p.add_argument("--cores-per-node", type=float, required=True, metavar="N")
    p.add_argument(
        "--storage-mbps",
        type=float,
        metavar="MB/S",
        help="shared storage bandwidth for all readers",
    )
    p.add_argument(
        "--network-gbps", type=float, metavar="GB/S", help="per-node network bandwidth, gigabits/s"
    )
    p.add_argument(
        "--hop-ms",
        type=float,
        metavar="MS",
        help="the latency of one of the ring allreduce's 2(N-1) steps, Horovod's coordination "
        f"included (default {HOP_MS:g} without --network-gbps: ranks on one host, fitted on "
        "this project's ground-truth suite; 0 with it: give your network's)",
    )
    p.add_argument(
        "--step-ms",
        type=float,
        metavar="MS",
        help="the target accelerator's step time (default: the run's synthetic step)",
    )
    p.add_argument(
        "--ceiling",
        metavar="RUN_DIR",
        help="a synthetic-only compare on the target (compare --synthetic-only): its measured step and "
        "CPU use at each worker count replace the network model's synchronisation time",
    )
    p.add_argument(
        "--service-cores-per-worker",
        type=float,
        default=1.0,
        metavar="N",
        help="cores of one tf.data service worker on the target's CPU hosts, for sizing the service "
        "when the run measured its workers (compare --remedies all; default 1)",
    )
    add_report_argument(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    console = console_for_output()
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise PipeprofError(f"predict: run directory {run_dir} does not exist")
    for name in ("gpus_per_node", "cores_per_node"):
        if getattr(args, name) <= 0:
            raise PipeprofError(f"predict: --{name.replace('_', '-')} must be positive")
    hop_ms = args.hop_ms
    if hop_ms is None:
        hop_ms = 0.0 if args.network_gbps else HOP_MS
    if not (math.isfinite(hop_ms) and hop_ms >= 0):
        raise PipeprofError(f"predict: --hop-ms must be a number of ms, 0 or more, not {hop_ms:g}")
    target = Target(
        gpus_per_node=args.gpus_per_node,
        cores_per_node=args.cores_per_node,
        storage_mbps=args.storage_mbps,
        network_gbps=args.network_gbps,
        step_ms=args.step_ms,
        hop_ms=hop_ms,
    )
    ceiling = Path(args.ceiling) if args.ceiling else None
    if ceiling is not None and not ceiling.is_dir():
        raise PipeprofError(f"predict: --ceiling {ceiling} does not exist")
    if not args.service_cores_per_worker > 0:
        raise PipeprofError("predict: --service-cores-per-worker must be positive")
    preds, src, ctx = run_predict(
        run_dir, target, worker_counts(args.np_spec), ceiling, args.service_cores_per_worker
    )
    device = ctx["manifest"].get("device", "real")
    title = (
        f"pipeprof predict · {ctx['scenario'].name} · {args.gpus_per_node} GPUs × "
        f"{args.cores_per_node:g} cores per node"
        + (f" · from an EMULATED run ({device})" if device != "real" else "")
    )
    t = Table(title=title, title_justify="left", header_style="bold")
    for name in (
        "np",
        "cores/rank",
        "device ms",
        "input CPU ms",
        "storage ms",
        "sync ms",
        "CPU busy",
        "contention ms",
        "straggler ×",
        "synthetic/s",
        "real/s",
        "gap",
        "gap from",
        "dominant",
    ):
        t.add_column(name, justify="left" if name in ("dominant", "gap from") else "right")
    for p in preds:
        t.add_row(
            str(p.np),
            fmt(p.cores_per_rank, 2),
            fmt(p.device_ms),
            fmt(p.input_cpu_ms),
            fmt(p.storage_ms),
            fmt(p.allreduce_ms, 1) + ("*" if p.sync_measured else ""),
            f"{100 * p.busy_synth:.0f}→{100 * p.busy_real:.0f}%",
            fmt(p.contention_ms, 1),
            fmt(p.straggler_real, 3),
            fmt(p.synthetic_samples_per_s, 0),
            fmt(p.real_samples_per_s, 0),
            fmt(p.gap_pct, 1, "%"),
            p.gap_cause,
            p.dominant,
        )
    console.print(t)
    console.print(
        f"from np=1: device {src.device_ms:.1f} ms/step, training loop {src.sync_cpu_ms:.1f} CPU-ms/step, "
        f"real step's extra {src.real_handoff_ms:.1f} ms at {100 * src.source_busy:.0f}% host CPU, "
        f"pipeline {src.pipeline_ms_per_step:.1f} CPU-ms/step "
        f"({src.pipeline_core_ms_per_sample:.3f} core-ms/sample alone × {src.batch_per_rank} samples)"
        + (f", {src.bytes_per_sample / 1e3:.0f} KB/sample" if src.bytes_per_sample else "")
        + (f", gradient {src.gradient_bytes / 2**20:.1f} MB" if src.gradient_bytes else "")
    )
    if any(p.sync_measured for p in preds):
        console.print(
            f"* sync measured by the synthetic-only run {ceiling}; elsewhere from the network model"
        )
    if not all(p.sync_measured for p in preds if p.np > 1):
        if hop_ms:
            latency = f"2(N−1) ring steps of {hop_ms:g} ms each (--hop-ms"
            why = ", the default for ranks on one host"
        else:
            latency, why = "no ring-step latency (--hop-ms 0", ", the default with --network-gbps"
        latency += (why if args.hop_ms is None else "") + ")"
        network = (
            f"the gradient over {args.network_gbps:g} Gb/s"
            if args.network_gbps
            else "no --network-gbps: the bytes' time left out"
        )
        console.print(f"sync: {latency}; {network}")
    for note in ctx["notes"]:
        console.print(f"[yellow]note:[/] {note}")
    if ctx["service"] is not None:
        core_ms, at_np, sizing = ctx["service"]
        print_service(console, core_ms, at_np, sizing, args.service_cores_per_worker)
    last = preds[-1]
    console.print(
        f"at np={last.np}: [bold]{last.dominant}[/] dominates the step → {advice(last, run_dir)}"
    )
    if last.gap_cause not in ("none", last.dominant):
        console.print(
            f"at np={last.np}: the gap comes mostly from [bold]{last.gap_cause}[/] → "
            f"{TERMS_ADVICE[last.gap_cause].format(cores=last.cores_per_rank)}"
        )
    console.print(f"written: {run_dir / 'prediction.csv'}")
    render_report(args, run_dir, console)
    return 0


def print_service(
    console, core_ms: float, at_np: int, sizing: list, cores_per_worker: float
) -> None:
    """How many tf.data service workers keep the target's ranks fed, per np."""
    t = Table(
        title=f"tf.data service: workers to keep the devices fed ({cores_per_worker:g} cores each, "
        f"{sizing[0].worker_samples_per_s:,.0f} samples/s per worker)",
        title_justify="left",
        header_style="bold",
    )
    for name in ("np", "devices take/s", "workers", "cores", "with fewer", "gap with fewer"):
        t.add_column(name, justify="right")
    for s in sizing:
        t.add_row(
            str(s.np),
            fmt(s.demand_samples_per_s, 0),
            str(s.workers),
            fmt(s.cores, 0),
            str(s.fewer_workers) if s.fewer_workers else "–",
            fmt(s.gap_with_fewer_pct, 1, "%"),
        )
    console.print(t)
    console.print(
        f"one worker's cost: {core_ms:.3f} core-ms per sample served, measured on this run's service "
        f"workers at np={at_np}; workers = the ranks' rate ÷ one worker's (tf.data service's autoscaling "
        f"rule)"
    )
