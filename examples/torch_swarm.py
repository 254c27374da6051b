#!/usr/bin/python3
"""Training on Fashion-MNIST in the shape of PyTorch's MNIST example: two conv layers, dropout,
Adadelta, StepLR, a train/test loop. examples/torch_plain.py is the plain single-process script;
examples/torch_swarm.py is the same script made a swarm of peers, each training on its shard and
averaging with the others as it goes (`diff` the two: docs/python.md).

    /usr/bin/python3 examples/torch_plain.py [--epochs 3] [--train-samples 8000]
    rumor-run --nproc 4 examples/torch_swarm.py [--epochs 3] [--train-samples 8000]
"""
import argparse
import gzip
import os

import numpy as np
import rumor.torch
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


def read_idx(path):
    """An unsigned-byte IDX file (the MNIST format), gzipped or not, as a numpy array."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        raw = f.read()
    if raw[:3] != b"\0\0\x08":
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * len(dims)).reshape(dims)


def fashion_mnist(directory, split, limit):
    """The `split` ("train" or "t10k") images, normalised, and labels: the first `limit` (0: all)."""
    def load(stem):
        for name in (stem + ".gz", stem):
            if os.path.exists(os.path.join(directory, name)):
                return read_idx(os.path.join(directory, name))
        raise FileNotFoundError(f"{directory}: no {stem}[.gz] (apt-get install dataset-fashion-mnist)")
    images, labels = load(f"{split}-images-idx3-ubyte"), load(f"{split}-labels-idx1-ubyte")
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = (torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1) - 0.286) / 0.353
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


class Net(nn.Module):
    """Two 3x3 convolutions, a max pool, dropout, two dense layers; log-probabilities out."""

    def __init__(self, c1=32, c2=64):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, c1, 3), nn.ReLU(), nn.Conv2d(c1, c2, 3), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten())
        self.hidden = nn.Linear(c2 * 12 * 12, 128)
        self.drop = nn.Dropout(0.5)
        self.classes = nn.Linear(128, 10)

    def forward(self, x):
        return F.log_softmax(self.classes(self.drop(F.relu(self.hidden(self.features(x))))), dim=1)


def train(args, model, loader, optimizer, epoch):
    model.train()
    for i, (x, y) in enumerate(loader):
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
        if i % args.log_interval == 0:
            print(f"epoch {epoch} batch {i}/{len(loader)} loss {loss.item():.4f} "
                  f"lr {optimizer.param_groups[0]['lr']:.4f}", flush=True)


def test(model, loader):
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            loss += F.nll_loss(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
    n = len(loader.dataset)
    print(f"test: loss {loss / n:.4f}, accuracy {correct}/{n} ({correct / n:.4f})", flush=True)
    return correct / n


def fit(args, model, optimizer, scheduler, train_loader, test_loader):
    for epoch in range(1, args.epochs + 1):
        train(args, model, train_loader, optimizer, epoch)
        test(model, test_loader)
        scheduler.step()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--test-batch-size", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1.0, help="Adadelta's learning rate")
    ap.add_argument("--gamma", type=float, default=0.7, help="StepLR: the rate is multiplied by this every epoch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log-interval", type=int, default=50, help="batches between progress lines")
    ap.add_argument("--train-samples", type=int, default=0, help="train on the first N samples (0: all 60000)")
    ap.add_argument("--test-samples", type=int, default=0, help="test on the first N samples (0: all 10000)")
    ap.add_argument("--channels", default="32,64", help="filters of the two conv layers (smaller: faster)")
    ap.add_argument("--threads", type=int, default=1, help="torch's CPU threads")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--save-model", default=None, metavar="FILE")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    train_set = fashion_mnist(args.data, "train", args.train_samples)
    test_set = fashion_mnist(args.data, "t10k", args.test_samples)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=rumor.torch.ShardSampler(train_set))
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)
    model = Net(*(int(c) for c in args.channels.split(",")))
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    with rumor.torch.swarm(model, optimizer) as optimizer:  # joins; settles and leaves at the end
        scheduler = optimizer.add_scheduler(StepLR(optimizer, step_size=1, gamma=args.gamma))
        fit(args, model, optimizer, scheduler, train_loader, test_loader)
    print(f"final test accuracy {test(model, test_loader):.4f}", flush=True)
    if args.save_model:
        torch.save(model.state_dict(), args.save_model)


if __name__ == "__main__":
    main()
