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


def distribute(ds, address: str):
    """``ds`` run on the tf.data service at ``address`` ("host:port" of its dispatcher)."""
    import tensorflow as tf

    return ds.apply(
        tf.data.experimental.service.distribute(
            processing_mode="parallel_epochs", service=f"{PROTOCOL}://{address}"
        )
    )


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
    parser.add_argument("--parent", type=int, default=0, help="exit when this process is gone")
    args = parser.parse_args(argv)
    if args.parent:
        threading.Thread(target=_watch_parent, args=(args.parent,), daemon=True).start()
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
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
