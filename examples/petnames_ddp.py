"""Pet names: a four-layer character LSTM that learns to continue name-like strings, trained
with PyTorch DDP, the workload of the write-up that ran it on a Dask cluster (1, 4 and 16 GPUs
with dask_pytorch_ddp). One example is a window of a name's characters, one-hot, blanks before
its start; its target is the same window one character on, the name's end a stop mark.

``--data device`` holds the data as the write-up did: every window encoded once, in tensors on
the device, read by a DataLoader with no workers, a batch at a time (one index into each
tensor). ``--data loader`` keeps the names as strings and encodes each window as the loader
reads it, a Python loop over its characters, with ``--workers`` loader processes (none by
default, as in the write-up). The first leaves the loader next to nothing to do; the second
makes the step wait on it.

``--batch-size`` is global, as the write-up warns a fair comparison needs: each rank takes
batch / ranks, so 1 and 2 ranks train on the same samples a step.

    pipeprof compare --engine ddp --np 1,2 -- python examples/petnames_ddp.py
    pipeprof compare --engine ddp --launcher dask --np 1,2 -- python examples/petnames_ddp.py --data loader
    torchrun --nproc-per-node 2 examples/petnames_ddp.py            # without pipeprof
"""

import argparse
import os
import random
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler

import pipeprof.torch as pt  # pipeprof

ALPHABET = " abcdefghijklmnopqrstuvwxyz."  # the blank before a name, its letters, its stop mark
INDEX = {c: i for i, c in enumerate(ALPHABET)}
ONSETS = ["", "b", "ch", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "sh", "t",
          "v", "w", "z", "br", "cl", "fl", "gr", "st", "tr"]  # fmt: skip
VOWELS = ["a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "oo", "ou", "ie"]
CODAS = ["", "", "", "n", "r", "s", "l", "x", "th", "ck", "m", "nd", "rt", "sy", "ie"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", choices=["device", "loader"], default="device")
    p.add_argument("--names", type=int, default=4000, help="name-like strings generated")
    p.add_argument("--window", type=int, default=10, help="characters an example")
    p.add_argument("--hidden", type=int, default=64, help="units of each LSTM layer")
    p.add_argument("--batch-size", type=int, default=256, help="global: each rank batch / ranks")
    p.add_argument("--workers", type=int, default=0, help="loader processes (--data loader)")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--epochs", type=int, default=2)
    return p.parse_args()


def pet_names(n, seed=0):
    """``n`` name-like strings of one to three syllables, alike on every rank (a fixed seed)."""
    rng = random.Random(seed)
    return [
        "".join(
            rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
            for _ in range(rng.choice((1, 2, 2, 3)))
        )[:12]
        for _ in range(n)
    ]


def windows(names, width):
    """Every (window, window one on) of each name: ``width`` characters ending at each place of
    the name and its stop mark, blanks before its start."""
    pairs = []
    for name in names:
        text = " " * width + name + "."
        pairs += [(text[end - width - 1 : end - 1], text[end - width : end])
                  for end in range(width + 1, len(text) + 1)]  # fmt: skip
    return pairs


def one_hot(text):
    x = torch.zeros(len(text), len(ALPHABET))
    for i, c in enumerate(text):
        x[i, INDEX[c]] = 1.0
    return x


def targets(text):
    return torch.tensor([INDEX[c] for c in text], dtype=torch.long)


class OnDevice(Dataset):
    """Every window encoded once and held on the device; an item is a batch of indices."""

    def __init__(self, pairs, device):
        self.x = torch.stack([one_hot(a) for a, _ in pairs]).to(device)
        self.y = torch.stack([targets(b) for _, b in pairs]).to(device)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, indices):
        index = torch.as_tensor(indices, device=self.x.device)
        return self.x[index], self.y[index]


class Encoded(Dataset):
    """The strings as they are; each window encoded when the loader reads it."""

    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        a, b = self.pairs[i]
        return one_hot(a), targets(b)


class Model(torch.nn.Module):
    """Four LSTM layers, then a dense layer with a score for each character."""

    def __init__(self, hidden):
        super().__init__()
        self.lstm = torch.nn.LSTM(len(ALPHABET), hidden, num_layers=4, batch_first=True)
        self.dense = torch.nn.Linear(hidden, len(ALPHABET))

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.dense(out)


def loader_for(args, pairs, device, rank, size):
    share = args.batch_size // size
    if args.data == "device":
        data = OnDevice(pairs, device)
        sampler = DistributedSampler(data, num_replicas=size, rank=rank, shuffle=True)
        batches = BatchSampler(sampler, share, drop_last=True)
        # batch_size=None: each item is already a batch, handed on as it is
        return DataLoader(data, batch_size=None, sampler=batches, num_workers=0), sampler
    data = Encoded(pairs)
    sampler = DistributedSampler(data, num_replicas=size, rank=rank, shuffle=True, drop_last=True)
    loader = DataLoader(
        data, batch_size=share, sampler=sampler, num_workers=args.workers,
        persistent_workers=args.workers > 0, pin_memory=device.type == "cuda", drop_last=True,
    )  # fmt: skip
    return loader, sampler


def main():
    args = parse_args()
    device = torch.device("cpu")
    if torch.cuda.is_available():  # this host's GPU of this rank, before the group starts
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.batch_size % size or args.batch_size < size:
        sys.exit(
            f"petnames_ddp.py: --batch-size {args.batch_size} does not split over {size} ranks"
        )
    loader, sampler = loader_for(
        args, windows(pet_names(args.names), args.window), device, rank, size
    )
    if len(loader) == 0:
        sys.exit(
            f"petnames_ddp.py: a rank's {len(sampler)} windows make no batch of "
            f"{args.batch_size // size}: raise --names or lower --batch-size"
        )
    loader = pt.instrument(loader)  # pipeprof
    torch.manual_seed(0)
    model = Model(args.hidden).to(device)
    net = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x, y):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x).transpose(1, 2), y)
        loss.backward()
        opt.step()
        return loss.detach()

    loss = float("nan")
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            with pt.step() as s:  # pipeprof
                s.loss = loss = train_step(x, y)
    if rank == 0:
        print(f"trained {args.epochs} epoch(s) on {size} rank(s), loss {float(loss):.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
