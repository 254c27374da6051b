#!/usr/bin/python3
"""PyTorch reference for bench/train_throughput.cpp (run with Debian's /usr/bin/python3 and
python3-torch).

Same model as Rumor's default (Linear 784-256, ReLU, Linear 256-128, ReLU, Linear 128-10,
cross-entropy), Adam lr 1e-3, batch 64, on the real Fashion-MNIST read from the same gzip IDX
files (pixels / 255), one thread.

Default mode (throughput): a training loop of the usual form -- batch from a shuffled
permutation of the in-memory training tensor, zero_grad, forward, loss, backward, step --
timed over --steps steps after --warmup warm-up steps, --reps times; prints every repetition
and then machine-readable lines (wall clock, and process CPU time):
    pytorch_samples_per_s <median>
    pytorch_cpu_samples_per_s <median>

--epochs N: trains N full epochs (reshuffled every epoch, last batch may be smaller) and
reports the test accuracy after each, then:
    pytorch_test_acc <final accuracy>
"""
import argparse
import gzip
import os
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    rank = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(rank)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: size does not match the dimensions {dims}")
    return arr.reshape(dims)


def find(directory, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(directory, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{directory}: no {stem}[.gz]")


def load(directory):
    def images(stem):
        a = read_idx(find(directory, stem))
        return torch.from_numpy(a.reshape(a.shape[0], -1).astype(np.float32) / 255.0)

    def labels(stem):
        return torch.from_numpy(read_idx(find(directory, stem)).astype(np.int64))

    return (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
            images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte"))


def make_model():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1024]).argmax(1) == y[i:i + 1024]).sum())
                      for i in range(0, len(x), 1024))
    model.train()
    return correct / len(x)


def throughput(args, xtr, ytr):
    torch.manual_seed(args.seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    n = len(xtr)
    g = torch.Generator().manual_seed(args.seed)
    state = {"perm": torch.randperm(n, generator=g), "pos": 0}

    def next_batch():
        if state["pos"] + args.batch > n:  # new epoch (drop the ragged tail here)
            state["perm"], state["pos"] = torch.randperm(n, generator=g), 0
        idx = state["perm"][state["pos"]:state["pos"] + args.batch]
        state["pos"] += args.batch
        return xtr[idx], ytr[idx]

    def train_step():
        xb, yb = next_batch()
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    rates, cpu_rates = [], []
    for r in range(args.reps):
        for _ in range(args.warmup):
            train_step()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.steps):
            loss = train_step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        rate, cpu_rate = args.steps * args.batch / dt, args.steps * args.batch / dc
        rates.append(rate)
        cpu_rates.append(cpu_rate)
        print(f"rep {r + 1}/{args.reps}: pytorch {rate:9.1f} samples/s "
              f"({1e3 * dt / args.steps:.3f} ms/step, cpu {cpu_rate:9.1f}/s, loss {float(loss):.4f})",
              flush=True)
    print(f"pytorch_samples_per_s {statistics.median(rates):.1f}")
    # By process CPU time, like rumor_cpu_samples_per_s (steadier on a busy machine).
    print(f"pytorch_cpu_samples_per_s {statistics.median(cpu_rates):.1f}")


def epochs(args, xtr, ytr, xte, yte):
    torch.manual_seed(args.seed)
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    n = len(xtr)
    print(f"epoch 0 test_acc {accuracy(model, xte, yte):.4f}", flush=True)
    t0 = time.perf_counter()
    acc = 0.0
    for e in range(args.epochs):
        perm = torch.randperm(n)
        total, batches = 0.0, 0
        for i in range(0, n, args.batch):
            idx = perm[i:i + args.batch]
            xb, yb = xtr[idx], ytr[idx]
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            total += float(loss)
            batches += 1
        acc = accuracy(model, xte, yte)
        print(f"epoch {e + 1} train_loss {total / batches:.4f} test_acc {acc:.4f} "
              f"({time.perf_counter() - t0:.1f} s)", flush=True)
    print(f"pytorch_test_acc {acc:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=0,
                    help="train this many full epochs and report test accuracy instead of timing")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    t = time.perf_counter()
    xtr, ytr, xte, yte = load(args.data)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s); data {args.data}: "
          f"{len(xtr)} train / {len(xte)} test rows, loaded in {time.perf_counter() - t:.2f} s",
          flush=True)
    print(f"# mlp 784-256-128-10, Adam lr {args.lr}, batch {args.batch}", flush=True)
    if args.epochs > 0:
        epochs(args, xtr, ytr, xte, yte)
    else:
        print(f"# {args.reps} repetitions x {args.steps} timed steps "
              f"(after {args.warmup} warm-up steps each)", flush=True)
        throughput(args, xtr, ytr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
