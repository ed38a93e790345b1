"""A PyTorch DDP script with pipeprof's two lines, as torchrun starts it: its own process group,
DistributedSampler, DataLoader workers and DDP model. At its end each rank writes the world
size it joined, a digest of its weights and its host's name to ``--out``/rank<N>.json; each
start of a rank adds a line to ``--out``/starts-rank<N>-np<SIZE>; ``--fail-rank N`` makes
rank N exit with code 3 after its first step."""

import argparse
import hashlib
import json
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
from PIL import Image
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import pipeprof.torch as pt


class Folder(Dataset):
    def __init__(self, root):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.items = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
        ]
        self.classes = len(classes)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        with Image.open(path) as image:
            x = np.asarray(image.convert("RGB").resize((32, 32)), dtype=np.float32) / 255.0
        return torch.from_numpy(x.transpose(2, 0, 1).copy()), label


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--fail-rank", type=int, default=-1)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"starts-rank{rank}-np{size}"), "a") as fh:
        fh.write("started\n")  # one line each time this rank starts: a restart adds one
    data = Folder(args.data)
    sampler = DistributedSampler(data, num_replicas=size, rank=rank, drop_last=True)
    loader = DataLoader(data, batch_size=8, sampler=sampler, num_workers=1, drop_last=True)
    loader = pt.instrument(loader)  # pipeprof
    torch.manual_seed(rank)  # different on each rank: DDP broadcasts rank 0's
    net = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(8, data.classes),
        )
    )  # fmt: skip
    opt = torch.optim.SGD(net.parameters(), lr=0.01 * size)
    steps = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            with pt.step() as s:  # pipeprof
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(net(x), y)
                loss.backward()
                opt.step()
                s.loss = loss.detach()
            steps += 1
            if rank == args.fail_rank:
                sys.exit(3)
    digest = hashlib.sha256()
    for t in net.module.state_dict().values():
        digest.update(t.detach().cpu().numpy().tobytes())
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
        said = {"world_size": size, "weights": digest.hexdigest(), "steps": steps}
        json.dump({**said, "host": socket.gethostname()}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
