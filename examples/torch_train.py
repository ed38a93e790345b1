"""A PyTorch DDP training script: a small CNN on a folder of photos (one sub-folder per class),
read by a DataLoader with worker processes, one process a rank, joined by
``torch.distributed`` (Gloo on the CPU, NCCL on GPUs) as torchrun starts them.

The lines marked `pipeprof` are all it needs to be profiled:

    pipeprof compare --engine ddp --np 1,2 -- python examples/torch_train.py --data DIR
    torchrun --nproc-per-node 2 examples/torch_train.py --data DIR      # without pipeprof
"""

import argparse
import os

import torch
import torch.distributed as dist
from PIL import Image
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import pipeprof.torch as pt  # pipeprof


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a folder with one sub-folder of JPEGs per class")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.01, help="for one rank; scaled by ranks")
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes a rank")
    p.add_argument("--epochs", type=int, default=2)
    return p.parse_args()


class Photos(Dataset):
    def __init__(self, root, size):
        classes = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
        self.items = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(classes)
            for f in sorted(os.listdir(os.path.join(root, c)))
        ]
        self.classes, self.size = len(classes), size

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        with Image.open(path) as image:
            image = image.convert("RGB").resize((self.size, self.size), Image.Resampling.BILINEAR)
            x = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        x = x.view(self.size, self.size, 3).permute(2, 0, 1).float() / 255.0
        if torch.rand(()) < 0.5:
            x = torch.flip(x, [2])
        return x, label


def model(classes):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, classes),
    )  # fmt: skip


def main():
    args = parse_args()
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    device = (
        torch.device("cuda", rank % torch.cuda.device_count())
        if torch.cuda.is_available()
        else torch.device("cpu")
    )
    data = Photos(args.data, args.image_size)
    sampler = DistributedSampler(data, num_replicas=size, rank=rank, shuffle=True, drop_last=True)
    loader = DataLoader(
        data, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
        persistent_workers=args.workers > 0, pin_memory=device.type == "cuda", drop_last=True,
    )  # fmt: skip
    loader = pt.instrument(loader)  # pipeprof
    torch.manual_seed(0)
    net = DistributedDataParallel(model(data.classes).to(device))
    opt = torch.optim.SGD(net.parameters(), lr=args.lr * size, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def train_step(x, y):
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            with pt.step() as s:  # pipeprof
                s.loss = train_step(x, y)
    if rank == 0:
        print(f"trained {args.epochs} epoch(s) on {size} rank(s)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
