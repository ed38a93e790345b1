"""Plain PyTorch DDP synthetic benchmark: the reference pipeprof's synthetic twin is checked
against on the ddp engine (``synthetic_overhead.py --engine ddp``).

Started by torchrun (``python -m torch.distributed.run --standalone --nproc-per-node N``), one
process a rank joined over Gloo (NCCL on GPUs) as pipeprof's ddp ranks are. The model is
``pipeprof.frameworks.torch.small_cnn`` (quickstart's), wrapped in DistributedDataParallel,
with SGD at ``lr × N`` and momentum 0.9, and each step trains on one random batch made once
and already on the device: no input pipeline at all, and no pipeprof measurement code. CPU
intra-op threads: the usable cores over the local ranks, as pipeprof gives its ranks.

Each step ends when its loss is on the host (``loss.item()``, which waits for the device);
the first ``--warmup`` steps are dropped. Rank 0 prints one JSON line tagged
``PLAIN-SYNTHETIC``: ``samples_per_s`` (global batch × steps ÷ wall seconds) and
``samples_per_s_p50`` (global batch ÷ the median step interval).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# run as a file (python benchmarks/NAME.py): this checkout's benchmarks and pipeprof first
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness  # noqa: E402

TAG = "PLAIN-SYNTHETIC"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per rank (default: 32)")
    p.add_argument("--lr", type=float, default=0.01, help="for one rank (default: 0.01)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=120)
    args = p.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        p.error("--warmup and --steps must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from pipeprof.frameworks.torch import small_cnn
    from pipeprof.host import usable_cores

    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    if gpu:
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, usable_cores() // local))
    torch.manual_seed(0)
    net = small_cnn(torch, args.classes).to(device)
    model = DistributedDataParallel(net, device_ids=[device.index] if gpu else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    made = torch.Generator().manual_seed(rank)
    shape = (args.batch_size, 3, args.image_size, args.image_size)
    x = torch.rand(shape, generator=made).to(device)
    y = torch.randint(0, args.classes, (args.batch_size,), generator=made).to(device)

    ends: list[float] = []
    for _ in range(args.warmup + args.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        loss.item()  # the step's work done: on a GPU, a wait for the device
        ends.append(time.perf_counter())
    marks = ends[args.warmup - 1 :]
    wall = marks[-1] - marks[0]
    p50 = statistics.median(b - a for a, b in zip(marks, marks[1:]))
    global_batch = args.batch_size * size
    if rank == 0:
        harness.print_tagged(
            TAG,
            {
                "np": size,
                "torch": torch.__version__,
                "model": "small_cnn",
                "global_batch": global_batch,
                "steps": args.steps,
                "measured_s": wall,
                "samples_per_s": global_batch * args.steps / wall,
                "step_time_ms_p50": p50 * 1e3,
                "samples_per_s_p50": global_batch / p50,
            },
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
