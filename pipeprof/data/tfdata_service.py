"""tf.data service: a rank's pipeline runs on service worker processes, the rank consumes.

``python -m pipeprof.data.tfdata_service dispatcher|worker ...`` is one server process, started and
stopped by ``pipeprof.launch.service_processes`` around a launch. The rank side is ``distribute``: the
rank builds its pipeline as always (its own shard), and tf.data service serialises the graph
and runs it on every worker (``parallel_epochs``: each worker produces the rank's shard, the
rank takes batches from whichever has one ready), so the rank's CPU does no preprocessing.

A server exits by itself when the process that started it is gone (``--parent``), so a
pipeprof killed without a chance to stop its servers leaves none behind.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

from pipeprof import atomic

PROTOCOL = "grpc"


def distribute(ds, address: str, compression: str = "auto"):
    """``ds`` run on the tf.data service at ``address`` ("host:port" of its dispatcher),
    its elements sent as TensorFlow chooses (``compression="auto"``) or as they are ("none")."""
    import tensorflow as tf

    return ds.apply(
        tf.data.experimental.service.distribute(
            processing_mode="parallel_epochs",
            service=f"{PROTOCOL}://{address}",
            compression=None if compression == "none" else "AUTO",
        )
    )


CPU_LINE = "pipeprof tf.data service cpu_s "


def _report_cpu(every_s: float) -> None:
    """Print this process's CPU seconds since it began serving and the wall clock, every
    ``every_s``: how a worker tells the launcher what it spent and when (a worker on another
    host too: its log comes back over ssh, where psutil could not see it)."""
    start = os.times()
    while True:
        time.sleep(every_s)
        now = os.times()
        spent = (now.user - start.user) + (now.system - start.system)
        print(f"{CPU_LINE}{spent:.3f} {time.time():.3f}", flush=True)


def cpu_series(log: Path) -> list[tuple[float, float]]:
    """(wall clock, CPU seconds spent serving) of each CPU line a worker printed into ``log``."""
    series = []
    try:
        with log.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(CPU_LINE):
                    try:
                        spent, at = map(float, line[len(CPU_LINE) :].split())
                    except ValueError:
                        continue
                    series.append((at, spent))
    except OSError:
        pass
    return series


def cpu_between(series: list[tuple[float, float]], t0: float, t1: float) -> float:
    """CPU seconds spent between wall clock ``t0`` and ``t1``, interpolated between the lines
    around each; NaN when the lines do not cover both."""
    if len(series) < 2 or not series[0][0] <= t0 <= t1 <= series[-1][0]:
        return float("nan")

    def at(t: float) -> float:
        for (ta, ca), (tb, cb) in zip(series, series[1:]):
            if ta <= t <= tb:
                return ca if tb == ta else ca + (cb - ca) * (t - ta) / (tb - ta)
        return float("nan")

    return at(t1) - at(t0)


def _watch_parent(parent: int) -> None:
    """End this process when ``parent`` is gone (re-parented: its pid is no longer ours)."""
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(0.5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeprof.data.tfdata_service")
    parser.add_argument("role", choices=["dispatcher", "worker"])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    parser.add_argument("--dispatcher", default="", help="worker: the dispatcher's host:port")
    parser.add_argument("--host", default="localhost", help="the name clients reach this server by")
    parser.add_argument("--address-file", default="", help="where to write host:port once serving")
    parser.add_argument(
        "--parent",
        type=int,
        default=0,
        help="exit when this process is gone (-1: the one that started this, as over ssh)",
    )
    parser.add_argument(
        "--cpu-every", type=float, default=0.0, help="print CPU seconds spent serving this often"
    )
    args = parser.parse_args(argv)
    if args.parent:
        parent = os.getppid() if args.parent == -1 else args.parent
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    import tensorflow as tf

    service = tf.data.experimental.service
    if args.role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(port=args.port, protocol=PROTOCOL))
        port = int(server.target.rsplit(":", 1)[1])
    else:
        server = service.WorkerServer(
            service.WorkerConfig(
                dispatcher_address=args.dispatcher,
                worker_address=f"{args.host}:%port%",
                port=args.port,
                protocol=PROTOCOL,
            )
        )
        port = int(
            server._address.rsplit(":", 1)[1]
        )  # the port bound (TensorFlow has no public name for it)
    if args.address_file:
        atomic.write_text(Path(args.address_file), f"{args.host}:{port}\n")
    print(f"pipeprof tf.data service {args.role} serving on {args.host}:{port}", flush=True)
    if args.cpu_every > 0:
        threading.Thread(target=_report_cpu, args=(args.cpu_every,), daemon=True).start()
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
