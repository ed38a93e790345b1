"""``pipeprof watch -- CMD ...``: run your own training command and show the live dashboard
from what ``pipeprof.keras.PipeprofCallback`` streams, keeping everything in a run directory."""

from __future__ import annotations

import argparse
import os
import secrets
import socket
from typing import Any

from pipeprof.cli.compare import console_for_output, finish
from pipeprof.compare import CompareResult, write_summary
from pipeprof.errors import PipeprofError
from pipeprof.launch import horovod, signals
from pipeprof.rundir import manifest, new_run_dir, write_json
from pipeprof.telemetry.nvml import Nvml
from pipeprof.telemetry.recorder import Recorder
from pipeprof.telemetry.stream import ENV_ADDRESS, ENV_RUN_DIR, ENV_TOKEN, Collector
from pipeprof.tui.reporter import DashboardReporter, PlainReporter


def add_parser(sub: Any) -> None:
    p = sub.add_parser("watch", help="run your own training (with pipeprof.keras) under the live dashboard",
                       description="Run CMD (e.g. horovodrun -np 4 python train.py) with the address of a "
                                   "collector in PIPEPROF_STREAM; PipeprofCallback in the script streams to it.")
    p.add_argument("--out", metavar="DIR", help="run directory (default: runs/<time>-watch)")
    p.add_argument("--no-dashboard", action="store_true", help="pass the command's output through instead")
    p.add_argument("--timeout", type=int, default=0, metavar="S", help="kill the command after S seconds (0: never)")
    p.add_argument("--stream-host", metavar="ADDR", help="the address ranks stream to (default: loopback)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command to run")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, argv: list[str]) -> int:
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise PipeprofError("pipeprof watch: give the command to run after --, e.g. "
                            "pipeprof watch -- horovodrun -np 2 python train.py")
    console = console_for_output()
    run_dir = new_run_dir(args.out, "watch").resolve()
    write_json(run_dir / "manifest.json", manifest({}, argv, Nvml().inventory(), {"watched_command": cmd}))
    multi_host = any(a in ("-H", "--hosts", "--hostfile") for a in cmd)
    bind, advertise = (("0.0.0.0", args.stream_host or socket.gethostname())
                       if multi_host or args.stream_host else ("127.0.0.1", "127.0.0.1"))
    dashboard = console.is_terminal and not args.no_dashboard
    reporter: PlainReporter = (DashboardReporter(console, command="watch", scenario=" ".join(cmd)[:60], steps_total=0)
                               if dashboard else PlainReporter(console))
    recorder = Recorder(run_dir)

    def on_record(record: dict) -> None:
        recorder.write(record)
        reporter.record(record)

    token = secrets.token_hex(8)
    with Collector(on_record, bind=bind, advertise=advertise, token=token,
                   on_malformed=recorder.malformed) as collector:
        env = horovod.worker_env(dict(os.environ), os.getcwd())
        env.update({ENV_ADDRESS: collector.address, ENV_TOKEN: token, ENV_RUN_DIR: str(run_dir)})
        reporter.progress({"event": "launch", "np": None, "of_variants": 1})
        try:
            result = horovod.run(cmd, env=env, log_path=run_dir / "logs" / "watch.log",
                                 timeout_s=args.timeout or 10**9, on_line=None if dashboard else console.out)
        except FileNotFoundError:
            raise PipeprofError(f"pipeprof watch: command not found: {cmd[0]}") from None
        finally:
            reporter.close()
    recorder.ingest_fallback_files()
    if recorder.malformed_count:
        console.print(f"[yellow]warning:[/] {recorder.malformed_count} malformed stream record(s) dropped; "
                      f"the first is in {recorder.malformed_path}")
    recorder.close()
    summary = write_summary(run_dir, set())
    failure = None if result.ok else f"the watched command failed: {result.reason()} (log: {run_dir}/logs/watch.log)"
    code = finish(CompareResult(run_dir, summary, None), console, "pipeprof watch")
    if failure:
        exit_code = (signals.exit_code(result.signum) if result.signum is not None
                     else result.returncode if result.returncode > 0 else 1)
        raise PipeprofError(failure, exit_code=exit_code)
    return code
